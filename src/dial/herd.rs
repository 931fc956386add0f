//! A herd of dials to one backend shares its evidence: when many dials wait on the same
//! unanswered backend at once (a site's kubelets re-dialing after a failover, into an apiserver
//! whose accept queue is full or whose SYNs are dropped), a dial's re-attempts add SYNs and no
//! knowledge. Re-attempts exist for a lost SYN or SYN-ACK on a path that works; a herd none of
//! whose attempts has connected since it began waiting is not that case, so its dials keep their
//! first attempt and skip their re-attempts: the backend gets about one SYN per dial, not three.
//! Only a connect after the dial started counts: one from before the queue filled proves nothing.
//!
//! Lock-free: two atomics per backend, touched once when a dial starts and ends, when an
//! attempt connects and when a re-attempt is due. Does not own the race (`dial`) or the plan
//! (`schedule`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// A re-attempt is skipped only when at least this many dials of the backend (its own included)
/// are waiting on unanswered attempts: a client dial meeting a probe's, or two clients', keep
/// their re-attempts (on a lossy link each may have lost its own SYN), a herd does not.
pub const HERD: u32 = 3;

/// One backend's dials in flight and its latest connect.
#[derive(Debug)]
pub struct Herd {
    /// Dials waiting on an attempt now.
    waiting: AtomicU32,
    /// Milliseconds from `base` to the latest attempt that connected, plus 1 (0: none yet).
    connected: AtomicU64,
    base: Instant,
}

impl Default for Herd {
    fn default() -> Self {
        Herd {
            waiting: AtomicU32::new(0),
            connected: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

/// A dial counted as waiting for as long as it lives.
#[derive(Debug)]
pub struct Waiting<'a>(&'a Herd);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Herd {
    /// Counts a dial as waiting until the guard is dropped.
    pub fn wait(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(self)
    }

    /// An attempt connected at `now`.
    pub fn connected(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.base).as_millis();
        let stamp = u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1;
        self.connected.fetch_max(stamp, Ordering::Relaxed);
    }

    /// Whether a re-attempt of a dial that began waiting at `since` is skipped: [`HERD`] or more
    /// dials wait and none of the backend's attempts has connected since (an attempt that
    /// connected then shows the path works: the dial's own SYN was likely lost, and it re-attempts).
    pub fn skips_reattempt(&self, since: Instant) -> bool {
        if self.waiting.load(Ordering::Relaxed) < HERD {
            return false;
        }
        let stamp = self.connected.load(Ordering::Relaxed);
        let Some(ms) = stamp.checked_sub(1) else {
            return true;
        };
        self.base + Duration::from_millis(ms) < since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_herd_skips_re_attempts_unless_an_attempt_connected_since_the_dial_began() {
        let herd = Herd::default();
        let ms = Duration::from_millis;
        tokio::time::advance(ms(10)).await;
        herd.connected(Instant::now()); // before the queue filled
        tokio::time::advance(ms(10)).await;
        let began = Instant::now();
        let two = (herd.wait(), herd.wait());
        assert!(!herd.skips_reattempt(began), "two dials are no herd");
        let third = herd.wait();
        assert!(
            herd.skips_reattempt(began),
            "three; the connect before they began proves nothing"
        );
        tokio::time::advance(ms(150)).await;
        herd.connected(Instant::now());
        assert!(
            !herd.skips_reattempt(began),
            "an attempt connected since: the path works"
        );
        let later = Instant::now() + ms(10);
        assert!(
            herd.skips_reattempt(later),
            "not for a dial that began after it"
        );
        drop(third);
        assert!(!herd.skips_reattempt(later), "a dial ended: two are left");
        drop(two);
        assert_eq!(herd.waiting.load(Ordering::Relaxed), 0);
    }
}
