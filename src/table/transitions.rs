//! What a new snapshot means for the backends' connections and for the no-ready alarm: a pure
//! decision from the states before and after, table-tested like the picker.
//!
//! A backend that turned unready is not closed here: it is handed to `escape` (its connections
//! move once the backend they would go to has passed a probe since). Leaving a spell with no
//! backend ready closes nothing here either: `recovery` decides, one probe interval later. Does
//! not own applying it (stamping epochs, publishing, bumping, logging): `table` does.

use crate::eviction::CloseReason;
use crate::pick::WhenNoneReady;
use crate::verdict::{Health, Reach, State};

/// One backend of the new snapshot as the old one and the new one show it (`before`: `None`
/// if just added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// As the previous snapshot showed it.
    pub before: Option<Seen>,
    /// As the new snapshot shows it.
    pub after: Seen,
}

/// One backend as a snapshot shows it to the rules: its state and how far its latest check got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Its state.
    pub state: State,
    /// How far its latest check got; `None` while no check has finished.
    pub reach: Option<Reach>,
}

impl Seen {
    /// What `health` shows.
    pub fn of(health: &Health) -> Seen {
        Seen {
            state: health.state,
            reach: health.reach,
        }
    }

    /// Its latest check passed (HTTP 200).
    pub fn passed(self) -> bool {
        self.reach.is_some_and(Reach::passed)
    }

    /// Its latest check's only failing check is `shutdown`: draining (a planned hand-off).
    pub fn draining(self) -> bool {
        self.reach.is_some_and(Reach::is_draining)
    }

    /// Its latest check got an HTTP answer, whatever its status.
    pub fn answering(self) -> bool {
        self.reach.is_some_and(Reach::is_answered)
    }

    /// Its latest check finished with no HTTP answer (timeout, refused, TLS failure).
    pub fn silent(self) -> bool {
        self.reach.is_some_and(|r| !r.is_answered())
    }

    /// Its latest check failed and it is not draining: another check failed, or no answer.
    pub fn failed_otherwise(self) -> bool {
        self.reach.is_some_and(|r| !r.passed() && !r.is_draining())
    }
}

impl Change {
    fn was(&self, state: State) -> bool {
        self.before.is_some_and(|b| b.state == state)
    }

    fn just_failed(&self) -> bool {
        self.after.state == State::Unready && !self.was(State::Unready)
    }

    fn long_unready(&self) -> bool {
        self.after.state == State::Unready && self.was(State::Unready)
    }

    /// Turned ready from unready: its re-entry is paced ([`crate::pacing`]). Not from unknown:
    /// a backend seen for the first time (start-up, discovery) has no herd waiting for it.
    pub fn returned(&self) -> bool {
        self.after.state == State::Ready && self.was(State::Unready)
    }

    /// As the previous snapshot showed it, `test` held.
    fn was_seen(&self, test: fn(Seen) -> bool) -> bool {
        self.before.is_some_and(test)
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
    c.just_failed() && !f.none_ready && !c.after.draining()
}

/// It turned unready draining (only `shutdown` fails), or drains again after a pass of its rise,
/// while another backend is ready: a planned hand-off, each connection closed at a random point
/// of the hand-off window.
fn handoff(f: &Facts, c: &Change) -> Option<CloseReason> {
    let again = c.long_unready() && c.was_seen(Seen::passed);
    let begins = c.after.draining() && (c.just_failed() || again);
    (begins && !f.none_ready).then_some(CloseReason::Handoff)
}

/// Still draining when a backend is ready again after a spell with none, failing open: its
/// hand-off, which waited while there was nowhere better to go, goes on (a new one, over the
/// whole window).
fn handoff_resumed(f: &Facts, c: &Change) -> Option<CloseReason> {
    let failing_open = f.scene.policy == WhenNoneReady::FailOpen;
    let resumed = failing_open && !f.scene.was_any_ready && !f.none_ready;
    let draining = c.long_unready() && c.was_seen(Seen::draining) && c.after.draining();
    (resumed && draining).then_some(CloseReason::Handoff)
}

/// Draining, it now fails another check or stops answering: the connections whose hand-off turn
/// has not come are closed as when it turns unready (no confirm: the hand-off already moves them).
/// A pass is no break: the hand-off is called off ([`Transitions::call_off`]).
fn handoff_broken(f: &Facts, c: &Change) -> Option<CloseReason> {
    let broken = c.long_unready() && c.was_seen(Seen::draining) && c.after.failed_otherwise();
    (broken && !f.none_ready).then_some(CloseReason::TurnedUnready)
}

/// Its hand-off is called off: it was draining and passed (the reason ended; with `rise` above
/// 1 still unready, rising), or it drains and no backend is ready any more, failing open (with
/// `refuse` nothing may relay to an unready backend: the hand-off goes on).
fn handoff_called_off(f: &Facts, c: &Change) -> bool {
    let passed = c.was_seen(Seen::draining) && c.after.passed();
    let failing_open = f.scene.policy == WhenNoneReady::FailOpen;
    let nowhere = failing_open && f.scene.was_any_ready && f.none_ready && c.after.draining();
    passed || nowhere
}

/// With `refuse`, nothing may relay to an unready backend: one that just failed is closed at
/// once, ready backends or not, and when a reload switches to `refuse`, every unready one is.
fn refusing(f: &Facts, c: &Change) -> Option<CloseReason> {
    let refuse = f.scene.policy == WhenNoneReady::Refuse;
    let applies =
        (refuse && c.just_failed()) || (f.scene.became_refusing && c.after.state == State::Unready);
    applies.then_some(CloseReason::Refusing)
}

/// Decides evictions (each rule above, with its reason) and the alarm.
///
/// While nothing is ready, nothing is evicted but what `refuse` says (and, by time, `silence`): re-dialling
/// would only land on the same failing backends (a cluster-wide blink). The alarm is raised only once every backend has answered ("settled"):
/// at start-up the local apiserver without quorum answers its 500 before the remote ones answer
/// their 200.
pub fn decide(scene: Scene, changes: &[Change]) -> Transitions {
    let none_ready = !changes.iter().any(|c| c.after.state == State::Ready);
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
    let settled = changes.iter().all(|c| c.after.state != State::Unknown);
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
