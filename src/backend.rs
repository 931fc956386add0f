//! A backend's identity, its live per-backend state (active count, eviction, failed client
//! dials), and the immutable [`Snapshot`] that holds every backend with its health and the
//! routing settings (declared in `routing`).
//!
//! Does not own how health is measured (`health/`), how snapshots are published (`table`), or how a
//! backend is chosen (`pick`).

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::time::Instant;

pub use crate::eviction::Eviction;
pub use inbox::{Inbox, News};
pub use learned_window::LearnedWindow;
pub use reentry::{draw as reentry_draw, Reentry};
pub use routing::{
    NodeZone, Routing, ZoneSource, DEFAULT_DEAD_PATH_TIMEOUT, DEFAULT_REENTRY_WINDOW,
};

mod inbox;
mod learned_window;
pub mod probe_counts;
mod reentry;
mod routing;

pub use probe_counts::ProbeCounts;

use crate::eviction::CloseReason;
use crate::pick::{self, Candidate, Order, Pick};
use crate::relay::Totals;
use crate::verdict::{Health, State};

/// A backend's identity: its address exactly as configured. Reloads, probes, status, logs and
/// metrics all name a backend by it, so a backend whose zone or server name changes stays itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(Arc<str>);

impl BackendId {
    /// The id of the backend configured as `address`.
    pub fn new(address: &str) -> Self {
        BackendId(address.into())
    }

    /// The configured address.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One configured apiserver. Immutable; a config change that alters it makes a new spec with the
/// same [`BackendId`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// Identity: the address as configured.
    pub id: BackendId,
    /// What to dial: an IP literal (no brackets) or a DNS name.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The backend's zone, compared with the node's zone for picking.
    pub zone: Option<String>,
    /// The TLS name the probe verifies the apiserver certificate against.
    pub server_name: ServerName<'static>,
    /// Where the backend comes from: the config file, or discovery.
    pub source: BackendSource,
}

impl BackendSpec {
    /// Whether `other` is checked the same way (everything but the source is equal): a cached
    /// backend that an answer confirms keeps its monitor.
    pub fn probed_alike(&self, other: &BackendSpec) -> bool {
        (
            &self.id,
            &self.host,
            self.port,
            &self.zone,
            &self.server_name,
        ) == (
            &other.id,
            &other.host,
            other.port,
            &other.zone,
            &other.server_name,
        )
    }
}

/// Where a backend comes from (shown in `/status` and `readyprism status`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum BackendSource {
    /// The config file's `backends:` (a seed: never removed by discovery).
    #[default]
    Config,
    /// The `default/kubernetes` Endpoints object, in an answer since start-up.
    Discovered,
    /// The discovery cache read at start-up, not yet confirmed by an answer.
    Cache,
}

impl BackendSource {
    /// Every source, in the order `readyprism_backends` lists them.
    pub const ALL: [BackendSource; 3] = [
        BackendSource::Config,
        BackendSource::Discovered,
        BackendSource::Cache,
    ];

    /// `config`, `discovered` or `cache`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendSource::Config => "config",
            BackendSource::Discovered => "discovered",
            BackendSource::Cache => "cache",
        }
    }
}

/// Per-backend state that outlives snapshots, shared by every connection to the backend.
#[derive(Debug, Default)]
pub struct BackendLive {
    /// Closes the backend's connections when it turns unready or is removed.
    pub eviction: Eviction,
    /// Connections relayed to the backend now: the picker's "fewest active" input, and the
    /// `readyprism_connections_active` gauge.
    pub active: AtomicUsize,
    /// What the proxy counts for this backend; `metrics` exports it at scrape time.
    pub counters: ConnCounters,
    /// What the backend's monitor counts; `metrics` exports it at scrape time.
    pub probes: ProbeCounts,
    /// The backend monitor's inbox: failed client dials and dead-path relays, connected dials
    /// while it asks, and the table's asks for a confirm probe.
    pub inbox: Inbox,
    /// What its dials share, probes' and clients' alike: which of its addresses failed lately (a
    /// DNS-named backend: the others are tried first), and the herd of dials waiting on it (whose
    /// re-attempts are skipped while none connects).
    pub dial_memory: crate::dial::Memory,
    /// Its shutdown window as its monitor learned it, which a hand-off to it fits into.
    pub shutdown_window: LearnedWindow,
    /// Its latest re-entry window, which paces this node's new connections to it after it
    /// turned ready again.
    pub reentry: Reentry,
    /// Its request checks by what they found, in [`crate::overload::Found::ALL`]'s order;
    /// `metrics` exports them at scrape time.
    pub request_checks: [AtomicU64; crate::overload::Found::ALL.len()],
}

/// The proxy's per-backend counts: plain atomics (the relay path touches nothing else), read by
/// `metrics` when `/metrics` is scraped.
#[derive(Debug, Default)]
pub struct ConnCounters {
    /// Connections relayed, ever.
    pub connections: AtomicU64,
    /// Dials that failed for the backend's fault.
    pub dial_failures: AtomicU64,
    /// Connection attempts, by client dials and probes, to an address the same dial had already
    /// tried (`dial::Tally::reattempts`): the SYNs the re-attempt schedule added.
    pub dial_reattempts: AtomicU64,
    /// Connections closed because of the backend's state, by [`CloseReason::index`].
    pub closes: [AtomicU64; CloseReason::ALL.len()],
    /// Bytes relayed each way, over every connection.
    pub bytes: Totals,
}

impl BackendLive {
    /// Adds a finished (or dropped) dial's re-attempts to the backend's count; returns its
    /// attempts, for the connection's record.
    pub fn count_dial(&self, tally: &crate::dial::Tally) -> u32 {
        let re = tally.reattempts.load(Ordering::Relaxed);
        self.counters
            .dial_reattempts
            .fetch_add(u64::from(re), Ordering::Relaxed);
        tally.attempts.load(Ordering::Relaxed)
    }

    /// Counts one relayed connection for as long as the returned handle lives (also on panic).
    /// The handle is the connection's reference to its backend: no second pointer is kept.
    pub fn count_active(self: &Arc<Self>) -> Active {
        if self.active.fetch_add(1, Ordering::Relaxed) == 0 {
            // Its first connection: a backend probed at the remote cadence is wanted again.
            self.inbox.tell(News::Wanted);
        }
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        Active(self.clone())
    }
}

/// A relayed connection's backend, counted active while it lives ([`BackendLive::count_active`]).
#[derive(Debug)]
pub struct Active(Arc<BackendLive>);

impl std::ops::Deref for Active {
    type Target = BackendLive;

    fn deref(&self) -> &BackendLive {
        &self.0
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One entry of a snapshot.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Configuration and identity.
    pub spec: Arc<BackendSpec>,
    /// Health at the time the snapshot was made.
    pub health: Health,
    /// Why its request check finds it overloaded (`crate::overload`), while it does: ranked
    /// after the healthy ready backends for new connections, nothing closed. `None`: healthy, or
    /// not checked.
    pub degraded: Option<Arc<str>>,
    /// Live state, shared with the previous and next snapshots of the same backend.
    pub live: Arc<BackendLive>,
    /// The eviction epoch this snapshot was stamped with (see [`Eviction`]).
    pub evict_epoch: u64,
}

/// Everything the accept path and the admin server need, frozen at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases by one with every published snapshot; tests and status wait on it.
    pub generation: u64,
    /// Zone, no-ready policy and dial timeout.
    pub routing: Routing,
    /// Backends in config order.
    pub backends: Vec<Backend>,
}

impl Snapshot {
    /// True if at least one backend is ready.
    pub fn any_ready(&self) -> bool {
        self.backends.iter().any(|b| b.health.state == State::Ready)
    }

    /// Index of the backend with `id`.
    pub fn position(&self, id: &BackendId) -> Option<usize> {
        self.backends.iter().position(|b| b.spec.id == *id)
    }

    /// The picker's input: a plain copy of what it needs, with active counts read now; no
    /// re-entry paced (for the decisions that are not a new connection's).
    pub fn candidates(&self) -> Vec<Candidate> {
        self.candidates_at(None)
    }

    /// [`Snapshot::candidates`] for a new connection at `now` with re-entry `draw`: ready
    /// backends in a re-entry window that paces it now are marked so.
    fn candidates_at(&self, now: Option<(Instant, f64)>) -> Vec<Candidate> {
        let zone = self.routing.zone_name();
        let len = self.routing.reentry_window;
        self.backends
            .iter()
            .map(|b| Candidate {
                state: b.health.state,
                reach: b.health.reach,
                local: zone.is_some() && b.spec.zone.as_deref() == zone,
                latency: b.health.latency,
                active: b.live.active.load(Ordering::Relaxed),
                paced: b.health.state == State::Ready
                    && now.is_some_and(|(now, draw)| b.live.reentry.paces(len, now, draw)),
                degraded: b.degraded.is_some(),
            })
            .collect()
    }

    /// The current pick order, as a new connection with round-robin position `rr` would see it.
    pub fn pick(&self, rr: usize) -> Pick {
        pick::pick(&self.candidates(), self.routing.when_none_ready, rr)
    }

    /// A new connection's whole dial order: [`Snapshot::pick`], and the backends it goes on to
    /// when every ready one fails to dial (failing open), worked out only if it comes to that.
    /// Ready backends whose re-entry paces the connection (its `draw`) at `now` are ranked
    /// after the others.
    pub fn order(&self, rr: usize, now: Instant, draw: f64) -> Order {
        Order::new(
            self.candidates_at(Some((now, draw))),
            self.routing.when_none_ready,
            rr,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend whose first active guard was dropped and whose second is held.
    fn second_guard_held() -> (Arc<BackendLive>, Active) {
        let live = Arc::new(BackendLive::default());
        let g = live.count_active();
        assert_eq!(live.active.load(Ordering::Relaxed), 1);
        drop(g);
        let g = live.count_active();
        (live, g)
    }

    #[test]
    fn an_active_guard_counts_only_while_held() {
        let (live, _g) = second_guard_held();
        assert_eq!(live.active.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn every_active_guard_adds_to_the_connection_total() {
        let (live, _g) = second_guard_held();
        assert_eq!(live.counters.connections.load(Ordering::Relaxed), 2);
    }
}
