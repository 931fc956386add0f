//! The rise/fall state machine ([`RiseFall`]) and latency smoothing: pure, no clock, no I/O.
//!
//! Does not own probing or timing; the scheduler feeds it results and asks it whether a change is
//! pending (then it probes again after `fast_interval`).

use std::sync::Arc;
use std::time::Duration;

use crate::verdict::{CheckFailure, FailClass, FailingChecks, Health, Pending, Reach, State};

/// Weight of a new latency sample. 0.3 follows a real change within a few probes while one slow
/// answer moves the average by less than a third.
pub const EWMA_ALPHA: f64 = 0.3;

/// One check's result as the state machine sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// HTTP 200, answered in `latency` (request→response on an established connection).
    Pass {
        /// Request→response time.
        latency: Duration,
    },
    /// Anything else.
    Fail {
        /// Why, for status and logs (`readyz 500: etcd failed`, `dial: connection refused`).
        reason: Arc<str>,
        /// What kind of failure, for the metric.
        class: FailClass,
        /// The checks an answer named as failing; none without an answer.
        checks: FailingChecks,
        /// How far it got: no connection (new connections fail, which a dial that connects
        /// refutes: `passive`), a connection but no answer, or an answer that is not a pass.
        reach: Reach,
    },
}

impl Outcome {
    /// A client dial to the backend failed: a failed check that got no connection (passive
    /// health).
    pub fn dial_failed(reason: Arc<str>) -> Outcome {
        Outcome::Fail {
            reason,
            class: FailClass::Dial,
            checks: FailingChecks::none(),
            reach: Reach::Unreached,
        }
    }

    /// An HTTP answer with `status` (not 200) in `latency`, naming `checks` as failing: draining
    /// when `shutdown` is the only one.
    pub fn failed_answer(
        reason: Arc<str>,
        class: FailClass,
        checks: FailingChecks,
        status: u16,
        latency: Duration,
    ) -> Outcome {
        let reach = if checks.only_shutdown() {
            Reach::draining(status, latency)
        } else {
            Reach::answered(status, latency)
        };
        Outcome::Fail {
            reason,
            class,
            checks,
            reach,
        }
    }

    /// How far the check got.
    pub fn reach(&self) -> Reach {
        match self {
            Outcome::Pass { latency } => Reach::answered(200, *latency),
            Outcome::Fail { reach, .. } => *reach,
        }
    }

    /// The class of failure, `None` for a pass.
    pub fn fail_class(&self) -> Option<FailClass> {
        match self {
            Outcome::Pass { .. } => None,
            Outcome::Fail { class, .. } => Some(*class),
        }
    }

    /// Whether the check passed.
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Pass { .. })
    }
}

/// Hysteresis for one backend.
#[derive(Debug, Clone)]
pub struct RiseFall {
    rise: u32,
    fall: u32,
    health: Health,
    /// Consecutive results that disagree with the current state.
    streak: u32,
}

/// What one observation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// `Some((from, to))` when the state changed.
    pub changed: Option<(State, State)>,
    /// A change is under way but not yet decided: probe again soon.
    pub pending: bool,
}

impl Step {
    /// Two observations in a row as one: the change from the first state to the last (if they
    /// differ), pending as after the second.
    pub fn then(self, next: Step) -> Step {
        let changed = match (self.changed, next.changed) {
            (Some((from, _)), Some((_, to))) => (from != to).then_some((from, to)),
            (first, None) => first,
            (None, second) => second,
        };
        Step {
            changed,
            pending: next.pending,
        }
    }
}

impl RiseFall {
    /// A machine starting from `health` (unknown at start-up, kept across reloads).
    pub fn new(rise: u32, fall: u32, health: Health) -> Self {
        RiseFall {
            rise: rise.max(1),
            fall: fall.max(1),
            health,
            streak: 0,
        }
    }

    /// Current health.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// A new client connection to the backend worked: a fall under way while it is ready is
    /// called off (the failures so far said new connections fail). True if one was. Only
    /// `passive` calls it, which knows whether the fall is one that failed dials started.
    pub fn call_off_fall(&mut self) -> bool {
        let under_way = self.health.state == State::Ready && self.streak > 0;
        if under_way {
            self.streak = 0;
            self.health.pending = None;
        }
        under_way
    }

    /// Folds in one probe result.
    pub fn observe(&mut self, outcome: &Outcome) -> Step {
        let reach = outcome.reach();
        if let Some(sample) = reach.latency() {
            self.health.latency = Some(match self.health.latency {
                Some(old) => old.mul_f64(1.0 - EWMA_ALPHA) + sample.mul_f64(EWMA_ALPHA),
                None => sample,
            });
        }
        self.health.reach = Some(reach);
        self.health.last_failure = match outcome {
            Outcome::Pass { .. } => None,
            Outcome::Fail { reason, checks, .. } => Some(CheckFailure {
                reason: reason.clone(),
                checks: checks.clone(),
            }),
        };
        let pass = outcome.passed();
        let from = self.health.state;
        let agrees = matches!((from, pass), (State::Ready, true) | (State::Unready, false));
        let to = match from {
            // The first result decides at once: start-up must be fast.
            State::Unknown => Some(if pass { State::Ready } else { State::Unready }),
            _ if agrees => {
                self.streak = 0;
                None
            }
            // Draining (a graceful shutdown: only `shutdown` fails): no new connections, at once.
            State::Ready if reach.is_draining() => Some(State::Unready),
            _ => {
                self.streak += 1;
                let needed = if from == State::Ready {
                    self.fall
                } else {
                    self.rise
                };
                (self.streak >= needed).then_some(if pass { State::Ready } else { State::Unready })
            }
        };
        if let Some(to) = to {
            self.health.state = to;
            self.streak = 0;
        }
        self.health.pending = (self.streak > 0).then_some(Pending {
            toward: if pass { State::Ready } else { State::Unready },
            count: self.streak,
            needed: if pass { self.rise } else { self.fall },
        });
        Step {
            changed: to.map(|to| (from, to)),
            pending: self.streak > 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result that starts or continues a pending change.
    const PENDING: Step = Step {
        changed: None,
        pending: true,
    };
    /// A result that agrees with the current state.
    const STEADY: Step = Step {
        changed: None,
        pending: false,
    };

    fn pass(ms: u64) -> Outcome {
        Outcome::Pass {
            latency: Duration::from_millis(ms),
        }
    }

    fn fail() -> Outcome {
        Outcome::failed_answer(
            "readyz 500: etcd failed".into(),
            crate::verdict::FailClass::Http5xx,
            crate::verdict::FailingChecks::none(),
            500,
            Duration::from_millis(2),
        )
    }

    #[test]
    fn first_result_decides_at_once() {
        let mut c = RiseFall::new(2, 2, Health::UNKNOWN);
        assert_eq!(
            c.observe(&fail()).changed,
            Some((State::Unknown, State::Unready))
        );
        let mut c = RiseFall::new(3, 3, Health::UNKNOWN);
        assert_eq!(
            c.observe(&pass(1)).changed,
            Some((State::Unknown, State::Ready))
        );
    }

    #[test]
    fn a_ready_backend_failing_only_shutdown_falls_at_once() {
        let mut c = RiseFall::new(2, 3, Health::UNKNOWN);
        c.observe(&pass(1));
        let draining = Outcome::failed_answer(
            "HTTP 500: [-]shutdown failed".into(),
            crate::verdict::FailClass::Http5xx,
            crate::verdict::FailingChecks::of(&["shutdown"]),
            500,
            Duration::from_millis(2),
        );
        assert_eq!(
            c.observe(&draining).changed,
            Some((State::Ready, State::Unready))
        );
        let mut c = RiseFall::new(2, 3, Health::UNKNOWN);
        c.observe(&pass(1));
        assert_eq!(
            c.observe(&fail()),
            PENDING,
            "any other check waits for fall"
        );
    }

    #[test]
    fn fall_needs_consecutive_failures() {
        let mut c = RiseFall::new(2, 3, Health::UNKNOWN);
        c.observe(&pass(1));
        assert_eq!(c.observe(&fail()), PENDING);
        assert_eq!(c.observe(&fail()), PENDING);
        assert_eq!(c.observe(&pass(1)), STEADY);
        c.observe(&fail());
        c.observe(&fail());
        assert_eq!(
            c.observe(&fail()).changed,
            Some((State::Ready, State::Unready))
        );
        assert_eq!(c.health().last_error(), Some("readyz 500: etcd failed"));
    }

    #[test]
    fn rise_needs_consecutive_passes() {
        let mut c = RiseFall::new(2, 2, Health::UNKNOWN);
        c.observe(&fail());
        assert_eq!(c.observe(&pass(1)), PENDING);
        assert_eq!(c.observe(&fail()), STEADY);
        c.observe(&pass(1));
        assert_eq!(
            c.observe(&pass(1)).changed,
            Some((State::Unready, State::Ready))
        );
        assert_eq!(c.health().last_error(), None);
    }

    #[test]
    fn a_working_connection_calls_off_only_a_fall_under_way() {
        let mut c = RiseFall::new(2, 2, Health::UNKNOWN);
        assert!(!c.call_off_fall(), "unknown: nothing under way");
        c.observe(&pass(1));
        assert!(!c.call_off_fall(), "ready, no failure yet");
        c.observe(&Outcome::dial_failed("dial: timeout after 1s".into()));
        assert!(c.call_off_fall());
        assert_eq!(
            c.observe(&Outcome::dial_failed("dial: timeout after 1s".into())),
            PENDING,
            "counting starts again"
        );
        c.observe(&fail());
        assert_eq!(c.health().state, State::Unready);
        c.observe(&pass(1));
        assert!(!c.call_off_fall(), "a rise is not a fall");
        assert_eq!(
            c.observe(&pass(1)).changed,
            Some((State::Unready, State::Ready))
        );
    }

    #[test]
    fn health_says_which_change_is_pending_with_how_far_it_got() {
        let toward = |state, count, needed| {
            Some(Pending {
                toward: state,
                count,
                needed,
            })
        };
        let mut c = RiseFall::new(2, 3, Health::UNKNOWN);
        // (result, pending after it)
        let cases = [
            (pass(1), None),
            (fail(), toward(State::Unready, 1, 3)),
            (fail(), toward(State::Unready, 2, 3)),
            (fail(), None),
            (pass(1), toward(State::Ready, 1, 2)),
            (fail(), None),
            (pass(1), toward(State::Ready, 1, 2)),
            (pass(1), None),
        ];
        for (i, (outcome, want)) in cases.into_iter().enumerate() {
            c.observe(&outcome);
            assert_eq!(c.health().pending, want, "after result {i}");
        }
        c.observe(&fail());
        assert!(c.call_off_fall());
        assert_eq!(
            c.health().pending,
            None,
            "a fall called off is no longer pending"
        );
    }

    #[test]
    fn latency_is_smoothed() {
        let mut c = RiseFall::new(1, 1, Health::UNKNOWN);
        c.observe(&pass(10));
        assert_eq!(c.health().latency, Some(Duration::from_millis(10)));
        c.observe(&pass(20));
        let l = c.health().latency.expect("measured").as_secs_f64();
        assert!((l - 0.013).abs() < 1e-9, "{l}");
        c.observe(&Outcome::dial_failed("dial: connection refused".into())); // no answer: unchanged
        assert!((c.health().latency.expect("kept").as_secs_f64() - 0.013).abs() < 1e-9);
    }
}
