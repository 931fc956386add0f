//! The routing table: one `ArcSwap<Snapshot>` with a single writer task and lock-free readers.
//!
//! Health results and config changes arrive as [`TableCmd`]s; the writer folds them into a new
//! snapshot, decides what the change means ([`transitions`], pure), and applies it: stamp, publish,
//! then bump the evicted backends (see [`crate::backend::Eviction`]). It also brings connections
//! home: when a same-zone backend has been ready for `failback_after` ([`failback`], pure), the
//! connections relayed to other zones are evicted the same way, and the failback is called off
//! if the zone has no ready backend left before every turn has come; a hand-off under way is
//! called off likewise when its backend passes or none is ready ([`handoff`] keeps which are
//! under way). A backend that turned unready
//! keeps its connections until their escape route is confirmed and it still fails ([`escape`],
//! pure: the writer asks the route's and its own monitor for a confirm probe, and looks again
//! when a wait for its own answer runs out); after a spell with none ready, connections move only
//! off backends still down one probe interval later ([`recovery`], pure). It keeps the log's cause
//! current ([`cause`], pure): an unready backend's changed reason, and a reminder of every
//! reason while none is ready; and the last few state transitions for people ([`recent`]). Does
//! not own probing (`health/`) or connection handling (`proxy`).

mod bump;
pub mod cause;
mod configure;
pub mod escape;
pub mod failback;
pub mod handoff;
pub mod recent;
pub mod recovery;
pub mod transitions;

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendId, BackendSpec, Routing, Snapshot};
use crate::eviction::CloseReason;
use crate::metrics::Metrics;
use crate::pick::WhenNoneReady;
use crate::verdict::{Health, State};
use bump::{evict_now, publish_then_bump, stamp};
use configure::configure;
use escape::{Escapes, Fall, Pass};
use failback::Failback;
use handoff::Handoffs;
use recovery::Recovery;
use tokio::time::Instant;
use transitions::{Alarm, Change, Check, Scene};

/// The published snapshot and its generation counter.
#[derive(Debug)]
pub struct Table {
    current: ArcSwap<Snapshot>,
    generation: watch::Sender<u64>,
    /// The last few state transitions (the admin page); written by the writer only.
    recent: recent::Recent,
}

/// A change for the writer.
#[derive(Debug)]
pub enum TableCmd {
    /// A backend's health changed (state, latency or reason).
    Health {
        /// Which backend; ignored if it is no longer configured.
        id: BackendId,
        /// The new health.
        health: Health,
        /// When the result's evidence began: the probe's start, or when failed client dials
        /// were counted (a fall's time; a pass's, for confirming escape routes).
        started: Instant,
    },
    /// Replace the backend list and routing settings (start-up and reload).
    Configure {
        /// The new routing settings.
        routing: Routing,
        /// The new backends, in config order.
        backends: Vec<Arc<BackendSpec>>,
        /// Signalled once the new snapshot is published.
        done: oneshot::Sender<()>,
    },
}

impl Table {
    /// An empty table (no backends) at generation 0.
    pub fn new() -> Arc<Table> {
        Arc::new(Table {
            current: ArcSwap::from_pointee(Snapshot::default()),
            generation: watch::Sender::new(0),
            recent: recent::Recent::default(),
        })
    }

    /// The last few backend state transitions, oldest first (at most [`recent::KEPT`]).
    pub fn recent(&self) -> Arc<Vec<recent::Transition>> {
        self.recent.load()
    }

    /// The current snapshot. Cheap; hold it only for the synchronous part of a decision.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Notified with the generation of every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub(crate) fn publish(&self, snap: Snapshot) {
        let generation = snap.generation;
        self.current.store(Arc::new(snap));
        self.generation.send_replace(generation);
    }
}

/// Runs the single writer until cancelled or every sender is gone.
pub async fn run_writer(
    table: Arc<Table>,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<TableCmd>,
    cancel: CancellationToken,
) {
    // Whether "no backend is ready" has been announced and not yet taken back.
    let mut announced = false;
    let mut failback = Failback::default();
    // The reason the log last gave per unready backend, and when "no backend is ready" was last
    // said (the alarm or a reminder).
    let mut said = cause::Said::new();
    let mut reminded: Option<Instant> = None;
    let mut escapes = Escapes::default();
    let mut recovery = Recovery::default();
    let mut handoffs = Handoffs::default();
    loop {
        let due = failback.next_due(table.load().routing.failback_after);
        let recovered = recovery.next_due(table.load().routing.probe_interval);
        let escaped = escapes.next_due();
        let cmd = tokio::select! {
            _ = cancel.cancelled() => return,
            _ = sleep_until_some(cause::next_reminder(announced, reminded)) => {
                tracing::warn!(backends = %cause::reasons(&table.load()), "still no backend is ready");
                reminded = Some(Instant::now());
                continue;
            }
            _ = sleep_until_some(due) => {
                let after = table.load().routing.failback_after;
                if failback.take_due(after, Instant::now()) {
                    failback.closing(fail_back(&table));
                }
                continue;
            }
            _ = sleep_until_some(recovered) => {
                recover(&table, &mut recovery);
                continue;
            }
            _ = sleep_until_some(escaped) => {
                escape(&table, &mut escapes);
                continue;
            }
            cmd = rx.recv() => match cmd { Some(c) => c, None => return },
        };
        let old = table.load();
        match cmd {
            TableCmd::Health {
                id,
                health,
                started,
            } => {
                let arrived = Instant::now();
                let Some(i) = old.position(&id) else {
                    continue; // a probe of a backend removed by a reload
                };
                if health.state != State::Unknown && health.last_failure.is_none() {
                    escapes.passed(&id, Pass { started, arrived });
                } else if health.last_failure.is_some() {
                    escapes.failed(&id, started);
                }
                if old.backends[i].health == health {
                    escape(&table, &mut escapes);
                    continue;
                }
                let note = cause::on_health(said.get(&id), old.backends[i].health.state, &health);
                let mut next = (*old).clone();
                next.backends[i].health = health;
                let applied = apply(&table, &metrics, &old, next, announced);
                announced = applied.announced;
                handoffs.apply(&table, &applied.handed_off, &applied.call_off, arrived);
                for b in applied.fell {
                    let fall = Fall {
                        at: started,
                        noted: arrived,
                    };
                    escapes.fell(&b, fall);
                }
                match note {
                    cause::Note::Nothing => {}
                    cause::Note::Remember(reason) => {
                        said.insert(id, reason);
                    }
                    cause::Note::Changed { was, now } => {
                        let zone = old.backends[i].spec.zone.as_deref().unwrap_or("");
                        tracing::warn!(backend = %id, zone, was = was.as_deref().unwrap_or(""), reason = &*now, "an unready backend fails for another reason");
                        said.insert(id, now);
                    }
                    cause::Note::Forget => {
                        said.remove(&id);
                    }
                }
            }
            TableCmd::Configure {
                routing,
                backends,
                done,
            } => {
                let (next, removed) = configure(&old, routing, backends);
                said.retain(|id, _| next.position(id).is_some());
                let applied = apply(&table, &metrics, &old, next, announced);
                announced = applied.announced;
                let now = Instant::now();
                handoffs.apply(&table, &applied.handed_off, &applied.call_off, now);
                for b in applied.fell {
                    escapes.fell(
                        &b,
                        Fall {
                            at: now,
                            noted: now,
                        },
                    );
                }
                // After publishing: a connection that still read the old snapshot sees the new
                // epoch, skips the removed backend and re-plans on the snapshot just published.
                for live in removed {
                    live.eviction.evict_now();
                }
                let _ = done.send(()); // the reloader may have given up waiting; nothing to undo
            }
        }
        let now = Instant::now();
        reminded = match (announced, reminded) {
            (false, _) => None,
            (true, None) => Some(now),
            (true, kept) => kept,
        };
        failback.observe(&table.load(), now);
        call_off_failback(&table, &failback.take_call_off(&table.load(), now));
        let wait = table.load().routing.probe_interval;
        recovery.observe(old.any_ready(), &table.load(), wait, now);
        recover(&table, &mut recovery);
        escape(&table, &mut escapes);
    }
}

/// Judges the backends waiting for their escape route: asks the monitors of the routes and of the
/// fallen backends themselves for a confirm probe, and closes the connections of those whose
/// route is confirmed while they still fail, or did not answer in time (turned_unready).
fn escape(table: &Table, escapes: &mut Escapes) {
    if !escapes.is_waiting() {
        return;
    }
    let snap = table.load();
    let review = escapes.review(&snap, Instant::now());
    for &to in &review.ask {
        tracing::debug!(backend = %snap.backends[to].spec.id, "asking for a confirm probe (the escape route, or the fallen backend itself)");
        snap.backends[to].live.confirm.ask();
    }
    let evict: Vec<(usize, CloseReason)> = review
        .close
        .iter()
        .map(|&i| (i, CloseReason::TurnedUnready))
        .collect();
    evict_now(table, &evict);
}

/// Moves the connections a recovery says to (left_none_ready): those on a backend still down
/// one probe interval after a spell with none ready ended, or whose rise failed since.
fn recover(table: &Table, recovery: &mut Recovery) {
    let snap = table.load();
    let moves = recovery.take(snap.routing.probe_interval, &snap, Instant::now());
    let evict: Vec<(usize, CloseReason)> = moves
        .iter()
        .map(|&i| (i, CloseReason::LeftNoneReady))
        .collect();
    evict_now(table, &evict);
}

/// Completes at `due`; never when `None`.
async fn sleep_until_some(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Closes the connections relayed outside this node's zone (a same-zone backend has been ready
/// for `failback_after`): stamp, publish, then bump, as for any eviction, with reason failback.
/// Returns the backends it closes.
fn fail_back(table: &Table) -> Vec<BackendId> {
    let old = table.load();
    let away = failback::away(&old);
    let evict: Vec<(usize, CloseReason)> =
        away.iter().map(|&i| (i, CloseReason::Failback)).collect();
    evict_now(table, &evict);
    away.iter()
        .map(|&i| old.backends[i].spec.id.clone())
        .collect()
}

/// Calls off the failback of `ids` (no backend in this node's zone is ready any more, or the
/// backend is home now): the connections not yet closed stay where they are, rather than
/// re-dial away again. Nothing is published: the snapshot offers the backends as before, and
/// their epochs stay.
fn call_off_failback(table: &Table, ids: &[BackendId]) {
    let snap = table.load();
    for id in ids {
        let Some(i) = snap.position(id) else {
            continue;
        };
        let b = &snap.backends[i];
        if b.live.eviction.call_off(CloseReason::Failback) {
            let active = b.live.active.load(std::sync::atomic::Ordering::Relaxed);
            let zone = snap.routing.zone_name();
            if zone.is_some() && b.spec.zone.as_deref() == zone {
                tracing::info!(backend = %id, reason = CloseReason::Failback.as_str(), active, "this node's zone changed to the backend's own; failback called off, the backend's connections not yet closed stay");
            } else {
                tracing::info!(backend = %id, reason = CloseReason::Failback.as_str(), active, "no backend in this node's zone is ready; failback called off, the backend's connections not yet closed stay");
            }
        }
    }
}

/// What applying a snapshot did, for the writer's own state.
struct Applied {
    /// Whether the no-ready alarm is up.
    announced: bool,
    /// The backends that turned unready (their escape route to confirm).
    fell: Vec<BackendId>,
    /// The backends bumped for a hand-off.
    handed_off: Vec<BackendId>,
    /// The backends whose hand-off, if under way, is to be called off.
    call_off: Vec<BackendId>,
}

/// Decides what `next` means compared with `old`, then applies it: stamp evicted backends with
/// their next epoch, set gauges, log the alarm, publish, and only then bump.
fn apply(
    table: &Table,
    metrics: &Metrics,
    old: &Snapshot,
    mut next: Snapshot,
    announced: bool,
) -> Applied {
    next.generation = old.generation + 1;
    let changes: Vec<Change> = next
        .backends
        .iter()
        .map(|b| {
            let before = old.position(&b.spec.id).map(|i| &old.backends[i].health);
            Change {
                before: before.map(|h| h.state),
                after: b.health.state,
                was: before.map_or(Check::None, Check::of),
                now: Check::of(&b.health),
            }
        })
        .collect();
    let policy = next.routing.when_none_ready;
    let became_refusing =
        policy == WhenNoneReady::Refuse && old.routing.when_none_ready != WhenNoneReady::Refuse;
    let scene = Scene {
        was_any_ready: old.any_ready(),
        policy,
        became_refusing,
        announced,
    };
    let decision = transitions::decide(scene, &changes);
    let bumps = stamp(&mut next, &decision.evict);
    match decision.alarm {
        Alarm::Raise => {
            let action = match policy {
                WhenNoneReady::FailOpen => "failing open: routing to all backends",
                WhenNoneReady::Refuse => "refusing client connections",
            };
            metrics.no_ready_events.inc();
            tracing::warn!(backends = %cause::reasons(&next), checks = %cause::checks(&next), "no backend is ready; {action}");
        }
        Alarm::Clear => {
            tracing::warn!("a backend is ready again; leaving the no-ready-backend state")
        }
        Alarm::Unchanged => {}
    }
    metrics
        .no_ready_backends
        .set(i64::from(decision.no_ready_gauge));
    let at = std::time::SystemTime::now();
    let turned: Vec<recent::Transition> = next
        .backends
        .iter()
        .zip(&changes)
        .filter(|(_, c)| c.before.unwrap_or(State::Unknown) != c.after)
        .map(|(b, c)| recent::Transition {
            at,
            backend: b.spec.id.to_string(),
            from: c.before.unwrap_or(State::Unknown),
            to: c.after,
            reason: b.health.last_error().map(str::to_string),
        })
        .collect();
    let ids = |of: &mut dyn Iterator<Item = usize>| -> Vec<BackendId> {
        of.map(|i| next.backends[i].spec.id.clone()).collect()
    };
    let applied = Applied {
        announced: decision.announced,
        fell: ids(&mut decision.confirm.iter().copied()),
        handed_off: ids(&mut decision
            .evict
            .iter()
            .filter(|(_, why)| *why == CloseReason::Handoff)
            .map(|&(i, _)| i)),
        call_off: ids(&mut decision.call_off.iter().copied()),
    };
    publish_then_bump(table, next, bumps);
    table.recent.push(turned);
    applied
}

#[cfg(test)]
impl Table {
    /// Publishes a hand-made snapshot (unit tests of readers).
    pub(crate) fn test_publish(&self, snap: Snapshot) {
        self.publish(snap);
    }
}
