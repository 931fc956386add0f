//! Health checking: one [`Monitor`] task per backend probes `/readyz`, runs the rise/fall machine
//! and sends each result to the table's writer. Backends are checked independently and in parallel.
//!
//! `probe` owns the HTTPS client, `rise_fall` the pure hysteresis, `state` the values they produce;
//! this file owns the schedule.

pub(crate) mod probe;
pub(crate) mod rise_fall;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tokio::time::Instant;

use crate::backend::BackendSpec;
use crate::config::HealthConfig;
use crate::metrics::BackendMetrics;
use crate::table::TableCmd;
use crate::tls::TlsSource;
use probe::{HttpsProbe, Probe};
use rise_fall::{Outcome, RiseFall};
use state::{Health, State};

/// One backend's health loop: everything it needs besides the probe itself.
#[derive(Debug)]
pub(crate) struct Monitor {
    /// The backend.
    pub spec: Arc<BackendSpec>,
    /// Intervals, timeout, rise/fall.
    pub health: HealthConfig,
    /// Health to start from (kept across reloads).
    pub initial: Health,
    /// The table's writer.
    pub table: mpsc::Sender<TableCmd>,
    /// This backend's metric handles.
    pub metrics: BackendMetrics,
}

impl Monitor {
    /// The real probe for this monitor's backend.
    pub fn https_probe(&self, tls: Arc<TlsSource>) -> HttpsProbe {
        HttpsProbe::new(self.spec.clone(), self.health.path.clone(), tls)
    }

    /// Probes at once, then every `interval` (±10 %) or `fast_interval` while a change is pending,
    /// both counted from the start of the previous probe, until cancelled or the table is gone.
    pub async fn run<P: Probe>(self, mut probe: P, cancel: CancellationToken) {
        let Monitor {
            spec,
            health,
            initial,
            table,
            metrics,
        } = self;
        let mut rise_fall = RiseFall::new(health.rise, health.fall, initial);
        let mut jitter = Jitter::seeded(spec.id.as_str());
        loop {
            let started = Instant::now();
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                o = probe.probe(health.timeout) => o,
            };
            record(&metrics, &outcome);
            let step = rise_fall.observe(&outcome);
            if let Some((from, to)) = step.changed {
                log_change(&spec, from, to, rise_fall.health());
                match to {
                    State::Ready => metrics.to_ready.inc(),
                    _ => metrics.to_unready.inc(),
                };
            }
            let cmd = TableCmd::Health {
                id: spec.id.clone(),
                health: rise_fall.health().clone(),
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                sent = table.send(cmd) => if sent.is_err() { return }, // the writer is gone
            }
            let delay = if step.pending {
                health.fast_interval
            } else {
                jitter.around(health.interval)
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(started + delay) => {}
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
    let (backend, from, to) = (spec.id.as_str(), from.as_str(), to.as_str());
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
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// A probe that answers from a script and notes when it was called.
    struct Scripted {
        calls: Arc<Mutex<Vec<Instant>>>,
        script: VecDeque<bool>,
    }

    impl Probe for Scripted {
        fn probe(
            &mut self,
            _timeout: Duration,
        ) -> impl std::future::Future<Output = Outcome> + Send {
            self.calls.lock().expect("calls").push(Instant::now());
            let pass = self.script.pop_front().unwrap_or(true);
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await; // probes take time too
                Outcome {
                    pass,
                    latency: Some(Duration::from_millis(1)),
                    reason: (!pass).then(|| "HTTP 500".into()),
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn first_probe_at_once_then_interval_with_jitter_and_fast_interval_while_pending() {
        let metrics = crate::metrics::Metrics::new();
        let spec = Arc::new(BackendSpec {
            id: crate::backend::BackendId::new("a:1"),
            host: "a".into(),
            port: 1,
            zone: None,
            server_name: rustls_pki_types::ServerName::try_from("a").expect("name"),
        });
        let (tx, mut rx) = mpsc::channel(64);
        let task = Monitor {
            health: HealthConfig {
                path: "/readyz".into(),
                interval: Duration::from_secs(5),
                timeout: Duration::from_secs(3),
                fast_interval: Duration::from_secs(1),
                rise: 2,
                fall: 2,
            },
            metrics: metrics.backend(&spec.id),
            spec,
            initial: Health::UNKNOWN,
            table: tx,
        };
        let calls = Arc::new(Mutex::new(Vec::new()));
        // pass (decides ready), pass, fail (pending), fail (unready), pass (pending), pass (ready)
        let script = [true, true, false, false, true, true].into_iter().collect();
        let start = Instant::now();
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(task.run(
            Scripted {
                calls: calls.clone(),
                script,
            },
            cancel.clone(),
        ));
        let mut states = Vec::new();
        for _ in 0..6 {
            let TableCmd::Health { health, .. } = rx.recv().await.expect("result") else {
                panic!("health")
            };
            states.push(health.state);
        }
        cancel.cancel();
        handle.await.expect("task ends on cancel");
        use State::*;
        assert_eq!(states, [Ready, Ready, Ready, Unready, Unready, Ready]);
        let t: Vec<Duration> = calls
            .lock()
            .expect("calls")
            .iter()
            .map(|i| *i - start)
            .collect();
        assert_eq!(t[0], Duration::ZERO, "first probe at once");
        let gap = |i: usize| t[i] - t[i - 1];
        // Paused time is exact up to the timer wheel's 1 ms granularity.
        let about = |d: Duration, want: Duration| d.abs_diff(want) <= Duration::from_millis(1);
        for i in [1, 2, 4] {
            let g = gap(i);
            assert!(
                g >= Duration::from_millis(4499) && g <= Duration::from_millis(5501),
                "interval ±10 %: gap {i} = {g:?}"
            );
        }
        assert!(
            about(gap(3), Duration::from_secs(1)),
            "fast_interval while a fall is pending: {t:?}"
        );
        assert!(
            about(gap(5), Duration::from_secs(1)),
            "fast_interval while a rise is pending: {t:?}"
        );
        assert!(gap(1) != gap(2) || gap(2) != gap(4), "jitter varies: {t:?}");
    }

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
