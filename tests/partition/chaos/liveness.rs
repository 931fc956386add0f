//! The balancer's own health over a played schedule (invariant 4: it never exits or panics,
//! keeps answering `/livez`, its descriptors and memory stay flat, every connection leaves one
//! record with a reason) and the return after the last heal (invariant 5). Pure: samples, logs
//! and figures in, violations out.

use super::invariants::{bound, Records, Violation};
use super::sampler::Sample;

/// Descriptors a process may hold more at its end than at its start (both the least over
/// [`WINDOW`] seconds, when the same few connections are open).
pub const FD_SLACK: usize = 4;
/// Resident memory it may grow by, KiB.
pub const RSS_SLACK_KIB: u64 = 32 * 1024;
/// The first and last seconds of a process's samples compared.
const WINDOW: f64 = 15.0;

/// One process's start and end: least descriptors and resident memory in its first and last
/// [`WINDOW`] seconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Growth {
    pub pid: u32,
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
        (
            w.iter().filter_map(|s| s.fds).min().unwrap_or(0),
            w.iter().filter_map(|s| s.rss_kib).min().unwrap_or(0),
        )
    };
    let (f0, r0) = least(first.t, first.t + WINDOW);
    let (f1, r1) = least(last.t - WINDOW, last.t);
    Some(Growth {
        pid: first.pid,
        fds: (f0, f1),
        rss_kib: (r0, r1),
        secs: last.t - first.t,
    })
}

/// The connection records in a balancer's log: how many, and how many have no reason.
pub fn records(log: &str) -> (usize, usize) {
    let ended: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "connection ended")
        .collect();
    let reasonless = ended
        .iter()
        .filter(|l| {
            l["fields"]["reason"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        })
        .count();
    (ended.len(), reasonless)
}

/// What the end of the run found about the balancer.
pub struct Ending {
    /// The running balancer's exit, if it exited.
    pub exited: Option<String>,
    /// Its log and its restarted ones'.
    pub log: String,
    /// Connection records in the running balancer's log (all, without a reason), and the
    /// connections its metrics counted (relayed plus rejected), once none was active.
    pub records: (usize, usize),
    pub counted: Option<usize>,
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
        if g.fds.1 > g.fds.0 + FD_SLACK {
            out.push(v(
                at,
                format!("pid {pid}: descriptors grew {} -> {}", g.fds.0, g.fds.1),
            ));
        }
        if g.rss_kib.1 > g.rss_kib.0 + RSS_SLACK_KIB {
            out.push(v(
                at,
                format!(
                    "pid {pid}: resident memory grew {} -> {} KiB",
                    g.rss_kib.0, g.rss_kib.1
                ),
            ));
        }
        grown.push(g);
    }
    let (all, reasonless) = end.records;
    if reasonless > 0 {
        out.push(v(
            at,
            format!("{reasonless} of {all} connection records have no reason"),
        ));
    }
    if let Some(counted) = end.counted {
        if counted != all {
            out.push(v(
                at,
                format!("{all} connection records for {counted} connections counted"),
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
