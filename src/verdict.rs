//! A backend's health as the rise/fall machine last decided it: the state and what was measured.
//!
//! Plain values, no behaviour beyond naming: the picker, the snapshot and the status document all
//! read them. Does not own how they are decided (`health::rise_fall`).

mod checks;
mod fail_class;
mod reach;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use checks::FailingChecks;
pub use fail_class::FailClass;
pub use reach::{Answer, Reach};

/// Health state after hysteresis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// No check has finished yet (start-up, or just added by a reload).
    Unknown,
    /// Passing: receives new connections.
    Ready,
    /// Failing: receives nothing unless no backend is ready and we fail open.
    Unready,
}

impl State {
    /// Lower-case name used in status JSON, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Unknown => "unknown",
            State::Ready => "ready",
            State::Unready => "unready",
        }
    }
}

/// What the health checker last published for one backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// Current state after hysteresis.
    pub state: State,
    /// Smoothed `/readyz` request→response time; `None` until a response was measured.
    pub latency: Option<Duration>,
    /// How far the most recent check got; `None` before any.
    pub reach: Option<Reach>,
    /// The most recent check's failure; cleared by a pass. A ready backend can carry one: the
    /// first failures of a fall that has not happened (yet).
    pub last_failure: Option<CheckFailure>,
    /// A change of state under way but not yet decided (the first failure of a fall, the first
    /// pass of a rise); `None` when the results agree with the state.
    pub pending: Option<Pending>,
}

/// A change of state under way: `count` of the `needed` results in a row toward `toward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// The state the results point to.
    pub toward: State,
    /// Results in a row so far (at least 1).
    pub count: u32,
    /// Results in a row that decide it (`rise` or `fall`).
    pub needed: u32,
}

/// Why the most recent check failed. How far it got is [`Health::reach`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckFailure {
    /// For status and logs (`readyz 500: etcd failed`, `dial: connection refused`).
    pub reason: Arc<str>,
    /// The checks the answer named as failing (`[-]etcd failed`); none without an answer.
    pub checks: FailingChecks,
}

impl Health {
    /// Health of a backend no check has finished for.
    pub const UNKNOWN: Health = Health {
        state: State::Unknown,
        latency: None,
        reach: None,
        last_failure: None,
        pending: None,
    };

    /// The most recent check's failure reason, if it failed.
    pub fn last_error(&self) -> Option<&str> {
        self.last_failure.as_ref().map(|f| &*f.reason)
    }

    /// The most recent check's only failing check is `shutdown`: the apiserver is shutting down
    /// gracefully and still serves what it has (a planned hand-off).
    pub fn draining(&self) -> bool {
        self.reach.is_some_and(Reach::is_draining)
    }
}
