//! Health checking: one [`Monitor`] task per backend probes `/readyz`, runs the rise/fall machine
//! and sends each result to the table's writer. Backends are checked independently and in parallel.
//!
//! `probe` owns the kept `/readyz` connection (over the shared `https` client), `rise_fall` the
//! pure hysteresis (the values it produces are `verdict`'s);
//! this file owns the schedule.

pub(crate) mod probe;
pub(crate) mod rise_fall;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tokio::time::Instant;

use crate::backend::{BackendLive, BackendSpec, ProbeCounts};
use crate::config::HealthConfig;
use crate::jitter::Jitter;
use crate::table::TableCmd;
use crate::tls::TlsSource;
use crate::verdict::{Health, State};
use probe::{HttpsProbe, Inconclusive, Probe};
use rise_fall::{Outcome, RiseFall, Step};

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

    /// Probes at once, then every `interval` (±10 %) or `fast_interval` while a change is pending,
    /// both counted from the start of the previous probe, until cancelled or the table is gone.
    /// Failed client dials (and relays cut by TCP's user timeout) count as failed checks at once;
    /// one that starts a change brings the next probe forward to now ([`early_probe`]), dialing
    /// a fresh connection. Probes never overlap: one in flight per backend.
    pub async fn run<P: Probe>(self, mut probe: P, cancel: CancellationToken) {
        let mut rise_fall = RiseFall::new(self.health.rise, self.health.fall, self.initial.clone());
        let mut jitter = Jitter::seeded(self.spec.id.as_str(), JITTER_PERCENT);
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
                    record(&self.live.probes, &outcome);
                    self.clear_on_connected(&mut rise_fall);
                    let step = rise_fall.observe(&outcome);
                    // A backend that answered HTTP is judged by its answer, not by new dials.
                    if outcome.answered() || !step.pending {
                        self.live.dials.set_suspect(false);
                    }
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
                        // The next probe dials afresh, and now while a change is pending.
                        probe.reset();
                        if step.pending {
                            next = next.min(early_probe(started, Instant::now()));
                        }
                    }
                }
            }
        }
    }

    /// Counts the failed client dials reported since the last call as failed checks (at most
    /// `fall` of them: one burst cannot count for more) and publishes the result.
    async fn count_dials(&self, rise_fall: &mut RiseFall, cancel: &CancellationToken) -> Dials {
        self.clear_on_connected(rise_fall);
        let Some((failed, reason)) = self.live.dials.take() else {
            return Dials::None;
        };
        let mut step = Step::default();
        for _ in 0..failed.min(self.health.fall) {
            step = step.then(rise_fall.observe(&Outcome::dial_failed(reason.clone())));
        }
        // A fall under way from failed dials: a client dial that connects now calls it off.
        self.live.dials.set_suspect(step.pending);
        if self.publish(rise_fall, step, cancel).await {
            Dials::Counted(step)
        } else {
            Dials::Stop
        }
    }

    /// A client dial connected while a fall from failed dials was under way: called off.
    fn clear_on_connected(&self, rise_fall: &mut RiseFall) {
        if self.live.dials.take_connected() && rise_fall.clear_fall() {
            self.live.dials.set_suspect(false);
            tracing::debug!(backend = %self.spec.id, "a client dial connected: the pending fall from failed dials is called off");
        }
    }

    /// Logs and counts a state change, then sends the health to the table. False once the table
    /// is gone or the monitor is cancelled.
    async fn publish(&self, rise_fall: &RiseFall, step: Step, cancel: &CancellationToken) -> bool {
        if let Some((from, to)) = step.changed {
            log_change(&self.spec, from, to, rise_fall.health());
            self.live.probes.changed_to(to);
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

fn record(counts: &ProbeCounts, outcome: &Outcome) {
    counts.checked(outcome.passed());
    if let Some(l) = outcome.latency() {
        counts.latency.observe(l);
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

/// A passive failure brings a probe forward, but never to less than this after the previous
/// probe started: a burst of failed client dials (a site's kubelets) makes one early probe, not
/// one each, and a black-holed backend gets at most one probe dial (3 SYNs) per second from them.
pub const EARLY_PROBE_GAP: Duration = Duration::from_secs(1);

/// When the probe a passive failure at `now` asks for starts, the previous probe having started
/// at `last`: at once, or [`EARLY_PROBE_GAP`] after `last`.
fn early_probe(last: Instant, now: Instant) -> Instant {
    now.max(last + EARLY_PROBE_GAP)
}

/// The steady-state interval varies by up to this many percent either way, so that every node's
/// probes do not hit the apiservers in lockstep.
pub const JITTER_PERCENT: u32 = 10;

#[cfg(test)]
mod tests;
