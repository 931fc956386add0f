//! Closing the connections relayed to one backend, and why: the publish-then-bump protocol
//! ([`Eviction`]) and the named reasons ([`CloseReason`]) every such close carries into the log,
//! the connection's record and `readyprism_unready_closes_total`.
//!
//! Does not own deciding when (`table::transitions`) or closing a connection (`proxy`).

use std::time::Duration;

use tokio::sync::watch;

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
/// connection was picked from.
///
/// The protocol, in one place: **publish, then bump.** The table writer stamps the snapshot that
/// stops offering the backend with [`Eviction::next`], publishes it, and only then calls
/// [`Eviction::bump_to`]. A connection calls [`Eviction::watch_from`] with the epoch of the
/// snapshot it picked from, before dialing: `None` means the backend was evicted since (or the
/// snapshot already knew it would be), so it skips the backend and, having lost candidates, plans
/// again on the newer snapshot; `Some` fires on the next bump. No eviction can slip between
/// reading a snapshot and watching.
/// The channel carries the epoch and the reason of the latest bump.
#[derive(Debug)]
pub struct Eviction(watch::Sender<(u64, CloseReason)>);

impl Default for Eviction {
    fn default() -> Self {
        Eviction(watch::Sender::new((0, CloseReason::TurnedUnready)))
    }
}

impl Eviction {
    /// The current epoch: what a snapshot made now is stamped with.
    pub fn epoch(&self) -> u64 {
        self.0.borrow().0
    }

    /// The epoch to stamp on a snapshot that evicts this backend, and to bump to once published.
    pub fn next(&self) -> u64 {
        self.epoch().wrapping_add(1)
    }

    /// Fires every watch with `reason`: call after publishing the snapshot stamped with `epoch`.
    pub fn bump_to(&self, epoch: u64, reason: CloseReason) {
        self.0.send_replace((epoch, reason));
    }

    /// Closes every connection of a backend no snapshot offers any more (removed by a reload).
    pub fn evict_now(&self) {
        self.0
            .send_modify(|(n, why)| (*n, *why) = (n.wrapping_add(1), CloseReason::Removed));
    }

    /// A watch for a connection picked from a snapshot stamped `epoch`; `None` if already evicted.
    pub fn watch_from(&self, epoch: u64) -> Option<EvictionWatch> {
        let mut rx = self.0.subscribe();
        let current = rx.borrow_and_update().0;
        (current == epoch).then_some(EvictionWatch(rx))
    }
}

/// One connection's view of its backend's [`Eviction`].
#[derive(Debug)]
pub struct EvictionWatch(watch::Receiver<(u64, CloseReason)>);

impl EvictionWatch {
    /// True once the backend was evicted after the watch was made.
    pub fn fired(&self) -> bool {
        self.0.has_changed().unwrap_or(true)
    }

    /// Completes when the backend is evicted, with why.
    pub async fn wait(&mut self) -> CloseReason {
        // A closed channel cannot happen while the backend lives; treat it as a removal.
        match self.0.changed().await {
            Ok(()) => self.0.borrow_and_update().1,
            Err(_) => CloseReason::Removed,
        }
    }
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
        let mut w = e.watch_from(e.epoch()).expect("not evicted");
        assert!(!w.fired());
        e.bump_to(e.next(), CloseReason::Silent);
        assert!(w.fired());
        assert_eq!(w.wait().await, CloseReason::Silent);
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
        assert!(early.fired(), "a watch made before the bump fires");
        assert!(
            e.watch_from(old_snapshot_epoch).is_none(),
            "a reader of the old snapshot after the bump skips the backend"
        );
    }

    #[tokio::test]
    async fn evict_now_fires_says_removed_and_stales_every_earlier_epoch() {
        let e = Eviction::default();
        let before = e.epoch();
        let mut w = e.watch_from(before).expect("fresh");
        e.evict_now();
        assert!(w.fired());
        assert_eq!(w.wait().await, CloseReason::Removed, "the watch says why");
        assert!(e.watch_from(before).is_none());
    }
}
