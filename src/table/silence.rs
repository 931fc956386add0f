//! Failing open, the connections relayed to a backend that does not answer at all (timeout,
//! refused, TLS failure) move to one that answers HTTP (`silent`), once its silence is confirmed
//! by a check that started after another backend was answering. At the end of a cluster-wide
//! blink every apiserver was silent and one answers first: the others' silence began with the
//! event, not while another answered, and their next result decides (most answer again). A
//! backend that falls silent while others answer is confirmed by the check that found it.
//!
//! Owns since when some backend has been answering and which silent backends were moved; pure:
//! the writer passes the snapshot and the instants. Does not own closing (the writer).

use tokio::time::Instant;

use super::transitions::Seen;
use crate::backend::{BackendId, Snapshot};
use crate::verdict::State;

/// The answering clock and the backends moved for their silence.
#[derive(Debug, Default)]
pub struct Silence {
    /// Since when some backend's latest check has got an HTTP answer, without a break.
    answering_since: Option<Instant>,
    /// Backends whose connections moved for their silence, until they answer again.
    moved: Vec<BackendId>,
}

impl Silence {
    /// Folds in `snap`, published at `now`.
    pub fn observe(&mut self, snap: &Snapshot, now: Instant) {
        let answering = snap
            .backends
            .iter()
            .any(|b| Seen::of(&b.health).answering());
        if answering {
            self.answering_since.get_or_insert(now);
        } else {
            self.answering_since = None;
        }
        self.moved.retain(|id| {
            snap.position(id)
                .is_some_and(|i| Seen::of(&snap.backends[i].health).silent())
        });
    }

    /// Whether the connections of `id` move now: in `snap`, failing open (`failing_open`, none
    /// ready), it is unready and its latest check, which started at `started`, got no answer,
    /// after another backend was answering; once per silence.
    pub fn moves(
        &mut self,
        snap: &Snapshot,
        failing_open: bool,
        id: &BackendId,
        started: Instant,
    ) -> bool {
        let Some(i) = snap.position(id) else {
            return false;
        };
        let health = &snap.backends[i].health;
        let silent = health.state == State::Unready && Seen::of(health).silent();
        let confirmed = self.answering_since.is_some_and(|since| started >= since);
        let moves = failing_open && silent && confirmed && !self.moved.contains(id);
        if moves {
            self.moved.push(id.clone());
        }
        moves
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixtures::snapshot as snap;
    use std::time::Duration;

    #[test]
    fn only_a_silence_found_after_another_answered_moves_and_once() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let id = BackendId::new("10.0.0.0:6443");
        let mut s = Silence::default();
        // A blink: every backend silent, then the second answers at 10 s.
        s.observe(&snap("SS"), at(5));
        assert!(!s.moves(&snap("SS"), true, &id, at(4)), "nobody answers");
        s.observe(&snap("SA"), at(10));
        assert!(
            !s.moves(&snap("SA"), true, &id, at(8)),
            "silent since the blink"
        );
        assert!(
            !s.moves(&snap("SA"), false, &id, at(11)),
            "not failing open"
        );
        assert!(
            s.moves(&snap("SA"), true, &id, at(11)),
            "silent after the answer"
        );
        assert!(!s.moves(&snap("SA"), true, &id, at(16)), "once");
        // It answers, then falls silent again while the other answers: moves at once.
        s.observe(&snap("AA"), at(20));
        s.observe(&snap("SA"), at(26));
        assert!(s.moves(&snap("SA"), true, &id, at(25)), "a new silence");
    }
}
