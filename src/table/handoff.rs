//! The hand-offs under way: when each draining backend's hand-off began, so that calling one off
//! (it passed, or no backend is ready any more) touches only a hand-off whose turns may still
//! come, and says so once, rather than a bump whose window ended long ago; and applying such a
//! call-off (the bump's mark, one log line).
//!
//! The record is pure: the caller passes `now` and the window. Does not own deciding when a
//! hand-off begins or is called off (`transitions`), nor the bump or its mark (`eviction`).

use std::time::Duration;

use tokio::time::Instant;

use super::writer::{Effect, Effects};
use crate::backend::{BackendId, Snapshot};
use crate::eviction::CloseReason;

/// The backends bumped for a hand-off, and when.
#[derive(Debug, Default)]
pub struct Handoffs {
    /// Each backend's latest hand-off and when it began; dropped once called off, and ignored
    /// once its window is over (the next hand-off of the backend replaces it).
    began: Vec<(BackendId, Instant)>,
}

impl Handoffs {
    /// `id`'s hand-off begins at `now` (its backend was just bumped for it).
    pub fn begin(&mut self, id: &BackendId, now: Instant) {
        self.began.retain(|(b, _)| b != id);
        self.began.push((id.clone(), now));
    }

    /// Whether `id` has a hand-off under way at `now` (begun less than `window` ago), to be
    /// called off: it is then no longer under way.
    pub fn take_under_way(&mut self, id: &BackendId, window: Duration, now: Instant) -> bool {
        let Some(at) = self.began.iter().position(|(b, _)| b == id) else {
            return false;
        };
        let (_, since) = self.began.swap_remove(at);
        now < since + window
    }
}

impl Handoffs {
    /// Notes the hand-offs of `began` (just bumped), and calls off those of `call_off` still
    /// under way in `snap` (the snapshot just published): the connections whose turn has not
    /// come stay. Nothing is published: the backend is offered as before, and its epoch stays.
    pub(super) fn apply(
        &mut self,
        snap: &Snapshot,
        began: &[BackendId],
        call_off: &[BackendId],
        now: Instant,
        fx: &mut Effects,
    ) {
        for id in began {
            self.begin(id, now);
        }
        let window = snap.routing.handoff_window;
        for id in call_off {
            let Some(i) = snap.position(id) else {
                continue;
            };
            let b = &snap.backends[i];
            if self.take_under_way(id, window, now) {
                let why = if b.health.draining() {
                    "no backend is ready to hand its connections to"
                } else {
                    "it answers ready again"
                };
                let message = "hand-off called off; the backend's connections not yet closed stay";
                fx.push(Effect::call_off(
                    b,
                    CloseReason::Handoff,
                    message,
                    Some(why),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(5);

    #[test]
    fn only_a_hand_off_still_under_way_is_called_off_and_only_once() {
        let t0 = Instant::now();
        let s = |ms| t0 + Duration::from_millis(ms);
        let (a, b) = (
            BackendId::new("10.0.0.1:6443"),
            BackendId::new("10.0.0.2:6443"),
        );
        let mut h = Handoffs::default();
        assert!(!h.take_under_way(&a, WINDOW, t0), "none begun");
        h.begin(&a, t0);
        assert!(!h.take_under_way(&b, WINDOW, s(1)), "another backend's");
        assert!(h.take_under_way(&a, WINDOW, s(4_999)), "within the window");
        assert!(!h.take_under_way(&a, WINDOW, s(5_000)), "once");
        h.begin(&a, s(10_000));
        assert!(
            !h.take_under_way(&a, WINDOW, s(15_000)),
            "its window is over: nothing left to call off"
        );
        h.begin(&a, s(20_000));
        h.begin(&a, s(30_000));
        assert!(
            h.take_under_way(&a, WINDOW, s(31_000)),
            "the latest hand-off counts"
        );
    }
}
