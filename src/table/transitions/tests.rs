//! The transitions decision, table-tested: evictions by rule and the no-ready alarm.

use super::*;
use State::*;
use WhenNoneReady::*;

use CloseReason::*;

/// The latest check of a backend in `state` that answers HTTP: failed if unready, else passed.
fn answered(state: Option<State>) -> Check {
    if state == Some(Unready) {
        Check::Failed
    } else {
        Check::Passed
    }
}

/// A backend that answers HTTP before and after (the usual case).
fn step(before: Option<State>, after: State) -> Change {
    Change {
        before,
        after,
        was: answered(before),
        now: answered(Some(after)),
    }
}

/// A backend whose only failing check is `shutdown` before / after (draining).
fn drain(before: Option<State>, after: State, was_draining: bool, draining: bool) -> Change {
    let c = step(before, after);
    Change {
        was: if was_draining { Check::Draining } else { c.was },
        now: if draining { Check::Draining } else { c.now },
        ..c
    }
}

/// A draining backend whose latest check passed (a pass toward `rise`, or the rise itself).
fn drain_passed(after: State) -> Change {
    Change {
        now: Check::Passed,
        ..drain(Some(Unready), after, true, false)
    }
}

/// A backend whose checks got no HTTP answer before / after (timeouts, refused, TLS).
fn quiet(before: Option<State>, after: State, was_answering: bool, answering: bool) -> Change {
    let c = step(before, after);
    Change {
        was: if was_answering { c.was } else { Check::Silent },
        now: if answering { c.now } else { Check::Silent },
        ..c
    }
}

fn scene(
    was_any_ready: bool,
    policy: WhenNoneReady,
    announced: bool,
    became_refusing: bool,
) -> Scene {
    Scene {
        was_any_ready,
        policy,
        became_refusing,
        announced,
    }
}

#[test]
fn a_backend_turning_unready_beside_a_ready_one_awaits_its_escape_route() {
    for policy in [FailOpen, Refuse] {
        let t = decide(
            scene(true, policy, false, false),
            &[step(Some(Ready), Unready), step(Some(Ready), Ready)],
        );
        assert_eq!(t.confirm, vec![0], "{policy:?}: confirmed first");
        assert!(t.evict.is_empty(), "{policy:?}: nothing closed yet");
    }
    let t = decide(
        scene(true, FailOpen, false, false),
        &[step(Some(Ready), Ready), step(None, Unready)],
    );
    assert_eq!(t.confirm, vec![1], "added unready beside a ready one");
    let t = decide(
        scene(true, FailOpen, false, false),
        &[step(Some(Unready), Unready), step(Some(Ready), Ready)],
    );
    assert!(
        t.confirm.is_empty() && t.evict.is_empty(),
        "already unready"
    );
}

#[test]
fn a_draining_backend_is_handed_off() {
    let t = decide(
        scene(true, FailOpen, false, false),
        &[
            drain(Some(Ready), Unready, false, true),
            step(Some(Ready), Ready),
        ],
    );
    assert_eq!((t.evict, t.confirm), (vec![(0, Handoff)], vec![]));
}

#[test]
fn a_draining_backend_failing_another_check_closes_the_rest_at_once() {
    let t = decide(
        scene(true, FailOpen, false, false),
        &[
            drain(Some(Unready), Unready, true, false),
            step(Some(Ready), Ready),
        ],
    );
    assert_eq!(t.evict, vec![(0, TurnedUnready)]);
    let t = decide(
        scene(true, FailOpen, false, false),
        &[
            drain(Some(Unready), Unready, true, true),
            step(Some(Ready), Ready),
        ],
    );
    assert!(t.evict.is_empty(), "still draining: the hand-off goes on");
    assert!(
        t.call_off.is_empty(),
        "still draining: the hand-off goes on"
    );
}

#[test]
fn a_draining_backend_that_passes_has_its_hand_off_called_off_not_cut() {
    for (what, after) in [("rising (rise 2)", Unready), ("ready (rise 1)", Ready)] {
        let t = decide(
            scene(true, FailOpen, false, false),
            &[drain_passed(after), step(Some(Ready), Ready)],
        );
        assert_eq!((t.evict, t.call_off), (vec![], vec![0]), "{what}");
    }
    let t = decide(
        scene(true, FailOpen, false, false),
        &[
            Change {
                was: Check::Passed,
                ..drain(Some(Unready), Unready, false, true)
            },
            step(Some(Ready), Ready),
        ],
    );
    assert_eq!(
        (t.evict, t.call_off),
        (vec![(0, Handoff)], vec![]),
        "draining again after a pass of its rise: handed off again"
    );
}

#[test]
fn a_hand_off_waits_while_no_backend_is_ready_and_goes_on_once_one_is() {
    let t = decide(
        scene(true, FailOpen, false, false),
        &[
            drain(Some(Unready), Unready, true, true),
            drain(Some(Ready), Unready, false, true),
        ],
    );
    assert_eq!(
        (t.evict, t.call_off),
        (vec![], vec![0, 1]),
        "the other drains too: nowhere to go, called off"
    );
    let t = decide(
        scene(true, Refuse, false, false),
        &[
            drain(Some(Unready), Unready, true, true),
            drain(Some(Ready), Unready, false, true),
        ],
    );
    assert_eq!(
        (t.evict, t.call_off),
        (vec![(1, Refusing)], vec![]),
        "refusing: nothing may stay on an unready backend"
    );
    let t = decide(
        scene(false, FailOpen, true, false),
        &[
            drain(Some(Unready), Unready, true, true),
            drain(Some(Unready), Unready, true, true),
        ],
    );
    assert_eq!((t.evict, t.call_off), (vec![], vec![]), "still nowhere");
    let t = decide(
        scene(false, FailOpen, true, false),
        &[
            drain(Some(Unready), Unready, true, true),
            drain_passed(Ready),
        ],
    );
    assert_eq!(
        (t.evict, t.call_off),
        (vec![(0, Handoff)], vec![1]),
        "one is ready again: the other's hand-off goes on"
    );
    let t = decide(
        scene(false, FailOpen, true, false),
        &[
            drain(Some(Unready), Unready, true, true),
            step(Some(Unready), Ready),
        ],
    );
    assert_eq!(t.evict, vec![(0, Handoff)], "another backend ready again");
}

#[test]
fn every_backend_failing_closes_nothing() {
    let t = decide(
        scene(true, FailOpen, false, false),
        &[
            step(Some(Ready), Unready),
            drain(Some(Ready), Unready, false, true),
        ],
    );
    assert_eq!((t.evict, t.confirm), (vec![], vec![]));
    assert_eq!(t.alarm, Alarm::Raise);
}

/// A row of a decision table: (name, was_any_ready, steps, policy, announced, want evict,
/// want alarm).
type Case = (
    &'static str,
    bool,
    Vec<Change>,
    WhenNoneReady,
    bool,
    Vec<(usize, CloseReason)>,
    Alarm,
);

/// Decides every case (no backend newly refusing) and checks its evictions and alarm.
fn assert_decisions(cases: Vec<Case>) {
    for (name, was_any_ready, steps, policy, announced, evict, alarm) in cases {
        let t = decide(scene(was_any_ready, policy, announced, false), &steps);
        assert_eq!(t.evict, evict, "{name}: evict");
        assert_eq!(t.alarm, alarm, "{name}: alarm");
    }
}

/// Refusing, a backend that turns unready with nothing else ready is evicted at once.
#[test]
fn with_refuse_an_unready_backend_is_evicted_even_with_nothing_ready() {
    assert_decisions(vec![(
        "refuse: evict at once even with nothing ready",
        true,
        vec![step(Some(Ready), Unready)],
        Refuse,
        false,
        vec![(0, Refusing)],
        Alarm::Raise,
    )]);
}

/// The no-ready alarm is raised once nothing is ready, not before the backends settle, not
/// twice, and not for an empty list.
#[test]
fn the_no_ready_alarm_is_raised_once_nothing_settled_is_ready() {
    assert_decisions(vec![
        (
            "none ready + fail_open: keep, raise the alarm",
            true,
            vec![step(Some(Ready), Unready), step(Some(Unready), Unready)],
            FailOpen,
            false,
            vec![],
            Alarm::Raise,
        ),
        (
            "not settled: no alarm",
            false,
            vec![step(Some(Unknown), Unready), step(Some(Unknown), Unknown)],
            FailOpen,
            false,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "already announced: no second alarm",
            false,
            vec![step(Some(Unready), Unready)],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "no backends: no alarm",
            true,
            vec![],
            FailOpen,
            false,
            vec![],
            Alarm::Unchanged,
        ),
    ]);
}

/// Leaving none-ready clears the alarm and closes nothing at once (`recovery` decides later).
#[test]
fn leaving_none_ready_clears_the_alarm_closing_nothing_at_once() {
    assert_decisions(vec![(
        "leaving none-ready: nothing closed now",
        false,
        vec![step(Some(Unready), Unready), step(Some(Unready), Ready)],
        FailOpen,
        true,
        vec![],
        Alarm::Clear,
    )]);
}

/// Failing open, a backend that gets no HTTP answer is not the snapshot rules' to close: whether
/// its silence was found after another answered is a matter of time (`silence`, the writer).
#[test]
fn failing_open_a_silent_backend_is_left_to_the_silence_policy() {
    assert_decisions(vec![
        (
            "failing open: a backend stops answering while another answers",
            false,
            vec![
                quiet(Some(Unready), Unready, true, false),
                step(Some(Unready), Unready),
            ],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "failing open: someone starts answering",
            false,
            vec![
                quiet(Some(Unready), Unready, false, false),
                quiet(Some(Unready), Unready, false, true),
            ],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
    ]);
}

#[test]
fn switching_to_refuse_evicts_every_unready_backend_even_long_unready_ones() {
    let steps = [step(Some(Unready), Unready), step(Some(Ready), Ready)];
    assert_eq!(
        decide(scene(true, Refuse, false, true), &steps).evict,
        vec![(0, Refusing)]
    );
    assert!(decide(scene(true, Refuse, false, false), &steps)
        .evict
        .is_empty());
}

#[test]
fn gauge_stays_up_while_a_just_added_backend_is_unchecked() {
    let t = decide(
        scene(false, FailOpen, true, false),
        &[step(Some(Unready), Unready), step(None, Unknown)],
    );
    assert_eq!(
        (t.alarm, t.announced, t.no_ready_gauge),
        (Alarm::Unchanged, true, true)
    );
}

#[test]
fn gauge_is_down_before_the_alarm_is_raised() {
    let t = decide(
        scene(false, FailOpen, false, false),
        &[step(None, Unready), step(None, Unknown)],
    );
    assert!(!t.no_ready_gauge && !t.announced);
}
