//! What a new snapshot means for the backends' connections and for the no-ready alarm: a pure
//! decision from the states before and after, table-tested like the picker.
//!
//! Does not own applying it (stamping epochs, publishing, bumping, logging): `table` does.

use crate::eviction::CloseReason;
use crate::pick::WhenNoneReady;
use crate::verdict::State;

/// One backend of the new snapshot, with its state in the old one (`None`: just added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// State in the previous snapshot.
    pub before: Option<State>,
    /// State in the new snapshot.
    pub after: State,
    /// Its latest check got an HTTP answer, as of the previous snapshot (false if just added).
    pub was_answering: bool,
    /// ... and as of the new one.
    pub answering: bool,
}

impl Change {
    fn just_failed(&self) -> bool {
        self.after == State::Unready && self.before != Some(State::Unready)
    }

    fn long_unready(&self) -> bool {
        self.after == State::Unready && self.before == Some(State::Unready)
    }
}

/// Whether "no backend is ready" is announced (WARN log, `readyprism_no_ready_backends` = 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alarm {
    /// Nothing changes.
    Unchanged,
    /// Every backend has answered and none is ready: say so.
    Raise,
    /// A backend is ready again after an announced no-ready period.
    Clear,
}

/// The decision for one new snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transitions {
    /// Backends (indices into the new snapshot) whose connections must be closed, and why.
    pub evict: Vec<(usize, CloseReason)>,
    /// What happens to the no-ready alarm.
    pub alarm: Alarm,
    /// Whether the alarm is up after this snapshot (the value to carry to the next decision).
    pub announced: bool,
    /// The `no_ready_backends` gauge: up only while nothing is ready and it was announced.
    pub no_ready_gauge: bool,
}

/// What the whole table looks like across the change: the facts every rule reads.
#[derive(Debug, Clone, Copy)]
pub struct Scene {
    /// Some backend was ready in the previous snapshot.
    pub was_any_ready: bool,
    /// The no-ready policy now.
    pub policy: WhenNoneReady,
    /// A reload just switched the policy from `fail_open` to `refuse`.
    pub became_refusing: bool,
    /// Whether the no-ready alarm was up.
    pub announced: bool,
}

/// Facts derived once from the scene and every change.
struct Facts {
    scene: Scene,
    none_ready: bool,
    /// Failing open, some unready backend answers HTTP now ...
    answers_now: bool,
    /// ... and some long-unready one answered as of the previous snapshot, while nothing was ready.
    answered_before: bool,
}

/// A rule: the reason to close `c`'s connections, if it applies.
type Rule = fn(&Facts, &Change) -> Option<CloseReason>;

/// The rules, first match wins; each names its reason.
const RULES: [Rule; 4] = [turned_unready, left_none_ready, refusing, silent];

/// It turned unready while another backend is ready: its clients re-dial a ready one.
fn turned_unready(f: &Facts, c: &Change) -> Option<CloseReason> {
    (c.just_failed() && !f.none_ready).then_some(CloseReason::TurnedUnready)
}

/// A backend became ready after a spell with none: every unready backend's connections (those
/// that failed open to it) go to the ready one.
fn left_none_ready(f: &Facts, c: &Change) -> Option<CloseReason> {
    let left = !f.scene.was_any_ready && !f.none_ready;
    (left && c.after == State::Unready).then_some(CloseReason::LeftNoneReady)
}

/// With `refuse`, nothing may relay to an unready backend: one that just failed is closed at
/// once, ready backends or not, and when a reload switches to `refuse`, every unready one is.
fn refusing(f: &Facts, c: &Change) -> Option<CloseReason> {
    let refuse = f.scene.policy == WhenNoneReady::Refuse;
    let applies =
        (refuse && c.just_failed()) || (f.scene.became_refusing && c.after == State::Unready);
    applies.then_some(CloseReason::Refusing)
}

/// Failing open, a backend that does not answer at all (timeout, refused, TLS failure) is closed
/// as soon as some backend answers HTTP — once: not again while it stays silent.
fn silent(f: &Facts, c: &Change) -> Option<CloseReason> {
    let failing_open = f.none_ready && f.scene.policy == WhenNoneReady::FailOpen;
    let silent_now = failing_open && c.after == State::Unready && !c.answering && f.answers_now;
    let silent_before =
        !f.scene.was_any_ready && c.long_unready() && !c.was_answering && f.answered_before;
    (silent_now && !silent_before).then_some(CloseReason::Silent)
}

/// Decides evictions (each rule above, with its reason) and the alarm.
///
/// While nothing is ready and we fail open, nothing else is evicted: re-dialling would only land
/// on the same backends. The alarm is raised only once every backend has answered ("settled"):
/// at start-up the local apiserver without quorum answers its 500 before the remote ones answer
/// their 200.
pub fn decide(scene: Scene, changes: &[Change]) -> Transitions {
    let none_ready = !changes.iter().any(|c| c.after == State::Ready);
    let facts = Facts {
        scene,
        none_ready,
        answers_now: changes
            .iter()
            .any(|c| c.after == State::Unready && c.answering),
        answered_before: !scene.was_any_ready
            && changes
                .iter()
                .any(|c| c.before == Some(State::Unready) && c.was_answering),
    };
    let evict = changes
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            RULES
                .iter()
                .find_map(|rule| rule(&facts, c))
                .map(|r| (i, r))
        })
        .collect();
    let settled = changes.iter().all(|c| c.after != State::Unknown);
    let announced = scene.announced;
    let alarm = if none_ready && settled && !changes.is_empty() && !announced {
        Alarm::Raise
    } else if announced && !none_ready {
        Alarm::Clear
    } else {
        Alarm::Unchanged
    };
    let announced = match alarm {
        Alarm::Raise => true,
        Alarm::Clear => false,
        Alarm::Unchanged => announced,
    };
    Transitions {
        evict,
        alarm,
        announced,
        // A backend added while nothing is ready does not end the alert until it is ready.
        no_ready_gauge: none_ready && announced,
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn table_of_decisions() {
        // (name, was_any_ready, steps, policy, announced, want evict, want alarm)
        type Case = (
            &'static str,
            bool,
            Vec<Change>,
            WhenNoneReady,
            bool,
            Vec<(usize, CloseReason)>,
            Alarm,
        );
        let cases: Vec<Case> = vec![
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
                "none ready + fail_open: keep, raise the alarm",
                true,
                vec![step(Some(Ready), Unready), step(Some(Unready), Unready)],
                FailOpen,
                false,
                vec![],
                Alarm::Raise,
            ),
            (
                "leaving none-ready: evict every unready",
                false,
                vec![step(Some(Unready), Unready), step(Some(Unready), Ready)],
                FailOpen,
                true,
                vec![(0, LeftNoneReady)],
                Alarm::Clear,
            ),
            (
                "refuse: evict at once even with nothing ready",
                true,
                vec![step(Some(Ready), Unready)],
                Refuse,
                false,
                vec![(0, Refusing)],
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
            (
                "no backends: no alarm",
                true,
                vec![],
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
        ];
        for (name, was_any_ready, steps, policy, announced, evict, alarm) in cases {
            let t = decide(scene(was_any_ready, policy, announced, false), &steps);
            assert_eq!(t.evict, evict, "{name}: evict");
            assert_eq!(t.alarm, alarm, "{name}: alarm");
        }
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
}
