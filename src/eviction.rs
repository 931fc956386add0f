//! Closing the connections relayed to one backend, and why: the publish-then-bump protocol
//! ([`Eviction`]) and the named reasons ([`CloseReason`]) every such close carries into the log,
//! the connection's record and `readyprism_connections_closed_total`.
//!
//! Does not own deciding when (`table::transitions`) or closing a connection (`proxy`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Connections of a backend that went bad are closed spread over this window, so thousands of
/// watch clients do not re-dial the next apiserver in the same millisecond; well inside the 1 s
/// promise.
pub const EVICT_SPREAD: Duration = Duration::from_millis(500);

/// Failback closes are spread over this window: nothing is urgent (the far backend is fine), so
/// the kubelets of a whole site come home gently.
pub const FAILBACK_SPREAD: Duration = Duration::from_secs(10);

/// Why a backend's connections were closed. One per rule of `table::transitions`, plus removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// It turned unready while another backend is ready.
    TurnedUnready,
    /// It is unready and a backend became ready after a spell with none: connections that failed
    /// open to it go home.
    LeftNoneReady,
    /// It is unready and the policy is `refuse` (or just switched to it): nothing fails open.
    Refusing,
    /// Failing open, it stopped answering (timeouts, refused, TLS) while another answers HTTP.
    Silent,
    /// It was removed from the config.
    Removed,
    /// It is in another zone, and a backend in this node's zone has been ready for
    /// `failback_after`: its clients come home, spread over [`FAILBACK_SPREAD`].
    Failback,
    /// Not an eviction: TCP itself gave up on one connection's backend leg (data unacknowledged
    /// for the proxy's user timeout, a dead path). Listed here so every close the backend caused
    /// is counted in one family; no snapshot rule bumps it.
    DeadPath,
}

impl CloseReason {
    /// Every reason, in a stable order (metric series are initialised from it).
    pub const ALL: [CloseReason; 7] = [
        CloseReason::TurnedUnready,
        CloseReason::LeftNoneReady,
        CloseReason::Refusing,
        CloseReason::Silent,
        CloseReason::Removed,
        CloseReason::Failback,
        CloseReason::DeadPath,
    ];

    /// The name used in logs, connection records and the `reason` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::TurnedUnready => "turned_unready",
            CloseReason::LeftNoneReady => "left_none_ready",
            CloseReason::Refusing => "refusing",
            CloseReason::Silent => "silent",
            CloseReason::Removed => "removed",
            CloseReason::Failback => "failback",
            CloseReason::DeadPath => "dead_path",
        }
    }

    /// Over how long the closes are spread: [`FAILBACK_SPREAD`] for a failback, else
    /// [`EVICT_SPREAD`].
    pub fn spread(self) -> Duration {
        match self {
            CloseReason::Failback => FAILBACK_SPREAD,
            _ => EVICT_SPREAD,
        }
    }

    /// Index into [`CloseReason::ALL`] (declaration order).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Closes the connections relayed to one backend, without a race against the snapshot a
/// connection was picked from; and at shutdown, once the grace period is over, closes them all.
///
/// The protocol, in one place: **publish, then bump.** The table writer stamps the snapshot that
/// stops offering the backend with [`Eviction::next`], publishes it, and only then calls
/// [`Eviction::bump_to`]. A connection calls [`Eviction::watch_from`] with the epoch of the
/// snapshot it picked from, before dialing: `None` means the backend was evicted since (or the
/// snapshot already knew it would be), so it skips the backend and, having lost candidates, plans
/// again on the newer snapshot; `Some` fires on the next bump. No eviction can slip between
/// reading a snapshot and watching.
///
/// Shutdown rides on the same wake-up ([`Eviction::shut`]), so a relayed connection waits on
/// one thing: an idle connection holds one waiter, not one per reason to stop.
#[derive(Debug, Default)]
pub struct Eviction {
    /// The epoch of the latest bump (high bits) and its reason's [`CloseReason::index`] (low
    /// [`REASON_BITS`]): one word, so a reader never sees one bump's epoch with another's reason.
    latest: AtomicU64,
    /// Set once the proxy cuts the connections that outlived the shutdown grace period.
    shut: AtomicBool,
    /// Wakes every watching connection on a bump or at the cut.
    wake: Notify,
}

/// Bits of [`Eviction::latest`] that hold the reason; the epoch has the other 56 (it only ever
/// compares equal, and wraps after 2⁵⁶ bumps of one backend).
const REASON_BITS: u32 = 8;

impl Eviction {
    /// The current epoch: what a snapshot made now is stamped with.
    pub fn epoch(&self) -> u64 {
        self.latest.load(Ordering::Acquire) >> REASON_BITS
    }

    /// The epoch to stamp on a snapshot that evicts this backend, and to bump to once published.
    pub fn next(&self) -> u64 {
        self.epoch().wrapping_add(1) & (u64::MAX >> REASON_BITS)
    }

    /// Fires every watch with `reason`: call after publishing the snapshot stamped with `epoch`.
    pub fn bump_to(&self, epoch: u64, reason: CloseReason) {
        self.latest.store(
            epoch << REASON_BITS | reason.index() as u64,
            Ordering::Release,
        );
        self.wake.notify_waiters();
    }

    /// Closes every connection of a backend no snapshot offers any more (removed by a reload).
    pub fn evict_now(&self) {
        self.bump_to(self.next(), CloseReason::Removed);
    }

    /// Closes every connection watching this backend at once, for shutdown: the drain's grace
    /// period is over. The epoch is left alone (no snapshot is involved), so a dial that
    /// connects now is not taken for evicted; its relay stops at once.
    pub fn shut(&self) {
        self.shut.store(true, Ordering::Release);
        self.wake.notify_waiters();
    }

    /// A watch for a connection picked from a snapshot stamped `epoch`; `None` if already evicted.
    pub fn watch_from(&self, epoch: u64) -> Option<EvictionWatch> {
        (self.epoch() == epoch).then_some(EvictionWatch(epoch))
    }

    /// True once the backend was evicted after `watch` was made (shutdown aside).
    pub fn fired(&self, watch: EvictionWatch) -> bool {
        self.epoch() != watch.0
    }

    /// Completes when the connection holding `watch` must be closed: the backend was evicted
    /// (with why), or shutdown cut it. Every idle connection holds this future: not an `async
    /// fn`, which would keep its arguments twice.
    #[allow(clippy::manual_async_fn, reason = "an async fn's future is larger")]
    pub fn stopped(&self, watch: EvictionWatch) -> impl Future<Output = Stop> + '_ {
        async move {
            loop {
                // Made before the check: a bump after the check wakes it even though it was not
                // polled yet (`notify_waiters` reaches every `Notified` already made).
                let woken = self.wake.notified();
                if self.shut.load(Ordering::Acquire) {
                    return Stop::Shutdown;
                }
                let latest = self.latest.load(Ordering::Acquire);
                if latest >> REASON_BITS != watch.0 {
                    let index = (latest & ((1 << REASON_BITS) - 1)) as usize;
                    // Only `bump_to` writes it, from a `CloseReason`.
                    let why = CloseReason::ALL
                        .get(index)
                        .copied()
                        .unwrap_or(CloseReason::Removed);
                    return Stop::Evicted(why);
                }
                woken.await;
            }
        }
    }
}

/// One connection's claim on its backend's [`Eviction`]: the epoch it was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvictionWatch(u64);

/// Why a relayed connection must be closed by the balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Its backend was evicted: close it, spread over the reason's window.
    Evicted(CloseReason),
    /// Shutdown's grace period is over: close it now.
    Shutdown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_once_at_its_index_with_its_own_name() {
        for (i, r) in CloseReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{r:?}");
        }
        let mut names: Vec<_> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), CloseReason::ALL.len());
    }

    #[tokio::test]
    async fn a_watch_made_from_the_current_epoch_fires_on_the_next_bump_with_its_reason() {
        let e = Eviction::default();
        let w = e.watch_from(e.epoch()).expect("not evicted");
        assert!(!e.fired(w));
        e.bump_to(e.next(), CloseReason::Silent);
        assert!(e.fired(w));
        assert_eq!(e.stopped(w).await, Stop::Evicted(CloseReason::Silent));
    }

    #[test]
    fn publish_then_bump_leaves_no_window() {
        let e = Eviction::default();
        let old_snapshot_epoch = e.epoch();
        let new_snapshot_epoch = e.next(); // stamped on the snapshot that stops offering it
                                           // Published, not yet bumped: neither reader may connect.
        assert!(e.watch_from(new_snapshot_epoch).is_none());
        let early = e.watch_from(old_snapshot_epoch).expect("bump not sent yet");
        e.bump_to(new_snapshot_epoch, CloseReason::TurnedUnready);
        assert!(e.fired(early), "a watch made before the bump fires");
        assert!(
            e.watch_from(old_snapshot_epoch).is_none(),
            "a reader of the old snapshot after the bump skips the backend"
        );
    }

    #[tokio::test]
    async fn evict_now_fires_says_removed_and_stales_every_earlier_epoch() {
        let e = Eviction::default();
        let before = e.epoch();
        let w = e.watch_from(before).expect("fresh");
        e.evict_now();
        assert!(e.fired(w));
        assert_eq!(
            e.stopped(w).await,
            Stop::Evicted(CloseReason::Removed),
            "the watch says why"
        );
        assert!(e.watch_from(before).is_none());
    }

    #[tokio::test]
    async fn a_waiting_connection_wakes_on_a_bump_or_the_shutdown_cut() {
        let e = std::sync::Arc::new(Eviction::default());
        let waiting = |e: &std::sync::Arc<Eviction>| {
            let (e, w) = (e.clone(), e.watch_from(e.epoch()).expect("fresh"));
            tokio::spawn(async move { e.stopped(w).await })
        };
        let evicted = waiting(&e);
        tokio::task::yield_now().await; // let it start waiting (it must wake either way)
        e.bump_to(e.next(), CloseReason::Failback);
        assert_eq!(
            evicted.await.expect("waiter"),
            Stop::Evicted(CloseReason::Failback)
        );
        let cut = waiting(&e);
        tokio::task::yield_now().await;
        e.shut();
        assert_eq!(cut.await.expect("waiter"), Stop::Shutdown);
    }

    #[test]
    fn the_cut_stops_watches_without_evicting_so_a_dial_that_connects_now_still_counts() {
        let e = Eviction::default();
        let w = e.watch_from(e.epoch()).expect("fresh");
        e.shut();
        assert!(!e.fired(w), "not an eviction: the dial is not skipped");
        assert!(e.watch_from(e.epoch()).is_some());
    }

    #[test]
    fn the_epoch_and_reason_share_one_word_and_the_epoch_wraps_within_it() {
        let e = Eviction::default();
        let last = u64::MAX >> REASON_BITS;
        e.bump_to(last, CloseReason::DeadPath);
        assert_eq!(e.epoch(), last);
        assert_eq!(e.next(), 0);
        e.evict_now();
        assert_eq!(e.epoch(), 0);
    }
}
