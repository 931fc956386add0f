//! A backend's shutdown window as its monitor learned it (`health::shutdown_window`), kept
//! lock-free: written by the monitor, read by the proxy when it hands a connection off, and by the
//! status document and the metrics. Also how often the backend closed its listener with no window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The share of the learned window a hand-off uses: its closes end with a margin before the
/// listener closes (the window is measured between probes, a probe interval apart at best).
pub const FIT: f64 = 0.7;

/// Nothing learned yet.
const UNKNOWN: u64 = u64::MAX;

/// The learned window (milliseconds) and the count of closes without one.
#[derive(Debug)]
pub struct LearnedWindow {
    millis: AtomicU64,
    no_window: AtomicU64,
}

impl Default for LearnedWindow {
    fn default() -> Self {
        LearnedWindow {
            millis: AtomicU64::new(UNKNOWN),
            no_window: AtomicU64::new(0),
        }
    }
}

impl LearnedWindow {
    /// The latest learned window, if any.
    pub fn get(&self) -> Option<Duration> {
        match self.millis.load(Ordering::Relaxed) {
            UNKNOWN => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Keeps `window` as the learned one (the latest shutdown's).
    pub fn set(&self, window: Duration) {
        let ms = u64::try_from(window.as_millis())
            .unwrap_or(UNKNOWN - 1)
            .min(UNKNOWN - 1);
        self.millis.store(ms, Ordering::Relaxed);
    }

    /// The window a hand-off to the backend spreads its closes over: the `handoff_window`
    /// setting, or [`FIT`] of the learned window when that is shorter.
    pub fn fit(&self, handoff_window: Duration) -> Duration {
        fitted(handoff_window, self.get())
    }

    /// Counts a close of the listener with no window; returns how many there were before.
    pub fn closed_without_window(&self) -> u64 {
        self.no_window.fetch_add(1, Ordering::Relaxed)
    }

    /// Closes of the listener with no window, ever.
    pub fn without_window(&self) -> u64 {
        self.no_window.load(Ordering::Relaxed)
    }
}

/// [`LearnedWindow::fit`] as a pure function of the setting and the learned window.
pub fn fitted(handoff_window: Duration, learned: Option<Duration>) -> Duration {
    learned.map_or(handoff_window, |w| handoff_window.min(w.mul_f64(FIT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_off_fits_into_the_learned_window() {
        let five = Duration::from_secs(5);
        assert_eq!(fitted(five, None), five);
        assert_eq!(fitted(five, Some(Duration::from_secs(60))), five);
        assert_eq!(
            fitted(five, Some(Duration::from_secs(5))),
            Duration::from_millis(3500)
        );
        assert_eq!(fitted(five, Some(Duration::ZERO)), Duration::ZERO);
    }

    #[test]
    fn unknown_until_set_then_the_latest() {
        let w = LearnedWindow::default();
        assert_eq!(w.get(), None);
        w.set(Duration::from_millis(9_800));
        w.set(Duration::from_millis(4_200));
        assert_eq!(w.get(), Some(Duration::from_millis(4_200)));
        assert_eq!(w.closed_without_window(), 0);
        assert_eq!(w.closed_without_window(), 1);
        assert_eq!(w.without_window(), 2);
    }
}
