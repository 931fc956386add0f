//! The picker: a pure function from the backends' health to the order in which to dial them.
//!
//! No clock, no I/O, no atomics: the caller copies active counts into [`Candidate`]s first. Does not
//! own dialing or retries (`proxy`), only the order.

use std::cmp::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::verdict::{Reach, State};

/// What to do with a new client connection when no backend is ready (the `when_none_ready` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenNoneReady {
    /// Route to every backend in the usual order: an etcd-wide outage must not also cut the node off.
    FailOpen,
    /// Close the client connection at once.
    Refuse,
}

/// Backends whose latency is within this fraction of the best one in their zone group count as
/// equal. 25 % keeps a 23 ms and a 43 ms site apart but treats LAN jitter as noise.
pub const TOLERANCE_FRACTION: f64 = 0.25;

/// ... and never less than this absolute band, so sub-millisecond noise on one LAN does not decide.
pub const TOLERANCE_FLOOR: Duration = Duration::from_millis(2);

/// What the picker needs to know about one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Its health state: ready, known to fail, or not yet checked.
    pub state: State,
    /// How far its latest check got (`None` before any): failing open prefers one that answers
    /// HTTP (alive, not ready), then one that takes connections but does not answer, to one whose
    /// dials fail (refused, unanswered).
    pub reach: Option<Reach>,
    /// In the node's own zone.
    pub local: bool,
    /// Smoothed `/readyz` latency, if measured.
    pub latency: Option<Duration>,
    /// Connections currently relayed to it.
    pub active: usize,
    /// Its re-entry is paced now ([`crate::pacing`]): ranked after the ready backends that are not.
    pub paced: bool,
    /// Its request check finds it overloaded ([`crate::overload`]): ranked after the healthy
    /// ready backends, before the paced ones.
    pub degraded: bool,
}

/// The picker's answer: indices into the candidate slice, best first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// Ready backends only.
    Ready(Vec<usize>),
    /// Nothing is ready: backends not yet checked first, then (failing open) the failing ones,
    /// each part by the same zone and latency rules.
    NoneReady(Vec<usize>),
    /// Nothing is ready or unchecked and the policy is refuse (or there are no backends).
    Refuse,
}

impl Pick {
    /// The dial order (empty when refusing).
    pub fn order(&self) -> &[usize] {
        match self {
            Pick::Ready(o) | Pick::NoneReady(o) => o,
            Pick::Refuse => &[],
        }
    }
}

/// Orders candidates: ready only, local zone first, then by latency, with near-equal latencies
/// sharing by fewest active connections and then round-robin on `rr`.
///
/// With nothing ready, backends not yet checked (start-up, just added) are tried first: they are
/// more likely to work than ones known to fail. Known failing ones follow only when failing open:
/// first those that still answer HTTP (alive, not ready), then those that do not answer at all
/// (timeout, refused, TLS failure).
///
/// ```
/// use std::time::Duration;
/// use readyprism::verdict::{Reach, State};
/// use readyprism::pick::{pick, Candidate, Pick, WhenNoneReady};
///
/// let ms = |n| Some(Duration::from_millis(n));
/// let reach = Some(Reach::answered(200, Duration::ZERO));
/// let c = |state, local, latency| Candidate { state, reach, local, latency, active: 0, paced: false, degraded: false };
/// let local_no_quorum = c(State::Unready, true, ms(0));
/// let remote_near = c(State::Ready, false, ms(23));
/// let remote_far = c(State::Ready, false, ms(43));
/// let order = pick(&[local_no_quorum, remote_far, remote_near], WhenNoneReady::FailOpen, 0);
/// assert_eq!(order, Pick::Ready(vec![2, 1]));
/// ```
pub fn pick(cands: &[Candidate], when_none_ready: WhenNoneReady, rr: usize) -> Pick {
    let ready: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].state == State::Ready)
        .collect();
    if !ready.is_empty() {
        return Pick::Ready(ranked(cands, order(cands, ready, rr), true));
    }
    let out = not_ready(cands, when_none_ready, rr);
    if out.is_empty() {
        Pick::Refuse
    } else {
        Pick::NoneReady(out)
    }
}

/// Ready backends in `o`'s order, split stably: the healthy ones, then the degraded ones, then
/// (with `pacing`) those whose re-entry is paced, degraded or not. Pacing is the stronger rule: a
/// paced backend takes a connection only from its point of the window on.
fn ranked(cands: &[Candidate], mut o: Vec<usize>, pacing: bool) -> Vec<usize> {
    o.sort_by_key(|&i| (pacing && cands[i].paced, cands[i].degraded)); // stable
    o
}

/// Where a connection goes when every ready candidate failed to dial: failing open, on to the
/// backends that are not ready, in fail-open order, so the client sees no failure while any
/// backend accepts TCP; with `refuse`, nowhere.
///
/// ```
/// use std::time::Duration;
/// use readyprism::verdict::{Reach, State};
/// use readyprism::pick::{fallback, Candidate, WhenNoneReady};
///
/// let c = |state, reach| Candidate { state, reach: Some(reach), local: false, latency: None, active: 0, paced: false, degraded: false };
/// let answered = Reach::answered(500, Duration::ZERO);
/// let cands = [c(State::Ready, answered), c(State::Unready, Reach::Unreached), c(State::Unready, answered)];
/// assert_eq!(fallback(&cands, WhenNoneReady::FailOpen, 0), vec![2, 1]);
/// assert!(fallback(&cands, WhenNoneReady::Refuse, 0).is_empty());
/// ```
pub fn fallback(cands: &[Candidate], when_none_ready: WhenNoneReady, rr: usize) -> Vec<usize> {
    match when_none_ready {
        WhenNoneReady::FailOpen => not_ready(cands, when_none_ready, rr),
        WhenNoneReady::Refuse => Vec::new(),
    }
}

/// One connection's dial order: the picker's order, then, failing open once every ready backend
/// failed to dial, the [`fallback`], computed only then (most connections never need it), from
/// the same candidates, so it is the order the connection would have had at pick time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    cands: Vec<Candidate>,
    when_none_ready: WhenNoneReady,
    rr: usize,
    pick: Pick,
}

impl Order {
    /// Picks now; see [`pick`].
    pub fn new(cands: Vec<Candidate>, when_none_ready: WhenNoneReady, rr: usize) -> Order {
        let pick = pick(&cands, when_none_ready, rr);
        Order {
            cands,
            when_none_ready,
            rr,
            pick,
        }
    }

    /// The picker's answer.
    pub fn pick(&self) -> &Pick {
        &self.pick
    }

    /// The ready backend that would have come first had its re-entry not been paced, when the
    /// pick goes to one that is not: the connection was sent elsewhere because of it.
    ///
    /// ```
    /// use readyprism::verdict::{Reach, State};
    /// use readyprism::pick::{Candidate, Order, WhenNoneReady};
    ///
    /// let reach = Some(Reach::answered(200, std::time::Duration::ZERO));
    /// let c = |local, paced| Candidate { state: State::Ready, reach, local, latency: None, active: 0, paced, degraded: false };
    /// let o = Order::new(vec![c(false, false), c(true, true)], WhenNoneReady::FailOpen, 0);
    /// assert_eq!(o.pick().order(), &[0, 1]);
    /// assert_eq!(o.deferred(), Some(1));
    /// ```
    pub fn deferred(&self) -> Option<usize> {
        let Pick::Ready(o) = &self.pick else {
            return None;
        };
        let first = *o.first()?;
        if self.cands[first].paced || !o.iter().any(|&i| self.cands[i].paced) {
            return None;
        }
        let unpaced = ranked(&self.cands, order(&self.cands, o.clone(), self.rr), false);
        unpaced.first().copied().filter(|&i| self.cands[i].paced)
    }

    /// Where to go once [`Order::pick`]'s order is exhausted: the [`fallback`] after a ready
    /// pick, nowhere after any other (not-ready backends were in the pick already).
    ///
    /// ```
    /// use readyprism::verdict::{Reach, State};
    /// use readyprism::pick::{Candidate, Order, WhenNoneReady};
    ///
    /// let reach = Some(Reach::answered(200, std::time::Duration::ZERO));
    /// let c = |state| Candidate { state, reach, local: false, latency: None, active: 0, paced: false, degraded: false };
    /// let some_ready = Order::new(vec![c(State::Ready), c(State::Unready)], WhenNoneReady::FailOpen, 0);
    /// assert_eq!(some_ready.fallback(), vec![1]);
    /// let none_ready = Order::new(vec![c(State::Unready)], WhenNoneReady::FailOpen, 0);
    /// assert_eq!(none_ready.pick().order(), &[0]);
    /// assert!(none_ready.fallback().is_empty(), "tried already");
    /// ```
    pub fn fallback(&self) -> Vec<usize> {
        match self.pick {
            Pick::Ready(_) => fallback(&self.cands, self.when_none_ready, self.rr),
            Pick::NoneReady(_) | Pick::Refuse => Vec::new(),
        }
    }
}

/// The backends that are not ready: unchecked first, then (failing open) the answering failing
/// ones, then the silent ones that take connections, then those that take none; each part by
/// zone and latency.
fn not_ready(cands: &[Candidate], when_none_ready: WhenNoneReady, rr: usize) -> Vec<usize> {
    let with = |keep: &dyn Fn(&Candidate) -> bool| -> Vec<usize> {
        (0..cands.len()).filter(|&i| keep(&cands[i])).collect()
    };
    let mut out = order(cands, with(&|c| c.state == State::Unknown), rr);
    if when_none_ready == WhenNoneReady::FailOpen {
        for rank in 0..3 {
            let part = with(&|c| c.state == State::Unready && open_rank(c.reach) == rank);
            out.extend(order(cands, part, rr));
        }
    }
    out
}

/// Failing open, in this order: answering HTTP, taking connections without an answer, the rest.
fn open_rank(reach: Option<Reach>) -> u8 {
    match reach {
        Some(Reach::Answered(_)) => 0,
        Some(Reach::Connected) => 1,
        Some(Reach::Unreached) | None => 2,
    }
}

/// Orders `members` in place (no allocation on the accept path): local zone first, each zone
/// group by [`order_group`].
fn order(cands: &[Candidate], mut members: Vec<usize>, rr: usize) -> Vec<usize> {
    members.sort_by_key(|&i| !cands[i].local); // stable: config order within each group
    let split = members.partition_point(|&i| cands[i].local);
    let (local, remote) = members.split_at_mut(split);
    order_group(cands, local, rr);
    order_group(cands, remote, rr);
    members
}

/// By latency; the band of near-equal latencies at the front shares by fewest active
/// connections, then round-robin on `rr`.
fn order_group(cands: &[Candidate], group: &mut [usize], rr: usize) {
    if group.is_empty() {
        return;
    }
    // Unmeasured latency sorts last; ties keep config order, so the result is deterministic.
    group.sort_by(|&a, &b| cmp_latency(cands[a].latency, cands[b].latency).then(a.cmp(&b)));
    let band_end = match cands[group[0]].latency {
        Some(best) => {
            let limit = best + tolerance(best);
            group
                .iter()
                .position(|&i| cands[i].latency.is_none_or(|l| l > limit))
                .unwrap_or(group.len())
        }
        // Nothing measured: all are equally unknown and share.
        None => group.len(),
    };
    let band = &mut group[..band_end];
    let len = band.len();
    band.rotate_left(rr % len);
    band.sort_by_key(|&i| cands[i].active); // stable: ties keep the rotated order
}

fn tolerance(best: Duration) -> Duration {
    best.mul_f64(TOLERANCE_FRACTION).max(TOLERANCE_FLOOR)
}

fn cmp_latency(a: Option<Duration>, b: Option<Duration>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.cmp(&b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(ready: bool, local: bool, ms: Option<u64>, active: usize) -> Candidate {
        Candidate {
            state: if ready { State::Ready } else { State::Unready },
            reach: Some(Reach::answered(
                if ready { 200 } else { 500 },
                Duration::from_millis(1),
            )),
            local,
            latency: ms.map(Duration::from_millis),
            active,
            paced: false,
            degraded: false,
        }
    }

    fn unchecked(local: bool) -> Candidate {
        Candidate {
            state: State::Unknown,
            ..c(false, local, None, 0)
        }
    }

    #[test]
    fn table_of_orders() {
        use WhenNoneReady::*;
        let cases: Vec<(&str, Vec<Candidate>, WhenNoneReady, Pick)> = vec![
            (
                "unready fastest local is skipped",
                vec![
                    c(false, true, Some(0), 0),
                    c(true, false, Some(23), 0),
                    c(true, false, Some(43), 0),
                ],
                FailOpen,
                Pick::Ready(vec![1, 2]),
            ),
            (
                "ready local beats faster remote",
                vec![c(true, false, Some(1), 0), c(true, true, Some(30), 0)],
                FailOpen,
                Pick::Ready(vec![1, 0]),
            ),
            (
                "lower latency wins among remotes",
                vec![c(true, false, Some(43), 0), c(true, false, Some(23), 0)],
                FailOpen,
                Pick::Ready(vec![1, 0]),
            ),
            (
                "near-equal: fewer active first",
                vec![c(true, false, Some(20), 5), c(true, false, Some(21), 1)],
                FailOpen,
                Pick::Ready(vec![1, 0]),
            ),
            (
                "unmeasured sorts after measured",
                vec![c(true, false, None, 0), c(true, false, Some(40), 0)],
                FailOpen,
                Pick::Ready(vec![1, 0]),
            ),
            (
                "none ready fails open in zone+latency order",
                vec![
                    c(false, false, Some(5), 0),
                    c(false, true, Some(9), 0),
                    c(false, false, Some(1), 0),
                ],
                FailOpen,
                Pick::NoneReady(vec![1, 2, 0]),
            ),
            (
                "none ready refuses",
                vec![c(false, true, Some(1), 0)],
                Refuse,
                Pick::Refuse,
            ),
            ("empty refuses", vec![], FailOpen, Pick::Refuse),
            (
                "pacing is the stronger rule: a degraded backend before a paced healthy one",
                vec![
                    Candidate {
                        paced: true,
                        ..c(true, true, Some(1), 0)
                    },
                    Candidate {
                        degraded: true,
                        ..c(true, false, Some(43), 0)
                    },
                    c(true, false, Some(60), 0),
                ],
                FailOpen,
                Pick::Ready(vec![2, 1, 0]),
            ),
            (
                "unchecked before known failing when failing open",
                vec![
                    c(false, true, Some(1), 0),
                    unchecked(false),
                    unchecked(true),
                ],
                FailOpen,
                Pick::NoneReady(vec![2, 1, 0]),
            ),
            (
                "failing open: silent backends that take connections before those that take none",
                vec![
                    Candidate {
                        reach: Some(Reach::Unreached),
                        ..c(false, false, Some(23), 0)
                    },
                    Candidate {
                        reach: Some(Reach::Connected),
                        ..c(false, false, Some(43), 0)
                    },
                ],
                FailOpen,
                Pick::NoneReady(vec![1, 0]),
            ),
            (
                "failing open: answering backends before silent ones, zone and latency aside",
                vec![
                    Candidate {
                        reach: Some(Reach::Connected),
                        ..c(false, true, Some(0), 0)
                    },
                    c(false, false, Some(43), 0),
                    unchecked(false),
                ],
                FailOpen,
                Pick::NoneReady(vec![2, 1, 0]),
            ),
            (
                "refuse still tries unchecked backends, never failing ones",
                vec![c(false, true, Some(1), 0), unchecked(false)],
                Refuse,
                Pick::NoneReady(vec![1]),
            ),
        ];
        for (name, cands, policy, want) in cases {
            assert_eq!(pick(&cands, policy, 0), want, "{name}");
        }
        // Paced and degraded backends alike go after the other ready ones, never after a
        // failing one, and keep the ready order among themselves.
        let paced = |c: Candidate| Candidate { paced: true, ..c };
        let degraded = |c: Candidate| Candidate {
            degraded: true,
            ..c
        };
        for (mark, demote) in [
            ("paced", &paced as &dyn Fn(_) -> _),
            ("degraded", &degraded),
        ] {
            let after_remotes = [
                demote(c(true, true, Some(1), 0)),
                c(true, false, Some(43), 0),
                c(false, false, Some(2), 0),
                c(true, false, Some(23), 0),
            ];
            let want = Pick::Ready(vec![3, 1, 0]);
            assert_eq!(
                pick(&after_remotes, FailOpen, 0),
                want,
                "a {mark} local backend"
            );
            let all = [
                demote(c(true, false, Some(43), 0)),
                demote(c(true, true, Some(40), 0)),
            ];
            let want = Pick::Ready(vec![1, 0]);
            assert_eq!(pick(&all, FailOpen, 0), want, "every ready backend {mark}");
        }
    }

    #[test]
    fn a_connection_is_deferred_only_by_a_paced_backend_it_would_have_gone_to() {
        let paced = |local, ms| Candidate {
            paced: true,
            ..c(true, local, Some(ms), 0)
        };
        let order = |cands: Vec<Candidate>| Order::new(cands, WhenNoneReady::FailOpen, 0);
        // Local and paced: the remote one gets the connection because of it.
        assert_eq!(
            order(vec![c(true, false, Some(40), 0), paced(true, 1)]).deferred(),
            Some(1)
        );
        // Paced but behind a faster unpaced one anyway: nobody was deferred.
        assert_eq!(
            order(vec![c(true, true, Some(1), 0), paced(true, 40)]).deferred(),
            None
        );
        // Every ready backend paced: the connection waits instead.
        assert_eq!(
            order(vec![paced(true, 1), paced(false, 9)]).deferred(),
            None
        );
        assert_eq!(order(vec![c(true, true, Some(1), 0)]).deferred(), None);
        // Paced and degraded, local: the healthy remote one would have had it unpaced too.
        let worn = Candidate {
            degraded: true,
            ..paced(true, 1)
        };
        assert_eq!(
            order(vec![worn, c(true, false, Some(40), 0)]).deferred(),
            None
        );
        // Paced and healthy, ahead of a degraded one once unpaced: deferred by its pacing.
        let degraded = Candidate {
            degraded: true,
            ..c(true, false, Some(40), 0)
        };
        assert_eq!(order(vec![paced(true, 1), degraded]).deferred(), Some(0));
    }

    #[test]
    fn near_equal_backends_share_by_round_robin() {
        let cands = [
            c(true, false, Some(20), 0),
            c(true, false, Some(21), 0),
            c(true, false, Some(90), 0),
        ];
        let firsts: Vec<usize> = (0..4)
            .map(|rr| pick(&cands, WhenNoneReady::FailOpen, rr).order()[0])
            .collect();
        assert_eq!(firsts, vec![0, 1, 0, 1]);
        assert_eq!(pick(&cands, WhenNoneReady::FailOpen, 1).order(), &[1, 0, 2]);
    }

    #[test]
    fn tolerance_band_scales_with_latency_but_has_a_floor() {
        // 1 ms vs 2.5 ms: inside the 2 ms floor, so they share.
        let lan = [
            c(true, false, Some(1), 3),
            Candidate {
                latency: Some(Duration::from_micros(2500)),
                ..c(true, false, None, 0)
            },
        ];
        assert_eq!(pick(&lan, WhenNoneReady::FailOpen, 0).order()[0], 1);
        // 23 ms vs 43 ms: far apart, the faster one always first whatever its load.
        let wan = [c(true, false, Some(43), 0), c(true, false, Some(23), 100)];
        assert_eq!(pick(&wan, WhenNoneReady::FailOpen, 0).order(), &[1, 0]);
    }
}
