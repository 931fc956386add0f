//! Every per-backend series, read from the current snapshot at scrape time: health from the
//! snapshot's verdicts, the monitor's and the proxy's counts from the backends' plain atomics.
//! Neither the relay path nor a monitor touches a Prometheus handle or a label map, and a removed
//! backend's series go with it.
//!
//! Does not own the counts (`backend::ProbeCounts`, moved by `health`; `backend::ConnCounters`,
//! moved by `proxy`).

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::SnapshotSource;
use crate::backend::{Backend, BackendSource};
use crate::eviction::CloseReason;
use crate::overload::Found;
use crate::verdict::{FailClass, State};

/// The collector: the current snapshot's backends, encoded on every scrape.
pub(super) struct Backends(pub(super) SnapshotSource);

impl fmt::Debug for Backends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Backends")
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithReason {
    backend: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithZone {
    backend: String,
    zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithTo {
    backend: String,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithResult {
    backend: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithResultReason {
    backend: String,
    result: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithCheck {
    backend: String,
    check: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithDirection {
    backend: String,
    direction: &'static str,
}

/// The histogram's exemplar labels: it has none.
type NoExemplar = prometheus_client::encoding::NoLabelSet;

/// Reads one counter of a backend.
type Read = fn(&Backend) -> u64;

/// The per-backend counters with only a `backend` label: name, help, and how to read it.
const COUNTERS: [(&str, &str, Read); 7] = [
    (
        "connections",
        "Client connections relayed to the backend",
        |b| b.live.counters.connections.load(Ordering::Relaxed),
    ),
    (
        "dial_failures",
        "Dials that failed for the backend's fault (refused, timed out, unreachable, reset, blocked)",
        |b| b.live.counters.dial_failures.load(Ordering::Relaxed),
    ),
    (
        "spliced_bytes",
        "Bytes relayed by splice(2), never copied through this process (both directions; a part of bytes)",
        |b| b.live.counters.bytes.spliced.load(Ordering::Relaxed),
    ),
    (
        "dial_reattempts",
        "Connection attempts (SYNs) of client dials and probes to an address the same dial had already tried",
        |b| b.live.counters.dial_reattempts.load(Ordering::Relaxed),
    ),
    (
        "confirm_probes",
        "Probes made at once to confirm the backend as the escape route of an unready backend's connections (at most one per probe interval)",
        |b| b.live.inbox.confirms_made(),
    ),
    (
        "reentry_deferred",
        "New client connections sent to another ready backend because this one had just turned ready again and its re-entry from this node was paced (reentry_window)",
        |b| b.live.reentry.deferred(),
    ),
    (
        "backend_closed_without_shutdown_window",
        "Times the backend refused a probe's dial right after passing its checks, with no [-]shutdown answer between: a graceful restart with kube-apiserver's --shutdown-delay-duration 0, or a crash",
        |b| b.live.shutdown_window.without_window(),
    ),
];

impl Collector for Backends {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let snap = (self.0)();
        let backends = &snap.backends;
        let id = |b: &Backend| b.spec.id.to_string();
        let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);

        let mut m = encoder.encode_descriptor(
            "backend_ready",
            "1 if the backend passes its /readyz checks",
            None,
            MetricType::Gauge,
        )?;
        for b in backends {
            let labels = WithZone {
                backend: id(b),
                zone: b.spec.zone.clone().unwrap_or_default(),
            };
            let ready = i64::from(b.health.state == State::Ready);
            ConstGauge::new(ready).encode(m.encode_family(&labels)?)?;
        }
        // One series per check the latest answer named: at most 8 per backend (`FailingChecks`),
        // gone with the next answer that does not name it, and with the backend.
        let mut m = encoder.encode_descriptor(
            "backend_failing_check",
            "1 for each check the backend's latest /readyz answer named as failing ([-]NAME failed), at most 8 per backend",
            None,
            MetricType::Gauge,
        )?;
        for b in backends {
            let failure = b.health.last_failure.as_ref();
            for check in failure.into_iter().flat_map(|f| f.checks.names()) {
                let labels = WithCheck {
                    backend: id(b),
                    check: check.to_string(),
                };
                ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "backend_state_changes",
            "Backend state changes by new state",
            None,
            MetricType::Counter,
        )?;
        for b in backends {
            let probes = &b.live.probes;
            for (to, n) in [
                (State::Ready, &probes.to_ready),
                (State::Unready, &probes.to_unready),
            ] {
                let labels = WithTo {
                    backend: id(b),
                    to: to.as_str(),
                };
                ConstCounter::new(load(n)).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "health_checks",
            "Health probes by result; a failure by its class (reason)",
            None,
            MetricType::Counter,
        )?;
        for b in backends {
            let probes = &b.live.probes;
            let labels = WithResult {
                backend: id(b),
                result: "pass",
            };
            ConstCounter::new(load(&probes.passed)).encode(m.encode_family(&labels)?)?;
            // A failure carries its class; every class exists from the backend's start at 0.
            for (class, n) in FailClass::ALL.iter().zip(&probes.failed) {
                let labels = WithResultReason {
                    backend: id(b),
                    result: "fail",
                    reason: class.label(),
                };
                ConstCounter::new(load(n)).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "backend_degraded",
            "1 while the backend's request check finds it overloaded (a 429, no answer, or an answer far slower than its average): ranked after the healthy ready backends for new connections, nothing closed",
            None,
            MetricType::Gauge,
        )?;
        for b in backends {
            let degraded = i64::from(b.degraded.is_some());
            ConstGauge::new(degraded).encode(m.encode_family(&Labels { backend: id(b) })?)?;
        }
        let mut m = encoder.encode_descriptor(
            "request_checks",
            "Request checks (a GET through priority and fairness with the kubelet's identity, at most one per backend per request_check_interval) by what they found",
            None,
            MetricType::Counter,
        )?;
        for b in backends {
            for found in Found::ALL {
                let labels = WithResult {
                    backend: id(b),
                    result: found.label(),
                };
                let n = load(&b.live.request_checks[found.index()]);
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "health_check_duration_seconds",
            "/readyz request to response time",
            None,
            MetricType::Histogram,
        )?;
        for b in backends {
            let (sum, count, buckets) = b.live.probes.latency.read();
            m.encode_family(&Labels { backend: id(b) })?
                .encode_histogram::<NoExemplar>(sum, count, &buckets, None)?;
        }
        for (name, help, read) in COUNTERS {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for b in backends {
                ConstCounter::new(read(b)).encode(m.encode_family(&Labels { backend: id(b) })?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "backend_shutdown_window_seconds",
            "The backend's shutdown window as learned from its probes (first [-]shutdown answer to first refused dial); a hand-off to it fits into 0.7 of it. Absent until learned",
            None,
            MetricType::Gauge,
        )?;
        for b in backends {
            if let Some(w) = b.live.shutdown_window.get() {
                ConstGauge::new(w.as_secs_f64())
                    .encode(m.encode_family(&Labels { backend: id(b) })?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "connections_active",
            "Client connections relayed now",
            None,
            MetricType::Gauge,
        )?;
        for b in backends {
            let n = b.live.active.load(Ordering::Relaxed) as i64;
            ConstGauge::new(n).encode(m.encode_family(&Labels { backend: id(b) })?)?;
        }
        let mut m = encoder.encode_descriptor(
            "connections_closed",
            &closed_help(),
            None,
            MetricType::Counter,
        )?;
        for b in backends {
            for r in CloseReason::ALL {
                let n = load(&b.live.counters.closes[r.index()]);
                let labels = WithReason {
                    backend: id(b),
                    reason: r.as_str(),
                };
                ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "bytes",
            "Bytes relayed by direction",
            None,
            MetricType::Counter,
        )?;
        for b in backends {
            let bytes = &b.live.counters.bytes;
            for (direction, n) in [
                ("to_backend", &bytes.to_backend),
                ("to_client", &bytes.to_client),
            ] {
                let labels = WithDirection {
                    backend: id(b),
                    direction,
                };
                ConstCounter::new(load(n)).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "backends",
            "Backends in the list by source (config, discovered, cache)",
            None,
            MetricType::Gauge,
        )?;
        for source in BackendSource::ALL {
            let n = backends.iter().filter(|b| b.spec.source == source).count() as i64;
            let labels = SourceLabel {
                source: source.as_str(),
            };
            ConstGauge::new(n).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The help of `readyprism_connections_closed_total`, its reasons listed from
/// [`CloseReason::ALL`], so a new reason cannot be left out.
fn closed_help() -> String {
    let reasons: Vec<&str> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
    format!(
        "Connections closed because of the backend's state, by reason ({})",
        reasons.join(", ")
    )
}

#[cfg(test)]
mod tests;
