//! What a new snapshot means for the backends' connections and for the no-ready alarm: a pure
//! decision from the states before and after, table-tested like the picker.
//!
//! Does not own applying it (stamping epochs, publishing, bumping, logging): `table` does.

use crate::health::state::State;
use crate::pick::WhenNoneReady;

/// One backend of the new snapshot, with its state in the old one (`None`: just added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// State in the previous snapshot.
    pub before: Option<State>,
    /// State in the new snapshot.
    pub after: State,
    /// Its latest check got an HTTP answer, as of the previous snapshot (false if just added).
    pub was_answering: bool,
    /// ... and as of the new one.
    pub answering: bool,
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
    /// Indices (into the new snapshot) of backends whose connections must be closed.
    pub evict: Vec<usize>,
    /// What happens to the no-ready alarm.
    pub alarm: Alarm,
    /// Whether the alarm is up after this snapshot (the value to carry to the next decision).
    pub announced: bool,
    /// The `no_ready_backends` gauge: up only while nothing is ready and it was announced.
    pub no_ready_gauge: bool,
}

/// Decides evictions and the alarm.
///
/// - A backend that turns unready while another is ready is evicted.
/// - While nothing is ready and we fail open, nothing is evicted: re-dialling would only land on
///   the same backends. Leaving that state evicts every unready backend (connections that failed
///   open to them).
/// - With `refuse`, an unready backend is evicted at once, ready backends or not; and when a
///   reload switches `fail_open` to `refuse`, every unready backend is (the connections that
///   failed open to them must not outlive the policy).
/// - While nothing is ready and we fail open, a backend that does not answer at all (timeout,
///   refused, TLS failure) is evicted as soon as some backend answers HTTP: its connections
///   re-dial, and failing open prefers the answering ones.
/// - The alarm is raised only once every backend has answered ("settled"): at start-up the local
///   apiserver without quorum answers its 500 before the remote ones answer their 200.
pub fn transitions(
    was_any_ready: bool,
    steps: &[Step],
    policy: WhenNoneReady,
    announced: bool,
    became_refusing: bool,
) -> Transitions {
    let none_ready = !steps.iter().any(|s| s.after == State::Ready);
    let left_none_ready = !was_any_ready && !none_ready;
    let refusing = policy == WhenNoneReady::Refuse;
    let answers_now = steps
        .iter()
        .any(|s| s.after == State::Unready && s.answering);
    let answered_before = !was_any_ready
        && steps
            .iter()
            .any(|s| s.before == Some(State::Unready) && s.was_answering);
    let failing_open = none_ready && policy == WhenNoneReady::FailOpen;
    let evict = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            let unready = s.after == State::Unready;
            let just_failed = s.before != Some(State::Unready);
            let closes = (!none_ready || refusing) && (just_failed || left_none_ready);
            let silent_now = failing_open && !s.answering && answers_now;
            let silent_before = !was_any_ready
                && s.before == Some(State::Unready)
                && !s.was_answering
                && answered_before;
            unready && (closes || became_refusing || (silent_now && !silent_before))
        })
        .map(|(i, _)| i)
        .collect();
    let settled = steps.iter().all(|s| s.after != State::Unknown);
    let alarm = if none_ready && settled && !steps.is_empty() && !announced {
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

    /// A backend that answers HTTP before and after (the usual case).
    fn step(before: Option<State>, after: State) -> Step {
        Step {
            before,
            after,
            was_answering: true,
            answering: true,
        }
    }

    /// A backend whose checks got no HTTP answer before / after (timeouts, refused, TLS).
    fn silent(before: Option<State>, after: State, was_answering: bool, answering: bool) -> Step {
        Step {
            before,
            after,
            was_answering,
            answering,
        }
    }

    #[test]
    fn table_of_decisions() {
        // (name, was_any_ready, steps, policy, announced, want evict, want alarm)
        type Case = (
            &'static str,
            bool,
            Vec<Step>,
            WhenNoneReady,
            bool,
            Vec<usize>,
            Alarm,
        );
        let cases: Vec<Case> = vec![
            (
                "unready while another is ready: evict",
                true,
                vec![step(Some(Ready), Unready), step(Some(Ready), Ready)],
                FailOpen,
                false,
                vec![0],
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
                vec![0],
                Alarm::Clear,
            ),
            (
                "refuse: evict at once even with nothing ready",
                true,
                vec![step(Some(Ready), Unready)],
                Refuse,
                false,
                vec![0],
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
                    silent(Some(Unready), Unready, true, false),
                    step(Some(Unready), Unready),
                ],
                FailOpen,
                true,
                vec![0],
                Alarm::Unchanged,
            ),
            (
                "failing open: already silent and evicted: not again",
                false,
                vec![
                    silent(Some(Unready), Unready, false, false),
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
                    silent(Some(Unready), Unready, true, false),
                    silent(Some(Unready), Unready, false, false),
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
                    silent(Some(Unready), Unready, false, false),
                    silent(Some(Unready), Unready, false, true),
                ],
                FailOpen,
                true,
                vec![0],
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
                vec![1],
                Alarm::Unchanged,
            ),
        ];
        for (name, was_any_ready, steps, policy, announced, evict, alarm) in cases {
            let t = transitions(was_any_ready, &steps, policy, announced, false);
            assert_eq!(t.evict, evict, "{name}: evict");
            assert_eq!(t.alarm, alarm, "{name}: alarm");
        }
    }

    #[test]
    fn switching_to_refuse_evicts_every_unready_backend_even_long_unready_ones() {
        let steps = [step(Some(Unready), Unready), step(Some(Ready), Ready)];
        assert_eq!(
            transitions(true, &steps, Refuse, false, true).evict,
            vec![0]
        );
        assert!(transitions(true, &steps, Refuse, false, false)
            .evict
            .is_empty());
    }

    #[test]
    fn gauge_stays_up_while_a_just_added_backend_is_unchecked() {
        let t = transitions(
            false,
            &[step(Some(Unready), Unready), step(None, Unknown)],
            FailOpen,
            true,
            false,
        );
        assert_eq!(
            (t.alarm, t.announced, t.no_ready_gauge),
            (Alarm::Unchanged, true, true)
        );
    }

    #[test]
    fn gauge_is_down_before_the_alarm_is_raised() {
        let t = transitions(
            false,
            &[step(None, Unready), step(None, Unknown)],
            FailOpen,
            false,
            false,
        );
        assert!(!t.no_ready_gauge && !t.announced);
    }
}
