//! Runs one partition scenario end to end: the lab (and etcd where the scenario needs it), the
//! cast, a baseline, the fault, a window until the expected outcome has held for a while (or the
//! fault's fixed duration), an optional heal, then the record: JSON in `target/partition-lab/`,
//! the figures printed, and the scenario's own checks while the lab still stands (so a failure
//! keeps its logs).

use std::time::Duration;

use super::balancers::Balancer;
use super::cast::{poll, site_of, wall, Cast, ClientEvent, Exchange, Readyz, CLIENT_SILENCE};
use super::etcd::EtcdCluster;
use super::figures::{phase, report, save, timeline};
use super::netlab::{lab_print, Fault, Host, NetLab};
use super::timeline::Timeline;

/// How long the outcome must have held before a window ends: several request periods and stream
/// events, and long enough to see a flap.
const HOLD: f64 = 3.0;
/// Requests in the normal order before the fault (the picture's baseline).
const BASELINE_REQUESTS: usize = 12;
/// Up to this many more, at random: the fault's phase in the 5 s probe cycle.
const BASELINE_SPREAD: usize = 25;
/// A window ends at the latest this long after its start, settled or not (the checks then say
/// what was missing).
const WINDOW_LIMIT: Duration = Duration::from_secs(30);

/// How long a head-to-head run waits for the other balancer's checks to settle before the fault.
const STEADY_LIMIT: Duration = Duration::from_secs(45);

/// Whether the client's latest 10 requests all succeeded and none landed on a site in `away`.
fn steady(cast: &Cast, away: &[String]) -> bool {
    let recent: Vec<_> = cast
        .client_events()
        .into_iter()
        .filter_map(|e| match e {
            ClientEvent::Req(Exchange { ok, site, .. }) => Some((ok, site)),
            _ => None,
        })
        .rev()
        .take(10)
        .collect();
    recent.len() == 10
        && recent
            .iter()
            .all(|(ok, site)| *ok && site.as_ref().is_none_or(|s| !away.contains(s)))
}

/// Backend states, e.g. `[(DcB, "unready")]`.
pub type States = &'static [(Host, &'static str)];

/// A heal and the window after it.
pub struct Heal {
    /// Good backends once healed.
    pub good: &'static [Host],
    /// The states healing leads to.
    pub settled: States,
    /// How long past [`WINDOW_LIMIT`] the heal window may take to settle (a heal that waits on
    /// failback: `failback_after` and its spread).
    pub longer: Duration,
}

/// What a scenario is, besides its fault.
pub struct Spec {
    pub name: &'static str,
    pub title: &'static str,
    /// A real etcd cluster, leader moved to dc-a (the field report's placement).
    pub etcd: bool,
    /// More flags for every etcd member (`--election-timeout 10000`).
    pub etcd_flags: &'static [&'static str],
    pub readyz: [(Host, Readyz); 3],
    /// The balancer's states to wait for before the client starts.
    pub before: States,
    /// Good backends while the fault is in force.
    pub good: &'static [Host],
    /// The states the fault leads to (the window ends once they hold and the client is settled).
    pub settled: States,
    /// Keep the fault for exactly this long instead (the scenario is about its duration).
    pub fault_for: Option<Duration>,
    /// Heal, then a second window: its good backends and the states it leads to.
    pub heal: Option<Heal>,
    /// More flags for the client (`--slow`: a request always in flight).
    pub client_flags: &'static [&'static str],
    /// The node's balancer (readyprism but in the head-to-head).
    pub balancer: Balancer,
    /// More flags for a site's simulated apiserver (`--shutdown-delay 15s`).
    pub apiserver_flags: &'static [(Host, &'static [&'static str])],
    /// The heal window lasts until the node lease has been renewed after the heal, so that the
    /// record holds the whole lease gap the fault caused.
    pub lease_renewed: bool,
}

impl Spec {
    /// The usual scenario, to override per scenario: no etcd, every `/readyz` passes, all ready
    /// before the fault, no good backends or settled states (say them), settled by its window,
    /// no heal.
    pub const fn new(name: &'static str, title: &'static str) -> Spec {
        Spec {
            name,
            title,
            etcd: false,
            etcd_flags: &[],
            readyz: [
                (Host::DcA, Readyz::Pass),
                (Host::DcB, Readyz::Pass),
                (Host::Witness, Readyz::Pass),
            ],
            before: &[
                (Host::DcA, "ready"),
                (Host::DcB, "ready"),
                (Host::Witness, "ready"),
            ],
            good: &[],
            settled: &[],
            fault_for: None,
            heal: None,
            client_flags: &[],
            balancer: Balancer::Readyprism,
            apiserver_flags: &[],
            lease_renewed: false,
        }
    }
}

/// What a scenario's checks get.
pub struct Outcome<'a> {
    pub timeline: Timeline,
    /// `kubectl get --raw /readyz` before the fault, at the end of the fault window, after heal;
    /// `None` where kubectl is not installed (the run said it skips these).
    pub kubectl: Vec<(&'static str, Option<Result<String, String>>)>,
    pub cast: &'a Cast<'a>,
    /// When the fault was applied (wall clock): the zero of the timeline's times.
    pub fault_at: f64,
}

impl Outcome<'_> {
    /// A phase's figures by name (`fault`, `heal`).
    pub fn phase(&self, name: &str) -> &super::timeline::Phase {
        self.timeline
            .phases
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no phase {name}"))
    }

    /// The kubectl result taken at `when`; `None` where kubectl is not installed.
    pub fn kubectl(&self, when: &str) -> Option<&Result<String, String>> {
        self.kubectl
            .iter()
            .find(|(w, _)| *w == when)
            .unwrap_or_else(|| panic!("no kubectl run {when}"))
            .1
            .as_ref()
    }

    /// The connections readyprism closed after the fault, one line each: when (seconds from
    /// the fault), the backend's site and the reason.
    pub fn closed_after_fault(&self) -> Vec<String> {
        self.cast
            .closed_by_balancer()
            .into_iter()
            .filter(|e| e.t > self.fault_at)
            .map(|e| {
                let site = site_of(&e.backend).map_or(e.backend.as_str(), |h| h.name());
                format!("{:+.2} s {site}: {}", e.t - self.fault_at, e.reason)
            })
            .collect()
    }
}

/// Whether the window that started at `from` (wall clock) has settled: the states hold, the
/// latest state change is `HOLD` old, requests and the stream have been on good backends for
/// `HOLD`, and a `/slow` request in flight at `from` has ended.
fn settled(cast: &Cast, fault_at: f64, from: f64, good: &[Host], states: &[(Host, &str)]) -> bool {
    let now = wall();
    let changes = cast.changes();
    if !cast.states_are(states) || changes.last().is_some_and(|c| c.t > now - HOLD) {
        return false;
    }
    let (t, dial_errors) = timeline("", "", "", fault_at, None, &cast.client_events(), &changes);
    let (from, now) = (from - fault_at, now - fault_at);
    let p = phase(&t, &dial_errors, "", (from, now), good);
    let held = |v: Option<f64>| v.is_some_and(|v| from + v <= now - HOLD);
    // With `--slow`, also the request held in flight when the window began has ended (its
    // thread is sequential: the first `/slow` to end after `from` is that one), so the record
    // has its figure: scenario 7's held request, retried after the eviction, lands ~5.5 s after
    // the cut, and a window that settled on the rest at 5.4 s cut it off.
    let slow_ended = t.slow.is_empty() || t.slow.iter().any(|r| r.end > from);
    held(p.all_good) && held(p.stream_good) && slow_ended
}

fn window(
    cast: &Cast,
    fault_at: f64,
    from: f64,
    (good, states): (&[Host], &[(Host, &str)]),
    limit: Duration,
) {
    let _ = poll(limit, || settled(cast, fault_at, from, good, states));
}

/// Whether the client renewed its node lease after `t` (wall clock).
fn lease_renewed_after(cast: &Cast, t: f64) -> bool {
    cast.client_events()
        .iter()
        .any(|e| matches!(e, ClientEvent::Lease { ok: true, t1, .. } if *t1 > t))
}

/// Whether the client's stream delivered an event after `t` (wall clock).
fn stream_delivered_after(cast: &Cast, t: f64) -> bool {
    cast.client_events()
        .iter()
        .any(|e| matches!(e, ClientEvent::Line { t: at, .. } if *at > t))
}

/// Panics, naming the flag, unless `readyprism sim-apiserver` has every `--flag` in `flags`: a
/// scenario written for a flag still to come fails with that, not with a lab problem.
fn sim_apiserver_has(flags: &[&str], scenario: &str) {
    let out = std::process::Command::new(super::cast::BIN)
        .args(["sim-apiserver", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("readyprism sim-apiserver --help: {e}"));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in flags.iter().filter(|f| f.starts_with("--")) {
        assert!(
            help.contains(flag),
            "{scenario}: `readyprism sim-apiserver` has no `{flag}` yet; this scenario needs it \
             (kube-apiserver's graceful shutdown in the simulated apiserver)"
        );
    }
}

/// Runs the scenario; `None` when the lab (or etcd) is skipped on this machine.
pub fn run(
    spec: &Spec,
    fault: impl FnOnce(&NetLab) -> Vec<Fault>,
    check: impl FnOnce(&Outcome),
) -> Option<()> {
    let lab = NetLab::start(spec.name)?;
    let _etcd = if spec.etcd {
        let mut etcd = EtcdCluster::start(&lab, spec.name, spec.etcd_flags)?;
        etcd.wait_healthy(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"));
        etcd.move_leader(Host::DcA, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
        Some(etcd)
    } else {
        None
    };
    let with_kubectl =
        crate::support::kubectl_available(&format!("{}: its kubectl checks", spec.name));
    let kubectl_readyz = |cast: &Cast| with_kubectl.then(|| cast.kubectl_readyz());
    if let Some(program) = spec.balancer.program() {
        if !super::netlab::on_path(program) {
            super::netlab::skip(spec.name, &format!("{program} is not installed"));
            return None;
        }
    }
    for (_, flags) in spec.apiserver_flags {
        sim_apiserver_has(flags, spec.name);
    }
    let mut cast = Cast::start_for(&lab, spec.readyz, spec.balancer, spec.apiserver_flags);
    cast.wait_states(spec.before, Duration::from_secs(20));
    cast.start_client_with(spec.client_flags);
    if spec.balancer != Balancer::Readyprism {
        // The others log no states: wait (a while, not forever) until their checks steer the
        // client's requests away from the sites `before` calls unready.
        let away: Vec<String> = spec
            .before
            .iter()
            .filter(|(_, s)| *s != "ready")
            .map(|(h, _)| h.name().to_string())
            .collect();
        let _ = poll(STEADY_LIMIT, || steady(&cast, &away));
    }
    // A baseline for the picture: a dozen requests (about 2.5 s) in the normal order, then up to
    // 25 more (5 s, one probe interval) chosen at random, so that the fault lands anywhere in the
    // probe cycle rather than always at the same distance from the balancer's start.
    let extra = (wall().fract() * 1e6) as usize % (BASELINE_SPREAD + 1);
    let baseline = poll(Duration::from_secs(20), || {
        cast.client_events()
            .iter()
            .filter(|e| matches!(e, ClientEvent::Req(Exchange { ok: true, .. })))
            .count()
            >= BASELINE_REQUESTS + extra
    });
    assert!(baseline, "no baseline: {:?}", cast.client_events());
    let mut kubectl = vec![("before the fault", kubectl_readyz(&cast))];

    let fault_at = wall();
    let faults = fault(&lab);
    let what = faults
        .iter()
        .map(|f| f.what.clone())
        .collect::<Vec<_>>()
        .join(" + ");
    // A timed fault that heals lasts exactly its duration: kubectl's check during it runs
    // alongside (its answer can take the 2 s etcd read budget) rather than before the heal.
    let timed_heal = spec.fault_for.is_some() && spec.heal.is_some();
    let (during, fault_end) = std::thread::scope(|s| {
        let alongside = timed_heal.then(|| s.spawn(|| kubectl_readyz(&cast)));
        match spec.fault_for {
            Some(d) => {
                let _ = poll(d + Duration::from_secs(5), || {
                    wall() - fault_at >= d.as_secs_f64()
                });
            }
            None => window(
                &cast,
                fault_at,
                fault_at,
                (spec.good, spec.settled),
                WINDOW_LIMIT,
            ),
        }
        let Some(during) = alongside else {
            return (kubectl_readyz(&cast), wall());
        };
        let fault_end = wall();
        for f in &faults {
            lab.heal(f);
        }
        (during.join().expect("kubectl's check"), fault_end)
    });
    kubectl.push(("during the fault", during));
    let mut heal_at = None;
    if let Some(heal) = &spec.heal {
        if !timed_heal {
            for f in &faults {
                lab.heal(f);
            }
        }
        let at = if timed_heal { fault_end } else { wall() };
        heal_at = Some(at);
        window(
            &cast,
            fault_at,
            at,
            (heal.good, heal.settled),
            WINDOW_LIMIT + heal.longer,
        );
        if spec.lease_renewed {
            let _ = poll(WINDOW_LIMIT, || lease_renewed_after(&cast, at));
        }
        kubectl.push(("after healing", kubectl_readyz(&cast)));
    }
    let end = wall();
    // Whether the stream was alive when a window ended is judged by a recent event or a later
    // one (`figures::phase`): on a lossy link TCP's retransmission back-off keeps a live stream
    // silent for seconds (3.1 s within scenario 6's 60 s), and a record taken the moment a window
    // ended in such a silence read "stream on good never". So the client runs on until its stream
    // delivers again, up to its own silence limit (then it ends the connection itself) and the
    // few seconds its re-dial takes, whose first event shows where the stream went.
    let redial = Duration::from_secs(5);
    let _ = poll(CLIENT_SILENCE + redial, || {
        stream_delivered_after(&cast, end)
    });
    cast.stop_client();

    let (mut t, dial_errors) = timeline(
        spec.name,
        spec.title,
        &what,
        fault_at,
        heal_at,
        &cast.client_events(),
        &cast.changes(),
    );
    let fault_window = (0.0, fault_end - fault_at);
    t.phases
        .push(phase(&t, &dial_errors, "fault", fault_window, spec.good));
    if let (Some(heal), Some(at)) = (&spec.heal, heal_at) {
        let heal_window = (at - fault_at, end - fault_at);
        t.phases
            .push(phase(&t, &dial_errors, "heal", heal_window, heal.good));
    }
    let path = save(&t);
    let mut text = report(&t);
    for (when, r) in &kubectl {
        let r = r
            .as_ref()
            .map_or("skipped (no kubectl)".to_string(), |r| format!("{r:?}"));
        text.push_str(&format!("  kubectl get --raw /readyz {when}: {r}\n"));
    }
    for m in cast.metrics("readyprism_dial_failures_total") {
        text.push_str(&format!("  {m}\n"));
    }
    text.push_str(&format!("  record: {}\n", path.display()));
    lab_print(&text);
    check(&Outcome {
        timeline: t,
        kubectl,
        cast: &cast,
        fault_at,
    });
    Some(())
}
