//! What one run saw ([`Run`]) → the numbers of the table ([`Outcome`]). Pure: no clock, no I/O.

use serde::Serialize;

use crate::clients::{Event, EventKind};
use crate::fleet::Kind;
use crate::scenario::{Sample, Scenario};

/// A hand-off spread over this window is what the drain goal compares the re-dial rate with.
pub const HANDOFF_WINDOW_S: f64 = 5.0;

/// Width of the buckets new connections are counted in.
pub const BUCKET_S: f64 = 0.1;

/// Raw observations of one scenario against one fleet, times in seconds since the fault began.
pub struct Run {
    pub scenario: Scenario,
    pub kind: Kind,
    pub clients: usize,
    /// The apiserver the fault hit, when it hit one.
    pub victim: Option<usize>,
    /// Clients on each apiserver when the fault began.
    pub on_at_fault: Vec<usize>,
    /// Clients on each apiserver at the end of the watch.
    pub on_at_end: Vec<usize>,
    /// Drain: clients still on the draining apiserver when its listener closed.
    pub on_victim_at_close: Option<usize>,
    /// Drain: when the apiserver closed its listener and its connections.
    pub apiserver_closed_at: Option<f64>,
    /// Client events from the fault on.
    pub events: Vec<Event>,
    /// The 100 ms samples from the fault on.
    pub samples: Vec<Sample>,
    /// Every balancer process still ran at the end.
    pub balancers_alive: bool,
    /// Seconds watched from the fault's start.
    pub window: f64,
}

/// The numbers of one scenario against one balancer.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub scenario: &'static str,
    pub balancer: &'static str,
    pub clients: usize,
    pub window_s: f64,
    pub victim: Option<usize>,
    pub on_at_fault: Vec<usize>,
    pub on_at_end: Vec<usize>,
    /// Connections the clients saw closed by their balancer (not by an apiserver that stopped).
    pub closed_by_balancer: usize,
    /// Connections closed by the draining apiserver when it stopped.
    pub closed_by_apiserver: usize,
    /// Requests that failed on a connection that reached an apiserver (it closed under them,
    /// the first request of a dial included).
    pub requests_cut: usize,
    /// Dials the balancer refused (TCP failed, or it closed before relaying an apiserver's byte).
    pub dials_failed: usize,
    /// `requests_cut + dials_failed`.
    pub client_errors: usize,
    /// New client TLS connections (handshakes) after the fault.
    pub new_connections: usize,
    /// The most new client connections in one 100 ms bucket.
    pub peak_per_100ms: usize,
    /// The most new client connections in any 1 s (sliding over the 100 ms buckets), per second.
    pub peak_per_s: usize,
    /// TLS handshakes the apiservers completed after the fault: the clients' and the balancers'
    /// probes (so this minus `new_connections` is what probing cost).
    pub apiserver_handshakes: u64,
    /// Connections on the victim when the fault began: those that have to move.
    pub to_move: Option<usize>,
    /// Quorum, drain: seconds from the fault until no client was on the victim (sampled every
    /// 100 ms); `None`: never within the watch.
    pub all_off_victim_s: Option<f64>,
    /// Drain: clients still on the draining apiserver when its listener closed.
    pub on_victim_at_close: Option<usize>,
    /// Drain: 2 × to_move / handoff window, per second: the goal's bound on `peak_per_s`.
    pub spread_bound_per_s: Option<f64>,
    /// Clients connected at the end of the watch.
    pub connected_at_end: usize,
    /// Every balancer process still ran at the end.
    pub balancers_alive: bool,
    /// New client connections per 100 ms bucket from the fault on (the picture).
    pub per_100ms: Vec<usize>,
}

/// The numbers of `run`.
pub fn outcome(run: &Run) -> Outcome {
    let buckets = (run.window / BUCKET_S).ceil() as usize + 1;
    let mut per_100ms = vec![0usize; buckets];
    let (mut by_balancer, mut by_apiserver, mut cut, mut failed) = (0, 0, 0, 0);
    for e in &run.events {
        match e.kind {
            EventKind::Connected(_) => {
                let b = ((e.t / BUCKET_S) as usize).min(buckets - 1);
                per_100ms[b] += 1;
            }
            EventKind::Closed {
                apiserver,
                in_request,
            } => {
                if closed_by_apiserver(run, usize::from(apiserver), e.t) {
                    by_apiserver += 1;
                } else {
                    by_balancer += 1;
                }
                if in_request {
                    cut += 1;
                }
            }
            EventKind::DialFailed => failed += 1,
            EventKind::DialCut { handshaken } => {
                // Closed under its first request by the balancer (the apiserver is unknown).
                if handshaken {
                    let b = ((e.t / BUCKET_S) as usize).min(buckets - 1);
                    per_100ms[b] += 1;
                }
                by_balancer += 1;
                cut += 1;
            }
        }
    }
    let new_connections = per_100ms.iter().sum();
    let peak_per_100ms = per_100ms.iter().copied().max().unwrap_or(0);
    let per_s = (1.0 / BUCKET_S).round() as usize;
    let peak_per_s = per_100ms
        .windows(per_s.min(per_100ms.len()).max(1))
        .map(|w| w.iter().sum::<usize>())
        .max()
        .unwrap_or(0);
    let handshakes = |s: Option<&Sample>| s.map_or(0, |s| s.handshakes.iter().sum::<u64>());
    let apiserver_handshakes =
        handshakes(run.samples.last()).saturating_sub(handshakes(run.samples.first()));
    let to_move = run.victim.map(|v| run.on_at_fault[v]);
    let all_off_victim_s = run.victim.and_then(|v| {
        run.samples
            .iter()
            .find(|s| s.t >= 0.0 && s.on[v] == 0)
            .map(|s| s.t.max(0.0))
    });
    let spread_bound_per_s = (run.scenario == Scenario::Drain)
        .then(|| to_move.map(|m| 2.0 * m as f64 / HANDOFF_WINDOW_S))
        .flatten();
    Outcome {
        scenario: run.scenario.name(),
        balancer: run.kind.name(),
        clients: run.clients,
        window_s: run.window,
        victim: run.victim,
        on_at_fault: run.on_at_fault.clone(),
        on_at_end: run.on_at_end.clone(),
        closed_by_balancer: by_balancer,
        closed_by_apiserver: by_apiserver,
        requests_cut: cut,
        dials_failed: failed,
        client_errors: cut + failed,
        new_connections,
        peak_per_100ms,
        peak_per_s,
        apiserver_handshakes,
        to_move,
        all_off_victim_s,
        on_victim_at_close: run.on_victim_at_close,
        spread_bound_per_s,
        connected_at_end: run.on_at_end.iter().sum(),
        balancers_alive: run.balancers_alive,
        per_100ms,
    }
}

/// Whether a close at `t` on `apiserver` was the draining apiserver stopping, not the balancer.
fn closed_by_apiserver(run: &Run, apiserver: usize, t: f64) -> bool {
    matches!((run.victim, run.apiserver_closed_at), (Some(v), Some(at)) if v == apiserver && t >= at)
}
