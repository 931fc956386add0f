//! The transitions decision, table-tested: evictions by rule and the no-ready alarm.

use super::*;
use crate::testing::fixtures;
use State::*;
use WhenNoneReady::*;

use CloseReason::*;

/// A backend as a snapshot shows it, by letter: as [`fixtures::health`] (`R` ready, `A`
/// answering unready, `D` draining, `S` silent, `X` unreached, `?` unchecked), and `r` unready
/// with a passed check (rising).
fn seen(letter: char) -> Seen {
    match letter {
        'r' => Seen {
            state: Unready,
            reach: Some(Reach::answered(200, std::time::Duration::from_millis(2))),
        },
        _ => Seen::of(&fixtures::health(letter)),
    }
}

/// A backend's change by two letters ([`seen`]), before and after: `"RD"` a ready backend found
/// draining; `-` before: just added.
fn ch(letters: &str) -> Change {
    let mut l = letters.chars();
    let (before, after) = (l.next().expect("before"), l.next().expect("after"));
    Change {
        before: (before != '-').then(|| seen(before)),
        after: seen(after),
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
        let t = decide(scene(true, policy, false, false), &[ch("RA"), ch("RR")]);
        assert_eq!(t.confirm, vec![0], "{policy:?}: confirmed first");
        assert!(t.evict.is_empty(), "{policy:?}: nothing closed yet");
    }
    let t = decide(scene(true, FailOpen, false, false), &[ch("RR"), ch("-A")]);
    assert_eq!(t.confirm, vec![1], "added unready beside a ready one");
    let t = decide(scene(true, FailOpen, false, false), &[ch("AA"), ch("RR")]);
    assert!(
        t.confirm.is_empty() && t.evict.is_empty(),
        "already unready"
    );
}

#[test]
fn a_draining_backend_is_handed_off() {
    let t = decide(scene(true, FailOpen, false, false), &[ch("RD"), ch("RR")]);
    assert_eq!((t.evict, t.confirm), (vec![(0, Handoff)], vec![]));
}

#[test]
fn a_draining_backend_failing_another_check_closes_the_rest_at_once() {
    let t = decide(scene(true, FailOpen, false, false), &[ch("DA"), ch("RR")]);
    assert_eq!(t.evict, vec![(0, TurnedUnready)]);
    let t = decide(scene(true, FailOpen, false, false), &[ch("DD"), ch("RR")]);
    assert!(t.evict.is_empty(), "still draining: the hand-off goes on");
    assert!(
        t.call_off.is_empty(),
        "still draining: the hand-off goes on"
    );
}

#[test]
fn a_draining_backend_that_passes_has_its_hand_off_called_off_not_cut() {
    for (what, after) in [("rising (rise 2)", "Dr"), ("ready (rise 1)", "DR")] {
        let t = decide(scene(true, FailOpen, false, false), &[ch(after), ch("RR")]);
        assert_eq!((t.evict, t.call_off), (vec![], vec![0]), "{what}");
    }
    let t = decide(scene(true, FailOpen, false, false), &[ch("rD"), ch("RR")]);
    assert_eq!(
        (t.evict, t.call_off),
        (vec![(0, Handoff)], vec![]),
        "draining again after a pass of its rise: handed off again"
    );
}

#[test]
fn a_hand_off_waits_while_no_backend_is_ready_and_goes_on_once_one_is() {
    let t = decide(scene(true, FailOpen, false, false), &[ch("DD"), ch("RD")]);
    assert_eq!(
        (t.evict, t.call_off),
        (vec![], vec![0, 1]),
        "the other drains too: nowhere to go, called off"
    );
    let t = decide(scene(true, Refuse, false, false), &[ch("DD"), ch("RD")]);
    assert_eq!(
        (t.evict, t.call_off),
        (vec![(1, Refusing)], vec![]),
        "refusing: nothing may stay on an unready backend"
    );
    let t = decide(scene(false, FailOpen, true, false), &[ch("DD"), ch("DD")]);
    assert_eq!((t.evict, t.call_off), (vec![], vec![]), "still nowhere");
    let t = decide(scene(false, FailOpen, true, false), &[ch("DD"), ch("DR")]);
    assert_eq!(
        (t.evict, t.call_off),
        (vec![(0, Handoff)], vec![1]),
        "one is ready again: the other's hand-off goes on"
    );
    let t = decide(scene(false, FailOpen, true, false), &[ch("DD"), ch("AR")]);
    assert_eq!(t.evict, vec![(0, Handoff)], "another backend ready again");
}

#[test]
fn every_backend_failing_closes_nothing() {
    let t = decide(scene(true, FailOpen, false, false), &[ch("RA"), ch("RD")]);
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
        vec![ch("RA")],
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
            vec![ch("RA"), ch("AA")],
            FailOpen,
            false,
            vec![],
            Alarm::Raise,
        ),
        (
            "not settled: no alarm",
            false,
            vec![ch("?A"), ch("??")],
            FailOpen,
            false,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "already announced: no second alarm",
            false,
            vec![ch("AA")],
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
        vec![ch("AA"), ch("AR")],
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
            vec![ch("AS"), ch("AA")],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "failing open: someone starts answering",
            false,
            vec![ch("SS"), ch("SA")],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
    ]);
}

#[test]
fn switching_to_refuse_evicts_every_unready_backend_even_long_unready_ones() {
    let steps = [ch("AA"), ch("RR")];
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
    let t = decide(scene(false, FailOpen, true, false), &[ch("AA"), ch("-?")]);
    assert_eq!(
        (t.alarm, t.announced, t.no_ready_gauge),
        (Alarm::Unchanged, true, true)
    );
}

#[test]
fn gauge_is_down_before_the_alarm_is_raised() {
    let t = decide(scene(false, FailOpen, false, false), &[ch("-A"), ch("-?")]);
    assert!(!t.no_ready_gauge && !t.announced);
}
