//! A backend monitor's one inbox: what the proxy tells it (client dials that failed, relays TCP
//! gave up on, and, only while the monitor asks for it, dials that connected) and what the table
//! writer asks of it (a confirm probe). Lock-free: a count and the latest reason, three flags, one
//! wake-up. One verb for both senders ([`Inbox::tell`]); the monitor waits on one thing
//! ([`Inbox::wait`]). What the news means is `health::passive`'s rule and `health`'s schedule.
//!
//! Does not own when a confirm is needed (`table::escape`) nor the bound on confirm probes
//! (`health`: at most one per probe interval).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use tokio::sync::Notify;

/// What a sender tells a backend's monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum News {
    /// A client dial failed, or a relay hit a dead path, with why (`dial: connection refused`).
    DialFailed(String),
    /// A dial to the backend connected (a client's, or a probe's); heard only while the monitor
    /// is suspicious ([`Inbox::set_suspect`]).
    Connected,
    /// The table asks for a confirm probe; asks before the monitor looks are one.
    ConfirmAsked,
    /// The backend is wanted at the steady `interval` again (it may carry a connection or be
    /// picked): a remote cadence ([`Inbox::set_remote`]) ends at once. Costs one relaxed load
    /// unless the cadence was remote.
    Wanted,
}

/// One backend's inbox.
#[derive(Debug, Default)]
pub struct Inbox {
    failed: AtomicU32,
    reason: ArcSwapOption<String>,
    /// Set by the monitor while a connected dial would call off a pending fall.
    suspect: AtomicBool,
    /// A dial connected while `suspect`.
    connected: AtomicBool,
    /// A confirm probe was asked for and not yet taken.
    confirm: AtomicBool,
    /// Confirm probes made (`readyprism_confirm_probes_total`).
    confirms_made: AtomicU64,
    /// Set by the table writer while the backend may be probed at `health.remote_interval`.
    remote: AtomicBool,
    /// The remote cadence ended and the monitor has not looked yet.
    wanted: AtomicBool,
    wake: Notify,
}

impl Inbox {
    /// Tells the monitor `news`. [`News::Connected`] costs one relaxed load unless the monitor
    /// asked for it.
    pub fn tell(&self, news: News) {
        let wake = match news {
            News::DialFailed(reason) => {
                self.reason.store(Some(Arc::new(reason)));
                self.failed.fetch_add(1, Ordering::AcqRel);
                true
            }
            News::Connected => {
                self.suspect.load(Ordering::Relaxed) && !self.connected.swap(true, Ordering::AcqRel)
            }
            News::ConfirmAsked => !self.confirm.swap(true, Ordering::AcqRel),
            News::Wanted => {
                self.remote.load(Ordering::Relaxed)
                    && self.remote.swap(false, Ordering::AcqRel)
                    && !self.wanted.swap(true, Ordering::AcqRel)
            }
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// The monitor's side: whether a dial that connects should be told from now on.
    pub fn set_suspect(&self, suspect: bool) {
        self.suspect.store(suspect, Ordering::Relaxed);
        if !suspect {
            self.connected.store(false, Ordering::Release);
        }
    }

    /// The writer's side: whether the backend may be probed at the remote cadence from now on.
    /// Ending it wakes the monitor ([`News::Wanted`]).
    pub fn set_remote(&self, remote: bool) {
        if remote {
            self.remote.store(true, Ordering::Release);
        } else {
            self.tell(News::Wanted);
        }
    }

    /// Whether the backend may be probed at the remote cadence now.
    pub fn is_remote(&self) -> bool {
        self.remote.load(Ordering::Acquire)
    }

    /// Waits until the inbox holds a failure or a connected dial not yet taken, or (`between`
    /// probes) a confirm ask or the end of a remote cadence.
    pub async fn wait(&self, between: bool) {
        loop {
            let woken = self.wake.notified();
            if self.failed.load(Ordering::Acquire) > 0
                || self.connected.load(Ordering::Acquire)
                || (between
                    && (self.confirm.load(Ordering::Acquire)
                        || self.wanted.load(Ordering::Acquire)))
            {
                return;
            }
            woken.await;
        }
    }

    /// Whether a dial connected (while suspect) since the last call.
    pub fn take_connected(&self) -> bool {
        self.connected.swap(false, Ordering::AcqRel)
    }

    /// The failures told since the last call and the latest reason; `None` if there were none.
    pub fn take_failed(&self) -> Option<(u32, Arc<str>)> {
        let n = self.failed.swap(0, Ordering::AcqRel);
        let reason = self.reason.load_full()?;
        (n > 0).then(|| (n, reason.as_str().into()))
    }

    /// Whether a confirm probe was asked for since the last call.
    pub fn take_confirm(&self) -> bool {
        self.confirm.swap(false, Ordering::AcqRel)
    }

    /// Whether the remote cadence ended since the last call.
    pub fn take_wanted(&self) -> bool {
        self.wanted.swap(false, Ordering::AcqRel)
    }

    /// Counts a confirm probe made.
    pub fn confirm_made(&self) {
        self.confirms_made.fetch_add(1, Ordering::Relaxed);
    }

    /// Confirm probes made.
    pub fn confirms_made(&self) -> u64 {
        self.confirms_made.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Two dial failures told before anyone waits, the later one a timeout.
    fn failed_twice(inbox: &Inbox) {
        inbox.tell(News::DialFailed("dial: connection refused".into()));
        inbox.tell(News::DialFailed("dial: timeout after 1s".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn news_told_before_the_wait_still_wakes_the_monitor() {
        let inbox = Inbox::default();
        failed_twice(&inbox);
        // Paused time: a wait that would never end reaches the deadline at once, and fails.
        tokio::time::timeout(Duration::from_secs(60), inbox.wait(false))
            .await
            .expect("the news told before the wait was lost: it never ended");
        assert_eq!(
            inbox.take_failed(),
            Some((2, "dial: timeout after 1s".into()))
        );
    }

    #[test]
    fn failures_drain_as_a_count_with_the_latest_reason() {
        let inbox = Inbox::default();
        assert!(inbox.take_failed().is_none());
        failed_twice(&inbox);
        assert_eq!(
            inbox.take_failed(),
            Some((2, "dial: timeout after 1s".into()))
        );
        assert!(inbox.take_failed().is_none(), "drained");
    }

    #[tokio::test(start_paused = true)]
    async fn the_monitor_wakes_for_what_it_heeds_only() {
        let inbox = Inbox::default();
        inbox.tell(News::Connected);
        inbox.tell(News::ConfirmAsked);
        let waiting = tokio::time::timeout(Duration::from_secs(1), inbox.wait(false));
        assert!(
            waiting.await.is_err(),
            "a connected dial unasked, a confirm unheeded"
        );
        tokio::time::timeout(Duration::from_secs(1), inbox.wait(true))
            .await
            .expect("a confirm heeded");
        assert!(inbox.take_confirm() && !inbox.take_confirm(), "taken once");
        inbox.set_suspect(true);
        inbox.tell(News::Connected);
        inbox.tell(News::DialFailed("dial: connection refused".into()));
        inbox.tell(News::DialFailed("dial: timeout after 1s".into()));
        tokio::time::timeout(Duration::from_secs(1), inbox.wait(false))
            .await
            .expect("failures heeded");
        assert!(inbox.take_connected());
        let (n, reason) = inbox.take_failed().expect("two");
        assert_eq!((n, &*reason), (2, "dial: timeout after 1s"));
        assert_eq!(inbox.take_failed(), None);
    }
}
