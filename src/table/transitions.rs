//! What a new snapshot means for the backends' connections and for the no-ready alarm: a pure
//! decision from the states before and after, table-tested like the picker.
//!
//! A backend that turned unready is not closed here: it is handed to `escape` (its connections
//! move once the backend they would go to has passed a probe since). Leaving a spell with no
//! backend ready closes nothing here either: `recovery` decides, one probe interval later. Does
//! not own applying it (stamping epochs, publishing, bumping, logging): `table` does.

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
    /// Its only failing check was `shutdown` (draining), as of the previous snapshot ...
    pub was_draining: bool,
    /// ... and as of the new one.
    pub draining: bool,
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
    /// Backends that turned unready while another is ready: closed with `turned_unready` once
    /// their escape route is confirmed (`escape`), not now.
    pub confirm: Vec<usize>,
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

/// The rules, first match wins; each names its reason. A backend that turned unready while
/// another is ready and is not draining goes to [`Transitions::confirm`] instead.
const RULES: [Rule; 4] = [handoff, handoff_broken, refusing, silent];

/// It turned unready while another backend is ready: its clients re-dial a ready one, once the
/// escape route is confirmed. Not while draining (a hand-off).
fn turned_unready(f: &Facts, c: &Change) -> bool {
    c.just_failed() && !f.none_ready && !c.draining
}

/// It turned unready draining (only `shutdown` fails) while another backend is ready: a planned
/// hand-off, each connection closed at a random point of the hand-off window.
fn handoff(f: &Facts, c: &Change) -> Option<CloseReason> {
    (c.just_failed() && c.draining && !f.none_ready).then_some(CloseReason::Handoff)
}

/// Draining, it now fails another check or stops answering: the connections whose hand-off turn
/// has not come are closed as when it turns unready (no confirm: the hand-off already moves them).
fn handoff_broken(f: &Facts, c: &Change) -> Option<CloseReason> {
    let broken = c.long_unready() && c.was_draining && !c.draining;
    (broken && !f.none_ready).then_some(CloseReason::TurnedUnready)
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
/// While nothing is ready, nothing is evicted but what `refuse` and `silent` say: re-dialling
/// would only land on the same failing backends (a cluster-wide blink). The alarm is raised only once every backend has answered ("settled"):
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
    let confirm = (0..changes.len())
        .filter(|&i| turned_unready(&facts, &changes[i]))
        .collect::<Vec<usize>>();
    let evict = changes
        .iter()
        .enumerate()
        .filter(|(i, _)| !confirm.contains(i))
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
        confirm,
        alarm,
        announced,
        // A backend added while nothing is ready does not end the alert until it is ready.
        no_ready_gauge: none_ready && announced,
    }
}

#[cfg(test)]
mod tests;
