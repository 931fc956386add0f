//! A backend's re-entry window as this node paces it ([`crate::pacing`]), kept lock-free: opened
//! by the table writer when the backend turns ready from unready (or a recovery moves
//! connections to it), read by the proxy on the accept path, shown by the status document,
//! counted by the metrics. Also each new connection's draw of its point in a window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::pacing::Window;

/// No window opened.
const NONE: u64 = 0;

/// Pins every connection's draw to one fraction in [0, 1): for labs and tests that must know
/// where in a window a connection passes.
pub const DRAW_ENV: &str = "READYPRISM_REENTRY_DRAW";

/// When the backend's latest window opened, as nanoseconds after `base` plus one (0: none), and
/// the connections sent elsewhere because of it.
#[derive(Debug)]
pub struct Reentry {
    base: Instant,
    opened: AtomicU64,
    deferred: AtomicU64,
}

impl Default for Reentry {
    fn default() -> Self {
        Reentry {
            base: Instant::now(),
            opened: AtomicU64::new(NONE),
            deferred: AtomicU64::new(0),
        }
    }
}

impl Reentry {
    /// Opens a window at `at` (the backend turned ready then, or connections move to it).
    pub fn open(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.base).as_nanos();
        let raw = u64::try_from(ns).unwrap_or(u64::MAX - 1).saturating_add(1);
        self.opened.store(raw, Ordering::Relaxed);
    }

    /// The latest window, `len` long, if one was opened and `now` is before its end.
    pub fn window(&self, len: Duration, now: Instant) -> Option<Window> {
        let raw = self.opened.load(Ordering::Relaxed);
        if raw == NONE || len.is_zero() {
            return None;
        }
        let w = Window {
            opened: self.base + Duration::from_nanos(raw - 1),
            len,
        };
        (now < w.end()).then_some(w)
    }

    /// Whether a new connection with `draw` must wait or go elsewhere at `now` (`len`:
    /// `reentry_window`).
    pub fn paces(&self, len: Duration, now: Instant, draw: f64) -> bool {
        self.window(len, now).is_some_and(|w| w.paces(now, draw))
    }

    /// When a new connection with `draw` may go to the backend, if it is paced at `now`.
    pub fn admits_at(&self, len: Duration, now: Instant, draw: f64) -> Option<Instant> {
        let w = self.window(len, now)?;
        w.paces(now, draw).then(|| w.admits_at(draw))
    }

    /// Counts a connection sent elsewhere because the backend was paced.
    pub fn deferred_one(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections sent elsewhere because the backend was paced, ever.
    pub fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }
}

/// Connection `seq`'s draw of its point in any window: spread over [0, 1) from a seed drawn per
/// process, unless [`DRAW_ENV`] pins it.
pub fn draw(seq: usize) -> f64 {
    static SEED: std::sync::OnceLock<(u64, Option<f64>)> = std::sync::OnceLock::new();
    let (seed, pinned) = *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one("reentry");
        let pinned = std::env::var(DRAW_ENV)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|p| (0.0..1.0).contains(p));
        (seed, pinned)
    });
    pinned.unwrap_or_else(|| crate::jitter::unit(crate::jitter::mix(seed ^ seq as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn no_window_paces_nothing() {
        let r = Reentry::default();
        assert!(!r.paces(LEN, Instant::now(), 0.5));
        assert_eq!(r.admits_at(LEN, Instant::now(), 0.5), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_opened_window_paces_each_draw_until_its_point() {
        let r = Reentry::default();
        let t0 = Instant::now();
        r.open(t0);
        let half = t0 + LEN / 2;
        assert_eq!(r.admits_at(LEN, t0, 0.5), Some(half));
        assert!(!r.paces(LEN, half, 0.5));
        assert!(r.paces(LEN, half, 0.9));
        assert!(!r.paces(LEN, t0 + LEN, 0.9), "over at the window's end");
        assert!(
            !r.paces(Duration::ZERO, t0, 0.9),
            "a zero window paces nothing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn opening_again_starts_a_new_window() {
        let r = Reentry::default();
        let t0 = Instant::now();
        r.open(t0);
        let t1 = t0 + Duration::from_secs(7);
        assert!(!r.paces(LEN, t1, 0.5));
        r.open(t1);
        assert!(r.paces(LEN, t1, 0.5));
    }

    #[test]
    fn draws_spread_over_the_unit_interval() {
        let draws: Vec<f64> = (0..1000).map(draw).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let low = draws.iter().filter(|&&d| d < 0.5).count();
        assert!((350..650).contains(&low), "{low} of 1000 under 0.5");
    }
}
