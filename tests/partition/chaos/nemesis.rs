//! The nemesis: plays a schedule on the lab at its times (faults as the lab's iptables rules or
//! SIGSTOP/SIGCONT of etcd members, the balancer's events as signals, config edits and a
//! restart) and records when each event actually began and ended. Does not draw the schedule
//! (`schedule.rs`) or judge it (`invariants.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::partition::cast::{wall, Cast, APISERVER_PORT};
use crate::partition::etcd::{EtcdCluster, PEER_PORT};
use crate::partition::netlab::{self, lab_print, Host, NetLab};

use super::model::Applied;
use super::schedule::{describe, Event, Fault, Kind, Poke};

/// What a fault in force holds, to undo it.
enum InForce {
    Rules(Vec<netlab::Fault>),
    Stopped(Host),
    Nothing,
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
            pid,
        }
    }

    /// Plays `events` from `t0` (wall clock); returns each as applied, in the schedule's order.
    pub fn play(&mut self, events: &[Event], t0: f64) -> Vec<Applied> {
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
            InForce::Nothing => {}
        }
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
