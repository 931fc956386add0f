//! The writer's composition, stepped: the chaos lab's findings and the hand-off rules as unit
//! tests that run in milliseconds.

use std::time::Duration;

use super::step::{Step, Truth};
use crate::eviction::{CloseReason, EVICT_SPREAD, FAILBACK_SPREAD};
use crate::verdict::State;

const DC_A: &str = "10.0.1.1:6443";
const DC_B: &str = "10.0.2.1:6443";
const WITNESS: &str = "10.0.3.1:6443";

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// The field report's cluster, the node in dc-b, `failback_after` as given. Every backend is
/// probed at 0, 5, 10 … s (1 s after a first failure or pass that leaves a change pending); an
/// answer takes 10 ms.
fn cluster(failback_after: Duration) -> Step {
    Step::new(
        "dc-b",
        &[(DC_A, "dc-a"), (DC_B, "dc-b"), (WITNESS, "witness")],
        |r| r.failback_after = Some(failback_after),
    )
}

/// The time of the only bump of `backend` for `why`.
fn bump(h: &Step, backend: &str, why: CloseReason) -> Duration {
    let found: Vec<Duration> = h
        .bumps
        .iter()
        .filter(|b| b.0 == backend && b.1 == why)
        .map(|b| b.2)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {why:?} bump of {backend}: {:?}",
        h.bumps
    );
    found[0]
}

/// When `backend` last turned `to`.
fn turned(h: &Step, backend: &str, to: State) -> Duration {
    h.changes
        .iter()
        .rev()
        .find(|c| c.0 == backend && c.1 == to)
        .map(|c| c.2)
        .unwrap_or_else(|| panic!("{backend} never turned {to:?}: {:?}", h.changes))
}

/// dc-b down, 16 connections relayed to dc-a meanwhile (at 12 s), dc-b back at once (ready at
/// 17.01 s).
fn away_on_dc_a(failback_after: Duration) -> Step {
    let mut h = cluster(failback_after);
    h.run_to(s(1.0));
    h.set(DC_B, Truth::Unready);
    h.run_to(s(12.0));
    assert_eq!(h.state(DC_B), State::Unready);
    h.connect(DC_A, 16);
    h.set(DC_B, Truth::Ready);
    h
}

/// [`away_on_dc_a`], then dc-a turns unready at `at`; run to 60 s.
fn dc_a_unready_at(failback_after: Duration, at: Duration) -> Step {
    let mut h = away_on_dc_a(failback_after);
    h.run_to(at);
    h.set(DC_A, Truth::Unready);
    h.run_to(s(60.0));
    h
}

/// Asserts that all 16 of [`away_on_dc_a`]'s connections were closed.
fn assert_every_connection_closed(h: &Step) {
    assert_eq!(
        h.closed.len(),
        16,
        "every connection closed: {:?}",
        h.closed
    );
}

#[test]
fn the_harness_starts_ready_and_falls_on_failed_probes() {
    let mut h = cluster(s(10.0));
    h.run_to(s(1.0));
    assert_eq!(h.state(DC_A), State::Ready);
    h.set(DC_A, Truth::Unready);
    h.set(WITNESS, Truth::Silent);
    h.run_to(s(12.0));
    assert_eq!(h.state(DC_A), State::Unready, "two failed probes");
    assert_eq!(
        turned(&h, DC_A, State::Unready),
        s(6.01),
        "at 5 s, then 1 s later"
    );
    // A silent one's probes end at the 3 s timeout: at 8 s, and the fast re-probe at 11 s.
    assert_eq!(turned(&h, WITNESS, State::Unready), s(11.0));
    assert!(h.closed.is_empty(), "no connection to close");
    assert_eq!(
        h.bumps
            .iter()
            .map(|b| (b.0.as_str(), b.1))
            .collect::<Vec<_>>(),
        [
            (DC_A, CloseReason::TurnedUnready),
            (WITNESS, CloseReason::TurnedUnready)
        ],
        "its (empty) connections evicted once"
    );
}

/// The chaos lab's seed 18, stepped: dc-a turns unready while its connections wait their turns
/// in a failback's 10 s spread. Those whose failback turn has not come close at their
/// `turned_unready` turn, within the eviction spread, not seconds later as `failback`.
#[test]
fn seed_18_a_backend_that_turns_unready_during_its_failback_closes_at_once() {
    let h = dc_a_unready_at(s(10.0), s(27.0));
    let failback = bump(&h, DC_A, CloseReason::Failback);
    let unready = bump(&h, DC_A, CloseReason::TurnedUnready);
    assert!(
        failback < unready && unready < failback + FAILBACK_SPREAD,
        "the premise: dc-a turned unready during its failback ({failback:?}, {unready:?})"
    );
    assert_every_connection_closed(&h);
    // A failback turn that comes sooner than the connection's turned_unready one stands.
    for c in &h.closed {
        assert!(
            matches!(c.why, CloseReason::Failback | CloseReason::TurnedUnready),
            "{c:?}"
        );
        assert!(
            c.at < unready + EVICT_SPREAD,
            "{c:?}: unready at {unready:?}"
        );
    }
    let at_once = h
        .closed
        .iter()
        .filter(|c| c.why == CloseReason::TurnedUnready)
        .count();
    assert!(at_once >= 4, "the rest closed as turned_unready: {at_once}");
}

/// The chaos lab's seed 6, stepped: dc-b's failback begins just after dc-a turned unready. The
/// later failback bump never delays a `turned_unready` close already due.
#[test]
fn seed_6_a_failback_just_after_a_backend_turned_unready_never_delays_its_closes() {
    let run = |failback_after: Duration| dc_a_unready_at(failback_after, s(18.0));
    // Without a failback: when dc-b is ready, and when dc-a's connections are bumped.
    let h = run(s(600.0));
    let (home, fell) = (
        turned(&h, DC_B, State::Ready),
        bump(&h, DC_A, CloseReason::TurnedUnready),
    );
    // The failback due 0.1 s after that bump.
    let h = run(fell + s(0.1) - home);
    let unready = bump(&h, DC_A, CloseReason::TurnedUnready);
    let failback = bump(&h, DC_A, CloseReason::Failback);
    assert!(
        unready < failback && failback < unready + EVICT_SPREAD,
        "the premise: the failback began while the turned_unready closes were spread out \
         ({unready:?}, {failback:?})"
    );
    assert_every_connection_closed(&h);
    for c in &h.closed {
        assert_eq!(c.why, CloseReason::TurnedUnready, "{c:?}");
        assert!(
            c.at < unready + EVICT_SPREAD,
            "{c:?}: delayed by the failback"
        );
    }
}

/// A blink at home during a failback: dc-b falls before the 10 s spread is over, the failback is
/// called off and the connections not yet closed stay on dc-a; dc-b's next ready spell brings
/// them home, `failback_after` later.
#[test]
fn a_blink_at_home_calls_off_the_failback_and_the_next_ready_spell_brings_the_rest_home() {
    let mut h = away_on_dc_a(s(10.0));
    h.run_to(s(28.0));
    let first = bump(&h, DC_A, CloseReason::Failback);
    h.set(DC_B, Truth::Unready);
    h.run_to(s(34.0));
    let fell = turned(&h, DC_B, State::Unready);
    assert!(
        fell < first + FAILBACK_SPREAD,
        "the premise: a blink during the failback"
    );
    h.set(DC_B, Truth::Ready);
    h.run_to(s(45.0));
    let stayed = h.open_on(DC_A);
    assert!(stayed >= 4, "the called-off failback left {stayed} on dc-a");
    assert!(
        h.closed.iter().all(|c| c.at <= fell),
        "nothing closed after the call-off at {fell:?}: {:?}",
        h.closed
    );
    h.run_to(s(70.0));
    let back = turned(&h, DC_B, State::Ready);
    assert_eq!(h.open_on(DC_A), 0, "the next spell brought the rest home");
    let second: Vec<Duration> = h
        .bumps
        .iter()
        .filter(|b| b.0 == DC_A && b.1 == CloseReason::Failback && b.2 > first)
        .map(|b| b.2)
        .collect();
    assert_eq!(second.len(), 1, "one more failback: {:?}", h.bumps);
    assert!(
        second[0] >= back + s(10.0),
        "failback_after from dc-b's second rise: {second:?}"
    );
    assert!(
        h.closed.iter().all(|c| c.why == CloseReason::Failback),
        "{:?}",
        h.closed
    );
}

/// dc-a with a 20 s hand-off window.
fn handing_off(h: impl FnOnce(&mut Step)) -> Step {
    let mut step = Step::new(
        "dc-b",
        &[(DC_A, "dc-a"), (DC_B, "dc-b"), (WITNESS, "witness")],
        |r| {
            r.failback_after = None;
            r.handoff_window = s(20.0);
        },
    );
    step.run_to(s(1.0));
    step.connect(DC_A, 16);
    h(&mut step);
    step
}

/// dc-a (16 connections, a 20 s hand-off window) answers as `first`, then from `until` as
/// `then`, up to 40 s.
fn dc_a_answers(first: Truth, until: Duration, then: Truth) -> Step {
    handing_off(|h| {
        h.set(DC_A, first);
        h.run_to(until);
        h.set(DC_A, then);
        h.run_to(s(40.0));
    })
}

/// A draining backend that fails another check before its window is over: the rest are closed
/// at once (`turned_unready`), not at their hand-off turns.
#[test]
fn a_draining_backend_that_fails_another_check_closes_the_rest_at_once() {
    let h = dc_a_answers(Truth::Draining, s(7.0), Truth::Unready);
    let handoff = bump(&h, DC_A, CloseReason::Handoff);
    let unready = bump(&h, DC_A, CloseReason::TurnedUnready);
    assert!(handoff < unready, "{:?}", h.bumps);
    assert_eq!(h.closed.len(), 16, "{:?}", h.closed);
    let rest: Vec<_> = h.closed.iter().filter(|c| c.at >= unready).collect();
    assert!(
        rest.len() >= 8,
        "most were still waiting their turn: {rest:?}"
    );
    for c in rest {
        assert_eq!(c.why, CloseReason::TurnedUnready, "{c:?}");
        assert!(c.at < unready + EVICT_SPREAD, "{c:?}");
    }
}

/// A hand-off ends when its reason ends: dc-a passes before its window is over, and the
/// connections not yet closed stay.
#[test]
fn a_hand_off_is_called_off_when_the_backend_passes() {
    let h = dc_a_answers(Truth::Draining, s(6.0), Truth::Ready);
    let handoff = bump(&h, DC_A, CloseReason::Handoff);
    assert!(
        h.closed.iter().all(|c| c.at <= handoff + s(5.0)),
        "{:?}",
        h.closed
    );
    assert!(h.open_on(DC_A) >= 8, "the rest stay: {}", h.open_on(DC_A));
    assert_eq!(h.state(DC_A), State::Ready);
}

/// Every apiserver drains at once: with none ready the hand-offs are called off and nothing
/// closes; once dc-b is ready again, the backends still draining hand off over a new window.
#[test]
fn with_every_apiserver_draining_nothing_moves_until_one_is_ready() {
    let h = handing_off(|h| {
        for b in [DC_A, DC_B, WITNESS] {
            h.set(b, Truth::Draining);
        }
        h.run_to(s(12.0));
        assert_eq!(h.open_on(DC_A), 16, "nowhere to go: nothing closed");
        h.set(DC_B, Truth::Ready);
        h.run_to(s(60.0));
    });
    let resumed: Vec<Duration> = h
        .bumps
        .iter()
        .filter(|b| b.0 == DC_A && b.1 == CloseReason::Handoff)
        .map(|b| b.2)
        .collect();
    assert_eq!(
        resumed.len(),
        2,
        "handed off, called off, handed off again: {:?}",
        h.bumps
    );
    assert!(
        resumed[1] >= s(16.0),
        "once dc-b is ready (16.01 s): {resumed:?}"
    );
    assert_eq!(h.closed.len(), 16);
    assert!(h
        .closed
        .iter()
        .all(|c| c.why == CloseReason::Handoff && c.at >= resumed[1]));
}

/// A draining answer in the middle of a fall (one failed `etcd` check counted): the backend is
/// handed off, as at any first `[-]shutdown` answer, not cut as `turned_unready`.
#[test]
fn a_draining_answer_during_a_fall_is_a_hand_off() {
    let h = dc_a_answers(Truth::Unready, s(5.5), Truth::Draining);
    let handoff = bump(&h, DC_A, CloseReason::Handoff);
    assert!(handoff >= s(6.0), "at the fast re-probe: {handoff:?}");
    assert!(
        h.closed.iter().all(|c| c.why == CloseReason::Handoff),
        "{:?}",
        h.closed
    );
    assert!(
        h.closed.iter().any(|c| c.at > handoff + s(10.0)),
        "spread over the window"
    );
}

/// The bumps of `backend` for `why`, in order.
fn bumps_of(h: &Step, backend: &str, why: CloseReason) -> Vec<Duration> {
    let of = h.bumps.iter().filter(|b| b.0 == backend && b.1 == why);
    of.map(|b| b.2).collect()
}

/// Every backend silent (a cluster-wide blink: none ready, failing open), 8 connections on
/// dc-b, then `after` plays the end of it.
fn blink_then(after: impl FnOnce(&mut Step)) -> Step {
    let mut h = cluster(s(600.0));
    h.run_to(s(1.0));
    h.connect(DC_B, 8);
    for b in [DC_A, DC_B, WITNESS] {
        h.set(b, Truth::Silent);
    }
    h.run_to(s(12.0));
    for b in [DC_A, DC_B, WITNESS] {
        assert_eq!(h.state(b), State::Unready, "{b} fell in the blink");
    }
    after(&mut h);
    h
}

/// The end of a cluster-wide blink: every apiserver was silent, dc-a answers first, and dc-b's
/// silence began with the event: its next result decides, and it answers again. Nothing moves.
#[test]
fn the_first_answer_after_a_cluster_wide_blink_moves_nothing() {
    let h = blink_then(|h| {
        for b in [DC_A, DC_B, WITNESS] {
            h.set(b, Truth::Ready);
        }
        h.run_to(s(40.0));
    });
    assert_eq!(h.state(DC_B), State::Ready);
    assert!(
        bumps_of(&h, DC_B, CloseReason::Silent).is_empty(),
        "{:?}",
        h.bumps
    );
    assert!(h.closed.is_empty(), "{:?}", h.closed);
}

/// After a blink, dc-a answers (500, no quorum) while dc-b stays silent: dc-b's next check,
/// which started after dc-a answered, confirms it, and its connections move (`silent`), once.
#[test]
fn a_backend_still_silent_after_another_answers_moves_at_its_next_check() {
    let mut answered = Duration::ZERO;
    let h = blink_then(|h| {
        h.set(DC_A, Truth::Unready);
        h.run_to(s(40.0));
        answered = h
            .changes
            .iter()
            .find(|c| c.0 == DC_A && c.2 > s(12.0))
            .map_or(Duration::ZERO, |c| c.2);
    });
    let moved = bumps_of(&h, DC_B, CloseReason::Silent);
    assert_eq!(moved.len(), 1, "{:?}", h.bumps);
    // dc-a's first answer comes at its next probe (at 15 s); dc-b's check then started at 15 s
    // too, so only the one after it (about 20 s) confirms.
    assert!(moved[0] > s(15.5), "not at the first answer: {moved:?}");
    assert!(
        moved[0] <= s(23.5),
        "at dc-b's next check: {moved:?} ({answered:?})"
    );
    assert_eq!(h.closed.len(), 8, "{:?}", h.closed);
    assert!(h.closed.iter().all(|c| c.why == CloseReason::Silent));
}

/// Failing open while the others answer 500: dc-b falling silent is confirmed by the very check
/// that found it, and its connections move at once.
#[test]
fn a_backend_falling_silent_while_others_answer_moves_at_once() {
    let mut h = cluster(s(600.0));
    h.run_to(s(1.0));
    h.connect(DC_B, 8);
    h.set(DC_A, Truth::Unready);
    h.set(WITNESS, Truth::Unready);
    h.run_to(s(7.0));
    h.set(DC_B, Truth::Silent);
    h.run_to(s(30.0));
    let fell = turned(&h, DC_B, State::Unready);
    assert_eq!(
        bumps_of(&h, DC_B, CloseReason::Silent),
        [fell],
        "{:?}",
        h.bumps
    );
}

/// `backends` with `reentry_window` as given; `back` falls unready at 1 s and answers ready
/// again from 12 s: stepped to the moment it turns ready.
fn back_from_unready(backends: &[(&str, &str)], back: &str, window: Duration) -> Step {
    let mut h = Step::new("dc-b", backends, |r| r.reentry_window = window);
    h.run_to(s(1.0));
    h.set(back, Truth::Unready);
    h.run_to(s(12.0));
    assert_eq!(h.state(back), State::Unready);
    h.set(back, Truth::Ready);
    h.run_until(&format!("{back} turns ready"), s(30.0), |h| {
        h.state(back) == State::Ready
    });
    h
}

/// The node's own apiserver comes back from unready: a new connection goes on to the remote
/// one until its own point of the re-entry window (a draw of 0.4: 2 s in), then home; a
/// connection that drew 0 goes home at once; a backend seen ready for the first time (start-up)
/// is not paced.
#[test]
fn a_backend_back_from_unready_takes_each_connection_from_its_point_of_the_window() {
    let window = s(5.0);
    let mut start = Step::new("dc-b", &[(DC_A, "dc-a"), (DC_B, "dc-b")], |r| {
        r.reentry_window = window
    });
    start.run_to(s(1.0));
    assert_eq!(
        start.first_pick(0.99),
        (DC_B.to_string(), false),
        "start-up is not paced"
    );
    let mut h = back_from_unready(&[(DC_A, "dc-a"), (DC_B, "dc-b")], DC_B, window);
    let back = h.elapsed();
    assert_eq!(
        h.first_pick(0.4),
        (DC_A.to_string(), false),
        "paced: to the remote one"
    );
    assert_eq!(
        h.first_pick(0.0),
        (DC_B.to_string(), false),
        "a draw of 0 passes"
    );
    h.run_to(back + s(1.99));
    assert_eq!(
        h.first_pick(0.4),
        (DC_A.to_string(), false),
        "before its point"
    );
    h.run_to(back + s(2.0));
    assert_eq!(
        h.first_pick(0.4),
        (DC_B.to_string(), false),
        "home from its point on"
    );
    assert_eq!(
        h.first_pick(0.9),
        (DC_A.to_string(), false),
        "a later draw still waits"
    );
    h.run_to(back + window);
    assert_eq!(
        h.first_pick(0.999),
        (DC_B.to_string(), false),
        "nothing paced at the end"
    );
}

/// Every ready backend just back (a spell with none ready ends): a new connection waits for
/// its point, never past the window.
#[test]
fn after_a_spell_with_none_ready_a_connection_waits_for_its_point_at_most_the_window() {
    let window = s(5.0);
    let mut h = back_from_unready(&[(DC_B, "dc-b")], DC_B, window);
    let back = h.elapsed();
    assert_eq!(
        h.first_pick(0.5),
        (DC_B.to_string(), true),
        "waits at {back:?}"
    );
    h.run_to(back + s(2.5));
    assert_eq!(
        h.first_pick(0.5),
        (DC_B.to_string(), false),
        "goes at its point"
    );
    assert_eq!(h.first_pick(0.999), (DC_B.to_string(), true));
    h.run_to(back + window);
    assert_eq!(
        h.first_pick(0.999),
        (DC_B.to_string(), false),
        "at most the window"
    );
}

/// `reentry_window: 0s` paces nothing.
#[test]
fn a_zero_window_paces_nothing() {
    let h = back_from_unready(&[(DC_A, "dc-a"), (DC_B, "dc-b")], DC_B, Duration::ZERO);
    assert_eq!(h.first_pick(0.999), (DC_B.to_string(), false));
}

/// A spell with none ready ends with dc-b back and dc-a still failing: one probe interval later
/// the recovery moves the connections that failed open to dc-a, and their re-dials (every
/// node's, about then) meet dc-b paced afresh, though the window opened when it turned ready is
/// over.
#[test]
fn a_recovery_moves_connections_onto_a_backend_paced_afresh() {
    let window = s(5.0);
    let mut h = Step::new("dc-b", &[(DC_A, "dc-a"), (DC_B, "dc-b")], |r| {
        r.reentry_window = window
    });
    h.run_to(s(1.0));
    h.set(DC_A, Truth::Unready);
    h.set(DC_B, Truth::Unready);
    h.run_to(s(12.0));
    assert_eq!(
        (h.state(DC_A), h.state(DC_B)),
        (State::Unready, State::Unready)
    );
    h.connect(DC_A, 4);
    h.set(DC_B, Truth::Ready);
    h.run_until("a recovery moves dc-a's connections", s(40.0), |h| {
        h.bumps
            .iter()
            .any(|b| b.0 == DC_A && b.1 == CloseReason::LeftNoneReady)
    });
    let moved = h.elapsed();
    let back = turned(&h, DC_B, State::Ready);
    assert!(
        moved >= back + window,
        "moved {moved:?}, back {back:?}: after the first window"
    );
    assert_eq!(
        h.first_pick(0.5),
        (DC_B.to_string(), true),
        "the moved connections' re-dials wait for their points"
    );
    h.run_to(moved + window / 2);
    assert_eq!(h.first_pick(0.5), (DC_B.to_string(), false));
}

/// The node's home (dc-b) is overloaded: its request check finds it degraded at 1 s and healthy
/// again at 40 s. New connections go to a healthy backend meanwhile, the ones on it stay, and
/// failback waits `failback_after` from when it is healthy.
#[test]
fn a_degraded_home_takes_no_new_connections_closes_none_and_is_failed_back_to_once_healthy() {
    let mut h = cluster(s(10.0));
    h.run_to(s(1.0));
    h.connect(DC_B, 4);
    assert_eq!(h.first_pick(0.0).0, DC_B, "home first while healthy");
    h.degrade(DC_B, Some("HTTP 429 Too Many Requests, Retry-After: 1s"));
    assert_ne!(h.first_pick(0.0).0, DC_B, "ranked after the healthy ones");
    h.run_to(s(20.0));
    h.connect(DC_A, 3);
    h.run_to(s(40.0));
    assert_eq!(h.state(DC_B), State::Ready, "degraded is not unready");
    assert_eq!(h.open_on(DC_B), 4, "nothing closed on the degraded one");
    assert!(h.bumps.is_empty(), "no failback onto it: {:?}", h.bumps);
    h.degrade(DC_B, None);
    assert_eq!(h.first_pick(0.0).0, DC_B, "home first again");
    h.run_to(s(60.0));
    let failback = bump(&h, DC_A, CloseReason::Failback);
    assert!(
        failback >= s(50.0) && failback < s(51.0),
        "failback_after from when it was healthy: {failback:?}"
    );
}
