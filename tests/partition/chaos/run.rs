//! One chaos run end to end: the lab, etcd, the cast (failback shortened, every connection's
//! record logged), the client, the schedule played with the balancer sampled, the return after
//! the last heal, then the invariants: printed with the events around each violation and saved
//! with every event's actual time to `target/partition-lab/chaos-<seed>.json`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::partition::balancer_log;
use crate::partition::cast::{poll, wall, Cast, ClientEvent, Members, Tuning};
use crate::partition::etcd::EtcdCluster;
use crate::partition::figures::results_dir;
use crate::partition::netlab::{
    lab_print,
    Host::{self, DcA, DcB, Witness},
    NetLab,
};
use crate::partition::scenarios::ETCD;

use super::invariants::{self, bound, Records, Violation};
use super::liveness::{self, Ending};
use super::model::{self, Applied};
use super::moves::{self, Moves};
use super::nemesis::{apiserver_flags, Nemesis, Played};
use super::sampler;
use super::schedule::{describe, print, Schedule};

/// `failback_after` in the chaos runs (the default 60 s would make every return a minute long).
const FAILBACK_AFTER: f64 = 10.0;
const FAILBACK_SPREAD: f64 = 10.0;
/// Violations printed per invariant (all are in the record).
const SHOWN: usize = 5;
/// Sampling goes on this long after the return (the last window of the descriptor check).
const QUIET: Duration = Duration::from_secs(16);
/// With discovery on: the seeds in the config (dc-b, the node's zone, only from the Endpoints
/// object, as in scenario 9) and discovery's poll interval.
const MEMBERS: Members = Members {
    seeds: &model::SEEDS,
    interval: "2s",
};

fn tuning() -> Tuning {
    Tuning {
        config: format!("failback_after: {FAILBACK_AFTER}s\n"),
        log_level: Some(
            "info,readyprism::proxy::record=debug,readyprism::health=debug".to_string(),
        ),
    }
}

/// Whether the client's latest stream event is on `site` and recent.
fn stream_on(cast: &Cast, site: &str) -> bool {
    cast.client_events()
        .iter()
        .rev()
        .find_map(|e| match e {
            ClientEvent::Line { t, site: s, .. } => Some((*t, s.clone())),
            _ => None,
        })
        .is_some_and(|(t, s)| s == site && t > wall() - 2.0)
}

fn gauge(cast: &Cast, name: &str) -> Option<f64> {
    family_sum(&cast.metrics(name), name)
}

/// The sum of family `name`'s series in exposition `lines`; only its own:
/// `readyprism_no_ready_backends_events_total` starts with the gauge's name too.
fn family_sum(lines: &[String], name: &str) -> Option<f64> {
    lines
        .iter()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

#[test]
fn chaos_a_family_sum_leaves_out_families_that_share_its_prefix() {
    let lines: Vec<String> = [
        "readyprism_no_ready_backends 0",
        "readyprism_no_ready_backends_events_total 3",
        "readyprism_connections_active{backend=\"a\"} 2",
        "readyprism_connections_active{backend=\"b\"} 1",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        family_sum(&lines, "readyprism_no_ready_backends"),
        Some(0.0)
    );
    assert_eq!(
        family_sum(&lines, "readyprism_connections_active"),
        Some(3.0)
    );
}

/// Waits for the return after the last heal (invariant 5), until each part has come (by the
/// balancer's states, its gauge, the client's stream) or the bound has passed with 5 s to spare.
/// When each came is read from the records afterwards ([`liveness::returned`]).
fn wait_return(cast: &Cast, t0: f64, last_heal: f64) {
    let (_, home_by) = liveness::return_bounds(last_heal, FAILBACK_AFTER, FAILBACK_SPREAD);
    let all_ready: Vec<(Host, &str)> = Host::SITES.into_iter().map(|s| (s, "ready")).collect();
    let _ = poll(
        Duration::from_secs_f64(home_by + 5.0 - (wall() - t0)),
        || {
            cast.states_are(&all_ready)
                && gauge(cast, "readyprism_no_ready_backends") == Some(0.0)
                && stream_on(cast, "dc-b")
        },
    );
}

/// The connections the running balancer counted, once none is active: relayed, by backend
/// (`readyprism_connections_total`), and rejected (`""`).
fn counted(cast: &Cast) -> Option<BTreeMap<String, usize>> {
    let idle = poll(Duration::from_secs(10), || {
        gauge(cast, "readyprism_connections_active") == Some(0.0)
    });
    if !idle {
        return None;
    }
    let mut out = BTreeMap::new();
    for line in cast.metrics("readyprism_connections_total{") {
        let backend = line
            .split("backend=\"")
            .nth(1)
            .and_then(|r| r.split('"').next());
        let value = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse::<f64>().ok());
        if let (Some(b), Some(v)) = (backend, value) {
            out.insert(b.to_string(), v as usize);
        }
    }
    let rejected = gauge(cast, "readyprism_connections_rejected_total").unwrap_or(0.0);
    out.insert(String::new(), rejected as usize);
    Some(out)
}

fn around(applied: &[Applied], t: f64) -> String {
    applied
        .iter()
        .filter(|a| a.start - 10.0 <= t && t <= a.end.max(a.start) + 10.0)
        .map(|a| {
            format!(
                "      {:6.1}..{:6.1} s  {}\n",
                a.start,
                a.end,
                describe(&a.event.kind)
            )
        })
        .collect()
}

/// Copies the lab's logs (the balancer's, the client's records, etcd's) next to the record: the
/// lab's directory goes with it.
fn keep_logs(lab: &NetLab, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let to = dir.join(format!("{name}-logs"));
    let _ = std::fs::create_dir_all(&to);
    for entry in std::fs::read_dir(lab.dir()).into_iter().flatten().flatten() {
        let path = entry.path();
        let keep = path
            .extension()
            .is_some_and(|e| e == "log" || e == "jsonl" || e == "yaml");
        if keep {
            let _ = std::fs::copy(&path, to.join(entry.file_name()));
        }
    }
    to
}

fn event_json(a: &Applied) -> serde_json::Value {
    serde_json::json!({
        "at": a.event.at, "len": a.event.len, "what": describe(&a.event.kind),
        "start": a.start, "end": a.end, "member": a.resolved.map(Host::name),
    })
}

/// Plays `schedule` as run `name` (seed `seed`); the violations, or `None` if the lab is
/// skipped.
pub fn run(name: &str, seed: u64, schedule: &Schedule) -> Option<Vec<Violation>> {
    let events = &schedule.events;
    let lab = NetLab::start(name)?;
    let mut etcd = EtcdCluster::start(&lab, name, &[])?;
    etcd.wait_healthy(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let members = schedule.discovery.then_some(&MEMBERS);
    let flags = apiserver_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let flags = [DcA, DcB, Witness].map(|s| (s, flags.as_slice()));
    let mut cast = Cast::start_tuned(&lab, ETCD, members, &flags, &tuning());
    let all_ready: Vec<(Host, &str)> = Host::SITES.into_iter().map(|s| (s, "ready")).collect();
    cast.wait_states(&all_ready, Duration::from_secs(30));
    // A `/slow` request always in flight: a cut of the node's path is a dying path (scenario 7).
    cast.start_client_with(&["--slow"]);
    lab_print(&print(seed, schedule));

    let t0 = wall();
    let pid = AtomicU32::new(cast.balancer_pid());
    let stop = AtomicBool::new(false);
    let (Played { applied, herds }, samples) = std::thread::scope(|s| {
        let sampler = s.spawn(|| sampler::run(&lab, &pid, t0, &stop));
        let played = Nemesis::new(&lab, &etcd, &mut cast, &pid).play(events, t0);
        wait_return(&cast, t0, model::last_heal(&played.applied));
        std::thread::sleep(QUIET);
        stop.store(true, Ordering::SeqCst);
        (played, sampler.join().expect("sampler"))
    });
    let end = wall() - t0;
    cast.stop_client();
    // Counted once no connection is active, then the records: the client's last connections
    // end (and leave their records) only after it stopped.
    let counted = counted(&cast);
    let mut records = liveness::records(&cast.current_balancer_log());
    let _ = poll(Duration::from_secs(5), || {
        records = liveness::records(&cast.current_balancer_log());
        counted.as_ref().is_none_or(|c| records.matches(c).is_ok())
    });
    let ending = Ending {
        exited: cast.balancer_exited().map(|s| s.to_string()),
        log: cast.balancer_log(),
        records,
        counted,
    };
    // The herds' dials are requests like the client's (invariant 1 judges them too).
    let mut client = cast.client_events();
    let herd_dials = herds.len();
    client.extend(herds.into_iter().map(ClientEvent::Req));
    // A removal (discovery) is a change too: a removed backend is not ready.
    let log = cast.balancer_log();
    let mut changes = balancer_log::changes(&log);
    changes.extend(balancer_log::removals(&log));
    changes.sort_by(|a, b| a.t.total_cmp(&b.t));
    let records = Records {
        applied: &applied,
        client: &client,
        changes: &changes,
        samples: &samples,
        t0,
    };
    let mut violations = invariants::requests_land_on_good(&records);
    let (lease_gap, v2) = invariants::lease_renewed(&records, end);
    violations.extend(v2);
    violations.extend(invariants::no_connection_stays_on_unready(&records));
    let (growth, v4) = liveness::balancer_healthy(&records, &ending, end);
    violations.extend(v4);
    let ret = liveness::returned(
        &records,
        model::last_heal(&applied),
        (FAILBACK_AFTER, FAILBACK_SPREAD),
    );
    violations.extend(liveness::everything_returns(&ret));
    let ended = balancer_log::ended(&log);
    let probes = balancer_log::probes(&log);
    let needless = moves::no_needless_move(&Moves {
        ended: &ended,
        changes: &changes,
        probes: &probes,
        home: model::HOME,
        t0,
    });
    let moved = ended.iter().filter(|e| e.ended_by == "balancer").count();
    let needless_closes = needless.len();
    violations.extend(needless);
    violations.sort_by(|a, b| a.t.total_cmp(&b.t));

    let mut text = format!(
        "chaos seed {seed}: {} events over {end:.0} s ({}), {herd_dials} herd dials, detection bound {:.1} s, longest lease gap {lease_gap:.1} s, {} of {} samples with no ready backend, {needless_closes} of {moved} balancer closes needless\n  return: {ret:?}\n  processes: {growth:?}\n  connection records {:?}, counted {:?}\n",
        applied.len(),
        if schedule.discovery { "discovery on" } else { "sites listed" },
        bound(),
        samples.iter().filter(|s| s.no_ready == Some(1.0)).count(),
        samples.len(),
        ending.records,
        ending.counted,
    );
    for (i, v) in violations.iter().enumerate() {
        let same = violations[..i]
            .iter()
            .filter(|o| o.invariant == v.invariant)
            .count();
        if same == SHOWN {
            let more = violations
                .iter()
                .filter(|o| o.invariant == v.invariant)
                .count()
                - SHOWN;
            text.push_str(&format!(
                "  ... and {more} more of invariant {}\n",
                v.invariant
            ));
        }
        if same >= SHOWN {
            continue;
        }
        text.push_str(&format!(
            "  VIOLATION seed {seed} invariant {} at {:.1} s: {}\n    events around it:\n{}",
            v.invariant,
            v.t,
            v.what,
            around(&applied, v.t)
        ));
    }
    let record = serde_json::json!({
        "seed": seed, "t0": t0, "secs": end, "detection_bound": bound(),
        "discovery": schedule.discovery, "herd_dials": herd_dials,
        "events": applied.iter().map(event_json).collect::<Vec<_>>(),
        "violations": violations.iter().map(|v| serde_json::json!({
            "invariant": v.invariant, "t": v.t, "what": v.what })).collect::<Vec<_>>(),
        "longest_lease_gap": lease_gap, "return": ret, "processes": growth,
        "balancer_closes": moved, "needless_closes": needless_closes,
        "connection_records": ending.records, "connections_counted": ending.counted,
        "samples": samples.len(),
        "sampled": samples.iter().map(|s| serde_json::json!([
            s.t, s.pid, s.fds, s.rss_kib, s.no_ready, s.fixed_fds,
            s.active.iter().map(|(h, n)| (h.name(), n)).collect::<BTreeMap<_, _>>()])).collect::<Vec<_>>(),
    });
    let dir = results_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&record).expect("JSON"))
        .unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.push_str(&format!("  record: {}\n", path.display()));
    // Kept for every run (a few MB): a clean run's logs show what each event did.
    text.push_str(&format!(
        "  logs: {}\n",
        keep_logs(&lab, &dir, name).display()
    ));
    lab_print(&text);
    Some(violations)
}
