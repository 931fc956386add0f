//! Health checking: one task per backend probes `/readyz`, runs the rise/fall machine and sends each
//! result to the table's writer. Backends are probed independently and in parallel.
//!
//! `probe` owns the HTTPS client, `state` the pure hysteresis; this file owns the schedule.

pub mod probe;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendSpec, Health, State};
use crate::config::HealthConfig;
use crate::metrics::BackendMetrics;
use crate::table::TableCmd;
use crate::tls::TlsSource;
use probe::Prober;
use state::{Checker, Outcome};

/// Everything one backend's probe loop needs.
#[derive(Debug)]
pub struct ProbeTask {
    /// The backend.
    pub spec: Arc<BackendSpec>,
    /// Intervals, timeout, rise/fall, path.
    pub health: HealthConfig,
    /// TLS material, reloaded elsewhere.
    pub tls: Arc<TlsSource>,
    /// Health to start from (kept across reloads).
    pub initial: Health,
    /// The table's writer.
    pub table: mpsc::Sender<TableCmd>,
    /// This backend's metric handles.
    pub metrics: BackendMetrics,
}

impl ProbeTask {
    /// Probes at once, then on schedule, until cancelled or the table is gone.
    pub async fn run(self, cancel: CancellationToken) {
        let ProbeTask {
            spec,
            health,
            tls,
            initial,
            table,
            metrics,
        } = self;
        let mut prober = Prober::new(spec.clone(), health.path.clone(), tls);
        let mut checker = Checker::new(health.rise, health.fall, initial);
        let mut jitter = Jitter::seeded(&spec.address);
        loop {
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                o = prober.probe(health.timeout) => o,
            };
            record(&metrics, &outcome);
            let step = checker.observe(&outcome);
            if let Some((from, to)) = step.changed {
                log_change(&spec, from, to, checker.health());
                match to {
                    State::Ready => metrics.to_ready.inc(),
                    _ => metrics.to_unready.inc(),
                };
            }
            let cmd = TableCmd::Health {
                spec: spec.clone(),
                health: checker.health().clone(),
            };
            if table.send(cmd).await.is_err() {
                return; // the writer is gone: shutting down
            }
            let delay = if step.pending {
                health.fast_interval
            } else {
                jitter.around(health.interval)
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

fn record(metrics: &BackendMetrics, outcome: &Outcome) {
    if outcome.pass {
        metrics.checks_pass.inc();
    } else {
        metrics.checks_fail.inc();
    }
    if let Some(l) = outcome.latency {
        metrics.check_duration.observe(l.as_secs_f64());
    }
}

fn log_change(spec: &BackendSpec, from: State, to: State, health: &Health) {
    let zone = spec.zone.as_deref().unwrap_or("");
    let reason = health.last_error.as_deref().unwrap_or("HTTP 200");
    let (backend, from, to) = (spec.address.as_str(), from.as_str(), to.as_str());
    if to == "ready" {
        tracing::info!(backend, zone, from, to, reason, "backend state changed");
    } else {
        tracing::warn!(backend, zone, from, to, reason, "backend state changed");
    }
}

/// ±10 % jitter so that every node's probes do not hit the apiservers in lockstep.
struct Jitter(u64);

impl Jitter {
    fn seeded(name: &str) -> Self {
        use std::hash::BuildHasher;
        Jitter(std::collections::hash_map::RandomState::new().hash_one(name) | 1)
    }

    /// `base` scaled by a uniform factor in [0.9, 1.1).
    fn around(&mut self, base: Duration) -> Duration {
        // xorshift64: statistical quality is irrelevant here, only spread.
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let unit = (self.0 >> 11) as f64 / (1u64 << 53) as f64;
        base.mul_f64(0.9 + 0.2 * unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent_and_varies() {
        let mut j = Jitter::seeded("10.0.0.1:6443");
        let base = Duration::from_secs(5);
        let samples: Vec<Duration> = (0..1000).map(|_| j.around(base)).collect();
        assert!(samples
            .iter()
            .all(|d| *d >= base.mul_f64(0.9) && *d < base.mul_f64(1.1)));
        let distinct: std::collections::HashSet<_> = samples.iter().collect();
        assert!(distinct.len() > 900);
    }
}
