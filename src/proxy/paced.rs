//! A new connection's side of paced re-entry ([`crate::pacing`]): when every ready backend has
//! just turned ready again and paces this node's connections, the connection waits for the
//! soonest token (at most the window, counted); a connection sent past a paced backend it would
//! have gone to is counted against that backend; a dial to a paced backend takes a token.
//!
//! Does not own the rule (`pacing`) nor the window's atomics (`backend`).

use tokio::time::Instant;

use super::Picked;
use crate::pick::Pick;

impl Picked {
    /// When the connection may go, if every ready backend of its plan is paced at `now`: the
    /// soonest of their tokens (none later than its window's end).
    pub(super) fn paced_until(&self, now: Instant) -> Option<Instant> {
        let Pick::Ready(order) = self.order.pick() else {
            return None;
        };
        let len = self.snap.routing.reentry_window;
        order
            .iter()
            .map(|&i| self.snap.backends[i].live.reentry.admits_at(len, now))
            .collect::<Option<Vec<Instant>>>()?
            .into_iter()
            .min()
    }

    /// Counts the connection against the paced backend it would have gone to, if any.
    pub(super) fn count_deferred(&self) {
        if let Some(i) = self.order.deferred() {
            self.snap.backends[i].live.reentry.deferred_one();
        }
    }

    /// Takes a re-entry token of backend `index` for a dial at `now` (nothing outside a window).
    pub(super) fn take_token(&self, index: usize, now: Instant) {
        let b = &self.snap.backends[index];
        if b.health.state == crate::verdict::State::Ready {
            b.live.reentry.take(self.snap.routing.reentry_window, now);
        }
    }
}
