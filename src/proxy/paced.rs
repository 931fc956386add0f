//! A new connection's side of paced re-entry ([`crate::pacing`]): when every ready backend has
//! just turned ready again and paces the connection, it waits for its soonest point (at most
//! the window, counted); a connection sent past a paced backend it would have gone to is counted
//! against that backend.
//!
//! Does not own the rule (`pacing`) nor the window's atomics (`backend`).

use tokio::time::Instant;

use super::Picked;
use crate::pick::Pick;

impl Picked {
    /// When the connection may go, if every ready backend of its plan is paced at `now`: the
    /// soonest of its points in their windows (none later than a window's end).
    pub(super) fn paced_until(&self, now: Instant, draw: f64) -> Option<Instant> {
        let Pick::Ready(order) = self.order.pick() else {
            return None;
        };
        let len = self.snap.routing.reentry_window;
        order
            .iter()
            .map(|&i| self.snap.backends[i].live.reentry.admits_at(len, now, draw))
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
}
