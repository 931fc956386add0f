//! Closing the connections relayed to one backend, and why: the publish-then-bump protocol
//! ([`Eviction`]), calling off a bump whose closes are still spread out, and the named reasons
//! ([`CloseReason`]) every such close carries into the log, the connection's record and
//! `readyprism_connections_closed_total`.
//!
//! Does not own deciding when (`table::transitions`) or closing a connection (`proxy`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

pub mod turn;

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
    /// `failback_after`: its clients come home, spread over [`FAILBACK_SPREAD`]. Called off if
    /// the zone has no ready backend left before a connection's turn comes.
    Failback,
    /// Not an eviction: TCP itself gave up on one connection's backend leg (data unacknowledged
    /// for the proxy's user timeout, a dead path). Listed here so every close the backend caused
    /// is counted in one family; no snapshot rule bumps it.
    DeadPath,
    /// Not an eviction either: TCP gave up on a backend leg whose backend stopped reading (a
    /// zero window for the user timeout). The backend is alive: not a failed check.
    StalledReader,
    /// Its only failing check is `shutdown` (a graceful apiserver shutdown, still serving): each
    /// connection is closed at a random point of `handoff_window`, so the fleet's re-dials spread
    /// over seconds. A failure of any other check before its turn closes the rest as for
    /// [`CloseReason::TurnedUnready`]; a pass, or no backend ready to go to, calls it off.
    Handoff,
}

impl CloseReason {
    /// Every reason, in a stable order (metric series are initialised from it).
    pub const ALL: [CloseReason; 9] = [
        CloseReason::TurnedUnready,
        CloseReason::LeftNoneReady,
        CloseReason::Refusing,
        CloseReason::Silent,
        CloseReason::Removed,
        CloseReason::Failback,
        CloseReason::DeadPath,
        CloseReason::StalledReader,
        CloseReason::Handoff,
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
            CloseReason::StalledReader => "stalled_reader",
            CloseReason::Handoff => "handoff",
        }
    }

    /// Over how long the closes are spread: [`FAILBACK_SPREAD`] for a failback, else
    /// [`EVICT_SPREAD`] (a hand-off's window is a setting: [`CloseReason::window`]).
    pub fn spread(self) -> Duration {
        match self {
            CloseReason::Failback => FAILBACK_SPREAD,
            _ => EVICT_SPREAD,
        }
    }

    /// [`CloseReason::spread`], with `handoff` (the `handoff_window` setting) for a hand-off.
    pub fn window(self, handoff: Duration) -> Duration {
        match self {
            CloseReason::Handoff => handoff,
            _ => self.spread(),
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
/// A bump can be **called off** ([`Eviction::call_off`]) while its closes are still spread out:
/// the connections whose turn has not come stay, and watch on from the called-off epoch. A
/// failback is called off (its home zone lost its last ready backend), and a hand-off (its
/// backend passed, or no backend is ready to go to); the word that holds the epoch holds the
/// mark too, so a call-off never lands on a later bump.
///
/// Shutdown rides on the same wake-up ([`Eviction::shut`]), so a relayed connection waits on
/// one thing: an idle connection holds one waiter, not one per reason to stop.
#[derive(Debug, Default)]
pub struct Eviction {
    /// The epoch of the latest bump (high bits), its reason's [`CloseReason::index`] and whether
    /// it was called off ([`CALLED_OFF`]) (low [`REASON_BITS`]): one word, so a reader never
    /// sees one bump's epoch with another's reason or mark.
    latest: AtomicU64,
    /// Set once the proxy cuts the connections that outlived the shutdown grace period.
    shut: AtomicBool,
    /// Wakes every watching connection on a bump or at the cut.
    wake: Notify,
}

/// Bits of [`Eviction::latest`] that hold the reason and the call-off mark; the epoch has the
/// other 56 (it only ever compares equal, and wraps after 2⁵⁶ bumps of one backend).
const REASON_BITS: u32 = 8;

/// The mark of a called-off bump: the top bit of the reason byte (the reasons take 3 bits).
const CALLED_OFF: u64 = 1 << (REASON_BITS - 1);

/// The reason's bits, without the mark.
const REASON_MASK: u64 = CALLED_OFF - 1;

impl Eviction {
    /// The current epoch: what a snapshot made now is stamped with.
    pub fn epoch(&self) -> u64 {
        self.latest.load(Ordering::Acquire) >> REASON_BITS
    }

    /// The epoch to stamp on a snapshot that evicts this backend, and to bump to once published.
    pub fn next(&self) -> u64 {
        after(self.epoch())
    }

    /// Fires every watch with `reason`: call after publishing the snapshot stamped with `epoch`.
    pub fn bump_to(&self, epoch: u64, reason: CloseReason) {
        self.latest.store(
            epoch << REASON_BITS | reason.index() as u64,
            Ordering::Release,
        );
        self.wake.notify_waiters();
    }

    /// Calls off the latest bump if it was made for `reason` and not called off yet: the
    /// connections still waiting their turn to close stay, and watch on from its epoch. Returns
    /// whether it did. A later bump is never called off by mistake: the check and the mark are
    /// one compare-and-swap of the word that holds both.
    pub fn call_off(&self, reason: CloseReason) -> bool {
        let latest = self.latest.load(Ordering::Acquire);
        let made_for = (latest & !((1 << REASON_BITS) - 1)) | reason.index() as u64;
        if latest != made_for {
            return false;
        }
        let marked = self
            .latest
            .compare_exchange(
                made_for,
                made_for | CALLED_OFF,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if marked {
            self.wake.notify_waiters();
        }
        marked
    }

    /// Completes once the bump a connection was evicted by ([`Stop::Evicted`]'s watch) is
    /// called off: the connection, waiting its turn, then stays. Never if a later bump came
    /// first: that one stands. Held only by such a connection, never by an idle one.
    pub async fn called_off(&self, bump: EvictionWatch) {
        loop {
            // Made before the check, as in `stopped`: a call-off after the check still wakes it.
            let woken = self.wake.notified();
            if self.is_called_off(bump) {
                return;
            }
            woken.await;
        }
    }

    /// Whether `bump` is the latest bump and was called off ([`Eviction::called_off`], now).
    pub fn is_called_off(&self, bump: EvictionWatch) -> bool {
        let latest = self.latest.load(Ordering::Acquire);
        latest >> REASON_BITS == bump.0 && latest & CALLED_OFF != 0
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
    /// (with why, and the watch to go on with if that bump is called off before the connection's
    /// turn), or shutdown cut it. A bump already called off when the connection looks is no
    /// reason, if it is the only one since the watch: the watch moves on to it (in place: the
    /// future keeps one copy). Every idle connection holds this future: not an `async fn`, which
    /// would keep its arguments twice.
    #[allow(clippy::manual_async_fn, reason = "an async fn's future is larger")]
    pub fn stopped(&self, mut watch: EvictionWatch) -> impl Future<Output = Stop> + '_ {
        async move {
            loop {
                // Made before the check: a bump after the check wakes it even though it was not
                // polled yet (`notify_waiters` reaches every `Notified` already made).
                let woken = self.wake.notified();
                if let Some(stop) = self.stop_now(&mut watch) {
                    return stop;
                }
                woken.await;
            }
        }
    }

    /// The check [`Eviction::stopped`] makes, once: `Some` if the connection holding `watch`
    /// must be closed now; a called-off bump that is the only one since moves `watch` on to it.
    pub fn stop_now(&self, watch: &mut EvictionWatch) -> Option<Stop> {
        if self.shut.load(Ordering::Acquire) {
            return Some(Stop::Shutdown);
        }
        let latest = self.latest.load(Ordering::Acquire);
        let epoch = latest >> REASON_BITS;
        let called_off = latest & CALLED_OFF != 0;
        if epoch == watch.0 {
            None // not evicted since the watch
        } else if called_off && epoch == after(watch.0) {
            watch.0 = epoch;
            None
        } else {
            let index = (latest & REASON_MASK) as usize;
            // Only `bump_to` writes it, from a `CloseReason`.
            let why = CloseReason::ALL
                .get(index)
                .copied()
                .unwrap_or(CloseReason::Removed);
            // Past a called-off bump, an earlier one stands (its reason is not kept: as when
            // two bumps come before the connection looks, the latest names it).
            let by = if called_off { before(epoch) } else { epoch };
            Some(Stop::Evicted(why, EvictionWatch(by)))
        }
    }
}

/// The epoch after `epoch`, within the bits an epoch has: what [`Eviction::next`] gives when
/// the current epoch is `epoch` (the table writer stamps from the snapshot it published last).
pub fn after(epoch: u64) -> u64 {
    epoch.wrapping_add(1) & (u64::MAX >> REASON_BITS)
}

/// The epoch before `epoch`, within the bits an epoch has.
fn before(epoch: u64) -> u64 {
    epoch.wrapping_sub(1) & (u64::MAX >> REASON_BITS)
}

/// One connection's claim on its backend's [`Eviction`]: the epoch it was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvictionWatch(u64);

/// Why a relayed connection must be closed by the balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Its backend was evicted: close it, spread over the reason's window, unless the bump is
    /// called off first ([`Eviction::called_off`] with the watch, which the connection then
    /// goes on with).
    Evicted(CloseReason, EvictionWatch),
    /// Shutdown's grace period is over: close it now.
    Shutdown,
}

#[cfg(test)]
mod tests;
