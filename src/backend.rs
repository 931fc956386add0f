//! A backend's identity, its health as last decided, its live counters, and the immutable `Snapshot`
//! that holds all of them together.
//!
//! Does not own how health is measured (`health/`), how snapshots are published (`table`), or how a
//! backend is chosen (`pick`).

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::sync::watch;

use crate::config::WhenNoneReady;
use crate::metrics::BackendMetrics;
use crate::pick::{self, Candidate, Pick};

/// One configured apiserver. Immutable; a config change that alters it makes a new backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// The address exactly as configured: the backend's name in status, logs and metrics.
    pub address: String,
    /// What to dial: an IP literal (no brackets) or a DNS name.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The backend's zone, compared with the node's zone for picking.
    pub zone: Option<String>,
    /// The TLS name the probe verifies the apiserver certificate against.
    pub server_name: ServerName<'static>,
}

/// Health state as decided by the rise/fall state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No probe has finished yet.
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
    /// Reason of the most recent failed probe; cleared by a pass.
    pub last_error: Option<Arc<str>>,
}

impl Health {
    /// Health of a backend no probe has finished for.
    pub const UNKNOWN: Health = Health {
        state: State::Unknown,
        latency: None,
        last_error: None,
    };
}

/// Per-backend state that outlives snapshots: atomics and signals shared by every connection to it.
#[derive(Debug)]
pub struct BackendLive {
    /// Bumped when the backend's connections must be closed (turned unready, or removed).
    /// Each relayed connection holds a receiver and closes when the value changes.
    pub evict: watch::Sender<u64>,
    /// Pre-resolved metric handles, so the relay path never looks up labels. Its `active` gauge is
    /// also the picker's count of connections currently relayed to this backend.
    pub metrics: BackendMetrics,
}

impl BackendLive {
    /// Fresh live state with the given metric handles.
    pub fn new(metrics: BackendMetrics) -> Self {
        BackendLive {
            evict: watch::Sender::new(0),
            metrics,
        }
    }

    /// Asks every connection relayed to this backend to close; returns the new eviction epoch.
    pub fn evict_all(&self) -> u64 {
        let mut epoch = 0;
        self.evict.send_modify(|n| {
            *n = n.wrapping_add(1);
            epoch = *n;
        });
        epoch
    }
}

/// One entry of a snapshot.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Configuration identity.
    pub spec: Arc<BackendSpec>,
    /// Health at the time the snapshot was made.
    pub health: Health,
    /// Live counters, shared with the previous and next snapshots of the same backend.
    pub live: Arc<BackendLive>,
    /// The eviction epoch as of this snapshot. A connection picked from this snapshot compares it
    /// with `live.evict` after subscribing: a difference means the backend was evicted since, so
    /// no eviction can slip between reading the snapshot and subscribing.
    pub evict_epoch: u64,
}

/// Everything the accept path and the admin server need, frozen at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases by one with every published snapshot; tests and status wait on it.
    pub generation: u64,
    /// This node's zone.
    pub zone: Option<String>,
    /// Backends in config order.
    pub backends: Vec<Backend>,
    /// Behaviour with no ready backend.
    pub when_none_ready: WhenNoneReady,
    /// Per-attempt dial timeout.
    pub connect_timeout: Duration,
}

impl Snapshot {
    /// True if at least one backend is ready.
    pub fn any_ready(&self) -> bool {
        self.backends.iter().any(|b| b.health.state == State::Ready)
    }

    /// The picker's input: a plain copy of what it needs, with active counts read now.
    pub fn candidates(&self) -> Vec<Candidate> {
        self.backends
            .iter()
            .map(|b| Candidate {
                ready: b.health.state == State::Ready,
                failing: b.health.state == State::Unready,
                local: self.zone.is_some() && b.spec.zone == self.zone,
                latency: b.health.latency,
                active: usize::try_from(b.live.metrics.active.get()).unwrap_or(0),
            })
            .collect()
    }

    /// The current pick order, as a new connection with round-robin position `rr` would see it.
    pub fn pick(&self, rr: usize) -> Pick {
        pick::pick(&self.candidates(), self.when_none_ready, rr)
    }
}
