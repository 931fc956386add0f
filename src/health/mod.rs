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

use crate::backend::{BackendLive, BackendSpec};
use crate::config::HealthConfig;
use crate::metrics::BackendMetrics;
use crate::table::TableCmd;
use crate::tls::TlsSource;
use probe::{HttpsProbe, Inconclusive, Probe};
use rise_fall::{Outcome, RiseFall, Step};
use state::{Health, State};

/// What [`Monitor::count_dials`] did.
enum Dials {
    /// Nothing was reported.
    None,
    /// Failed dials were counted, with this step.
    Counted(Step),
    /// The table is gone or the monitor cancelled.
    Stop,
}

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
    /// The backend's live state: metric handles and the failed client dials the proxy reports.
    pub live: Arc<BackendLive>,
}

impl Monitor {
    /// The real probe for this monitor's backend.
    pub fn https_probe(&self, tls: Arc<TlsSource>) -> HttpsProbe {
        HttpsProbe::new(self.spec.clone(), self.health.path.clone(), tls)
    }

    /// Probes at once, then every `interval` (±10 %) or `fast_interval` while a change is pending,
    /// both counted from the start of the previous probe, until cancelled or the table is gone.
    /// Between probes, failed client dials count as failed checks, and the next probe dials a
    /// fresh connection.
    pub async fn run<P: Probe>(self, mut probe: P, cancel: CancellationToken) {
        let mut rise_fall = RiseFall::new(self.health.rise, self.health.fall, self.initial.clone());
        let mut jitter = Jitter::seeded(self.spec.id.as_str());
        // Set while probes cannot be made for a shortage on this node (logged once per spell).
        let mut short = false;
        loop {
            let started = Instant::now();
            // Failed client dials count at once, also while a probe is in flight (it may be
            // stuck dialing the same black hole for its whole timeout).
            let mut dial_failed = false;
            let outcome = {
                let probing = probe.probe(self.health.timeout);
                tokio::pin!(probing);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        o = &mut probing => break o,
                        _ = self.live.dials.reported() => match self.count_dials(&mut rise_fall, &cancel).await {
                            Dials::Stop => return,
                            Dials::None => {}
                            Dials::Counted(_) => dial_failed = true,
                        },
                    }
                }
            };
            if dial_failed {
                probe.reset(); // a kept connection proves nothing about new ones
            }
            let pending = match outcome {
                Ok(outcome) => {
                    if std::mem::take(&mut short) {
                        tracing::info!(backend = %self.spec.id, "probing again after a shortage on this node");
                    }
                    record(&self.live.metrics, &outcome);
                    let step = rise_fall.observe(&outcome);
                    if !self.publish(&rise_fall, step, &cancel).await {
                        return;
                    }
                    step.pending
                }
                Err(Inconclusive(reason)) => {
                    if !std::mem::replace(&mut short, true) {
                        tracing::warn!(backend = %self.spec.id, reason, "probe not made: this node is short of resources; backend health unchanged");
                    }
                    true // try again soon
                }
            };
            let delay = if pending {
                self.health.fast_interval
            } else {
                jitter.around(self.health.interval)
            };
            let mut next = started + delay;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep_until(next) => break,
                    _ = self.live.dials.reported() => {}
                }
                match self.count_dials(&mut rise_fall, &cancel).await {
                    Dials::Stop => return,
                    Dials::None => {}
                    Dials::Counted(step) => {
                        // The next probe dials afresh, and soon while a change is pending.
                        probe.reset();
                        if step.pending {
                            next = next.min(Instant::now() + self.health.fast_interval);
                        }
                    }
                }
            }
        }
    }

    /// Counts the failed client dials reported since the last call as failed checks (at most
    /// `fall` of them: one burst cannot count for more) and publishes the result.
    async fn count_dials(&self, rise_fall: &mut RiseFall, cancel: &CancellationToken) -> Dials {
        let Some((failed, reason)) = self.live.dials.take() else {
            return Dials::None;
        };
        let mut step = Step::default();
        for _ in 0..failed.min(self.health.fall) {
            step = step.then(rise_fall.observe(&Outcome::dial_failed(reason.clone())));
        }
        if self.publish(rise_fall, step, cancel).await {
            Dials::Counted(step)
        } else {
            Dials::Stop
        }
    }

    /// Logs and counts a state change, then sends the health to the table. False once the table
    /// is gone or the monitor is cancelled.
    async fn publish(&self, rise_fall: &RiseFall, step: Step, cancel: &CancellationToken) -> bool {
        if let Some((from, to)) = step.changed {
            log_change(&self.spec, from, to, rise_fall.health());
            match to {
                State::Ready => self.live.metrics.to_ready.inc(),
                _ => self.live.metrics.to_unready.inc(),
            };
        }
        let cmd = TableCmd::Health {
            id: self.spec.id.clone(),
            health: rise_fall.health().clone(),
        };
        tokio::select! {
            _ = cancel.cancelled() => false,
            sent = self.table.send(cmd) => sent.is_ok(),
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

    /// A probe that answers from a script and notes when it was called and reset.
    struct Scripted {
        calls: Arc<Mutex<Vec<Instant>>>,
        /// Pass (`Some(true)`), fail, or inconclusive (`None`: a shortage on this node).
        script: VecDeque<Option<bool>>,
        resets: Arc<std::sync::atomic::AtomicUsize>,
        /// How long each probe takes.
        takes: Duration,
    }

    impl Scripted {
        fn new(calls: &Arc<Mutex<Vec<Instant>>>, script: &[bool]) -> Self {
            Scripted {
                calls: calls.clone(),
                script: script.iter().map(|&p| Some(p)).collect(),
                resets: Arc::default(),
                takes: Duration::from_millis(10),
            }
        }
    }

    impl Probe for Scripted {
        fn probe(
            &mut self,
            _timeout: Duration,
        ) -> impl std::future::Future<Output = Result<Outcome, Inconclusive>> + Send {
            self.calls.lock().expect("calls").push(Instant::now());
            let next = self.script.pop_front().unwrap_or(Some(true));
            let takes = self.takes;
            async move {
                tokio::time::sleep(takes).await; // probes take time too
                let pass = next.ok_or_else(|| Inconclusive("Too many open files".into()))?;
                Ok(Outcome {
                    pass,
                    latency: Some(Duration::from_millis(1)),
                    reason: (!pass).then(|| "HTTP 500".into()),
                    answered: true,
                })
            }
        }

        fn reset(&mut self) {
            self.resets
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn monitor(tx: mpsc::Sender<TableCmd>) -> Monitor {
        let metrics = crate::metrics::Metrics::new();
        let spec = Arc::new(BackendSpec {
            id: crate::backend::BackendId::new("a:1"),
            host: "a".into(),
            port: 1,
            zone: None,
            server_name: rustls_pki_types::ServerName::try_from("a").expect("name"),
        });
        Monitor {
            health: HealthConfig {
                path: "/readyz".into(),
                interval: Duration::from_secs(5),
                timeout: Duration::from_secs(3),
                fast_interval: Duration::from_secs(1),
                rise: 2,
                fall: 2,
            },
            live: Arc::new(BackendLive::new(metrics.backend(&spec.id))),
            spec,
            initial: Health::UNKNOWN,
            table: tx,
        }
    }

    async fn next_health(rx: &mut mpsc::Receiver<TableCmd>) -> Health {
        let TableCmd::Health { health, .. } = rx.recv().await.expect("result") else {
            panic!("health")
        };
        health
    }

    #[tokio::test(start_paused = true)]
    async fn first_probe_at_once_then_interval_with_jitter_and_fast_interval_while_pending() {
        let (tx, mut rx) = mpsc::channel(64);
        let task = monitor(tx);
        let calls = Arc::new(Mutex::new(Vec::new()));
        // pass (decides ready), pass, fail (pending), fail (unready), pass (pending), pass (ready)
        let script = [true, true, false, false, true, true];
        let start = Instant::now();
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(task.run(Scripted::new(&calls, &script), cancel.clone()));
        let mut states = Vec::new();
        for _ in 0..6 {
            states.push(next_health(&mut rx).await.state);
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

    #[tokio::test(start_paused = true)]
    async fn failed_client_dials_count_as_failed_checks_and_the_next_probe_dials_afresh() {
        let (tx, mut rx) = mpsc::channel(64);
        let task = monitor(tx);
        let live = task.live.clone();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let probe = Scripted::new(&calls, &[true, true, true]);
        let resets = probe.resets.clone();
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(task.run(probe, cancel.clone()));
        assert_eq!(next_health(&mut rx).await.state, State::Ready);
        let start = Instant::now();

        // One refused dial: a failed check (pending), the kept connection dropped, a probe soon.
        live.dials.report("dial: connection refused".into());
        let h = next_health(&mut rx).await;
        assert_eq!(h.state, State::Ready, "one failure of fall 2");
        assert_eq!(h.last_error.as_deref(), Some("dial: connection refused"));
        assert!(!h.answering);
        assert_eq!(resets.load(std::sync::atomic::Ordering::SeqCst), 1);
        let h = next_health(&mut rx).await; // the probe it brought forward passes
        assert_eq!((h.state, h.last_error), (State::Ready, None));
        let t = *calls.lock().expect("calls").last().expect("probed");
        assert!(
            t - start <= Duration::from_millis(1001),
            "fast_interval, not interval"
        );

        // Two at once (fall 2): unready, exactly like two failed probes.
        live.dials.report("dial: timeout after 1s".into());
        live.dials.report("dial: timeout after 1s".into());
        let h = next_health(&mut rx).await;
        assert_eq!(h.state, State::Unready);
        assert_eq!(h.last_error.as_deref(), Some("dial: timeout after 1s"));
        assert_eq!(resets.load(std::sync::atomic::Ordering::SeqCst), 2);
        cancel.cancel();
        handle.await.expect("task ends on cancel");
    }

    #[tokio::test(start_paused = true)]
    async fn probes_this_node_could_not_make_leave_health_alone_and_retry_soon() {
        let (tx, mut rx) = mpsc::channel(64);
        let task = monitor(tx);
        let calls = Arc::new(Mutex::new(Vec::new()));
        // ready; one failure (pending); three probes not made; a pass; a failure; not made.
        let script = [
            Some(true),
            Some(true),
            Some(false),
            None,
            None,
            None,
            Some(true),
            Some(false),
            None,
        ];
        let probe = Scripted {
            script: script.into_iter().collect(),
            ..Scripted::new(&calls, &[])
        };
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(task.run(probe, cancel.clone()));
        let mut seen = Vec::new();
        for _ in 0..5 {
            let h = next_health(&mut rx).await;
            seen.push((h.state, h.last_error.map(|e| e.to_string())));
        }
        // Had the shortage counted as failures, the first one after the failure made it unready.
        let fail = || Some("HTTP 500".to_string());
        use State::*;
        assert_eq!(
            seen,
            [
                (Ready, None),
                (Ready, None),
                (Ready, fail()),
                (Ready, None),
                (Ready, fail())
            ]
        );
        let calls = calls.lock().expect("calls").clone();
        for w in calls[2..7].windows(2) {
            assert_eq!(
                w[1] - w[0],
                Duration::from_secs(1),
                "fast_interval: {calls:?}"
            );
        }
        cancel.cancel();
        handle.await.expect("task ends on cancel");
    }

    #[tokio::test(start_paused = true)]
    async fn failed_dials_count_at_once_even_while_a_probe_is_in_flight() {
        let (tx, mut rx) = mpsc::channel(64);
        let task = monitor(tx);
        let live = task.live.clone();
        let calls = Arc::new(Mutex::new(Vec::new()));
        // Every probe hangs for 3 s, as one dialing into a black hole until its timeout.
        let probe = Scripted {
            takes: Duration::from_secs(3),
            ..Scripted::new(&calls, &[true, true])
        };
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(task.run(probe, cancel.clone()));
        assert_eq!(next_health(&mut rx).await.state, State::Ready);
        // Now t = 3 s; the second probe runs from 4.5-5.5 s for 3 s: at t = 6 s it is in flight.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            calls.lock().expect("calls").len(),
            2,
            "a probe is in flight"
        );
        let before = Instant::now();
        live.dials.report("dial: timeout after 1s".into());
        live.dials.report("dial: timeout after 1s".into());
        let h = next_health(&mut rx).await;
        assert_eq!(
            h.state,
            State::Unready,
            "fall reached without waiting for the probe"
        );
        assert!(
            Instant::now() - before < Duration::from_secs(1),
            "at once, not after the probe"
        );
        cancel.cancel();
        handle.await.expect("task ends on cancel");
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
