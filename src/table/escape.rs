//! Confirming the escape route before moving a backend's connections: a backend that turned
//! unready keeps them until the backend they would go to (the picker's first choice now) has
//! passed a probe that started after the fall. Until then that backend is asked for one confirm
//! probe; a failed confirm closes nothing. During a cluster-wide blink every backend fails its
//! checks together, and closing would only move clients onto the next failing apiserver.
//!
//! Owns the latest pass of every backend, the backends waiting for a confirm, and the decision
//! ([`judge`], pure; the caller passes instants). Does not own asking the monitor or closing
//! (the table writer does both).

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::pick::{pick, Pick};
use crate::verdict::State;

/// What to do about one waiting backend's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The route is confirmed: close them (turned_unready).
    Close,
    /// Ask the route's backend for a confirm probe (not asked yet for this fall).
    Ask,
    /// A confirm was asked; wait for its result (a failed one closes nothing).
    Wait,
}

/// The decision for a backend that fell at `fell`, relaying something now (`busy`) or not, whose
/// connections would go to a backend whose latest pass started at `passed` (`None`: none known),
/// already `asked` for a confirm or not. With nothing to move, nothing is confirmed: the eviction
/// only stops dials picked from an older snapshot, which then re-plan as new connections do.
pub fn judge(fell: Instant, busy: bool, passed: Option<Instant>, asked: bool) -> Verdict {
    if !busy || passed.is_some_and(|p| p > fell) {
        Verdict::Close
    } else if asked {
        Verdict::Wait
    } else {
        Verdict::Ask
    }
}

/// The picker's first choice in `snap` now (a ready backend, so never an unready one): where a
/// closed connection would re-dial. `None` when nothing is ready.
pub fn route(snap: &Snapshot) -> Option<usize> {
    match pick(&snap.candidates(), snap.routing.when_none_ready, 0) {
        Pick::Ready(order) => order.first().copied(),
        Pick::NoneReady(_) | Pick::Refuse => None,
    }
}

/// The backends waiting for their escape route, and every backend's latest pass.
#[derive(Debug, Default)]
pub struct Escapes {
    /// When each backend's latest passing probe started.
    passes: Vec<(BackendId, Instant)>,
    waiting: Vec<Waiting>,
}

#[derive(Debug, Clone)]
struct Waiting {
    id: BackendId,
    fell: Instant,
    /// The route backends asked for a confirm during this fall.
    asked: Vec<BackendId>,
}

/// What [`Escapes::review`] found: backends to close, backends to ask for a confirm probe
/// (indices into the snapshot reviewed).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Review {
    /// Close these backends' connections (turned_unready).
    pub close: Vec<usize>,
    /// Ask these backends' monitors for a confirm probe.
    pub ask: Vec<usize>,
}

impl Escapes {
    /// A probe of `id` that started at `started` passed.
    pub fn passed(&mut self, id: &BackendId, started: Instant) {
        match self.passes.iter_mut().find(|(b, _)| b == id) {
            Some((_, at)) => *at = (*at).max(started),
            None => self.passes.push((id.clone(), started)),
        }
    }

    /// `id` turned unready at `fell` (the start of the probe that said so): its connections wait
    /// for a confirmed route.
    pub fn fell(&mut self, id: &BackendId, fell: Instant) {
        self.waiting.retain(|w| w.id != *id);
        self.waiting.push(Waiting {
            id: id.clone(),
            fell,
            asked: Vec::new(),
        });
    }

    /// Whether a backend waits for its route.
    pub fn is_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Judges every waiting backend against `snap`. One no longer unready (or removed) waits no
    /// more, nor does one with nowhere to go (nothing ready: a cluster-wide blink closes nothing).
    pub fn review(&mut self, snap: &Snapshot) -> Review {
        let mut review = Review::default();
        self.passes.retain(|(id, _)| snap.position(id).is_some());
        let route = route(snap);
        let passes = &self.passes;
        self.waiting.retain_mut(|w| {
            let Some(i) = snap.position(&w.id) else {
                return false;
            };
            let Some(to) = route.filter(|_| snap.backends[i].health.state == State::Unready) else {
                return false;
            };
            let to_id = &snap.backends[to].spec.id;
            let passed = passes.iter().find(|(b, _)| b == to_id).map(|(_, at)| *at);
            let busy = snap.backends[i].live.active.load(Ordering::Relaxed) > 0;
            match judge(w.fell, busy, passed, w.asked.contains(to_id)) {
                Verdict::Close => {
                    review.close.push(i);
                    false
                }
                Verdict::Ask => {
                    w.asked.push(to_id.clone());
                    review.ask.push(to);
                    true
                }
                Verdict::Wait => true,
            }
        });
        review.ask.sort_unstable();
        review.ask.dedup();
        review
    }
}

#[cfg(test)]
mod tests;
