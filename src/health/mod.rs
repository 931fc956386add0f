//! Health checking: one [`Monitor`] task per backend probes `/readyz`, runs the rise/fall machine
//! and sends each result to the table's writer. Backends are checked independently and in parallel.
//!
//! `probe` owns the kept `/readyz` connection (over the shared `https` client), `rise_fall` the
//! pure hysteresis (the values it produces are `verdict`'s), `passive` what the proxy's client
//! dials say; `request_check` a second, rarer `GET` through priority and fairness that finds an
//! overloaded apiserver (`overload`'s rule); this file owns the schedule ([`next_probe_due`], pure) and the loop.

pub(crate) mod passive;
pub(crate) mod probe;
pub(crate) mod request_check;
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
use request_check::RequestChecks;
use rise_fall::{Outcome, RiseFall, Step};
use shutdown_window::{Learned, ShutdownWindow};

/// What [`Monitor::heed`] saw first.
enum Heard<T> {
    /// The awaited future finished.
    Done(T),
    /// Failed client dials were counted, with this step (a fresh probe dial is due).
    Failed(Step),
    /// The table asked for a confirm probe (heeded only while waiting for the next probe).
    Confirm,
    /// The remote cadence ended: the backend is wanted at `interval` again (heeded only while
    /// waiting for the next probe).
    Wanted,
    /// The table is gone or the monitor cancelled.
    Stop,
}

/// What a monitor keeps between probes.
struct Running {
    machine: RiseFall,
    passive: Passive,
    jitter: Jitter,
    /// Set while probes cannot be made for a shortage on this node (logged once per spell).
    short: bool,
    /// When the latest confirm probe was made: at most one per interval.
    confirmed: Option<Instant>,
    shutdown: ShutdownWindow,
    /// The request checks, when on.
    requests: Option<RequestChecks>,
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
    /// The request checks' verdict to start from (kept across reloads).
    pub degraded: Option<Arc<str>>,
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
        let mut r = self.start();
        loop {
            let started = Instant::now();
            let Some((outcome, fresh)) = self.probe(&mut probe, &mut r, &cancel).await else {
                return;
            };
            if fresh {
                probe.reset();
            }
            let Some(pending) = self
                .fold(outcome, started, &mut probe, &mut r, &cancel)
                .await
            else {
                return;
            };
            if !self.request_check(&mut probe, &mut r, &cancel).await {
                return;
            }
            if !self
                .wait(started, pending, &mut probe, &mut r, &cancel)
                .await
            {
                return;
            }
        }
    }

    /// The state a monitor keeps between probes, from its initial health.
    fn start(&self) -> Running {
        // A backend new to the table is in its state (unknown) since now; a kept one keeps its time.
        self.live.probes.entered(std::time::SystemTime::now(), true);
        Running {
            machine: RiseFall::new(self.health.rise, self.health.fall, self.initial.clone()),
            passive: Passive::new(self.spec.id.clone(), self.live.clone(), self.health.fall),
            jitter: Jitter::seeded(self.spec.id.as_str(), JITTER_PERCENT),
            short: false,
            confirmed: None,
            shutdown: ShutdownWindow::default(),
            requests: RequestChecks::new(
                &self.health,
                self.spec.id.as_str(),
                self.degraded.clone(),
                Instant::now(),
            ),
        }
    }

    /// Probes once, folding in what the proxy tells meanwhile: the result, and whether failed
    /// dials were counted while it was in flight (the next probe dials afresh). `None` once
    /// stopped.
    async fn probe<P: Probe>(
        &self,
        probe: &mut P,
        r: &mut Running,
        cancel: &CancellationToken,
    ) -> Option<(Result<Outcome, Inconclusive>, bool)> {
        let mut fresh = false;
        let probing = probe.probe(self.health.timeout);
        tokio::pin!(probing);
        loop {
            match self.heed(&mut probing, r, cancel, false).await {
                Heard::Done(outcome) => return Some((outcome, fresh)),
                Heard::Failed(_) => fresh = true,
                Heard::Confirm | Heard::Wanted => {}
                Heard::Stop => return None,
            }
        }
    }

    /// Folds a probe's result (started at `started`) into the machine, after what the proxy
    /// told as it finished, and publishes it. Whether a change is pending (probe again soon);
    /// `None` once stopped.
    async fn fold<P: Probe>(
        &self,
        outcome: Result<Outcome, Inconclusive>,
        started: Instant,
        probe: &mut P,
        r: &mut Running,
        cancel: &CancellationToken,
    ) -> Option<bool> {
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(Inconclusive(reason)) => {
                if !std::mem::replace(&mut r.short, true) {
                    tracing::warn!(backend = %self.spec.id, reason, "probe not made: this node is short of resources; backend health unchanged");
                }
                return Some(true); // try again soon
            }
        };
        if std::mem::take(&mut r.short) {
            tracing::info!(backend = %self.spec.id, "probing again after a shortage on this node");
        }
        record(&self.spec.id, &self.live.probes, &outcome);
        // What the proxy told as the probe finished counts first.
        let heard = r.passive.fold(&mut r.machine);
        if heard.is_some() {
            probe.reset();
        }
        let step = r.machine.observe(&outcome);
        if let Some(learned) = r.shutdown.observe(&outcome, Instant::now()) {
            self.learned(learned);
        }
        let step = heard.map_or(step, |h| h.then(step));
        r.passive.probed(&outcome, step);
        self.publish(&r.machine, step, started, cancel)
            .await
            .then_some(step.pending)
    }

    /// Right after a probe: the request check when one is due and the backend is ready (on the
    /// probe's connection, folding in what the proxy tells meanwhile), and its verdict sent to
    /// the table when it changed. False once stopped.
    async fn request_check<P: Probe>(
        &self,
        probe: &mut P,
        r: &mut Running,
        cancel: &CancellationToken,
    ) -> bool {
        let now = Instant::now();
        let changed = match &mut r.requests {
            None => return true,
            Some(checks) if r.machine.health().state != State::Ready => checks.not_ready(),
            Some(checks) if !checks.due(now) => None,
            Some(checks) => {
                let path = checks.path.clone();
                let mut fresh = false;
                let got = {
                    let getting = probe.get(&path, self.health.timeout);
                    tokio::pin!(getting);
                    loop {
                        match self.heed(&mut getting, r, cancel, false).await {
                            Heard::Done(got) => break got,
                            // Failed client dials: the next probe dials afresh, as after a probe.
                            Heard::Failed(_) => fresh = true,
                            Heard::Confirm | Heard::Wanted => {}
                            Heard::Stop => return false,
                        }
                    }
                };
                if fresh {
                    probe.reset();
                }
                let live = &self.live;
                r.requests
                    .as_mut()
                    .and_then(|c| c.fold(got, self.health.timeout, live, Instant::now()))
            }
        };
        let Some(degraded) = changed else {
            return true;
        };
        request_check::log(self.spec.id.as_str(), &degraded);
        let cmd = TableCmd::Degraded {
            id: self.spec.id.clone(),
            degraded,
        };
        tokio::select! {
            _ = cancel.cancelled() => false,
            sent = self.table.send(cmd) => sent.is_ok(),
        }
    }

    /// Waits until the next probe is due (the previous one started at `started`; `pending`: a
    /// change is), folding in what the proxy tells meanwhile; a confirm ask brings it forward,
    /// at most once per interval. False once stopped.
    async fn wait<P: Probe>(
        &self,
        started: Instant,
        pending: bool,
        probe: &mut P,
        r: &mut Running,
        cancel: &CancellationToken,
    ) -> bool {
        // A ready backend of another zone that no pick would choose waits longer (`cadence`).
        let steady = if self.live.inbox.is_remote() {
            self.health.remote_interval
        } else {
            self.health.interval
        };
        let mut due = Due {
            last: started,
            pending,
            interval: r.jitter.around(steady),
            fast_interval: self.health.fast_interval,
            passive_failure: None,
        };
        let sleep = tokio::time::sleep_until(next_probe_due(&due));
        tokio::pin!(sleep);
        loop {
            match self.heed(&mut sleep, r, cancel, true).await {
                Heard::Done(()) => return true,
                Heard::Confirm => {
                    let now = Instant::now();
                    if r.confirmed
                        .is_none_or(|at| now >= at + self.health.interval)
                    {
                        r.confirmed = Some(now);
                        self.live.inbox.confirm_made();
                        return true;
                    }
                    // One per interval: the scheduled probe confirms.
                }
                Heard::Wanted => {
                    // Counted from the previous probe's start: at once if that is over.
                    due.interval = r.jitter.around(self.health.interval);
                    sleep.as_mut().reset(next_probe_due(&due));
                }
                Heard::Failed(step) => {
                    probe.reset();
                    if step.pending {
                        due.passive_failure = Some(Instant::now());
                        sleep.as_mut().reset(next_probe_due(&due));
                    }
                }
                Heard::Stop => return false,
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

    /// Awaits `until`, folding in what the inbox holds meanwhile; returns when it is done, at
    /// the first failures counted (published first), or (with `confirm`) when the table asked
    /// for a confirm probe.
    async fn heed<F: std::future::Future>(
        &self,
        until: &mut std::pin::Pin<&mut F>,
        r: &mut Running,
        cancel: &CancellationToken,
        confirm: bool,
    ) -> Heard<F::Output> {
        let inbox = &self.live.inbox;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Heard::Stop,
                done = until.as_mut() => return Heard::Done(done),
                () = inbox.wait(confirm) => {}
            }
            if let Some(step) = r.passive.fold(&mut r.machine) {
                return if self.publish(&r.machine, step, Instant::now(), cancel).await {
                    Heard::Failed(step)
                } else {
                    Heard::Stop
                };
            }
            if confirm && inbox.take_confirm() {
                return Heard::Confirm;
            }
            if confirm && inbox.take_wanted() {
                return Heard::Wanted;
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
    if let Some(l) = outcome.reach().latency() {
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
    // One line, at INFO when it turns ready and WARN otherwise (a level is a macro's constant).
    macro_rules! changed {
        ($level:ident) => {
            tracing::$level!(
                backend,
                zone,
                from,
                to,
                reason,
                checks,
                "backend state changed"
            )
        };
    }
    if ready {
        changed!(info);
    } else {
        changed!(warn);
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
