//! The recorded result of one partition scenario, as written to
//! `target/partition-lab/<scenario>.json` by the scenario tests and read by
//! `examples/partition_timeline.rs`, which draws it. One type for writer and reader.
//!
//! Every time is in seconds relative to the fault (negative: before it), from the wall clock that
//! the test, the balancer's logs and the kubelet-like client share.

use serde::{Deserialize, Serialize};

/// One scenario's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timeline {
    /// The test's name.
    pub scenario: String,
    /// A short title, e.g. `1. no-quorum local apiserver (real etcd)`.
    pub title: String,
    /// What the fault was, e.g. `block tcp port 2380 on dc-b`.
    pub fault: String,
    /// When the fault was healed, if it was.
    pub heal_at: Option<f64>,
    /// The sites, top to bottom as drawn: dc-a, dc-b, witness.
    pub sites: Vec<String>,
    /// Every request the client made, in order.
    pub requests: Vec<Request>,
    /// Every stream connection that delivered at least one event, in order.
    pub stream: Vec<StreamSegment>,
    /// Every backend state change the balancer logged.
    pub states: Vec<StateChange>,
    /// The figures, one set per phase (the fault; the heal where there is one).
    pub phases: Vec<Phase>,
    /// Every node-lease attempt, in order.
    #[serde(default)]
    pub leases: Vec<LeaseAttempt>,
    /// Every `GET /slow` (held 2 s by the apiserver; scenario 7), in order.
    #[serde(default)]
    pub slow: Vec<Request>,
}

/// One attempt to renew the node lease (`PUT .../leases/node`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseAttempt {
    pub start: f64,
    pub end: f64,
    pub ok: bool,
    /// The site that renewed it.
    pub site: Option<String>,
    /// 1 to 5 within a renewal round (client-go retries at once).
    pub attempt: u32,
    /// `new` or `reused` (the kept-alive connection).
    pub conn: String,
    pub error: Option<String>,
}

/// One `GET /whoami`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub start: f64,
    pub end: f64,
    /// The site that answered (`None` if none did).
    pub site: Option<String>,
    pub ok: bool,
    /// Attempts made (more than one: retried after EOF or a reset, as client-go does).
    pub attempts: u32,
    pub error: Option<String>,
}

/// One connection of the long-lived stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamSegment {
    /// The client's connection number.
    pub conn: u32,
    /// The site whose events it carried.
    pub site: String,
    /// First and last event received on it.
    pub first: f64,
    pub last: f64,
    /// When it ended, and why (`None`: still open when the record was taken).
    pub end: Option<f64>,
    pub reason: Option<String>,
}

/// A backend state change from the balancer's log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateChange {
    pub t: f64,
    pub site: String,
    pub from: String,
    pub to: String,
    pub reason: String,
}

/// The figures of one phase, measured from its start (the fault, or the heal).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    /// `fault` or `heal`.
    pub name: String,
    /// Start and end of the phase's window (relative to the fault).
    pub from: f64,
    pub to: f64,
    /// The sites that count as good backends in this phase.
    pub good: Vec<String>,
    /// Requests that ended in the window.
    pub requests: usize,
    /// From the phase's start to the end of the first request that landed on a good backend.
    pub first_good: Option<f64>,
    /// From the phase's start to the end of the first request after which every request landed
    /// on a good backend (`None`: not so by the end of the window).
    pub all_good: Option<f64>,
    /// From the phase's start to the first event of the run of stream connections on good
    /// backends that was still open at the end of the window (0 if the stream never left good
    /// backends).
    pub stream_good: Option<f64>,
    /// The longest time without a stream event between two stream connections in the window.
    pub stream_gap: f64,
    /// Requests that failed (after client-go-like retries), and stream dials that failed.
    pub errors: usize,
    pub error_samples: Vec<String>,
    /// Requests that needed a retry (EOF or reset on an earlier attempt).
    pub retried: usize,
    /// Requests that took at least the balancer's `connect_timeout`.
    pub slow: usize,
    /// The slowest request: seconds, and where it landed.
    pub slowest: f64,
    pub slowest_site: Option<String>,
    /// Backend state changes in the window, as `site -> state`.
    pub changes: Vec<String>,
    /// The longest time between successful lease renewals overlapping the window (`lease`).
    #[serde(default)]
    pub lease_gap: f64,
    /// Lease attempts that failed in the window.
    #[serde(default)]
    pub lease_failures: usize,
    /// From the phase's start until the in-flight `/slow` request was answered on a good
    /// backend, less its hold (`None`: not in the window, or no `/slow` requests).
    #[serde(default)]
    pub inflight_good: Option<f64>,
    /// `/slow` requests that failed (after client-go-like retries) in the window.
    #[serde(default)]
    pub inflight_errors: usize,
}
