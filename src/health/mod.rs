//! Health checking: one [`Monitor`] task per backend probes `/readyz`, runs the rise/fall machine
//! and sends each result to the table's writer. Backends are checked independently and in parallel.
//!
//! `probe` owns the kept `/readyz` connection (over the shared `https` client), `rise_fall` the
//! pure hysteresis (the values it produces are `verdict`'s), `passive` what the proxy's client
//! dials say; this file owns the schedule ([`next_probe_due`], pure) and the loop.

pub(crate) mod passive;
pub(crate) mod probe;
pub(crate) mod rise_fall;
pub(crate) mod shutdown_window;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tokio::time::Instant;

use crate::backend::{BackendId, BackendLive, BackendSpec, ProbeCounts};
use crate::config::HealthConfig;
use crate::jitter::Jitter;
use crate::table::TableCmd;
use crate::tls::TlsSource;
use crate::verdict::{Health, State};
use passive::Passive;
use probe::{HttpsProbe, Inconclusive, Probe};
use rise_fall::{Outcome, RiseFall, Step};
use shutdown_window::{Learned, ShutdownWindow};

/// What [`Monitor::heed`] saw first.
enum Heard<T> {
    /// The awaited future finished.
    Done(T),
    /// Failed client dials were counted, with this step (a fresh probe dial is due).
    Failed(Step),
    /// The table asked for a confirm probe (only while waiting for the next probe).
    Confirm,
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
    /// The backend's live state: the failed client dials the proxy reports, the probe counts.
    pub live: Arc<BackendLive>,
}

impl Monitor {
    /// The real probe for this monitor's backend.
    pub fn https_probe(&self, tls: Arc<TlsSource>) -> HttpsProbe {
        HttpsProbe::new(
            self.spec.clone(),
            self.live.clone(),
            self.health.path.clone(),
            tls,
        )
    }

    /// Probes at once, then as [`next_probe_due`] says: every `interval` (±10 %), or
    /// `fast_interval` while a change is pending, counted from the start of the previous probe;
    /// a passive failure that leaves a change pending brings it forward, and so does the table's
    /// ask for a confirm probe (at most one per `interval`, counted). Until cancelled or the
    /// table is gone. Probes never overlap: one in flight per backend. Failed client dials (and
    /// relays cut by TCP's user timeout) count at once, also while a probe is in flight (it may
    /// be stuck dialing the same black hole for its whole timeout), and the next probe dials a
    /// fresh connection: a kept one proves nothing about new ones.
    pub async fn run<P: Probe>(self, mut probe: P, cancel: CancellationToken) {
        let mut machine = RiseFall::new(self.health.rise, self.health.fall, self.initial.clone());
        // A backend new to the table is in its state (unknown) since now; a kept one keeps its time.
        self.live.probes.entered(std::time::SystemTime::now(), true);
        let passive = Passive::new(self.spec.id.clone(), self.live.clone(), self.health.fall);
        let mut jitter = Jitter::seeded(self.spec.id.as_str(), JITTER_PERCENT);
        // Set while probes cannot be made for a shortage on this node (logged once per spell).
        let mut short = false;
        // When the latest confirm probe was made: at most one per interval.
        let mut confirmed: Option<Instant> = None;
        let mut shutdown = ShutdownWindow::default();
        loop {
            // Probe.
            let started = Instant::now();
            let mut fresh = false;
            let outcome = {
                let probing = probe.probe(self.health.timeout);
                tokio::pin!(probing);
                loop {
                    match self
                        .heed(&mut probing, &passive, &mut machine, &cancel, false)
                        .await
                    {
                        Heard::Done(outcome) => break outcome,
                        Heard::Failed(_) => fresh = true,
                        Heard::Confirm => {}
                        Heard::Stop => return,
                    }
                }
            };
            // Observe and publish.
            if fresh {
                probe.reset();
            }
            let pending = match outcome {
                Ok(outcome) => {
                    if std::mem::take(&mut short) {
                        tracing::info!(backend = %self.spec.id, "probing again after a shortage on this node");
                    }
                    record(&self.spec.id, &self.live.probes, &outcome);
                    // What the proxy reported as the probe finished counts first.
                    let heard = passive.fold(&mut machine);
                    if heard.is_some() {
                        probe.reset();
                    }
                    let step = machine.observe(&outcome);
                    if let Some(learned) = shutdown.observe(&outcome, Instant::now()) {
                        self.learned(learned);
                    }
                    let step = heard.map_or(step, |h| h.then(step));
                    passive.probed(&outcome, step);
                    if !self.publish(&machine, step, started, &cancel).await {
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
            // Wait until the next probe is due.
            let mut due = Due {
                last: started,
                pending,
                interval: jitter.around(self.health.interval),
                fast_interval: self.health.fast_interval,
                passive_failure: None,
            };
            let sleep = tokio::time::sleep_until(next_probe_due(&due));
            tokio::pin!(sleep);
            loop {
                match self
                    .heed(&mut sleep, &passive, &mut machine, &cancel, true)
                    .await
                {
                    Heard::Done(()) => break,
                    Heard::Confirm => {
                        let now = Instant::now();
                        if confirmed.is_none_or(|at| now >= at + self.health.interval) {
                            confirmed = Some(now);
                            self.live.confirm.made();
                            break;
                        }
                        // One per interval: the scheduled probe confirms.
                    }
                    Heard::Failed(step) => {
                        probe.reset();
                        if step.pending {
                            due.passive_failure = Some(Instant::now());
                            sleep.as_mut().reset(next_probe_due(&due));
                        }
                    }
                    Heard::Stop => return,
                }
            }
        }
    }

    /// Keeps what a probe taught of the apiserver's shutdown window; the first close with no
    /// window is a WARN naming the setting to change.
    fn learned(&self, learned: Learned) {
        let id = &self.spec.id;
        match learned {
            Learned::Window(window) => {
                self.live.shutdown_window.set(window);
                tracing::info!(backend = %id, window = ?window, "learned the apiserver's shutdown window (first [-]shutdown to its listener's close); hand-offs to it fit into 0.7 of it");
            }
            Learned::NoWindow if self.live.shutdown_window.closed_without_window() == 0 => {
                tracing::warn!(backend = %id, "the apiserver closed its listener right after passing its checks, with no [-]shutdown window: a graceful restart with kube-apiserver's --shutdown-delay-duration 0 (Talos's default) or a crash; its connections cannot be handed off. Set --shutdown-delay-duration longer than handoff_window plus health.interval (on Talos: cluster.apiServer.extraArgs shutdown-delay-duration)");
            }
            Learned::NoWindow => {}
        }
    }

    /// Awaits `until`, folding in what the proxy reports meanwhile; returns when it is done, at
    /// the first failures counted (published first), or (with `confirm`) when the table asks for
    /// a confirm probe.
    async fn heed<F: std::future::Future>(
        &self,
        until: &mut std::pin::Pin<&mut F>,
        passive: &Passive,
        machine: &mut RiseFall,
        cancel: &CancellationToken,
        confirm: bool,
    ) -> Heard<F::Output> {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Heard::Stop,
                done = until.as_mut() => return Heard::Done(done),
                _ = passive.reported() => {}
                _ = self.live.confirm.asked(), if confirm => return Heard::Confirm,
            }
            if let Some(step) = passive.fold(machine) {
                return if self.publish(machine, step, Instant::now(), cancel).await {
                    Heard::Failed(step)
                } else {
                    Heard::Stop
                };
            }
        }
    }

    /// Logs and counts a state change, then sends the health to the table, with when its
    /// evidence began (`started`: the probe's start, or when failed client dials were counted).
    /// False once the table is gone or the monitor is cancelled.
    async fn publish(
        &self,
        machine: &RiseFall,
        step: Step,
        started: Instant,
        cancel: &CancellationToken,
    ) -> bool {
        if let Some((from, to)) = step.changed {
            log_change(&self.spec, from, to, machine.health());
            self.live.probes.changed_to(to);
            self.live
                .probes
                .entered(std::time::SystemTime::now(), false);
        }
        let cmd = TableCmd::Health {
            id: self.spec.id.clone(),
            health: machine.health().clone(),
            started,
        };
        tokio::select! {
            _ = cancel.cancelled() => false,
            sent = self.table.send(cmd) => sent.is_ok(),
        }
    }
}

/// What decides when the next probe starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// When the previous probe started.
    pub last: Instant,
    /// A change is pending (or the probe could not be made): probe again at `fast_interval`.
    pub pending: bool,
    /// The steady interval, jittered.
    pub interval: Duration,
    /// The interval while a change is pending.
    pub fast_interval: Duration,
    /// When the latest passive failure that left a change pending was counted, if one was
    /// since the previous probe started.
    pub passive_failure: Option<Instant>,
}

/// When the next probe starts: `fast_interval` after the previous one started while a change is
/// pending, else `interval`; a passive failure brings it forward to when it was counted, but
/// never to less than [`EARLY_PROBE_GAP`] after the previous probe started.
pub(crate) fn next_probe_due(due: &Due) -> Instant {
    let period = if due.pending {
        due.fast_interval
    } else {
        due.interval
    };
    let scheduled = due.last + period;
    match due.passive_failure {
        Some(at) => scheduled.min(at.max(due.last + EARLY_PROBE_GAP)),
        None => scheduled,
    }
}

fn record(id: &BackendId, counts: &ProbeCounts, outcome: &Outcome) {
    // One line a probe (debug): the chaos lab judges each close by the last probe before it.
    match outcome {
        Outcome::Pass { .. } => tracing::debug!(backend = %id, passed = true, "probe"),
        Outcome::Fail { checks, .. } => {
            let checks = checks.to_string();
            tracing::debug!(backend = %id, passed = false, checks, "probe");
        }
    }
    counts.checked(outcome.fail_class());
    counts.probed(outcome.passed(), std::time::SystemTime::now());
    if let Some(l) = outcome.latency() {
        counts.latency.observe(l);
    }
}

fn log_change(spec: &BackendSpec, from: State, to: State, health: &Health) {
    let zone = spec.zone.as_deref().unwrap_or("");
    let reason = health.last_error().unwrap_or("HTTP 200");
    // `etcd, etcd-readiness`: the failing checks the answer named; empty when none did.
    let checks = health
        .last_failure
        .as_ref()
        .map(|f| f.checks.to_string())
        .unwrap_or_default();
    let ready = to == State::Ready;
    let (backend, from, to) = (spec.id.as_str(), from.as_str(), to.as_str());
    if ready {
        tracing::info!(
            backend,
            zone,
            from,
            to,
            reason,
            checks,
            "backend state changed"
        );
    } else {
        tracing::warn!(
            backend,
            zone,
            from,
            to,
            reason,
            checks,
            "backend state changed"
        );
    }
}

/// A passive failure brings a probe forward, but never to less than this after the previous
/// probe started: a burst of failed client dials (a site's kubelets) makes one early probe, not
/// one each, and a black-holed backend gets at most one probe dial (3 SYNs) per second from them.
pub const EARLY_PROBE_GAP: Duration = Duration::from_secs(1);

/// The steady-state interval varies by up to this many percent either way, so that every node's
/// probes do not hit the apiservers in lockstep.
pub const JITTER_PERCENT: u32 = 10;

#[cfg(test)]
mod tests;
