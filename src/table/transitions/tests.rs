//! The transitions decision, table-tested: evictions by rule and the no-ready alarm.

use super::*;
use State::*;
use WhenNoneReady::*;

use CloseReason::*;

/// A backend that answers HTTP before and after (the usual case).
fn step(before: Option<State>, after: State) -> Change {
    Change {
        before,
        after,
        was_answering: true,
        answering: true,
    }
}

/// A backend whose checks got no HTTP answer before / after (timeouts, refused, TLS).
fn quiet(before: Option<State>, after: State, was_answering: bool, answering: bool) -> Change {
    Change {
        before,
        after,
        was_answering,
        answering,
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
fn with_refuse_a_backend_that_turns_unready_while_others_are_ready_is_turned_unready() {
    let t = decide(
        scene(true, Refuse, false, false),
        &[step(Some(Ready), Unready), step(Some(Ready), Ready)],
    );
    assert_eq!(
        t.evict,
        vec![(0, TurnedUnready)],
        "the first rule that applies names it"
    );
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

/// Failing open, a backend that turns (or is added) unready while another is ready is
/// evicted, once.
#[test]
fn a_backend_turning_unready_beside_a_ready_one_is_evicted_once() {
    assert_decisions(vec![
        (
            "unready while another is ready: evict",
            true,
            vec![step(Some(Ready), Unready), step(Some(Ready), Ready)],
            FailOpen,
            false,
            vec![(0, TurnedUnready)],
            Alarm::Unchanged,
        ),
        (
            "already unready: no second eviction",
            true,
            vec![step(Some(Unready), Unready), step(Some(Ready), Ready)],
            FailOpen,
            false,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "a backend added unready while others are ready: evicted (nothing to close yet)",
            true,
            vec![step(Some(Ready), Ready), step(None, Unready)],
            FailOpen,
            false,
            vec![(1, TurnedUnready)],
            Alarm::Unchanged,
        ),
    ]);
}

/// Refusing, a backend that turns unready is evicted at once, whatever else is ready.
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

/// Leaving none-ready clears the alarm and evicts every unready backend.
#[test]
fn leaving_none_ready_clears_the_alarm_evicting_every_unready_backend() {
    assert_decisions(vec![(
        "leaving none-ready: evict every unready",
        false,
        vec![step(Some(Unready), Unready), step(Some(Unready), Ready)],
        FailOpen,
        true,
        vec![(0, LeftNoneReady)],
        Alarm::Clear,
    )]);
}

/// Failing open, a backend that gets no HTTP answer is evicted once another answers, and only
/// once.
#[test]
fn failing_open_a_silent_backend_is_evicted_once_someone_else_answers() {
    assert_decisions(vec![
        (
            "failing open: a backend stops answering while another answers: evict it",
            false,
            vec![
                quiet(Some(Unready), Unready, true, false),
                step(Some(Unready), Unready),
            ],
            FailOpen,
            true,
            vec![(0, Silent)],
            Alarm::Unchanged,
        ),
        (
            "failing open: already silent and evicted: not again",
            false,
            vec![
                quiet(Some(Unready), Unready, false, false),
                step(Some(Unready), Unready),
            ],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "failing open: silent while nobody answers: keep (nowhere better)",
            false,
            vec![
                quiet(Some(Unready), Unready, true, false),
                quiet(Some(Unready), Unready, false, false),
            ],
            FailOpen,
            true,
            vec![],
            Alarm::Unchanged,
        ),
        (
            "failing open: someone starts answering: evict the silent ones",
            false,
            vec![
                quiet(Some(Unready), Unready, false, false),
                quiet(Some(Unready), Unready, false, true),
            ],
            FailOpen,
            true,
            vec![(0, Silent)],
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
