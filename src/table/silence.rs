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

use super::transitions::Check;
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
            .any(|b| Check::of(&b.health).answering());
        if answering {
            self.answering_since.get_or_insert(now);
        } else {
            self.answering_since = None;
        }
        self.moved.retain(|id| {
            snap.position(id)
                .is_some_and(|i| Check::of(&snap.backends[i].health) == Check::Silent)
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
        let silent = health.state == State::Unready && Check::of(health) == Check::Silent;
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
    use crate::backend::Routing;
    use crate::testing::fixtures;
    use crate::verdict::{CheckFailure, FailingChecks, Health};
    use std::time::Duration;

    /// Backends by their latest check: `s` silent, `a` answered 500, `r` ready.
    fn snap(checks: &str) -> Snapshot {
        let backends = checks
            .chars()
            .enumerate()
            .map(|(i, c)| {
                let spec = fixtures::spec(&format!("10.0.0.{i}:6443"), None);
                let mut b = fixtures::backend(spec, State::Unready);
                b.health = Health {
                    state: if c == 'r' {
                        State::Ready
                    } else {
                        State::Unready
                    },
                    last_failure: (c != 'r').then(|| CheckFailure {
                        reason: "x".into(),
                        answered: c == 'a',
                        checks: FailingChecks::none(),
                        reached: c == 'a',
                    }),
                    ..Health::UNKNOWN
                };
                b
            })
            .collect();
        Snapshot {
            generation: 1,
            routing: Routing::default(),
            backends,
        }
    }

    #[test]
    fn only_a_silence_found_after_another_answered_moves_and_once() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let id = BackendId::new("10.0.0.0:6443");
        let mut s = Silence::default();
        // A blink: every backend silent, then the second answers at 10 s.
        s.observe(&snap("ss"), at(5));
        assert!(!s.moves(&snap("ss"), true, &id, at(4)), "nobody answers");
        s.observe(&snap("sa"), at(10));
        assert!(
            !s.moves(&snap("sa"), true, &id, at(8)),
            "silent since the blink"
        );
        assert!(
            !s.moves(&snap("sa"), false, &id, at(11)),
            "not failing open"
        );
        assert!(
            s.moves(&snap("sa"), true, &id, at(11)),
            "silent after the answer"
        );
        assert!(!s.moves(&snap("sa"), true, &id, at(16)), "once");
        // It answers, then falls silent again while the other answers: moves at once.
        s.observe(&snap("aa"), at(20));
        s.observe(&snap("sa"), at(26));
        assert!(s.moves(&snap("sa"), true, &id, at(25)), "a new silence");
    }
}
