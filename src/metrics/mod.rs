//! Prometheus metrics: the registry, every process-wide family registered once, and — through
//! [`backends`] — every per-backend series (health, probes, connections), read at scrape time
//! from the current snapshot: a backend's series exist exactly while it is in the list.
//!
//! Does not own when metrics move: the owners of the events (probe, table, proxy, reload) do.
//! Reads the backends (`backend`); nothing in the domain depends on this module.

mod backends;
mod process;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::backend::Snapshot;

/// Where the metrics read the current backends from at scrape time (the table's snapshot).
pub type SnapshotSource = Box<dyn Fn() -> std::sync::Arc<Snapshot> + Send + Sync>;

/// `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// This build's version (Cargo's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit this build was made from (`git rev-parse --short=12 HEAD` at build time), or
/// `unknown` when built without git.
pub const COMMIT: &str = env!("READYPRISM_COMMIT");

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoLabels {}

/// The process's metrics. One instance, shared by `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// The standard `process_*` metrics, which carry no `readyprism_` prefix.
    process: Registry,
    local_dial_failures: Family<ReasonLabel, Counter>,
    /// 1 from the moment every backend has answered and none is ready (failing open or
    /// refusing) until one is ready again.
    pub no_ready_backends: Gauge,
    /// Times `no_ready_backends` went up: cluster-wide events (every backend failing its checks
    /// at once: a control-plane blink or roll, or this node cut off).
    pub no_ready_events: Counter,
    /// Client connections closed without a backend because none was ready (`refuse`).
    pub rejected_no_backend: Counter,
    /// Client connections closed because every candidate's dial failed.
    pub rejected_all_dials_failed: Counter,
    /// Client connections relayed to a backend known to fail its checks (failing open).
    pub failed_open: Counter,
    /// Client connections that waited for their point of a re-entry window because every
    /// ready backend paced them ([`crate::pacing`]).
    pub reentry_waits: Counter,
    /// Seconds those connections waited, in all.
    pub reentry_wait_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Admin connections closed at the connection cap to let a newcomer in.
    pub admin_shed: Counter,
    reloads: Family<ResultLabel, Counter>,
    discovery_polls: Family<ResultLabel, Counter>,
    cert_expiry: Family<NoLabels, Gauge>,
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
            local_dial_failures: Family::default(),
            no_ready_backends: Gauge::default(),
            no_ready_events: Counter::default(),
            rejected_no_backend: rejected.get_or_create_owned(&ReasonLabel {
                reason: "no_ready_backend",
            }),
            rejected_all_dials_failed: rejected.get_or_create_owned(&ReasonLabel {
                reason: "all_dials_failed",
            }),
            failed_open: Counter::default(),
            reentry_waits: Counter::default(),
            reentry_wait_seconds: Counter::default(),
            admin_shed: Counter::default(),
            reloads: Family::default(),
            discovery_polls: Family::default(),
            cert_expiry: Family::default(),
            registry: Registry::default(),
            process: Registry::default(),
        };
        let mut process = Registry::default();
        process.register_collector(Box::new(process::Process));
        // One row per family: name (under the `readyprism_` prefix), help, the family.
        macro_rules! register {
            ($($name:literal, $help:literal, $metric:expr;)*) => {
                $(registry.register($name, $help, $metric);)*
            };
        }
        register! {
            "local_dial_failures", "Dials that failed for want of something on this node (descriptors, ports, memory), by reason; never counted against a backend",
                m.local_dial_failures.clone();
            "no_ready_backends", "1 while no backend is ready (failing open or refusing)",
                m.no_ready_backends.clone();
            "no_ready_backends_events", "Times no backend was ready (every backend failing at once: a cluster-wide event); nothing is moved meanwhile",
                m.no_ready_events.clone();
            "connections_rejected", "Client connections closed without a backend, by reason",
                rejected;
            "connections_failed_open", "Client connections relayed to a backend failing its checks because none was ready",
                m.failed_open.clone();
            "reentry_waits", "Client connections that waited for their point of a re-entry window because every ready backend had just turned ready again (reentry_window); at most the window each",
                m.reentry_waits.clone();
            "reentry_wait_seconds", "Seconds client connections waited for their point of a re-entry window, in all",
                m.reentry_wait_seconds.clone();
            "admin_connections_shed", "Admin connections closed at the connection cap to let a newcomer in (the one longest without a request)",
                m.admin_shed.clone();
            "config_reloads", "Config reloads by result",
                m.reloads.clone();
            "discovery_polls", "Polls of the default/kubernetes Endpoints object by result",
                m.discovery_polls.clone();
            "client_cert_expiry_timestamp_seconds", "notAfter of the client certificate in use",
                m.cert_expiry.clone();
        }
        let build_info: Family<BuildLabels, Gauge> = Family::default();
        build_info
            .get_or_create(&BuildLabels {
                version: VERSION,
                commit: COMMIT,
            })
            .set(1);
        registry.register("build_info", "Build information", build_info);
        registry.register_collector(Box::new(backends::Backends(backends)));
        // Every label value an alert uses exists from start-up, so `increase()` sees the first one.
        for result in ["success", "failure"] {
            drop(m.reloads.get_or_create_owned(&ResultLabel { result }));
        }
        for reason in crate::dial::SHORTAGE_LABELS {
            drop(
                m.local_dial_failures
                    .get_or_create_owned(&ReasonLabel { reason }),
            );
        }
        Metrics {
            registry,
            process,
            ..m
        }
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

    /// Exports every `result` of `readyprism_discovery_polls_total` at 0, so that `increase()`
    /// sees the first of each (`results`: discovery's labels, which it owns).
    pub fn declare_discovery_results(&self, results: impl IntoIterator<Item = &'static str>) {
        for result in results {
            drop(
                self.discovery_polls
                    .get_or_create_owned(&ResultLabel { result }),
            );
        }
    }

    /// Counts a discovery poll (`result`: one of the labels declared).
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
        for registry in [&self.registry, &self.process] {
            if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
            {
                tracing::error!(error = %e, "cannot encode metrics");
            }
        }
        out
    }
}
