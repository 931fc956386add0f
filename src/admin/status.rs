//! The `/status` document as a type: written by the admin server, read by `readyprism status`, the
//! demo and the tests, so writer and readers cannot drift apart.
//!
//! Owns the document's shape and how it is derived from a snapshot, and (`cell`) how its text is
//! made safe to show. Does not own serving it.

pub mod cell;

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::config_view::ConfigStatus;
use super::timestamp;
pub use crate::backend::BackendSource;
use crate::backend::{Snapshot, ZoneSource};
use crate::pick::Pick;
use crate::tls::ClientCert;
use crate::verdict::{Pending, Reach, State};

/// What new connections get right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Ready backends only.
    Normal,
    /// Nothing is ready: routing to backends that fail their checks.
    FailOpen,
    /// Nothing is ready and the policy is `refuse`: clients are closed.
    Refuse,
    /// Nothing is ready yet, but backends not yet checked are tried (start-up, just added).
    Starting,
}

/// Which client certificate the probes present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CertStatus {
    /// None configured: anonymous by choice.
    None,
    /// Configured, the file does not exist (yet): anonymous while kubelet bootstraps.
    Absent,
    /// Presented.
    Loaded,
}

impl From<&ClientCert> for CertStatus {
    fn from(c: &ClientCert) -> Self {
        match c {
            ClientCert::NotConfigured => CertStatus::None,
            ClientCert::Absent(_) => CertStatus::Absent,
            ClientCert::Loaded { .. } => CertStatus::Loaded,
        }
    }
}

/// The whole `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusDoc {
    /// This node's zone.
    pub zone: Option<String>,
    /// Where the node's zone came from: `flag`, `env`, `config`, `address 10.0.1.5`; null when
    /// the zone is unknown. Absent from older balancers' documents.
    #[serde(default, with = "zone_source")]
    pub zone_source: Option<ZoneSource>,
    /// At least one backend is ready and the balancer is not shutting down (admin `/readyz`).
    pub ready: bool,
    /// What new connections get.
    pub mode: Mode,
    /// SIGTERM received: draining.
    pub shutting_down: bool,
    /// Which client certificate the probes present.
    pub client_cert: CertStatus,
    /// When the client certificate presented expires (`notAfter`, Unix seconds); null without
    /// one or when it cannot be read. Absent from older balancers' documents.
    #[serde(default)]
    pub client_cert_not_after: Option<i64>,
    /// Its time left when the document was made: `expires in 6d`, `EXPIRED 1h ago`; null
    /// without one. Absent from older balancers' documents.
    #[serde(default)]
    pub client_cert_expiry: Option<String>,
    /// The snapshot generation the document was made from.
    pub generation: u64,
    /// Every backend, the configured ones first in config order, then the discovered ones.
    pub backends: Vec<BackendStatus>,
    /// When the document was made, RFC 3339 UTC (a status file read later says how old it is).
    /// Absent from older balancers' documents.
    #[serde(default)]
    pub at: Option<String>,
    /// The running config's file, when it was loaded, and the last reload. Absent from older
    /// balancers' documents.
    #[serde(default)]
    pub config: Option<ConfigStatus>,
}

/// One backend in the `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// The address as configured (the backend's id).
    pub address: String,
    /// The backend's zone.
    pub zone: Option<String>,
    /// Where it comes from: `config`, `discovered`, or `cache` (read from the discovery cache at
    /// start-up, not yet confirmed by an answer). Absent from older balancers' documents.
    #[serde(default)]
    pub source: BackendSource,
    /// Health state after hysteresis.
    pub state: State,
    /// Smoothed `/readyz` latency in milliseconds, two decimals; null until measured.
    pub latency_ms: Option<f64>,
    /// Reason of the latest failed check; null after a pass.
    pub last_error: Option<String>,
    /// The latest check got an HTTP answer (any status): alive, even if not ready. Failing open
    /// prefers answering backends and closes connections to silent ones while one answers.
    pub answering: bool,
    /// Connections relayed to it now.
    pub active_connections: u64,
    /// 0-based position in the current pick order; null when not a candidate.
    pub rank: Option<usize>,
    /// Since when the backend is in its state (for `unknown`: since it was added), RFC 3339
    /// UTC. The fields from here on are absent from older balancers' documents.
    #[serde(default)]
    pub since: Option<String>,
    /// A change of state under way, not yet decided (`rising 1/2`); null when none is.
    #[serde(default)]
    pub pending: Option<PendingStatus>,
    /// When the latest probe ended, RFC 3339 UTC; null before any.
    #[serde(default)]
    pub last_check: Option<String>,
    /// Probes failed in a row up to the latest; 0 after a pass.
    #[serde(default)]
    pub consecutive_failures: u64,
    /// The checks the latest `/readyz` answer named as failing (`["etcd", "etcd-readiness"]`), in
    /// the apiserver's order, at most 8; omitted when none did (a pass, a timeout, a body that
    /// lists no checks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing_checks: Vec<String>,
    /// Failing checks the answer listed beyond those kept; omitted when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failing_checks_more: u32,
    /// The apiserver's shutdown window in seconds as learned from its probes (its first
    /// `[-]shutdown` answer to its first refused dial); a hand-off to it fits into 0.7 of it.
    /// Omitted until one was learned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_window_s: Option<f64>,
    /// Back from unready, this node's new connections to it are paced (`reentry_window`): the
    /// seconds left of its window. Omitted when not paced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reentry_window_left_s: Option<f64>,
    /// Why its request check finds it overloaded (`HTTP 429 Too Many Requests, Retry-After: 1s`):
    /// ranked after the healthy ready backends for new connections, nothing closed. Omitted when
    /// it is not degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A change of state under way: `count` of the `needed` results in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingStatus {
    /// `rising` (toward ready) or `falling` (toward unready).
    pub direction: Direction,
    /// Results in a row so far.
    pub count: u32,
    /// Results in a row that decide it (`health.rise` or `health.fall`).
    pub needed: u32,
}

/// Which way a pending change goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Toward ready.
    Rising,
    /// Toward unready.
    Falling,
}

impl std::fmt::Display for PendingStatus {
    /// `rising 1/2`, `falling 1/2`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let way = match self.direction {
            Direction::Rising => "rising",
            Direction::Falling => "falling",
        };
        write!(f, "{way} {}/{}", self.count, self.needed)
    }
}

impl From<Pending> for PendingStatus {
    fn from(p: Pending) -> Self {
        PendingStatus {
            direction: if p.toward == State::Ready {
                Direction::Rising
            } else {
                Direction::Falling
            },
            count: p.count,
            needed: p.needed,
        }
    }
}

impl StatusDoc {
    /// The document for `snap` (and the running config's `config`), made now.
    pub fn of(
        snap: &Snapshot,
        shutting_down: bool,
        client_cert: CertStatus,
        config: Option<ConfigStatus>,
    ) -> StatusDoc {
        let pick = snap.pick(0);
        let now = tokio::time::Instant::now();
        let failing = |i: &usize| snap.backends[*i].health.state == State::Unready;
        let mode = match &pick {
            Pick::Ready(_) => Mode::Normal,
            Pick::NoneReady(order) if order.iter().any(failing) => Mode::FailOpen,
            Pick::NoneReady(_) => Mode::Starting,
            Pick::Refuse => Mode::Refuse,
        };
        let backends = snap
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| BackendStatus {
                address: b.spec.id.to_string(),
                zone: b.spec.zone.clone(),
                source: b.spec.source,
                state: b.health.state,
                latency_ms: b
                    .health
                    .latency
                    .map(|l| (l.as_secs_f64() * 1e5).round() / 100.0),
                last_error: b.health.last_error().map(str::to_string),
                answering: b.health.reach.is_some_and(Reach::is_answered),
                active_connections: b.live.active.load(Ordering::Relaxed) as u64,
                rank: pick.order().iter().position(|&j| j == i),
                since: timestamp::rfc3339(b.live.probes.since_ms.load(Ordering::Relaxed)),
                pending: b.health.pending.map(PendingStatus::from),
                last_check: timestamp::rfc3339(b.live.probes.checked_ms.load(Ordering::Relaxed)),
                consecutive_failures: b.live.probes.consecutive_failures.load(Ordering::Relaxed),
                failing_checks: b
                    .health
                    .last_failure
                    .iter()
                    .flat_map(|f| f.checks.names().map(str::to_string))
                    .collect(),
                failing_checks_more: b
                    .health
                    .last_failure
                    .as_ref()
                    .map_or(0, |f| f.checks.more()),
                shutdown_window_s: b
                    .live
                    .shutdown_window
                    .get()
                    .map(|w| (w.as_secs_f64() * 10.0).round() / 10.0),
                reentry_window_left_s: b
                    .live
                    .reentry
                    .window(snap.routing.reentry_window, now)
                    .filter(|_| b.health.state == State::Ready)
                    .map(|w| ((w.end() - now).as_secs_f64() * 1000.0).round() / 1000.0),
                degraded: b.degraded.as_deref().map(crate::visible::escaped),
            })
            .collect();
        StatusDoc {
            zone: snap.routing.zone.as_ref().map(|z| z.name.clone()),
            zone_source: snap.routing.zone.as_ref().map(|z| z.source),
            ready: snap.any_ready() && !shutting_down,
            mode,
            shutting_down,
            client_cert,
            client_cert_not_after: None,
            client_cert_expiry: None,
            generation: snap.generation,
            backends,
            at: Some(timestamp::now()),
            config,
        }
    }
}

impl StatusDoc {
    /// The document with the client certificate `cert`'s expiry, its time left read at `now`
    /// (Unix seconds).
    pub fn with_expiry(self, cert: &ClientCert, now: i64) -> StatusDoc {
        let not_after = match cert {
            ClientCert::Loaded { not_after, .. } => *not_after,
            _ => None,
        };
        StatusDoc {
            client_cert_not_after: not_after,
            client_cert_expiry: cert.left(now).map(|l| l.to_string()),
            ..self
        }
    }
}

/// `zone_source` as its text form (`address 10.0.1.5`), so readers see what the log says.
mod zone_source {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::backend::ZoneSource;

    pub fn serialize<S: Serializer>(v: &Option<ZoneSource>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(z) => s.collect_str(z),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ZoneSource>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
impl StatusDoc {
    /// A document for tests: this node in zone `dc-a`, in `mode` (ready when normal), its client
    /// certificate loaded, and `backends`; nothing else known.
    pub fn in_dc_a(mode: Mode, backends: Vec<BackendStatus>) -> StatusDoc {
        StatusDoc {
            zone: Some("dc-a".to_string()),
            zone_source: None,
            ready: mode == Mode::Normal,
            mode,
            shutting_down: false,
            client_cert: CertStatus::Loaded,
            generation: 0,
            at: None,
            config: None,
            client_cert_expiry: None,
            client_cert_not_after: None,
            backends,
        }
    }
}

#[cfg(test)]
impl BackendStatus {
    /// A row for tests: `address` from the config, in `state` and answering; nothing else
    /// known (no zone, latency, error, connections, rank or history).
    pub fn bare(address: &str, state: State) -> BackendStatus {
        BackendStatus {
            address: address.to_string(),
            zone: None,
            source: BackendSource::Config,
            state,
            latency_ms: None,
            last_error: None,
            answering: true,
            active_connections: 0,
            rank: None,
            since: None,
            pending: None,
            last_check: None,
            consecutive_failures: 0,
            failing_checks: Vec::new(),
            failing_checks_more: 0,
            shutdown_window_s: None,
            reentry_window_left_s: None,
            degraded: None,
        }
    }
}

#[cfg(test)]
mod tests;
