//! Confirming the escape route before moving a backend's connections: a backend that turned
//! unready keeps them until the backend they would go to (the picker's first choice now) has
//! passed a probe that started after the fall. Until then that backend is asked for one confirm
//! probe; a failed confirm closes nothing. During a cluster-wide blink every backend fails its
//! checks together, and closing would only move clients onto the next failing apiserver.
//!
//! When another backend has failed a check within the last probe interval too (a suspected
//! cluster-wide event, which some backends' probes may have missed), the fallen backend is asked
//! for a confirm probe of its own as well: its connections move only if it still fails, and stay
//! while it passes again (it rises). With every other backend passing (one bad apiserver) the
//! route's pass alone decides, as fast as before.
//!
//! Owns the latest pass and failure of every backend, the backends waiting for a confirm, and the
//! decision ([`judge`], pure; the caller passes instants). Does not own asking the monitor or
//! closing (the table writer does both).

use std::sync::atomic::Ordering;

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::pick::{pick, Pick};
use crate::verdict::State;

/// What to do about one waiting backend's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The route is confirmed (and, in a suspected cluster-wide event, the fallen backend still
    /// fails): close them (turned_unready).
    Close,
    /// Ask for confirm probes not asked yet for this fall: of the route's backend (`route`), of
    /// the fallen backend itself (`own`).
    Ask {
        /// Ask the route's backend.
        route: bool,
        /// Ask the fallen backend.
        own: bool,
    },
    /// Wait for the confirms asked (a failed route closes nothing; a fallen backend that passes
    /// again keeps its connections while it rises).
    Wait,
}

/// How far apart a fallen backend's failure and its route's pass may start and still say the same
/// moment: the two confirms are asked together, so they start within this of each other.
const SAME_ROUND: Duration = Duration::from_secs(1);

/// What is known of the fallen backend itself since its fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// No other backend failed lately: one bad apiserver, its own state needs no second look.
    Unsuspected,
    /// A suspected cluster-wide event, and no probe of it has ended since the fall; `asked`: a
    /// confirm of it was asked.
    Pending {
        /// A confirm probe of it was asked during this fall.
        asked: bool,
    },
    /// Its latest probe since the fall failed: it is still down.
    Failed,
    /// Its latest probe since the fall passed: it is coming back (rising).
    Passing,
}

/// The decision for a backend that fell at `fell`, relaying something now (`busy`) or not, whose
/// connections would go to a backend whose latest pass started at `passed` (`None`: none known),
/// already `asked` for a confirm or not, and what is known of the fallen backend itself (`own`).
/// With nothing to move, nothing is confirmed: the eviction only stops dials picked from an older
/// snapshot, which then re-plan as new connections do.
pub fn judge(fell: Instant, busy: bool, passed: Option<Instant>, asked: bool, own: Own) -> Verdict {
    if !busy {
        return Verdict::Close;
    }
    let route = passed.is_some_and(|p| p > fell);
    match own {
        Own::Passing => Verdict::Wait,
        Own::Unsuspected | Own::Failed if route => Verdict::Close,
        _ => {
            let ask_route = !route && !asked;
            let ask_own = own == Own::Pending { asked: false };
            if ask_route || ask_own {
                Verdict::Ask {
                    route: ask_route,
                    own: ask_own,
                }
            } else {
                Verdict::Wait
            }
        }
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

/// The backends waiting for their escape route, and every backend's latest pass and failure.
#[derive(Debug, Default)]
pub struct Escapes {
    /// When each backend's latest passing probe started.
    passes: Vec<(BackendId, Instant)>,
    /// When each backend's latest failed check started.
    failures: Vec<(BackendId, Instant)>,
    waiting: Vec<Waiting>,
}

#[derive(Debug, Clone)]
struct Waiting {
    id: BackendId,
    fell: Instant,
    /// The route backends asked for a confirm during this fall.
    asked: Vec<BackendId>,
    /// The fallen backend itself was asked for a confirm during this fall.
    asked_own: bool,
}

/// The latest instant of `id` in `list`.
fn latest(list: &[(BackendId, Instant)], id: &BackendId) -> Option<Instant> {
    list.iter().find(|(b, _)| b == id).map(|(_, at)| *at)
}

/// Keeps `at` as `id`'s latest instant in `list`.
fn note(list: &mut Vec<(BackendId, Instant)>, id: &BackendId, at: Instant) {
    match list.iter_mut().find(|(b, _)| b == id) {
        Some((_, kept)) => *kept = (*kept).max(at),
        None => list.push((id.clone(), at)),
    }
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
        note(&mut self.passes, id, started);
    }

    /// A check of `id` that started at `started` failed (a probe, or a client dial).
    pub fn failed(&mut self, id: &BackendId, started: Instant) {
        note(&mut self.failures, id, started);
    }

    /// What is known of fallen `w` itself: see [`Own`]. Suspected when another backend's latest
    /// failure started less than `interval` before the fall, or after it. A failure of its own
    /// that started more than [`SAME_ROUND`] before the route's latest pass (`route_pass`) is
    /// stale: the blink may have ended between them, so its next result is awaited.
    fn own(&self, w: &Waiting, interval: Duration, route_pass: Option<Instant>) -> Own {
        let since = w.fell.checked_sub(interval).unwrap_or(w.fell);
        let suspect = self
            .failures
            .iter()
            .any(|(b, at)| *b != w.id && *at > since);
        if !suspect {
            return Own::Unsuspected;
        }
        let pass = latest(&self.passes, &w.id).filter(|p| *p > w.fell);
        let fail = latest(&self.failures, &w.id).filter(|f| *f > w.fell);
        match (pass, fail) {
            (Some(p), Some(f)) if p > f => Own::Passing,
            (Some(_), None) => Own::Passing,
            (_, Some(f)) if route_pass.is_some_and(|p| f + SAME_ROUND < p) => {
                Own::Pending { asked: w.asked_own }
            }
            (_, Some(_)) => Own::Failed,
            (None, None) => Own::Pending { asked: w.asked_own },
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
            asked_own: false,
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
        self.failures.retain(|(id, _)| snap.position(id).is_some());
        let route = route(snap);
        let interval = snap.routing.probe_interval;
        let route_pass = route.and_then(|to| latest(&self.passes, &snap.backends[to].spec.id));
        let owns: Vec<Own> = self
            .waiting
            .iter()
            .map(|w| self.own(w, interval, route_pass))
            .collect();
        let passes = &self.passes;
        let mut owns = owns.into_iter();
        self.waiting.retain_mut(|w| {
            let own = owns.next().unwrap_or(Own::Unsuspected);
            let Some(i) = snap.position(&w.id) else {
                return false;
            };
            let Some(to) = route.filter(|_| snap.backends[i].health.state == State::Unready) else {
                return false;
            };
            let to_id = &snap.backends[to].spec.id;
            let passed = passes.iter().find(|(b, _)| b == to_id).map(|(_, at)| *at);
            let busy = snap.backends[i].live.active.load(Ordering::Relaxed) > 0;
            match judge(w.fell, busy, passed, w.asked.contains(to_id), own) {
                Verdict::Close => {
                    review.close.push(i);
                    false
                }
                Verdict::Ask { route, own } => {
                    if route {
                        w.asked.push(to_id.clone());
                        review.ask.push(to);
                    }
                    if own {
                        w.asked_own = true;
                        review.ask.push(i);
                    }
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
