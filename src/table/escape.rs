//! Confirming the escape route before a fallen backend's connections move. The rule:
//!
//! - They move once the backend they would go to (the picker's first choice, the route) has
//!   passed a probe that started after the fall, and the fallen backend itself still fails: its
//!   own latest result since the fall failed, or none came within one round trip of the route's
//!   probe after that pass ([`deadline`]).
//! - A fallen backend that passes again keeps them while it rises. A failed route closes nothing:
//!   in a cluster-wide blink every backend fails together.
//! - A failure of its own that started over [`SAME_ROUND`] before the route's pass is stale: the
//!   event may have ended between them, so its next result is awaited. When the route itself
//!   failed a check since the fall, or within a probe interval before it (it saw the same
//!   event), only a failure that started within [`SAME_MOMENT`] of the route's pass or later
//!   moves them, however long that takes ([`Own::Awaited`]).
//! - At the fall both are asked for one confirm probe.
//!
//! Owns every backend's latest pass and failure, each fall's state (its own results since the
//! fall, the confirms asked), advanced by events, and the decision ([`judge`], pure; the caller
//! passes instants). Does not own asking the monitor or closing (the table writer does both), nor
//! the bound of one confirm per backend per probe interval (the monitor keeps it).

use std::sync::atomic::Ordering;

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::pick::{pick, Pick};
use crate::verdict::State;

/// What to do about one waiting backend's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ruling {
    /// The route is confirmed and the fallen backend still fails (or did not answer in time):
    /// close them (turned_unready).
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
    /// again keeps its connections while it rises), at most until [`until`] says.
    Wait,
}

/// How far apart a fallen backend's failure and its route's pass may start and still say the same
/// moment: the two confirms are asked together, so they start within this of each other.
const SAME_ROUND: Duration = Duration::from_secs(1);

/// How far apart two probes asked together (a fallen backend's and its route's confirms) may
/// start: once the route itself has failed since the fall, only a failure of the fallen backend
/// this close to the route's pass, or later, says it fails while the route passes.
const SAME_MOMENT: Duration = Duration::from_millis(250);

/// What is known of the fallen backend itself since its fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// No probe of it has ended since the fall, or only a failure that is stale (started over
    /// [`SAME_ROUND`] before the route's pass: the blink may have ended between them), so its
    /// next result is awaited; `asked`: a confirm of it was asked.
    Pending {
        /// A confirm probe of it was asked during this fall.
        asked: bool,
    },
    /// The route failed a check since the fall too (this node saw the cluster-wide moment
    /// through it), then passed, and no result of the fallen backend's own started with or after
    /// that pass: the event may have ended between them. Its next result decides, however long
    /// that takes (its probe interval at most), not the route's round trip; `asked` as for
    /// `Pending`.
    Awaited {
        /// A confirm probe of it was asked during this fall.
        asked: bool,
    },
    /// Its latest probe since the fall failed: it is still down.
    Failed,
    /// Its latest probe since the fall passed: it is coming back (rising).
    Passing,
}

/// A passed probe as the table's writer saw it; the later is the one that started later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pass {
    /// When the probe started.
    pub started: Instant,
    /// When its result reached the writer.
    pub arrived: Instant,
}

/// A backend's fall as the table's writer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fall {
    /// When the evidence that turned it unready began (the probe's start, or when failed client
    /// dials were counted).
    pub at: Instant,
    /// When the writer learnt of it (and asked for the confirms).
    pub noted: Instant,
}

impl Fall {
    /// A probe that started at `started` began after the fall: news of the fallen backend, or a
    /// confirm of its route.
    pub fn precedes(self, started: Instant) -> bool {
        started > self.at
    }
}

/// When the connections of a backend that fell (`fall`), whose own result is still outstanding,
/// move after the route passed (`pass`, started after the fall): one round trip of the route's
/// probe (its start to its arrival) beyond its arrival, or beyond the fall's, when the route
/// passed before the writer learnt of the fall and asked the fallen backend. A confirm of the
/// fallen backend asked with the route's takes about as long when it answers at all.
pub fn deadline(fall: Fall, pass: Pass) -> Instant {
    let trip = pass.arrived.saturating_duration_since(pass.started);
    pass.arrived.max(fall.noted) + trip
}

/// When waiting ends by itself (then [`judge`] closes): the [`deadline`] once the route passed
/// since the fall (`route`: its latest pass) while the fallen backend's own result is
/// outstanding; `None` while the wait is for a result.
pub fn until(fall: Fall, route: Option<Pass>, own: Own) -> Option<Instant> {
    match own {
        Own::Pending { .. } => route
            .filter(|p| fall.precedes(p.started))
            .map(|p| deadline(fall, p)),
        Own::Awaited { .. } | Own::Failed | Own::Passing => None,
    }
}

/// The decision at `now` for a backend that fell (`fall`), relaying something now (`busy`) or
/// not, whose connections would go to a backend whose latest pass is `route` (`None`: none
/// known), already `asked` for a confirm or not, and what is known of the fallen backend itself
/// (`own`). With nothing to move, nothing is confirmed: the eviction only stops dials picked from
/// an older snapshot, which then re-plan as new connections do.
pub fn judge(
    fall: Fall,
    busy: bool,
    route: Option<Pass>,
    asked: bool,
    own: Own,
    now: Instant,
) -> Ruling {
    if !busy {
        return Ruling::Close;
    }
    let confirmed = route.is_some_and(|p| fall.precedes(p.started));
    match own {
        Own::Passing => Ruling::Wait,
        Own::Failed if confirmed => Ruling::Close,
        Own::Pending { .. } if until(fall, route, own).is_some_and(|at| now >= at) => Ruling::Close,
        _ => {
            let ask_route = !confirmed && !asked;
            let ask_own = matches!(
                own,
                Own::Pending { asked: false } | Own::Awaited { asked: false }
            );
            if ask_route || ask_own {
                Ruling::Ask {
                    route: ask_route,
                    own: ask_own,
                }
            } else {
                Ruling::Wait
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
    /// Each backend's latest passing probe (the one that started last).
    passes: Vec<(BackendId, Pass)>,
    /// When each backend's latest failed check started.
    failures: Vec<(BackendId, Instant)>,
    waiting: Vec<Waiting>,
}

/// One fall, from the fall until its connections move or it waits no more.
#[derive(Debug, Clone)]
struct Waiting {
    id: BackendId,
    fall: Fall,
    /// The fallen backend's own results since the fall, as they arrive.
    since: Since,
    /// The route backends asked for a confirm during this fall.
    asked: Vec<BackendId>,
    /// The fallen backend itself was asked for a confirm during this fall.
    asked_own: bool,
    /// When its wait ends by itself ([`until`]), as of the latest review.
    until: Option<Instant>,
}

/// A fallen backend's own results that started after its fall: when its latest pass and its
/// latest failure started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Since {
    passed: Option<Instant>,
    failed: Option<Instant>,
}

/// Keeps the later of `kept` and `started`.
fn later(kept: &mut Option<Instant>, started: Instant) {
    *kept = Some(kept.map_or(started, |k| k.max(started)));
}

/// The latest value of `id` in `list`.
fn latest<T: Copy>(list: &[(BackendId, T)], id: &BackendId) -> Option<T> {
    list.iter().find(|(b, _)| b == id).map(|(_, at)| *at)
}

/// Keeps the greater of `at` and the value kept as `id`'s latest in `list`.
fn note<T: Copy + Ord>(list: &mut Vec<(BackendId, T)>, id: &BackendId, at: T) {
    match list.iter_mut().find(|(b, _)| b == id) {
        Some((_, kept)) => *kept = (*kept).max(at),
        None => list.push((id.clone(), at)),
    }
}

/// The route failed a check that started less than a probe `interval` before the fall, or after
/// it: it saw the same event (it may even have fallen and risen in it).
fn saw_the_event(route_failed: Option<Instant>, fall: Fall, interval: Duration) -> bool {
    route_failed.is_some_and(|f| f + interval > fall.at)
}

/// A failure that started at `failed` began more than `window` before the route's pass `pass`.
fn older_than(failed: Instant, window: Duration, pass: Pass) -> bool {
    failed + window < pass.started
}

/// What is known of fallen `w` itself, from its results since the fall and the route's latest
/// pass and failure (`route`): see [`Own`].
fn own_result(w: &Waiting, route: Option<(Pass, Option<Instant>)>, interval: Duration) -> Own {
    let seen = route.is_some_and(|(_, failed)| saw_the_event(failed, w.fall, interval));
    let older = |window, f| route.is_some_and(|(pass, _)| older_than(f, window, pass));
    let asked = w.asked_own;
    match (w.since.passed, w.since.failed) {
        (Some(p), Some(f)) if p > f => Own::Passing,
        (Some(_), None) => Own::Passing,
        (_, Some(f)) if seen && older(SAME_MOMENT, f) => Own::Awaited { asked },
        (_, Some(f)) if older(SAME_ROUND, f) => Own::Pending { asked },
        (_, Some(_)) => Own::Failed,
        (None, None) if seen => Own::Awaited { asked },
        (None, None) => Own::Pending { asked },
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
    /// A probe of `id` passed (when it started, when its result reached the writer).
    pub fn passed(&mut self, id: &BackendId, pass: Pass) {
        note(&mut self.passes, id, pass);
        for w in self.falls_of(id, pass.started) {
            later(&mut w.since.passed, pass.started);
        }
    }

    /// A check of `id` that started at `started` failed (a probe, or a client dial).
    pub fn failed(&mut self, id: &BackendId, started: Instant) {
        note(&mut self.failures, id, started);
        for w in self.falls_of(id, started) {
            later(&mut w.since.failed, started);
        }
    }

    /// The fall of `id` that a result which started at `started` is news of.
    fn falls_of<'a>(
        &'a mut self,
        id: &'a BackendId,
        started: Instant,
    ) -> impl Iterator<Item = &'a mut Waiting> + 'a {
        self.waiting
            .iter_mut()
            .filter(move |w| w.id == *id && w.fall.precedes(started))
    }

    /// `id` turned unready (`fall`): its connections wait for a confirmed route and its own
    /// confirm.
    pub fn fell(&mut self, id: &BackendId, fall: Fall) {
        self.waiting.retain(|w| w.id != *id);
        self.waiting.push(Waiting {
            id: id.clone(),
            fall,
            // The writer notes a fall with the result that decided it (at a reload, at once): no
            // result of its own started after it yet.
            since: Since::default(),
            asked: Vec::new(),
            asked_own: false,
            until: None,
        });
    }

    /// Whether a backend waits for its route.
    pub fn is_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// When the next wait ends by itself, as of the latest review: review again then.
    pub fn next_due(&self) -> Option<Instant> {
        self.waiting.iter().filter_map(|w| w.until).min()
    }

    /// Judges every waiting backend against `snap` at `now`. One no longer unready (or removed)
    /// waits no more, nor does one with nowhere to go (nothing ready: a cluster-wide blink closes
    /// nothing).
    pub fn review(&mut self, snap: &Snapshot, now: Instant) -> Review {
        let mut review = Review::default();
        self.passes.retain(|(id, _)| snap.position(id).is_some());
        self.failures.retain(|(id, _)| snap.position(id).is_some());
        let route = route(snap);
        let pass = route.and_then(|to| latest(&self.passes, &snap.backends[to].spec.id));
        let route_failed = route.and_then(|to| latest(&self.failures, &snap.backends[to].spec.id));
        let interval = snap.routing.probe_interval;
        self.waiting.retain_mut(|w| {
            let own = own_result(w, pass.map(|p| (p, route_failed)), interval);
            let Some(i) = snap.position(&w.id) else {
                return false;
            };
            let Some(to) = route.filter(|_| snap.backends[i].health.state == State::Unready) else {
                return false;
            };
            let to_id = &snap.backends[to].spec.id;
            let busy = snap.backends[i].live.active.load(Ordering::Relaxed) > 0;
            w.until = until(w.fall, pass, own);
            match judge(w.fall, busy, pass, w.asked.contains(to_id), own, now) {
                Ruling::Close => {
                    review.close.push(i);
                    false
                }
                Ruling::Ask { route, own } => {
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
                Ruling::Wait => true,
            }
        });
        review.ask.sort_unstable();
        review.ask.dedup();
        review
    }
}

#[cfg(test)]
mod tests;
