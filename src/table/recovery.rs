//! Leaving a spell with no backend ready (a cluster-wide blink, or start-up): the connections
//! that failed open stay where they are while their backend recovers. One probe interval after
//! the first backend turned ready, those on a backend unready since the spell and not rising
//! are moved (left_none_ready, the usual spread); those on a rising one stay, and move only if
//! its rise fails. A backend that falls after the spell is left to the usual rules.
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
    /// Unready, and not rising: its connections move.
    Down,
}

impl Course {
    /// The course of a backend with `health`.
    pub fn of(health: &Health) -> Course {
        if health.state != State::Unready {
            Course::Fine
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
    pub fn observe(&mut self, was_any_ready: bool, snap: &Snapshot, now: Instant) {
        let unready = |id: &BackendId| {
            snap.position(id)
                .is_some_and(|i| snap.backends[i].health.state == State::Unready)
        };
        if !snap.any_ready() {
            *self = Recovery::default();
        } else if !was_any_ready {
            self.left = Some(now);
            self.spell = snap
                .backends
                .iter()
                .filter(|b| b.health.state == State::Unready)
                .map(|b| b.spec.id.clone())
                .collect();
            self.rising.clear();
        } else {
            self.spell.retain(|id| unready(id));
        }
    }

    /// When the wait of `wait` (one probe interval) is over; `None`: no recovery waits.
    pub fn next_due(&self, wait: Duration) -> Option<Instant> {
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
        if self.left.is_some_and(|at| now >= at + wait) {
            self.left = None;
            for id in std::mem::take(&mut self.spell) {
                match course(&id) {
                    Some((i, Course::Down)) => moves.push(i),
                    Some((_, Course::Rising)) => self.rising.push(id),
                    Some((_, Course::Fine)) | None => {}
                }
            }
            return moves;
        }
        self.rising.retain(|id| match course(id) {
            Some((i, Course::Down)) => {
                moves.push(i);
                false
            }
            Some((_, Course::Rising)) => true,
            Some((_, Course::Fine)) | None => false,
        });
        moves
    }
}

#[cfg(test)]
mod tests;
