//! A backend's health as the rise/fall machine last decided it: the state and what was measured.
//!
//! Plain values, no behaviour beyond naming: the picker, the snapshot and the status document all
//! read them. Does not own how they are decided (`health::rise_fall`).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// Reason of the most recent failed check; cleared by a pass.
    pub last_error: Option<Arc<str>>,
    /// The most recent check got an HTTP answer, whatever its status: the apiserver is alive even
    /// if not ready. Failing open prefers such backends over ones that time out, refuse or fail
    /// TLS.
    pub answering: bool,
}

impl Health {
    /// Health of a backend no check has finished for.
    pub const UNKNOWN: Health = Health {
        state: State::Unknown,
        latency: None,
        last_error: None,
        answering: false,
    };
}
