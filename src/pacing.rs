//! Paced re-entry: when a backend turns ready again, this node's new connections to it pass a
//! token bucket that opens over `reentry_window`, so a fleet's re-dials arrive spread over the
//! window instead of in the probe phase that saw the backend come back.
//!
//! The rule, for one backend's window `[opened, opened + window)`:
//! - nothing before the node's **gate**, `opened + phase × window`, with `phase` drawn per node
//!   and backend in [0, 1): the fleet's first re-dials spread evenly over the window;
//! - from the gate, a bucket of [`BURST`] tokens (more than a node's handful of clients: kubelet,
//!   kube-proxy, the CNI and the static pods, so a node's re-dials go at its gate together),
//!   refilled at [`BURST`] per window (GCRA: one theoretical arrival time);
//! - from the window's end on, nothing is paced.
//!
//! A paced backend is ranked after the ready ones that are not (`pick`); when every ready backend
//! is paced, the connection waits for the soonest token, at most the window (`proxy`).
//!
//! Pure: told the time. Does not own the atomics that hold a backend's window (`backend`), nor
//! when a window opens (`table`: a backend that turns ready from unready).

use std::time::Duration;

use tokio::time::Instant;

/// Tokens in a full bucket, and tokens refilled per window.
pub const BURST: u32 = 16;

/// One backend's re-entry window, as this node paces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The node's first token: `opened + phase × window`.
    pub gate: Instant,
    /// The window's end: nothing is paced from here on.
    pub end: Instant,
    /// One token per `window / BURST`.
    pub interval: Duration,
}

impl Window {
    /// The window opened at `opened`, `len` long, with this node's `phase` in [0, 1).
    pub fn new(opened: Instant, len: Duration, phase: f64) -> Window {
        Window {
            gate: opened + len.mul_f64(phase.clamp(0.0, 1.0)),
            end: opened + len,
            interval: len / BURST,
        }
    }

    /// When a new connection may go to the backend at the soonest, given the bucket's
    /// theoretical arrival time `tat` (`None`: no token taken in this window yet): `now` or
    /// earlier means at once. Never after the window's end.
    pub fn admits_at(&self, tat: Option<Instant>) -> Instant {
        let tolerance = self.interval * (BURST - 1);
        let tat = tat.map_or(self.gate, |t| t.max(self.gate));
        let next = tat.checked_sub(tolerance).unwrap_or(self.gate);
        next.max(self.gate).min(self.end)
    }

    /// Whether a new connection at `now` must wait (or go elsewhere).
    pub fn paces(&self, now: Instant, tat: Option<Instant>) -> bool {
        now < self.end && now < self.admits_at(tat)
    }

    /// The arrival time after a token taken at `now`.
    pub fn take(&self, now: Instant, tat: Option<Instant>) -> Instant {
        let tat = tat.map_or(self.gate, |t| t.max(self.gate));
        tat.max(now) + self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: Duration = Duration::from_secs(5);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Tokens taken at `now`, one after another, until the bucket paces.
    fn drain(w: &Window, now: Instant, mut tat: Option<Instant>) -> (u32, Option<Instant>) {
        let mut n = 0;
        while !w.paces(now, tat) && n < 100 {
            tat = Some(w.take(now, tat));
            n += 1;
        }
        (n, tat)
    }

    #[test]
    fn nothing_passes_before_the_nodes_gate() {
        let t0 = Instant::now();
        let w = Window::new(t0, LEN, 0.5);
        assert_eq!(w.gate, t0 + ms(2500));
        assert!(w.paces(t0, None));
        assert!(w.paces(t0 + ms(2499), None));
        assert!(!w.paces(t0 + ms(2500), None));
        assert_eq!(w.admits_at(None), t0 + ms(2500));
    }

    #[test]
    fn from_the_gate_a_burst_passes_then_one_token_per_interval() {
        let t0 = Instant::now();
        let w = Window::new(t0, LEN, 0.2);
        let (n, tat) = drain(&w, w.gate, None);
        assert_eq!(n, BURST);
        assert_eq!(w.admits_at(tat), w.gate + w.interval);
        let (n, tat) = drain(&w, w.gate + w.interval, tat);
        assert_eq!(n, 1, "one more token per interval");
        assert!(w.paces(w.gate + w.interval, tat));
    }

    #[test]
    fn the_window_end_paces_nothing_and_bounds_every_wait() {
        let t0 = Instant::now();
        let w = Window::new(t0, LEN, 0.99);
        let (_, tat) = drain(&w, w.gate, None);
        assert!(w.admits_at(tat) <= w.end);
        assert!(!w.paces(w.end, tat));
        let (n, _) = drain(&w, w.end, tat);
        assert_eq!(n, 100, "unpaced after the end");
    }

    #[test]
    fn a_bucket_left_from_an_earlier_window_starts_full_at_the_new_gate() {
        let t0 = Instant::now();
        let old = Window::new(t0, LEN, 0.0);
        let (_, tat) = drain(&old, t0, None);
        let w = Window::new(t0 + ms(20_000), LEN, 0.0);
        assert_eq!(drain(&w, w.gate, tat).0, BURST);
    }

    #[test]
    fn the_gate_spreads_over_the_window_with_the_phase() {
        let t0 = Instant::now();
        assert_eq!(Window::new(t0, LEN, 0.0).gate, t0);
        assert_eq!(Window::new(t0, LEN, 0.75).gate, t0 + ms(3750));
        assert!(Window::new(t0, LEN, 7.0).gate <= t0 + LEN, "clamped");
    }
}
