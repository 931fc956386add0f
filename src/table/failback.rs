//! When connections on other zones go home: once a backend in this node's zone has been ready
//! (and not degraded: `crate::overload`) for `failback_after`, the connections relayed to backends
//! outside the zone are closed, so their clients (kubelet's long-lived connection above all) re-dial into the zone instead of crossing
//! the WAN until something breaks them. Latency alone never moves a connection. A failback
//! whose closes are still spread out is called off once the zone has no ready backend left (the
//! connections not yet closed would only re-dial away again), and on each backend it closes that
//! is home now (this node's zone changed, its addresses renumbered): only those it is closing, and
//! only while their closes are still spread out.
//!
//! Owns the clocks and the decisions (pure: the caller passes `now`). Does not own closing or
//! calling off (the table writer stamps, publishes and bumps, as for any eviction, and calls the
//! bump off through `eviction`).

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::eviction::CloseReason;
use crate::verdict::State;

/// The ready clocks of this node's zone's backends, and the failback under way.
#[derive(Debug, Default)]
pub struct Failback {
    /// Same-zone backends ready now: since when, and whether their failback has been done.
    ready: Vec<Clock>,
    /// The latest failback while its closes may still be spread out (for the failback spread
    /// after it began); cleared once that is over or every backend it closes is called off.
    under_way: Option<UnderWay>,
}

/// A failback whose closes may still be spread out.
#[derive(Debug)]
struct UnderWay {
    began: Instant,
    /// The backends it closes (set by [`Failback::closing`]) and not called off yet.
    away: Vec<BackendId>,
}

#[derive(Debug, Clone, PartialEq)]
struct Clock {
    id: BackendId,
    since: Instant,
    done: bool,
}

impl Failback {
    /// Folds in a snapshot seen at `now`: a same-zone backend that turned ready starts its clock,
    /// one that is not ready drops out (so a backend that flaps starts again from zero).
    pub fn observe(&mut self, snap: &Snapshot, now: Instant) {
        let zone = snap.routing.zone_name();
        let ready_here: Vec<&BackendId> = snap
            .backends
            .iter()
            .filter(|b| zone.is_some() && b.spec.zone.as_deref() == zone)
            .filter(|b| b.health.state == State::Ready)
            // Moving connections onto an overloaded apiserver does not help: its clock starts
            // once its request check finds it healthy.
            .filter(|b| b.degraded.is_none())
            .map(|b| &b.spec.id)
            .collect();
        self.ready.retain(|c| ready_here.contains(&&c.id));
        for id in ready_here {
            if !self.ready.iter().any(|c| c.id == *id) {
                self.ready.push(Clock {
                    id: id.clone(),
                    since: now,
                    done: false,
                });
            }
        }
    }

    /// When the next failback is due, with `after` as `failback_after` (`None`: never).
    pub fn next_due(&self, after: Option<Duration>) -> Option<Instant> {
        let after = after?;
        self.ready
            .iter()
            .filter(|c| !c.done)
            .map(|c| c.since + after)
            .min()
    }

    /// Whether a failback is due at `now`; a due one is then done (each same-zone backend's
    /// ready spell brings connections home once) and under way from `now`, closing the backends
    /// the caller then names ([`Failback::closing`]).
    pub fn take_due(&mut self, after: Option<Duration>, now: Instant) -> bool {
        let Some(after) = after else {
            return false;
        };
        let mut due = false;
        for c in self.ready.iter_mut().filter(|c| !c.done) {
            if now >= c.since + after {
                c.done = true;
                due = true;
            }
        }
        if due {
            self.under_way = Some(UnderWay {
                began: now,
                away: Vec::new(),
            });
        }
        due
    }

    /// The failback just taken ([`Failback::take_due`]) closes the connections of `away`.
    pub fn closing(&mut self, away: Vec<BackendId>) {
        if let Some(way) = &mut self.under_way {
            way.away = away;
        }
    }

    /// The backends whose failback must be called off at `now` (after [`Failback::observe`]
    /// with `snap`): its closes are still spread out, and no backend in this node's zone is
    /// ready any more (all of them), or the backend is no longer away (this node's zone changed
    /// to its own, or has none). The connections not yet closed stay where they are. Once each.
    pub fn take_call_off(&mut self, snap: &Snapshot, now: Instant) -> Vec<BackendId> {
        let Some(way) = &mut self.under_way else {
            return Vec::new();
        };
        if now >= way.began + CloseReason::Failback.spread() {
            self.under_way = None; // every turn has come: nothing left to call off
            return Vec::new();
        }
        let zone = snap.routing.zone_name();
        let away = |id: &BackendId| {
            snap.position(id)
                .is_some_and(|i| zone.is_some() && snap.backends[i].spec.zone.as_deref() != zone)
        };
        let home_ready = !self.ready.is_empty();
        let (off, on): (Vec<BackendId>, Vec<BackendId>) = std::mem::take(&mut way.away)
            .into_iter()
            .filter(|id| snap.position(id).is_some()) // removed: closed anyway
            .partition(|id| !home_ready || !away(id));
        way.away = on;
        if way.away.is_empty() {
            self.under_way = None;
        }
        off
    }
}

/// The backends whose connections a failback closes: outside this node's zone (or without one)
/// and relaying something now. Empty when the node has no zone.
pub fn away(snap: &Snapshot) -> Vec<usize> {
    let Some(zone) = snap.routing.zone_name() else {
        return Vec::new();
    };
    snap.backends
        .iter()
        .enumerate()
        .filter(|(_, b)| b.spec.zone.as_deref() != Some(zone))
        .filter(|(_, b)| b.live.active.load(std::sync::atomic::Ordering::Relaxed) > 0)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests;
