//! Leaving a spell with no backend ready (a cluster-wide blink, or start-up): the connections
//! that failed open stay where they are while their backend recovers. One probe interval after
//! the first backend turned ready, those on a backend unready since the spell and not rising
//! are moved (left_none_ready, the usual spread); those on a rising one stay, and move only if
//! its rise fails. A backend that falls after the spell is left to the usual rules, and so is
//! one that drains (its hand-off, which waited while none was ready, moves them).
//!
//! A backend already down for over an interval when the spell began was not part of the event
//! (it fell alone, long before): nothing says it is recovering, so the connections that failed
//! open to it move as soon as another backend is ready, as without a spell.
//!
//! Owns the clock and the decisions (pure: the caller passes `now`). Does not own closing (the
//! table writer stamps, publishes and bumps, as for any eviction).

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::verdict::{Health, State};

/// What a backend is doing, for the recovery rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Course {
    /// Ready (or not yet checked): nothing to move.
    Fine,
    /// Unready, with passes under way toward ready.
    Rising,
    /// Unready, draining (only `shutdown` fails): its hand-off moves them, not a recovery.
    Draining,
    /// Unready, and not rising: its connections move.
    Down,
}

impl Course {
    /// The course of a backend with `health`.
    pub fn of(health: &Health) -> Course {
        if health.state != State::Unready {
            Course::Fine
        } else if health.draining() {
            Course::Draining
        } else if health.pending.is_some_and(|p| p.toward == State::Ready) {
            Course::Rising
        } else {
            Course::Down
        }
    }
}

/// The recovery under way after a spell with none ready.
#[derive(Debug, Default)]
pub struct Recovery {
    /// When each unready backend turned unready, as seen here.
    down_since: Vec<(BackendId, Instant)>,
    /// When the spell under way (or the last one) began; `None` before any (start-up).
    began: Option<Instant>,
    /// Backends down since long before the spell: moved as soon as it is over.
    before: Vec<BackendId>,
    /// When the first backend turned ready, until the wait is over.
    left: Option<Instant>,
    /// Backends unready since the spell (their connections failed open to them): a backend that
    /// turns ready drops out, and one that falls later is the usual rules' (escape, hand-off).
    spell: Vec<BackendId>,
    /// Backends that were rising when the wait was over: moved if their rise fails.
    rising: Vec<BackendId>,
}

impl Recovery {
    /// Folds in a snapshot seen at `now`, `was_any_ready` in the previous one: leaving a spell
    /// with none ready starts the clock; a new spell stops everything (nothing moves in it).
    /// `wait` is one probe interval: a backend down for longer than it when the spell began was
    /// not part of it.
    pub fn observe(&mut self, was_any_ready: bool, snap: &Snapshot, wait: Duration, now: Instant) {
        let unready = |id: &BackendId| {
            snap.position(id)
                .is_some_and(|i| snap.backends[i].health.state == State::Unready)
        };
        self.down_since.retain(|(id, _)| unready(id));
        for b in &snap.backends {
            let id = &b.spec.id;
            if b.health.state == State::Unready && !self.down_since.iter().any(|(d, _)| d == id) {
                self.down_since.push((id.clone(), now));
            }
        }
        if !snap.any_ready() {
            if was_any_ready {
                self.began = Some(now);
            }
            self.left = None;
            self.spell.clear();
            self.before.clear();
            self.rising.clear();
        } else if !was_any_ready {
            self.left = Some(now);
            let long_before = |since: Instant| self.began.is_some_and(|b| since + wait < b);
            let (before, spell): (Vec<_>, Vec<_>) = self
                .down_since
                .iter()
                .partition(|(_, since)| long_before(*since));
            self.before = before.into_iter().map(|(id, _)| id.clone()).collect();
            self.spell = spell.into_iter().map(|(id, _)| id.clone()).collect();
            self.rising.clear();
        } else {
            self.spell.retain(|id| unready(id));
            self.before.retain(|id| unready(id));
        }
    }

    /// When the wait of `wait` (one probe interval) is over; `None`: no recovery waits.
    pub fn next_due(&self, wait: Duration) -> Option<Instant> {
        let wait = if self.before.is_empty() {
            wait
        } else {
            Duration::ZERO
        };
        self.left.map(|at| at + wait)
    }

    /// The backends of `snap` to move at `now`: once the wait is over, those of the spell that
    /// are down (the rising ones are watched); after it, watched ones whose rise failed. Indices
    /// into `snap`.
    pub fn take(&mut self, wait: Duration, snap: &Snapshot, now: Instant) -> Vec<usize> {
        let course = |id: &BackendId| {
            snap.position(id)
                .map(|i| (i, Course::of(&snap.backends[i].health)))
        };
        let mut moves = Vec::new();
        // Down ones move, rising ones are watched.
        let mut sort = |ids: Vec<BackendId>, moves: &mut Vec<usize>| {
            for id in ids {
                match course(&id) {
                    Some((i, Course::Down)) => moves.push(i),
                    Some((_, Course::Rising)) => self.rising.push(id),
                    Some((_, Course::Fine | Course::Draining)) | None => {}
                }
            }
        };
        sort(std::mem::take(&mut self.before), &mut moves);
        if self.left.is_some_and(|at| now >= at + wait) {
            sort(std::mem::take(&mut self.spell), &mut moves);
            self.left = None;
            return moves;
        }
        self.rising.retain(|id| match course(id) {
            Some((i, Course::Down)) => {
                moves.push(i);
                false
            }
            Some((_, Course::Rising)) => true,
            Some((_, Course::Fine | Course::Draining)) | None => false,
        });
        moves
    }
}

#[cfg(test)]
mod tests;
