//! The nemesis: plays a schedule on the lab at its times (faults as the lab's iptables rules,
//! SIGSTOP/SIGCONT of etcd members, an apiserver's SIGTERM and start, the Endpoints object
//! rewritten; the balancer's events as signals, config edits, a restart, a certificate rotation
//! and a herd of dials) and records when each event actually began and ended, and each herd
//! dial. Does not draw the schedule (`schedule.rs`) or judge it (`invariants.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::partition::cast::{wall, Cast, Exchange, APISERVER_PORT};
use crate::partition::dying_path::dial_herd;
use crate::partition::etcd::{EtcdCluster, PEER_PORT};
use crate::partition::netlab::{self, lab_print, Host, NetLab};

use super::model::Applied;
use super::schedule::{describe, Event, Fault, Kind, Poke, SHUTDOWN_DELAY, SHUTDOWN_GRACE};

/// What a fault in force holds, to undo it.
enum InForce {
    Rules(Vec<netlab::Fault>),
    Stopped(Host),
    /// The site's apiserver got SIGTERM: started again at the heal.
    Restarting(Host),
    /// The site left out of the Endpoints object.
    Unlisted(Host),
    Nothing,
}

/// The apiservers' flags in a chaos run: the graceful shutdown a `GracefulRestart` starts.
pub fn apiserver_flags() -> [String; 4] {
    [
        "--shutdown-delay".to_string(),
        format!("{SHUTDOWN_DELAY}s"),
        "--shutdown-grace".to_string(),
        format!("{SHUTDOWN_GRACE}s"),
    ]
}

/// What the nemesis did: each event as applied, in the schedule's order, and every herd dial.
pub struct Played {
    pub applied: Vec<Applied>,
    pub herds: Vec<Exchange>,
}

/// A herd's dials from `dialer.py`'s output (its `results`: wall-clock start and end, whether it
/// succeeded, the site, attempts, the error).
fn herd_dials(out: &std::process::Output) -> Vec<Exchange> {
    let text = String::from_utf8_lossy(&out.stdout);
    let value: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "dialer.py printed no JSON ({e}): {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    value["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Exchange {
            t0: r[0].as_f64().unwrap_or_default(),
            t1: r[1].as_f64().unwrap_or_default(),
            ok: r[2].as_bool().unwrap_or_default(),
            site: r[3].as_str().map(String::from),
            attempts: r[4].as_u64().unwrap_or_default() as u32,
            error: r[5].as_str().map(String::from),
        })
        .collect()
}

/// Plays the schedule; the lab, its etcd and the cast stay the caller's.
pub struct Nemesis<'c, 'l> {
    lab: &'l NetLab,
    etcd: &'c EtcdCluster<'l>,
    cast: &'c mut Cast<'l>,
    /// The config as the cast wrote it; edits append to it.
    base_config: String,
    edits: u32,
    interval: Option<u8>,
    stopped: BTreeMap<Host, u32>,
    /// Faults leaving each site out of the Endpoints object, in force.
    unlisted: BTreeMap<Host, u32>,
    /// Graceful restarts of each site's apiserver in force: overlapping ones make one outage,
    /// from the first's SIGTERM to the last's start.
    restarting: BTreeMap<Host, u32>,
    /// The balancer's pid, for the sampler (changes on a restart).
    pid: &'c AtomicU32,
}

enum Step {
    Start(usize),
    End(usize),
}

impl<'c, 'l> Nemesis<'c, 'l> {
    pub fn new(
        lab: &'l NetLab,
        etcd: &'c EtcdCluster<'l>,
        cast: &'c mut Cast<'l>,
        pid: &'c AtomicU32,
    ) -> Nemesis<'c, 'l> {
        let base_config = std::fs::read_to_string(cast.config_path()).expect("the config");
        Nemesis {
            lab,
            etcd,
            cast,
            base_config,
            edits: 0,
            interval: None,
            stopped: BTreeMap::new(),
            unlisted: BTreeMap::new(),
            restarting: BTreeMap::new(),
            pid,
        }
    }

    /// Plays `events` from `t0` (wall clock): each as applied, in the schedule's order, and the
    /// herds' dials (each herd runs beside the schedule; all are waited for).
    pub fn play(&mut self, events: &[Event], t0: f64) -> Played {
        let lab = self.lab;
        std::thread::scope(|scope| {
            let mut herds = Vec::new();
            let applied = self.play_steps(events, t0, &mut || {
                herds.push(scope.spawn(move || herd_dials(&dial_herd(lab))));
            });
            let herds = herds
                .into_iter()
                .flat_map(|h| h.join().expect("herd"))
                .collect();
            Played { applied, herds }
        })
    }

    fn play_steps(&mut self, events: &[Event], t0: f64, herd: &mut dyn FnMut()) -> Vec<Applied> {
        let mut steps: Vec<(f64, Step)> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            steps.push((e.at, Step::Start(i)));
            if matches!(e.kind, Kind::Fault(_)) {
                steps.push((e.at + e.len, Step::End(i)));
            }
        }
        // Ends before starts at the same time: a heal never undoes the next fault.
        steps.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then((matches!(a.1, Step::Start(_))).cmp(&matches!(b.1, Step::Start(_))))
        });
        let mut applied: Vec<Option<Applied>> = vec![None; events.len()];
        let mut held: BTreeMap<usize, InForce> = BTreeMap::new();
        for (at, step) in steps {
            let wait = t0 + at - wall();
            if wait > 0.0 {
                // The schedule's clock: the nemesis acts at its times, it waits on nothing.
                std::thread::sleep(Duration::from_secs_f64(wait));
            }
            match step {
                Step::Start(i) => {
                    let start = wall() - t0;
                    if events[i].kind == Kind::Poke(Poke::Herd) {
                        herd();
                    }
                    let (force, resolved) = self.start(&events[i]);
                    let end = wall() - t0;
                    let end = if matches!(events[i].kind, Kind::Poke(_)) {
                        end
                    } else {
                        f64::INFINITY
                    };
                    lab_print(&format!(
                        "chaos {start:6.1} s  {}{}",
                        describe(&events[i].kind),
                        resolved.map_or(String::new(), |h| format!(" ({})", h.name()))
                    ));
                    applied[i] = Some(Applied {
                        event: events[i],
                        start,
                        end,
                        resolved,
                    });
                    held.insert(i, force);
                }
                Step::End(i) => {
                    if let Some(force) = held.remove(&i) {
                        self.heal(force);
                    }
                    let end = wall() - t0;
                    lab_print(&format!(
                        "chaos {end:6.1} s  healed: {}",
                        describe(&events[i].kind)
                    ));
                    if let Some(a) = applied[i].as_mut() {
                        a.end = end;
                    }
                }
            }
        }
        for (_, force) in std::mem::take(&mut held) {
            self.heal(force);
        }
        applied.into_iter().flatten().collect()
    }

    fn start(&mut self, event: &Event) -> (InForce, Option<Host>) {
        let lab = self.lab;
        match event.kind {
            Kind::Fault(f) => match f {
                Fault::NoQuorum(s) => {
                    (InForce::Rules(vec![lab.block_tcp_port(s, PEER_PORT)]), None)
                }
                Fault::EtcdStopped(s) => (self.stop(s), None),
                Fault::LeaderStopped => {
                    let leader = self.etcd.leader().unwrap_or(Host::DcA);
                    (self.stop(leader), Some(leader))
                }
                Fault::Cut(a, b) => (InForce::Rules(vec![lab.cut(a, b)]), None),
                Fault::OneWay(a, b) => (InForce::Rules(vec![lab.drop_one_way(a, b)]), None),
                Fault::Isolated(s) => {
                    let cuts = Host::ALL
                        .into_iter()
                        .filter(|&h| h != s)
                        .map(|h| lab.cut(s, h))
                        .collect();
                    (InForce::Rules(cuts), None)
                }
                Fault::SynBlackHole(s) => {
                    (InForce::Rules(vec![lab.drop_syns(s, APISERVER_PORT)]), None)
                }
                Fault::Loss(a, b, p) => (InForce::Rules(vec![lab.loss(a, b, f64::from(p))]), None),
                Fault::GracefulRestart(s) => {
                    let n = self.restarting.entry(s).or_default();
                    if *n == 0 {
                        self.cast
                            .signal_apiserver(s, "TERM")
                            .unwrap_or_else(|e| panic!("SIGTERM to {}'s apiserver: {e}", s.name()));
                    }
                    *n += 1;
                    (InForce::Restarting(s), None)
                }
                Fault::Unlisted(s) => {
                    *self.unlisted.entry(s).or_default() += 1;
                    self.write_endpoints();
                    (InForce::Unlisted(s), None)
                }
            },
            Kind::Poke(p) => {
                self.poke(p);
                (InForce::Nothing, None)
            }
        }
    }

    fn stop(&mut self, site: Host) -> InForce {
        let n = self.stopped.entry(site).or_default();
        if *n == 0 {
            self.etcd
                .signal(site, "STOP")
                .unwrap_or_else(|e| panic!("stop etcd of {}: {e}", site.name()));
        }
        *n += 1;
        InForce::Stopped(site)
    }

    fn heal(&mut self, force: InForce) {
        match force {
            InForce::Rules(faults) => faults.iter().for_each(|f| self.lab.heal(f)),
            InForce::Stopped(site) => {
                let n = self.stopped.entry(site).or_default();
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.etcd
                        .signal(site, "CONT")
                        .unwrap_or_else(|e| panic!("resume etcd of {}: {e}", site.name()));
                }
            }
            InForce::Restarting(site) => {
                let n = self.restarting.entry(site).or_default();
                *n = n.saturating_sub(1);
                if *n == 0 {
                    // The fault lasts the shutdown and more: the old process has exited, or it
                    // is killed.
                    let wait = Duration::from_secs_f64(SHUTDOWN_DELAY + SHUTDOWN_GRACE + 5.0);
                    self.cast
                        .start_apiserver_again(site, wait)
                        .unwrap_or_else(|e| panic!("{e}"));
                }
            }
            InForce::Unlisted(site) => {
                let n = self.unlisted.entry(site).or_default();
                *n = n.saturating_sub(1);
                self.write_endpoints();
            }
            InForce::Nothing => {}
        }
    }

    /// The Endpoints object: every site but those left out by a fault in force.
    fn write_endpoints(&self) {
        let ips: Vec<_> = Host::SITES
            .into_iter()
            .filter(|s| self.unlisted.get(s).copied().unwrap_or_default() == 0)
            .map(Host::ip)
            .collect();
        self.cast.set_endpoints(&ips);
    }

    fn poke(&mut self, poke: Poke) {
        match poke {
            Poke::Sighup => {
                // The balancer may have exited: invariant 4 reports that, not the nemesis.
                let _ = self.cast.signal_balancer("HUP");
            }
            Poke::CommentEdit => {
                self.edits += 1;
                self.write_config();
            }
            Poke::IntervalEdit(secs) => {
                self.interval = Some(secs);
                self.write_config();
            }
            Poke::Restart => {
                self.cast
                    .restart_balancer()
                    .unwrap_or_else(|e| panic!("{e}"));
                self.pid.store(self.cast.balancer_pid(), Ordering::SeqCst);
            }
            Poke::CertRotation => self
                .cast
                .rotate_client_cert()
                .unwrap_or_else(|e| panic!("rotation: {e}")),
            // Started by `play` beside the schedule.
            Poke::Herd => {}
        }
    }

    /// The config with every edit so far, replaced by rename as Talos and editors write it.
    fn write_config(&self) {
        let mut text = self.base_config.clone();
        for n in 1..=self.edits {
            text.push_str(&format!("# chaos edit {n}\n"));
        }
        if let Some(secs) = self.interval {
            text.push_str(&format!("health:\n  interval: {secs}s\n"));
        }
        let path = self.cast.config_path().to_path_buf();
        let tmp = path.with_extension("yaml.tmp");
        std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{tmp:?}: {e}"));
        std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    }
}
