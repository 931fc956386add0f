//! What a backend's monitor counts — its probes by result, its state changes, the `/readyz`
//! latency histogram, and when (wall clock, for `/status` and the status file) the state began
//! and the last check ended — as plain atomics beside the backend's other live state. `metrics` reads
//! them at scrape time, so a removed backend's series go with it.
//!
//! Does not own when they move (`health`) nor how they are exported (`metrics`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::verdict::{FailClass, State};

/// Upper bounds of the latency histogram, in seconds: 1 ms doubling to ~16 s (a LAN answer to
/// the slowest timeout we accept); one more bucket above them counts the rest (`+Inf`).
pub const LATENCY_BOUNDS: [f64; 15] = {
    let mut b = [0.001; 15];
    let mut i = 1;
    while i < b.len() {
        b[i] = b[i - 1] * 2.0;
        i += 1;
    }
    b
};

/// One backend's probe counts.
#[derive(Debug, Default)]
pub struct ProbeCounts {
    /// Probes that passed.
    pub passed: AtomicU64,
    /// Probes that failed, one count per [`FailClass`] (in [`FailClass::ALL`]'s order).
    pub failed: [AtomicU64; FailClass::ALL.len()],
    /// State changes to ready.
    pub to_ready: AtomicU64,
    /// State changes to unready.
    pub to_unready: AtomicU64,
    /// `/readyz` request→response times.
    pub latency: Latencies,
    /// When the backend entered its current state, in milliseconds since the Unix epoch; 0 until
    /// its monitor started (then: when it started, for a backend still unknown).
    pub since_ms: AtomicU64,
    /// When the latest probe ended, in milliseconds since the Unix epoch; 0 before any.
    pub checked_ms: AtomicU64,
    /// Probes failed in a row, up to the latest; 0 after a pass.
    pub consecutive_failures: AtomicU64,
}

impl ProbeCounts {
    /// Counts a change to `to` (a change to unknown does not happen and is not counted).
    pub fn changed_to(&self, to: State) {
        let n = match to {
            State::Ready => &self.to_ready,
            State::Unready => &self.to_unready,
            State::Unknown => return,
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one check: passed (`None`) or failed with its class.
    pub fn checked(&self, failed: Option<FailClass>) {
        let n = match failed {
            None => &self.passed,
            Some(class) => &self.failed[class.index()],
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// A probe ended at `at` (wall clock): its time, and the run of failures it extends or ends.
    pub fn probed(&self, passed: bool, at: SystemTime) {
        self.checked_ms.store(unix_ms(at), Ordering::Relaxed);
        if passed {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        } else {
            self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The backend entered its state at `at` (wall clock); `first` only if no time is set yet.
    pub fn entered(&self, at: SystemTime, first: bool) {
        let ms = unix_ms(at);
        if first {
            let _ = self
                .since_ms
                .compare_exchange(0, ms, Ordering::Relaxed, Ordering::Relaxed); // set already: kept
        } else {
            self.since_ms.store(ms, Ordering::Relaxed);
        }
    }
}

/// Milliseconds since the Unix epoch (0 for a clock set before it).
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A latency histogram over [`LATENCY_BOUNDS`]: a count per bucket and the sum, each an atomic.
#[derive(Debug, Default)]
pub struct Latencies {
    /// Observations per bucket (not cumulative); the last is above every bound.
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    /// Sum of every observation, in nanoseconds (584 years before it wraps).
    sum_ns: AtomicU64,
}

/// What [`Latencies::read`] returns: the sum in seconds, the count, and each bucket's upper
/// bound (the last is `f64::MAX`, exported as `+Inf`) with its own (not cumulative) count.
pub type HistogramRead = (f64, u64, Vec<(f64, u64)>);

impl Latencies {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BOUNDS
            .iter()
            .position(|&bound| secs <= bound)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The histogram now.
    pub fn read(&self) -> HistogramRead {
        let bounds = LATENCY_BOUNDS.iter().copied().chain([f64::MAX]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.buckets)
            .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed)).as_secs_f64();
        (sum, count, buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_that_holds_it() {
        let l = Latencies::default();
        l.observe(Duration::from_micros(500)); // ≤ 1 ms
        l.observe(Duration::from_millis(1)); // a bound is its own bucket's
        l.observe(Duration::from_millis(3)); // ≤ 4 ms
        l.observe(Duration::from_secs(60)); // above every bound
        let (sum, count, buckets) = l.read();
        assert_eq!(count, 4);
        assert!((sum - 60.0045).abs() < 1e-9, "{sum}");
        let counts: Vec<u64> = buckets.iter().map(|(_, n)| *n).collect();
        assert_eq!(&counts[..4], &[2, 0, 1, 0]);
        assert_eq!(buckets.last(), Some(&(f64::MAX, 1)));
        assert!((LATENCY_BOUNDS[14] - 16.384).abs() < 1e-9);
    }

    #[test]
    fn changes_are_counted_by_their_new_state() {
        let c = ProbeCounts::default();
        c.changed_to(State::Ready);
        c.changed_to(State::Unready);
        c.changed_to(State::Unready);
        c.changed_to(State::Unknown);
        assert_eq!(c.to_ready.load(Ordering::Relaxed), 1);
        assert_eq!(c.to_unready.load(Ordering::Relaxed), 2);
    }
}
