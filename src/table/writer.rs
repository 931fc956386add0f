//! The table writer as a state machine that is told the time: every policy's state in one
//! [`Writer`], fed the commands ([`Writer::handle`]) and its own deadlines
//! ([`Writer::poll_timeout`], [`Writer::handle_timeout`]), answering with the [`Effect`]s to apply
//! in order (publish, then bump). Owns the order in which the policies see each change:
//!
//! 1. the command: a probe's pass or failure noted for the escape routes, the snapshot folded,
//!    decided and published ([`transitions`](super::transitions)), hand-offs begun or called off,
//!    fallen backends waiting for their escape route, the log's cause;
//! 2. then, on the snapshot just published: the failback's ready clocks and its call-off, the
//!    recovery after a spell with none ready, and the escape review.
//!
//! Does not own applying the effects (`run_writer`), nor any rule (the policy modules).

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::bump::stamp;
use super::cause;
use super::configure::configure;
use super::escape::{Escapes, Fall, Pass};
use super::failback::{self, Failback};
use super::handoff::Handoffs;
use super::recent;
use super::recovery::Recovery;
use super::silence::Silence;
use super::transitions::{self, Alarm, Change, Scene, Seen};
use super::TableCmd;
use crate::backend::{Backend, BackendId, BackendLive, Snapshot};
use crate::eviction::CloseReason;
use crate::metrics::Metrics;
use crate::pick::WhenNoneReady;
use crate::verdict::State;

/// One thing the writer decided, for its driver to do, in order.
#[derive(Debug)]
pub enum Effect {
    /// Publish this snapshot (before the bumps that follow it).
    Publish(Arc<Snapshot>),
    /// Fire the backend's eviction at this epoch (stamped in the snapshot published before).
    Bump(Arc<BackendLive>, u64, CloseReason),
    /// Close every connection of a backend no snapshot offers any more (removed by a reload).
    EvictNow(Arc<BackendLive>),
    /// Call off the backend's latest bump if it was for `reason`; if it was, log `message`.
    CallOff {
        /// The backend's live state.
        live: Arc<BackendLive>,
        /// For the log.
        id: BackendId,
        /// The bump's reason (failback or hand-off).
        reason: CloseReason,
        /// The log line.
        message: &'static str,
        /// Why, for a hand-off's line.
        why: Option<&'static str>,
    },
    /// Ask the backend's monitor for a confirm probe.
    Confirm(Arc<BackendLive>),
    /// Tell each backend's monitor whether it may probe at the remote cadence
    /// ([`super::cadence`]).
    Cadence(Vec<(Arc<BackendLive>, bool)>),
    /// Open the backend's re-entry window at this instant: it turned ready from unready, or a
    /// recovery moves connections to it ([`crate::pacing`]).
    Reentry(Arc<BackendLive>, Instant),
    /// Keep these state transitions for the admin page.
    Recent(Vec<recent::Transition>),
    /// Tell the reloader its snapshot is published.
    Done(oneshot::Sender<()>),
}

/// The effects of one step, in order.
pub type Effects = Vec<Effect>;

impl Effect {
    /// Calls off `b`'s latest bump if it was for `reason`, logging `message` (with `why`) if so.
    pub fn call_off(
        b: &Backend,
        reason: CloseReason,
        message: &'static str,
        why: Option<&'static str>,
    ) -> Effect {
        Effect::CallOff {
            live: b.live.clone(),
            id: b.spec.id.clone(),
            reason,
            message,
            why,
        }
    }
}

/// The single writer's state: the snapshot it published last, and every policy's.
#[derive(Debug)]
pub struct Writer {
    snap: Arc<Snapshot>,
    metrics: Arc<Metrics>,
    /// Whether "no backend is ready" has been announced and not yet taken back.
    announced: bool,
    failback: Failback,
    /// The reason the log last gave per unready backend.
    said: cause::Said,
    /// When "no backend is ready" was last said (the alarm or a reminder).
    reminded: Option<Instant>,
    escapes: Escapes,
    recovery: Recovery,
    handoffs: Handoffs,
    silence: Silence,
}

/// What applying a snapshot did, for the writer's own state.
struct Applied {
    /// The backends that turned unready (their escape route to confirm).
    fell: Vec<BackendId>,
    /// The backends bumped for a hand-off.
    handed_off: Vec<BackendId>,
    /// The backends whose hand-off, if under way, is to be called off.
    call_off: Vec<BackendId>,
}

impl Writer {
    /// A writer that goes on from `snap`, the snapshot published now.
    pub fn new(snap: Arc<Snapshot>, metrics: Arc<Metrics>) -> Writer {
        Writer {
            snap,
            metrics,
            announced: false,
            failback: Failback::default(),
            said: cause::Said::new(),
            reminded: None,
            escapes: Escapes::default(),
            recovery: Recovery::default(),
            handoffs: Handoffs::default(),
            silence: Silence::default(),
        }
    }

    /// The snapshot published last.
    #[cfg(test)]
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snap
    }

    /// When [`Writer::handle_timeout`] is next due: the soonest of the reminder while none is
    /// ready, the failback, the end of a recovery's wait and of an escape route's wait.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines().into_iter().flatten().min()
    }

    /// The named deadlines: reminder, failback, recovery, escape.
    fn deadlines(&self) -> [Option<Instant>; 4] {
        let routing = &self.snap.routing;
        [
            cause::next_reminder(self.announced, self.reminded),
            self.failback.next_due(routing.failback_after),
            self.recovery.next_due(routing.probe_interval),
            self.escapes.next_due(),
        ]
    }

    /// Does what is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) -> Effects {
        let mut fx = Effects::new();
        let [reminder, failback, recovery, escape] =
            self.deadlines().map(|d| d.is_some_and(|at| now >= at));
        if reminder {
            tracing::warn!(backends = %cause::reasons(&self.snap), "still no backend is ready");
            self.reminded = Some(now);
        }
        if failback
            && self
                .failback
                .take_due(self.snap.routing.failback_after, now)
        {
            let away = self.fail_back(&mut fx);
            self.failback.closing(away);
        }
        if recovery {
            self.recover(now, &mut fx);
        }
        if escape {
            self.escape(now, &mut fx);
        }
        fx
    }

    /// Folds in `cmd`, arrived at `now`.
    pub fn handle(&mut self, cmd: TableCmd, now: Instant) -> Effects {
        let mut fx = Effects::new();
        let old = self.snap.clone();
        match cmd {
            TableCmd::Health {
                id,
                health,
                started,
            } => {
                let Some(i) = old.position(&id) else {
                    return fx; // a probe of a backend removed by a reload
                };
                if health.state != State::Unknown && health.last_failure.is_none() {
                    self.escapes.passed(
                        &id,
                        Pass {
                            started,
                            arrived: now,
                        },
                    );
                } else if health.last_failure.is_some() {
                    self.escapes.failed(&id, started);
                }
                if old.backends[i].health == health {
                    self.silent(&id, started, &mut fx);
                    self.escape(now, &mut fx);
                    return fx;
                }
                let note =
                    cause::on_health(self.said.get(&id), old.backends[i].health.state, &health);
                let mut next = (*old).clone();
                next.backends[i].health = health;
                self.apply_and_follow(&old, next, started, now, &mut fx);
                self.silent(&id, started, &mut fx);
                self.note(note, id, old.backends[i].spec.zone.as_deref());
            }
            TableCmd::Degraded { id, degraded } => {
                let Some(i) = old.position(&id) else {
                    return fx; // a check of a backend removed by a reload
                };
                if old.backends[i].degraded == degraded {
                    return fx;
                }
                let mut next = (*old).clone();
                next.backends[i].degraded = degraded;
                // No health changed: only the pick's ranking, and what follows from it (the
                // escape route, the cadence, failback's clocks).
                self.apply_and_follow(&old, next, now, now, &mut fx);
            }
            TableCmd::Configure {
                routing,
                backends,
                done,
            } => {
                let (next, removed) = configure(&old, routing, backends);
                self.said.retain(|id, _| next.position(id).is_some());
                self.apply_and_follow(&old, next, now, now, &mut fx);
                // After publishing: a connection that still read the old snapshot sees the new
                // epoch, skips the removed backend and re-plans on the snapshot just published.
                fx.extend(removed.into_iter().map(Effect::EvictNow));
                fx.push(Effect::Done(done));
            }
        }
        self.reminded = match (self.announced, self.reminded) {
            (false, _) => None,
            (true, None) => Some(now),
            (true, kept) => kept,
        };
        self.failback.observe(&self.snap, now);
        let off = self.failback.take_call_off(&self.snap, now);
        self.call_off_failback(&off, &mut fx);
        let wait = self.snap.routing.probe_interval;
        self.recovery
            .observe(old.any_ready(), &self.snap, wait, now);
        self.recover(now, &mut fx);
        self.escape(now, &mut fx);
        fx
    }

    /// Applies `next` ([`Writer::apply`]), then follows what it did: the hand-offs it began or
    /// calls off, and the backends that fell (their evidence began at `fell_at`) waiting for
    /// their escape route.
    fn apply_and_follow(
        &mut self,
        old: &Snapshot,
        next: Snapshot,
        fell_at: Instant,
        now: Instant,
        fx: &mut Effects,
    ) {
        let applied = self.apply(old, next, now, fx);
        self.silence.observe(&self.snap, now);
        let (began, call_off) = (&applied.handed_off, &applied.call_off);
        self.handoffs.apply(&self.snap, began, call_off, now, fx);
        for b in applied.fell {
            let fall = Fall {
                at: fell_at,
                noted: now,
            };
            self.escapes.fell(&b, fall);
        }
    }

    /// Failing open, moves the connections of `id` if its check that started at `started` found
    /// it silent after another backend was answering ([`Silence`]): spread as on unready.
    fn silent(&mut self, id: &BackendId, started: Instant, fx: &mut Effects) {
        let failing_open =
            !self.snap.any_ready() && self.snap.routing.when_none_ready == WhenNoneReady::FailOpen;
        if self.silence.moves(&self.snap, failing_open, id, started) {
            if let Some(i) = self.snap.position(id) {
                self.evict(&[(i, CloseReason::Silent)], fx);
            }
        }
    }

    /// Keeps the log's cause of an unready backend current.
    fn note(&mut self, note: cause::Note, id: BackendId, zone: Option<&str>) {
        match note {
            cause::Note::Nothing => {}
            cause::Note::Remember(reason) => {
                self.said.insert(id, reason);
            }
            cause::Note::Changed { was, now } => {
                let zone = zone.unwrap_or("");
                tracing::warn!(backend = %id, zone, was = was.as_deref().unwrap_or(""), reason = &*now, "an unready backend fails for another reason");
                self.said.insert(id, now);
            }
            cause::Note::Forget => {
                self.said.remove(&id);
            }
        }
    }

    /// The protocol's order: publish the stamped snapshot, then bump, so that no connection
    /// dialed from the old snapshot outlives the eviction.
    fn publish(
        &mut self,
        next: Snapshot,
        bumps: Vec<(Arc<BackendLive>, u64, CloseReason)>,
        fx: &mut Effects,
    ) {
        self.snap = Arc::new(next);
        fx.push(Effect::Publish(self.snap.clone()));
        let remote = super::cadence::remote(&self.snap);
        let lives = self.snap.backends.iter().map(|b| b.live.clone());
        fx.push(Effect::Cadence(lives.zip(remote).collect()));
        fx.extend(
            bumps
                .into_iter()
                .map(|(live, epoch, why)| Effect::Bump(live, epoch, why)),
        );
    }

    /// Closes the connections of `evict`'s backends in the current snapshot: stamp, publish,
    /// bump.
    fn evict(&mut self, evict: &[(usize, CloseReason)], fx: &mut Effects) {
        if evict.is_empty() {
            return;
        }
        let mut next = (*self.snap).clone();
        next.generation += 1;
        let bumps = stamp(&mut next, evict);
        self.publish(next, bumps, fx);
    }

    /// Judges the backends waiting for their escape route: asks the monitors of the routes and
    /// of the fallen backends themselves for a confirm probe, and closes the connections of those
    /// whose route is confirmed while they still fail, or did not answer in time
    /// (turned_unready).
    fn escape(&mut self, now: Instant, fx: &mut Effects) {
        if !self.escapes.is_waiting() {
            return;
        }
        let review = self.escapes.review(&self.snap, now);
        for &to in &review.ask {
            tracing::debug!(backend = %self.snap.backends[to].spec.id, "asking for a confirm probe (the escape route, or the fallen backend itself)");
            fx.push(Effect::Confirm(self.snap.backends[to].live.clone()));
        }
        let evict: Vec<(usize, CloseReason)> = review
            .close
            .iter()
            .map(|&i| (i, CloseReason::TurnedUnready))
            .collect();
        self.evict(&evict, fx);
    }

    /// Moves the connections a recovery says to (left_none_ready): those on a backend still
    /// down one probe interval after a spell with none ready ended, or whose rise failed since.
    fn recover(&mut self, now: Instant, fx: &mut Effects) {
        let moves = self
            .recovery
            .take(self.snap.routing.probe_interval, &self.snap, now);
        let evict: Vec<(usize, CloseReason)> = moves
            .iter()
            .map(|&i| (i, CloseReason::LeftNoneReady))
            .collect();
        // Their clients re-dial the ready backends, as every node's do about now: paced, from
        // a window opened afresh (the one opened when they turned ready is about over).
        if !evict.is_empty() && !self.snap.routing.reentry_window.is_zero() {
            for b in self
                .snap
                .backends
                .iter()
                .filter(|b| b.health.state == State::Ready)
            {
                fx.push(Effect::Reentry(b.live.clone(), now));
            }
        }
        self.evict(&evict, fx);
    }

    /// Closes the connections relayed outside this node's zone (a same-zone backend has been
    /// ready for `failback_after`), with reason failback. Returns the backends it closes.
    fn fail_back(&mut self, fx: &mut Effects) -> Vec<BackendId> {
        let away = failback::away(&self.snap);
        let ids = away
            .iter()
            .map(|&i| self.snap.backends[i].spec.id.clone())
            .collect();
        let evict: Vec<(usize, CloseReason)> =
            away.iter().map(|&i| (i, CloseReason::Failback)).collect();
        self.evict(&evict, fx);
        ids
    }

    /// Calls off the failback of `ids` (no backend in this node's zone is ready any more, or
    /// the backend is home now): the connections not yet closed stay where they are, rather
    /// than re-dial away again. Nothing is published: the snapshot offers the backends as
    /// before, and their epochs stay.
    fn call_off_failback(&self, ids: &[BackendId], fx: &mut Effects) {
        let zone = self.snap.routing.zone_name();
        for id in ids {
            let Some(i) = self.snap.position(id) else {
                continue;
            };
            let b = &self.snap.backends[i];
            let message = if zone.is_some() && b.spec.zone.as_deref() == zone {
                "this node's zone changed to the backend's own; failback called off, the backend's connections not yet closed stay"
            } else {
                "no backend in this node's zone is ready; failback called off, the backend's connections not yet closed stay"
            };
            fx.push(Effect::call_off(b, CloseReason::Failback, message, None));
        }
    }

    /// Decides what `next` means compared with `old`, then applies it: stamp evicted backends
    /// with their next epoch, set gauges, log the alarm, publish, and only then bump.
    fn apply(
        &mut self,
        old: &Snapshot,
        mut next: Snapshot,
        now: Instant,
        fx: &mut Effects,
    ) -> Applied {
        next.generation = old.generation + 1;
        let changes: Vec<Change> = next
            .backends
            .iter()
            .map(|b| {
                let before = old.position(&b.spec.id);
                Change {
                    before: before.map(|i| Seen::of(&old.backends[i].health)),
                    after: Seen::of(&b.health),
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
            announced: self.announced,
        };
        let decision = transitions::decide(scene, &changes);
        let bumps = stamp(&mut next, &decision.evict);
        match decision.alarm {
            Alarm::Raise => {
                let action = match policy {
                    WhenNoneReady::FailOpen => "failing open: routing to all backends",
                    WhenNoneReady::Refuse => "refusing client connections",
                };
                self.metrics.no_ready_events.inc();
                tracing::warn!(backends = %cause::reasons(&next), checks = %cause::checks(&next), "no backend is ready; {action}");
            }
            Alarm::Clear => {
                tracing::warn!("a backend is ready again; leaving the no-ready-backend state")
            }
            Alarm::Unchanged => {}
        }
        self.metrics
            .no_ready_backends
            .set(i64::from(decision.no_ready_gauge));
        self.announced = decision.announced;
        let at = std::time::SystemTime::now();
        let turned: Vec<recent::Transition> = next
            .backends
            .iter()
            .zip(&changes)
            .map(|(b, c)| {
                (
                    b,
                    c.before.map_or(State::Unknown, |s| s.state),
                    c.after.state,
                )
            })
            .filter(|(_, from, to)| from != to)
            .map(|(b, from, to)| recent::Transition {
                at,
                backend: b.spec.id.to_string(),
                from,
                to,
                reason: b.health.last_error().map(str::to_string),
            })
            .collect();
        let ids = |of: &mut dyn Iterator<Item = usize>| -> Vec<BackendId> {
            of.map(|i| next.backends[i].spec.id.clone()).collect()
        };
        let applied = Applied {
            fell: ids(&mut decision.confirm.iter().copied()),
            handed_off: ids(&mut decision
                .evict
                .iter()
                .filter(|(_, why)| *why == CloseReason::Handoff)
                .map(|&(i, _)| i)),
            call_off: ids(&mut decision.call_off.iter().copied()),
        };
        // Before the publish that shows them ready, so no new connection sees them unpaced.
        for (b, c) in next.backends.iter().zip(&changes) {
            if c.returned() && !next.routing.reentry_window.is_zero() {
                fx.push(Effect::Reentry(b.live.clone(), now));
            }
        }
        self.publish(next, bumps, fx);
        fx.push(Effect::Recent(turned));
        applied
    }
}
