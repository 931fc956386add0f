//! What a new snapshot means for the backends' connections and for the no-ready alarm: a pure
//! decision from the states before and after, table-tested like the picker.
//!
//! A backend that turned unready is not closed here: it is handed to `escape` (its connections
//! move once the backend they would go to has passed a probe since). Leaving a spell with no
//! backend ready closes nothing here either: `recovery` decides, one probe interval later. Does
//! not own applying it (stamping epochs, publishing, bumping, logging): `table` does.

use crate::eviction::CloseReason;
use crate::pick::WhenNoneReady;
use crate::verdict::{Health, State};

/// One backend of the new snapshot, with its state in the old one (`None`: just added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// State in the previous snapshot.
    pub before: Option<State>,
    /// State in the new snapshot.
    pub after: State,
    /// What its latest check said as of the previous snapshot ([`Check::None`] if just added) ...
    pub was: Check,
    /// ... and as of the new one.
    pub now: Check,
}

/// What a backend's latest check said, as the rules read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No check has finished (just added, or its state is still unknown).
    None,
    /// It passed (HTTP 200).
    Passed,
    /// Its only failing check is `shutdown`: draining (a planned hand-off).
    Draining,
    /// It failed with an HTTP answer: alive, not ready.
    Failed,
    /// It got no HTTP answer (timeout, refused, TLS failure).
    Silent,
}

impl Check {
    /// The latest check of `health`.
    pub fn of(health: &Health) -> Check {
        match &health.last_failure {
            _ if health.state == State::Unknown => Check::None,
            None => Check::Passed,
            Some(_) if health.draining() => Check::Draining,
            Some(f) if f.answered => Check::Failed,
            Some(_) => Check::Silent,
        }
    }

    /// An HTTP answer arrived, whatever its status.
    pub fn answering(self) -> bool {
        matches!(self, Check::Passed | Check::Draining | Check::Failed)
    }
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
    /// Backends whose hand-off, if still under way, is called off: the connections whose turn
    /// has not come stay. Draining, it passed (its reason ended), or no backend is ready any
    /// more (nowhere better to go: it waits, and goes on once one is, by `handoff_resumed`).
    pub call_off: Vec<usize>,
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
}

/// A rule: the reason to close `c`'s connections, if it applies.
type Rule = fn(&Facts, &Change) -> Option<CloseReason>;

/// The rules, first match wins; each names its reason. A backend that turned unready while
/// another is ready and is not draining goes to [`Transitions::confirm`] instead.
const RULES: [Rule; 4] = [handoff, handoff_resumed, handoff_broken, refusing];

/// It turned unready while another backend is ready: its clients re-dial a ready one, once the
/// escape route is confirmed. Not while draining (a hand-off).
fn turned_unready(f: &Facts, c: &Change) -> bool {
    c.just_failed() && !f.none_ready && c.now != Check::Draining
}

/// It turned unready draining (only `shutdown` fails), or drains again after a pass of its rise,
/// while another backend is ready: a planned hand-off, each connection closed at a random point
/// of the hand-off window.
fn handoff(f: &Facts, c: &Change) -> Option<CloseReason> {
    let again = c.long_unready() && c.was == Check::Passed;
    let begins = c.now == Check::Draining && (c.just_failed() || again);
    (begins && !f.none_ready).then_some(CloseReason::Handoff)
}

/// Still draining when a backend is ready again after a spell with none, failing open: its
/// hand-off, which waited while there was nowhere better to go, goes on (a new one, over the
/// whole window).
fn handoff_resumed(f: &Facts, c: &Change) -> Option<CloseReason> {
    let failing_open = f.scene.policy == WhenNoneReady::FailOpen;
    let resumed = failing_open && !f.scene.was_any_ready && !f.none_ready;
    let draining = c.long_unready() && c.was == Check::Draining && c.now == Check::Draining;
    (resumed && draining).then_some(CloseReason::Handoff)
}

/// Draining, it now fails another check or stops answering: the connections whose hand-off turn
/// has not come are closed as when it turns unready (no confirm: the hand-off already moves them).
/// A pass is no break: the hand-off is called off ([`Transitions::call_off`]).
fn handoff_broken(f: &Facts, c: &Change) -> Option<CloseReason> {
    let broken = c.long_unready()
        && c.was == Check::Draining
        && matches!(c.now, Check::Failed | Check::Silent);
    (broken && !f.none_ready).then_some(CloseReason::TurnedUnready)
}

/// Its hand-off is called off: it was draining and passed (the reason ended; with `rise` above
/// 1 still unready, rising), or it drains and no backend is ready any more, failing open (with
/// `refuse` nothing may relay to an unready backend: the hand-off goes on).
fn handoff_called_off(f: &Facts, c: &Change) -> bool {
    let passed = c.was == Check::Draining && c.now == Check::Passed;
    let failing_open = f.scene.policy == WhenNoneReady::FailOpen;
    let nowhere = failing_open && f.scene.was_any_ready && f.none_ready && c.now == Check::Draining;
    passed || nowhere
}

/// With `refuse`, nothing may relay to an unready backend: one that just failed is closed at
/// once, ready backends or not, and when a reload switches to `refuse`, every unready one is.
fn refusing(f: &Facts, c: &Change) -> Option<CloseReason> {
    let refuse = f.scene.policy == WhenNoneReady::Refuse;
    let applies =
        (refuse && c.just_failed()) || (f.scene.became_refusing && c.after == State::Unready);
    applies.then_some(CloseReason::Refusing)
}

/// Decides evictions (each rule above, with its reason) and the alarm.
///
/// While nothing is ready, nothing is evicted but what `refuse` says (and, by time, `silence`): re-dialling
/// would only land on the same failing backends (a cluster-wide blink). The alarm is raised only once every backend has answered ("settled"):
/// at start-up the local apiserver without quorum answers its 500 before the remote ones answer
/// their 200.
pub fn decide(scene: Scene, changes: &[Change]) -> Transitions {
    let none_ready = !changes.iter().any(|c| c.after == State::Ready);
    let facts = Facts { scene, none_ready };
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
    let call_off = (0..changes.len())
        .filter(|&i| handoff_called_off(&facts, &changes[i]))
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
        call_off,
        alarm,
        announced,
        // A backend added while nothing is ready does not end the alert until it is ready.
        no_ready_gauge: none_ready && announced,
    }
}

#[cfg(test)]
mod tests;
