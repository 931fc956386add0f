//! Paced re-entry: when a backend turns ready again, this node's new connections to it are let in
//! over `reentry_window`, so a fleet's re-dials arrive spread over the window instead of in the
//! probe phase that saw the backend come back.
//!
//! The rule, for one backend's window `[opened, opened + window)`: each new connection draws its
//! own point of the window, `opened + draw × window` with `draw` in [0, 1), and may go to the
//! backend from that point on. So the share of new connections let in grows from none to all
//! over the window (slow start), and when nothing else is ready each waits until its own point:
//! a node's re-dials spread over the window, and a fleet's with them. From the window's end on,
//! nothing is paced.
//!
//! Measured against a per-node gate with a token bucket (the first form, `0ab877c`): with the
//! herd bench's 20 clients a node, every node's herd went at its gate together, and the peak
//! per 100 ms rose (43 against 29 unpaced); per-connection points have no per-node burst.
//!
//! A paced backend is ranked after the ready ones that are not (`pick`); when every ready backend
//! is paced, the connection waits for the soonest point, at most the window (`proxy`).
//!
//! Pure: told the time and the draw. Does not own the atomics that hold a backend's window
//! (`backend`), nor when a window opens (`table`).

use std::time::Duration;

use tokio::time::Instant;

/// One backend's re-entry window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// When it opened: the backend turned ready, or a recovery moved connections to it.
    pub opened: Instant,
    /// Its length (`reentry_window`).
    pub len: Duration,
}

impl Window {
    /// The window's end: nothing is paced from here on.
    pub fn end(&self) -> Instant {
        self.opened + self.len
    }

    /// When a new connection with `draw` (in [0, 1)) may go to the backend: never after the end.
    pub fn admits_at(&self, draw: f64) -> Instant {
        self.opened + self.len.mul_f64(draw.clamp(0.0, 1.0))
    }

    /// Whether a new connection with `draw` must wait (or go elsewhere) at `now`.
    pub fn paces(&self, now: Instant, draw: f64) -> bool {
        now < self.admits_at(draw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: Duration = Duration::from_secs(5);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_connection_passes_from_its_own_point_of_the_window() {
        let t0 = Instant::now();
        let w = Window {
            opened: t0,
            len: LEN,
        };
        assert_eq!(w.admits_at(0.5), t0 + ms(2500));
        assert!(w.paces(t0, 0.5));
        assert!(w.paces(t0 + ms(2499), 0.5));
        assert!(!w.paces(t0 + ms(2500), 0.5));
        assert!(!w.paces(t0, 0.0), "a draw of 0 passes at once");
    }

    #[test]
    fn the_share_let_in_grows_from_none_to_all_over_the_window() {
        let t0 = Instant::now();
        let w = Window {
            opened: t0,
            len: LEN,
        };
        let draws: Vec<f64> = (0..100).map(|i| f64::from(i) / 100.0).collect();
        let let_in = |at: Duration| draws.iter().filter(|&&d| !w.paces(t0 + at, d)).count();
        assert_eq!(let_in(ms(0)), 1);
        assert_eq!(let_in(ms(1000)), 21);
        assert_eq!(let_in(ms(2500)), 51);
        assert_eq!(let_in(LEN), 100);
    }

    #[test]
    fn no_wait_outlasts_the_window() {
        let t0 = Instant::now();
        let w = Window {
            opened: t0,
            len: LEN,
        };
        assert!(w.admits_at(0.999_999) <= w.end());
        assert!(w.admits_at(7.0) <= w.end(), "clamped");
        assert!(!w.paces(w.end(), 0.999_999));
    }
}
