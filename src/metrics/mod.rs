//! Prometheus metrics: the registry, every family registered once, the health monitors' handles
//! (resolved once per backend), and — through [`backends`] — the proxy's per-backend counts,
//! which live as plain atomics in the backends and are read at scrape time.
//!
//! Does not own when metrics move: the owners of the events (probe, table, proxy, reload) do.
//! Reads the backends (`backend`); nothing in the domain depends on this module.

mod backends;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::backend::{BackendId, Snapshot};

/// Where the metrics read the current backends from at scrape time (the table's snapshot).
pub type SnapshotSource = Box<dyn Fn() -> std::sync::Arc<Snapshot> + Send + Sync>;

/// `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendZone {
    backend: String,
    zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendTo {
    backend: String,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendResult {
    backend: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoLabels {}

/// Every `result` of `readyprism_discovery_polls_total`, each exported (at 0) from start-up.
pub const DISCOVERY_RESULTS: [&str; 10] = [
    "changed",
    "unchanged",
    "no_ready_backend",
    "dial_failed",
    "timeout",
    "bad_status",
    "not_json",
    "not_endpoints",
    "too_large",
    "no_addresses",
];

type HistogramFamily = Family<BackendLabel, Histogram, fn() -> Histogram>;

/// The process's metrics. One instance, shared by `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    backend_ready: Family<BackendZone, Gauge>,
    state_changes: Family<BackendTo, Counter>,
    health_checks: Family<BackendResult, Counter>,
    check_duration: HistogramFamily,
    local_dial_failures: Family<ReasonLabel, Counter>,
    /// 1 from the moment every backend has answered and none is ready (failing open or
    /// refusing) until one is ready again.
    pub no_ready_backends: Gauge,
    /// Client connections closed without a backend because none was ready (`refuse`).
    pub rejected_no_backend: Counter,
    /// Client connections closed because every candidate's dial failed.
    pub rejected_all_dials_failed: Counter,
    /// Client connections relayed to a backend known to fail its checks (failing open).
    pub failed_open: Counter,
    /// Admin connections closed at the connection cap to let a newcomer in.
    pub admin_shed: Counter,
    reloads: Family<ResultLabel, Counter>,
    discovery_polls: Family<ResultLabel, Counter>,
    cert_expiry: Family<NoLabels, Gauge>,
}

/// A health monitor's handles for its backend, resolved once when the monitor starts.
#[derive(Debug, Clone)]
pub struct HealthMetrics {
    /// State changes to ready.
    pub to_ready: Counter,
    /// State changes to unready.
    pub to_unready: Counter,
    /// Passed probes.
    pub checks_pass: Counter,
    /// Failed probes.
    pub checks_fail: Counter,
    /// `/readyz` request→response seconds.
    pub check_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(Box::new(|| std::sync::Arc::new(Snapshot::default())))
    }
}

impl Metrics {
    /// Registers every family under the `readyprism_` prefix; the proxy's per-backend counts are
    /// read from the snapshot `backends` returns, at every scrape.
    pub fn new(backends: SnapshotSource) -> Self {
        let mut registry = Registry::with_prefix("readyprism");
        let rejected: Family<ReasonLabel, Counter> = Family::default();
        let m = Metrics {
            backend_ready: Family::default(),
            state_changes: Family::default(),
            health_checks: Family::default(),
            // 1 ms .. ~16 s: a LAN answer to the slowest timeout we accept.
            check_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            }),
            local_dial_failures: Family::default(),
            no_ready_backends: Gauge::default(),
            rejected_no_backend: rejected.get_or_create_owned(&ReasonLabel {
                reason: "no_ready_backend",
            }),
            rejected_all_dials_failed: rejected.get_or_create_owned(&ReasonLabel {
                reason: "all_dials_failed",
            }),
            failed_open: Counter::default(),
            admin_shed: Counter::default(),
            reloads: Family::default(),
            discovery_polls: Family::default(),
            cert_expiry: Family::default(),
            registry: Registry::default(),
        };
        // One row per family: name (under the `readyprism_` prefix), help, the family.
        macro_rules! register {
            ($($name:literal, $help:literal, $metric:expr;)*) => {
                $(registry.register($name, $help, $metric);)*
            };
        }
        register! {
            "backend_ready", "1 if the backend passes its /readyz checks",
                m.backend_ready.clone();
            "backend_state_changes", "Backend state changes by new state",
                m.state_changes.clone();
            "health_checks", "Health probes by result",
                m.health_checks.clone();
            "health_check_duration_seconds", "/readyz request to response time",
                m.check_duration.clone();
            "local_dial_failures", "Dials that failed for want of something on this node (descriptors, ports, memory), by reason; never counted against a backend",
                m.local_dial_failures.clone();
            "no_ready_backends", "1 while no backend is ready (failing open or refusing)",
                m.no_ready_backends.clone();
            "connections_rejected", "Client connections closed without a backend, by reason",
                rejected;
            "connections_failed_open", "Client connections relayed to a backend failing its checks because none was ready",
                m.failed_open.clone();
            "admin_connections_shed", "Admin connections closed at the connection cap to let a newcomer in (the one longest without a request)",
                m.admin_shed.clone();
            "config_reloads", "Config reloads by result",
                m.reloads.clone();
            "discovery_polls", "Polls of the default/kubernetes Endpoints object by result",
                m.discovery_polls.clone();
            "client_cert_expiry_timestamp_seconds", "notAfter of the client certificate in use",
                m.cert_expiry.clone();
        }
        let build_info: Family<VersionLabel, Gauge> = Family::default();
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "Build information", build_info);
        registry.register_collector(Box::new(backends::Backends(backends)));
        // Every label value an alert uses exists from start-up, so `increase()` sees the first one.
        for result in ["success", "failure"] {
            drop(m.reloads.get_or_create_owned(&ResultLabel { result }));
        }
        for result in DISCOVERY_RESULTS {
            drop(
                m.discovery_polls
                    .get_or_create_owned(&ResultLabel { result }),
            );
        }
        for reason in ["descriptors", "ports", "memory", "interrupted"] {
            drop(
                m.local_dial_failures
                    .get_or_create_owned(&ReasonLabel { reason }),
            );
        }
        Metrics { registry, ..m }
    }

    /// Resolves (creating if needed) the health handles of one backend.
    pub fn health(&self, id: &BackendId) -> HealthMetrics {
        let address = id.as_str();
        let with = |to| BackendTo {
            backend: address.to_string(),
            to,
        };
        let result = |result| BackendResult {
            backend: address.to_string(),
            result,
        };
        HealthMetrics {
            to_ready: self.state_changes.get_or_create_owned(&with("ready")),
            to_unready: self.state_changes.get_or_create_owned(&with("unready")),
            checks_pass: self.health_checks.get_or_create_owned(&result("pass")),
            checks_fail: self.health_checks.get_or_create_owned(&result("fail")),
            check_duration: self.check_duration.get_or_create_owned(&BackendLabel {
                backend: address.to_string(),
            }),
        }
    }

    /// Sets `readyprism_backend_ready{backend,zone}`. Looked up per call: only the table writer
    /// calls it, and the zone label may change on reload.
    pub fn set_backend_ready(&self, id: &BackendId, zone: Option<&str>, ready: bool) {
        let labels = BackendZone {
            backend: id.to_string(),
            zone: zone.unwrap_or("").to_string(),
        };
        self.backend_ready
            .get_or_create(&labels)
            .set(i64::from(ready));
    }

    /// Drops the `backend_ready` series of `address` in `zone` (its zone changed or it is gone).
    pub fn forget_ready_series(&self, id: &BackendId, zone: Option<&str>) {
        self.backend_ready.remove(&BackendZone {
            backend: id.to_string(),
            zone: zone.unwrap_or("").to_string(),
        });
    }

    /// Counts a dial this node could not make (`label`: a [`crate::dial::DialError::label`]).
    pub fn local_dial_failure(&self, label: &'static str) {
        self.local_dial_failures
            .get_or_create(&ReasonLabel { reason: label })
            .inc();
    }

    /// Counts a config reload.
    pub fn reload(&self, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.reloads.get_or_create(&ResultLabel { result }).inc();
    }

    /// Counts a discovery poll (`result`: one of [`DISCOVERY_RESULTS`]).
    pub fn discovery_poll(&self, result: &'static str) {
        self.discovery_polls
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// Sets (or with `None`, removes) the client certificate's notAfter, in Unix seconds.
    pub fn set_client_cert_expiry(&self, not_after: Option<i64>) {
        match not_after {
            Some(t) => {
                self.cert_expiry.get_or_create(&NoLabels {}).set(t);
            }
            None => {
                self.cert_expiry.remove(&NoLabels {});
            }
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        out
    }
}
