//! The balancer's own health over a played schedule (invariant 4: it never exits or panics,
//! keeps answering `/livez`, its descriptors and memory stay flat, every connection leaves one
//! record with a reason) and the return after the last heal (invariant 5). Pure: samples, logs
//! and figures in, violations out.

use std::collections::{BTreeMap, BTreeSet};

use super::invariants::{bound, Records, Violation};
use super::sampler::Sample;
use crate::partition::client::ClientEvent;

/// Descriptors that are neither sockets nor pipes a process may hold more at its end than at its
/// start (both the least over [`WINDOW`] seconds): a file read at that moment, say.
pub const FD_SLACK: usize = 2;
/// Resident memory it may grow by, KiB.
pub const RSS_SLACK_KIB: u64 = 32 * 1024;
/// The first and last seconds of a process's samples compared.
const WINDOW: f64 = 15.0;

/// One process's start and end, the least over its first and its last [`WINDOW`] seconds: its
/// descriptors that are neither sockets nor pipes (judged: those do not come and go with
/// connections), all its descriptors less two per active connection (reported: the probes'
/// kept-alive connections, a discovery poll, the splice pipes of busy connections make them
/// vary), and its resident memory.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Growth {
    pub pid: u32,
    pub fixed_fds: (usize, usize),
    pub fds: (usize, usize),
    pub rss_kib: (u64, u64),
    pub secs: f64,
}

fn growth(samples: &[&Sample]) -> Option<Growth> {
    let (first, last) = (samples.first()?, samples.last()?);
    if last.t - first.t < 2.0 * WINDOW {
        return None;
    }
    let least = |from: f64, to: f64| {
        let w: Vec<_> = samples
            .iter()
            .filter(|s| s.t >= from && s.t <= to)
            .collect();
        let own = |s: &&&Sample| {
            let legs = 2 * s.active.values().sum::<f64>() as usize;
            s.fds.map(|n| n.saturating_sub(legs))
        };
        (
            w.iter().filter_map(|s| s.fixed_fds).min().unwrap_or(0),
            w.iter().filter_map(own).min().unwrap_or(0),
            w.iter().filter_map(|s| s.rss_kib).min().unwrap_or(0),
        )
    };
    let (x0, f0, r0) = least(first.t, first.t + WINDOW);
    let (x1, f1, r1) = least(last.t - WINDOW, last.t);
    Some(Growth {
        pid: first.pid,
        fixed_fds: (x0, x1),
        fds: (f0, f1),
        rss_kib: (r0, r1),
        secs: last.t - first.t,
    })
}

/// The connection records in a balancer's log, by backend (`""` for a connection rejected
/// without one), how many have no reason, and the backends it removed (their counters start
/// again from 0 if they come back).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Tally {
    pub by_backend: BTreeMap<String, usize>,
    pub reasonless: usize,
    pub removed: BTreeSet<String>,
}

impl Tally {
    pub fn all(&self) -> usize {
        self.by_backend.values().sum()
    }

    /// Whether the records match what the balancer counted (`counted`, by backend, `""` for the
    /// rejected): equal for every backend, but at least as many for a removed one. `Err` says
    /// where they differ.
    pub fn matches(&self, counted: &BTreeMap<String, usize>) -> Result<(), String> {
        let keys: BTreeSet<&String> = self.by_backend.keys().chain(counted.keys()).collect();
        let mut wrong = Vec::new();
        for k in keys {
            let records = self.by_backend.get(k).copied().unwrap_or_default();
            let count = counted.get(k).copied().unwrap_or_default();
            let ok = if self.removed.contains(k) {
                records >= count
            } else {
                records == count
            };
            if !ok {
                wrong.push(format!("{k:?}: {records} records, {count} counted"));
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        }
    }
}

/// The connection records of a balancer's `log`.
pub fn records(log: &str) -> Tally {
    let mut tally = Tally::default();
    for l in log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let fields = &l["fields"];
        let backend = fields["backend"].as_str().unwrap_or_default().to_string();
        match fields["message"].as_str() {
            Some("connection ended") => {
                *tally.by_backend.entry(backend).or_default() += 1;
                if fields["reason"].as_str().unwrap_or_default().is_empty() {
                    tally.reasonless += 1;
                }
            }
            Some(m) if m.starts_with("backend removed") => {
                tally.removed.insert(backend);
            }
            _ => {}
        }
    }
    tally
}

/// What the end of the run found about the balancer.
pub struct Ending {
    /// The running balancer's exit, if it exited.
    pub exited: Option<String>,
    /// Its log and its restarted ones'.
    pub log: String,
    /// Connection records in the running balancer's log, and the connections its metrics
    /// counted (relayed, by backend, and rejected), once none was active.
    pub records: Tally,
    pub counted: Option<BTreeMap<String, usize>>,
}

/// Invariant 4: the processes' growth and the violations.
pub fn balancer_healthy(r: &Records, end: &Ending, at: f64) -> (Vec<Growth>, Vec<Violation>) {
    let mut out = Vec::new();
    let v = |t: f64, what: String| Violation {
        invariant: 4,
        t,
        what,
    };
    if let Some(status) = &end.exited {
        out.push(v(at, format!("readyprism exited: {status}")));
    }
    if let Some(line) = end.log.lines().find(|l| l.contains("panicked")) {
        out.push(v(at, format!("readyprism panicked: {line}")));
    }
    for w in r.samples.windows(2) {
        if !w[0].live && !w[1].live && !r.restarting(w[0].t) && !r.restarting(w[1].t) {
            out.push(v(
                w[0].t,
                "/livez did not answer twice in a row".to_string(),
            ));
            break;
        }
    }
    let mut pids: Vec<u32> = r.samples.iter().map(|s| s.pid).collect();
    pids.dedup();
    let mut grown = Vec::new();
    for pid in pids {
        let mine: Vec<&Sample> = r.samples.iter().filter(|s| s.pid == pid).collect();
        let Some(g) = growth(&mine) else {
            continue;
        };
        // What grew from the first sample to the last by more than its slack.
        let mut grew = |what: &str, (from, to): (u64, u64), slack: u64, unit: &str| {
            if to > from + slack {
                out.push(v(
                    at,
                    format!("pid {pid}: {what} grew {from} -> {to}{unit}"),
                ));
            }
        };
        let fixed_fds = (g.fixed_fds.0 as u64, g.fixed_fds.1 as u64);
        grew(
            "descriptors other than sockets and pipes",
            fixed_fds,
            FD_SLACK as u64,
            "",
        );
        grew("resident memory", g.rss_kib, RSS_SLACK_KIB, " KiB");
        grown.push(g);
    }
    let (all, reasonless) = (end.records.all(), end.records.reasonless);
    if reasonless > 0 {
        out.push(v(
            at,
            format!("{reasonless} of {all} connection records have no reason"),
        ));
    }
    if let Some(counted) = &end.counted {
        if let Err(wrong) = end.records.matches(counted) {
            out.push(v(
                at,
                format!("connection records and connections counted differ: {wrong}"),
            ));
        }
    }
    (grown, out)
}

/// What the return after the last heal reached, seconds from the schedule's start.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Return {
    pub last_heal: f64,
    pub all_ready: Option<f64>,
    pub stream_home: Option<f64>,
    pub none_unready_gauge: Option<f64>,
    /// The bounds: all ready, and the stream home.
    pub ready_by: f64,
    pub home_by: f64,
}

/// When each part of the return came, from the records (not from a poll, which may begin late:
/// balancer events can follow the last heal, and the nemesis plays them first): every backend
/// logged ready (a removed one is not), `readyprism_no_ready_backends` sampled 0, and the
/// client's stream on dc-b after its last line elsewhere; each the first such time at or after
/// the last heal.
pub fn returned(r: &Records, last_heal: f64, (failback_after, spread): (f64, f64)) -> Return {
    let (ready_by, home_by) = return_bounds(last_heal, failback_after, spread);
    let mut times: Vec<f64> = vec![last_heal];
    times.extend(
        r.changes
            .iter()
            .map(|c| c.t - r.t0)
            .filter(|&t| t > last_heal),
    );
    let all_ready = times.into_iter().find(|&t| r.all_ready(t));
    let none_unready_gauge = r
        .samples
        .iter()
        .find(|s| s.t >= last_heal && s.no_ready == Some(0.0))
        .map(|s| s.t);
    let lines: Vec<(f64, &str)> = r
        .client
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Line { t, site, .. } => Some((t - r.t0, site.as_str())),
            _ => None,
        })
        .collect();
    let away = lines
        .iter()
        .filter(|(_, site)| *site != "dc-b")
        .map(|(t, _)| *t)
        .fold(f64::NEG_INFINITY, f64::max);
    let stream_home = lines
        .iter()
        .find(|(t, site)| *site == "dc-b" && *t >= last_heal && *t > away)
        .map(|(t, _)| *t);
    Return {
        last_heal,
        all_ready,
        stream_home,
        none_unready_gauge,
        ready_by,
        home_by,
    }
}

/// The bounds after the last heal at `last_heal`: every backend ready within the detection bound;
/// the stream in the node's zone within that, `failback_after` and its spread.
pub fn return_bounds(last_heal: f64, failback_after: f64, spread: f64) -> (f64, f64) {
    let ready = last_heal + bound();
    (ready, ready + failback_after + spread)
}

/// Invariant 5.
pub fn everything_returns(ret: &Return) -> Vec<Violation> {
    let mut out = Vec::new();
    let late = |reached: Option<f64>, by: f64| reached.is_none_or(|t| t > by);
    let mut v = |by: f64, what: &str, reached: Option<f64>| {
        out.push(Violation {
            invariant: 5,
            t: by,
            what: format!(
                "after the last heal at {:.1} s, {what} not by {by:.1} s (reached: {reached:?})",
                ret.last_heal
            ),
        })
    };
    if late(ret.all_ready, ret.ready_by) {
        v(ret.ready_by, "every backend ready", ret.all_ready);
    }
    if late(ret.none_unready_gauge, ret.ready_by) {
        v(
            ret.ready_by,
            "readyprism_no_ready_backends 0",
            ret.none_unready_gauge,
        );
    }
    if late(ret.stream_home, ret.home_by) {
        v(ret.home_by, "the stream back in dc-b", ret.stream_home);
    }
    out
}

#[test]
fn chaos_records_match_the_counts_by_backend_and_at_least_for_a_removed_one() {
    let line = |msg: &str, backend: &str, reason: &str| {
        serde_json::json!({"fields": {"message": msg, "backend": backend, "reason": reason}})
            .to_string()
    };
    let log = [
        line("connection ended", "10.77.1.1:6443", "closed"),
        line("connection ended", "10.77.2.1:6443", "removed"),
        line(
            "backend removed; closing its connections",
            "10.77.2.1:6443",
            "removed",
        ),
        line("connection ended", "10.77.2.1:6443", "closed"),
        line("connection ended", "", "all_dials_failed"),
    ]
    .join("\n");
    let tally = records(&log);
    assert_eq!((tally.all(), tally.reasonless), (4, 0));
    let counted = |a: usize, b: usize, rejected: usize| {
        BTreeMap::from([
            ("10.77.1.1:6443".to_string(), a),
            ("10.77.2.1:6443".to_string(), b),
            (String::new(), rejected),
        ])
    };
    // dc-b's counter started again at its removal: one counted, two records.
    assert!(tally.matches(&counted(1, 1, 1)).is_ok());
    // A record missing or doubled for a backend never removed is not.
    assert!(tally.matches(&counted(2, 1, 1)).is_err());
    assert!(tally.matches(&counted(0, 1, 1)).is_err());
    assert!(tally.matches(&counted(1, 1, 0)).is_err());
    // Nor more counted than recorded for a removed one.
    assert!(tally.matches(&counted(1, 3, 1)).is_err());
}

#[test]
fn chaos_the_return_is_read_from_the_records_from_the_last_heal_on() {
    use crate::partition::balancer_log::Change;
    use crate::partition::netlab::Host::{DcA, DcB, Witness};
    let changes = [
        Change::to(1.0, DcA, "ready"),
        Change::to(1.0, Witness, "ready"),
        Change::to(1.0, DcB, "ready"),
        Change::to(20.0, DcB, "unready"),
        Change::to(41.5, DcB, "ready"),
    ];
    let sample = |t: f64, no_ready: f64| Sample {
        t,
        pid: 1,
        live: true,
        fds: None,
        fixed_fds: None,
        rss_kib: None,
        no_ready: Some(no_ready),
        active: BTreeMap::new(),
        failed: BTreeMap::new(),
    };
    let samples = [sample(39.0, 0.0), sample(40.0, 1.0), sample(42.0, 0.0)];
    let line = |t: f64, site: &str| ClientEvent::Line {
        t,
        c: 1,
        site: site.to_string(),
    };
    let client = [line(10.0, "dc-b"), line(30.0, "dc-a"), line(55.0, "dc-b")];
    let r = Records {
        applied: &[],
        client: &client,
        changes: &changes,
        samples: &samples,
        t0: 0.0,
    };
    let ret = returned(&r, 40.0, (10.0, 10.0));
    assert_eq!(ret.all_ready, Some(41.5));
    assert_eq!(ret.none_unready_gauge, Some(42.0));
    assert_eq!(ret.stream_home, Some(55.0));
    assert!(everything_returns(&ret).is_empty());
    // Not ready before the bound: invariant 5 fires.
    let late = returned(&r, 20.0, (10.0, 10.0));
    assert!(late.all_ready.is_some_and(|t| t > late.ready_by) || late.all_ready.is_none());
    assert!(!everything_returns(&late).is_empty());
}

#[test]
fn chaos_descriptors_other_than_sockets_and_pipes_are_judged() {
    use crate::partition::netlab::Host::DcB;
    // 60 s of one process: 9 fixed descriptors; sockets, two per active connection.
    let samples = |fixed: &dyn Fn(f64) -> usize, active: &dyn Fn(f64) -> f64| -> Vec<Sample> {
        (0..60)
            .map(|t| {
                let t = f64::from(t);
                let on = active(t);
                Sample {
                    t,
                    pid: 7,
                    live: true,
                    fds: Some(fixed(t) + 3 + 2 * on as usize),
                    fixed_fds: Some(fixed(t)),
                    rss_kib: Some(1000),
                    no_ready: Some(0.0),
                    active: BTreeMap::from([(DcB, on)]),
                    failed: BTreeMap::new(),
                }
            })
            .collect()
    };
    // Few connections at the start, many at the end: no growth.
    let busy = samples(&|_| 9, &|t| if t < 30.0 { 1.0 } else { 5.0 });
    let g = growth(&busy.iter().collect::<Vec<_>>()).expect("long enough");
    assert_eq!((g.fixed_fds, g.fds), ((9, 9), (12, 12)));
    // A descriptor leaked every 10 s: grown by 4 over the last window.
    let leaking = samples(&|t| 9 + (t / 10.0) as usize, &|_| 2.0);
    let g = growth(&leaking.iter().collect::<Vec<_>>()).expect("long enough");
    assert!(g.fixed_fds.1 > g.fixed_fds.0 + FD_SLACK, "{g:?}");
}
