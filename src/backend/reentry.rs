//! A backend's re-entry window as this node paces it ([`crate::pacing`]), kept lock-free: opened
//! by the table writer when the backend turns ready from unready, read and drawn from by the
//! proxy on the accept path, shown by the status document, counted by the metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::pacing::Window;

/// No window opened, or no token taken.
const NONE: u64 = 0;

/// When the backend's latest window opened and the bucket's arrival time, as nanoseconds after
/// `base` (plus one, so 0 means none); the node's phase for this backend, drawn once.
#[derive(Debug)]
pub struct Reentry {
    base: Instant,
    phase: f64,
    opened: AtomicU64,
    tat: AtomicU64,
    deferred: AtomicU64,
}

/// Pins every backend's phase to one fraction in [0, 1): for labs and tests that must know
/// where the gate falls (a herd bench gives its nodes phases spread evenly).
pub const PHASE_ENV: &str = "READYPRISM_REENTRY_PHASE";

impl Default for Reentry {
    /// A phase drawn afresh (per node and backend), unless [`PHASE_ENV`] pins it.
    fn default() -> Self {
        use std::hash::BuildHasher;
        let drawn = || {
            let bits = std::collections::hash_map::RandomState::new().hash_one("reentry");
            crate::jitter::unit(crate::jitter::mix(bits))
        };
        Reentry::with_phase(pinned_phase().unwrap_or_else(drawn))
    }
}

/// [`PHASE_ENV`] as read once, if it holds a fraction in [0, 1).
fn pinned_phase() -> Option<f64> {
    static PINNED: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *PINNED.get_or_init(|| {
        std::env::var(PHASE_ENV)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|p| (0.0..1.0).contains(p))
    })
}

impl Reentry {
    /// A backend whose gate falls at `phase` (in [0, 1)) of every window.
    pub fn with_phase(phase: f64) -> Reentry {
        Reentry {
            base: Instant::now(),
            phase,
            opened: AtomicU64::new(NONE),
            tat: AtomicU64::new(NONE),
            deferred: AtomicU64::new(0),
        }
    }

    /// This node's phase for the backend: its gate falls this far into every window.
    pub fn phase(&self) -> f64 {
        self.phase
    }

    /// Opens a window at `at` (the backend turned ready then); its bucket starts full.
    pub fn open(&self, at: Instant) {
        self.tat.store(NONE, Ordering::Relaxed);
        self.opened.store(self.encode(at), Ordering::Release);
    }

    /// The latest window, `len` long, if one was opened and `now` is before its end.
    pub fn window(&self, len: Duration, now: Instant) -> Option<Window> {
        let opened = self.decode(self.opened.load(Ordering::Acquire))?;
        let w = Window::new(opened, len, self.phase);
        (now < w.end).then_some(w)
    }

    /// Whether a new connection at `now` must wait or go elsewhere (`len`: `reentry_window`).
    pub fn paces(&self, len: Duration, now: Instant) -> bool {
        self.window(len, now)
            .is_some_and(|w| w.paces(now, self.arrival()))
    }

    /// When a new connection may go to the backend, if it is paced at `now`.
    pub fn admits_at(&self, len: Duration, now: Instant) -> Option<Instant> {
        let w = self.window(len, now)?;
        w.paces(now, self.arrival())
            .then(|| w.admits_at(self.arrival()))
    }

    /// Takes a token for a connection dialed at `now`, if a window is open. A connection that
    /// lost a race for the last token still goes: the overshoot is bounded by the connections
    /// picked at one instant, and the next pick sees the bucket empty.
    pub fn take(&self, len: Duration, now: Instant) {
        let Some(w) = self.window(len, now) else {
            return;
        };
        let _ = self
            .tat
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |raw| {
                Some(self.encode(w.take(now, self.decode(raw))))
            });
    }

    /// Counts a connection sent elsewhere because the backend was paced.
    pub fn deferred_one(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections sent elsewhere because the backend was paced, ever.
    pub fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }

    fn arrival(&self) -> Option<Instant> {
        self.decode(self.tat.load(Ordering::Relaxed))
    }

    fn encode(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.base).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX - 1).saturating_add(1)
    }

    fn decode(&self, raw: u64) -> Option<Instant> {
        (raw != NONE).then(|| self.base + Duration::from_nanos(raw - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn no_window_paces_nothing() {
        let r = Reentry::with_phase(0.5);
        assert!(!r.paces(LEN, Instant::now()));
        assert_eq!(r.admits_at(LEN, Instant::now()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_opened_window_paces_until_the_gate_then_a_burst_then_per_interval() {
        let r = Reentry::with_phase(0.5);
        let t0 = Instant::now();
        r.open(t0);
        assert!(r.paces(LEN, t0));
        let gate = t0 + Duration::from_millis(2500);
        assert_eq!(r.admits_at(LEN, t0), Some(gate));
        for _ in 0..crate::pacing::BURST {
            assert!(!r.paces(LEN, gate));
            r.take(LEN, gate);
        }
        assert_eq!(
            r.admits_at(LEN, gate),
            Some(gate + LEN / crate::pacing::BURST)
        );
        assert!(!r.paces(LEN, t0 + LEN), "over at the window's end");
    }

    #[tokio::test(start_paused = true)]
    async fn opening_again_refills_the_bucket() {
        let r = Reentry::with_phase(0.0);
        let t0 = Instant::now();
        r.open(t0);
        for _ in 0..crate::pacing::BURST {
            r.take(LEN, t0);
        }
        assert!(r.paces(LEN, t0));
        let t1 = t0 + Duration::from_secs(1);
        r.open(t1);
        assert!(!r.paces(LEN, t1));
    }

    #[test]
    fn phases_are_drawn_per_backend() {
        let phases: Vec<f64> = (0..16).map(|_| Reentry::default().phase()).collect();
        assert!(phases.iter().all(|p| (0.0..1.0).contains(p)));
        assert!(phases.windows(2).any(|w| w[0] != w[1]), "{phases:?}");
    }
}
