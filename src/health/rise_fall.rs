//! The rise/fall state machine ([`RiseFall`]) and latency smoothing: pure, no clock, no I/O.
//!
//! Does not own probing or timing; the scheduler feeds it results and asks it whether a change is
//! pending (then it probes again after `fast_interval`).

use std::sync::Arc;
use std::time::Duration;

use super::state::{Health, State};

/// Weight of a new latency sample. 0.3 follows a real change within a few probes while one slow
/// answer moves the average by less than a third.
pub const EWMA_ALPHA: f64 = 0.3;

/// One check's result as the state machine sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// HTTP 200.
    pub pass: bool,
    /// Request→response time on an established connection, when a response arrived.
    pub latency: Option<Duration>,
    /// Why it failed (`None` on pass).
    pub reason: Option<Arc<str>>,
    /// An HTTP answer arrived (any status); false for timeouts, refused dials, TLS failures.
    pub answered: bool,
}

impl Outcome {
    /// A client dial to the backend failed: a failed check with no answer (passive health).
    pub fn dial_failed(reason: Arc<str>) -> Outcome {
        Outcome {
            pass: false,
            latency: None,
            reason: Some(reason),
            answered: false,
        }
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

    /// Folds in one probe result.
    pub fn observe(&mut self, outcome: &Outcome) -> Step {
        if let Some(sample) = outcome.latency {
            self.health.latency = Some(match self.health.latency {
                Some(old) => old.mul_f64(1.0 - EWMA_ALPHA) + sample.mul_f64(EWMA_ALPHA),
                None => sample,
            });
        }
        self.health.answering = outcome.answered;
        self.health.last_error = if outcome.pass {
            None
        } else {
            outcome.reason.clone()
        };
        let from = self.health.state;
        let agrees = matches!(
            (from, outcome.pass),
            (State::Ready, true) | (State::Unready, false)
        );
        let to = match from {
            // The first result decides at once: start-up must be fast.
            State::Unknown => Some(if outcome.pass {
                State::Ready
            } else {
                State::Unready
            }),
            _ if agrees => {
                self.streak = 0;
                None
            }
            _ => {
                self.streak += 1;
                let needed = if from == State::Ready {
                    self.fall
                } else {
                    self.rise
                };
                (self.streak >= needed).then_some(if outcome.pass {
                    State::Ready
                } else {
                    State::Unready
                })
            }
        };
        if let Some(to) = to {
            self.health.state = to;
            self.streak = 0;
        }
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
        Outcome {
            pass: true,
            latency: Some(Duration::from_millis(ms)),
            reason: None,
            answered: true,
        }
    }

    fn fail() -> Outcome {
        Outcome {
            pass: false,
            latency: None,
            reason: Some("HTTP 500: [-]etcd failed".into()),
            answered: true,
        }
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
    fn fall_needs_consecutive_failures_and_a_pass_resets_it() {
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
        assert_eq!(
            c.health().last_error.as_deref(),
            Some("HTTP 500: [-]etcd failed")
        );
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
        assert_eq!(c.health().last_error, None);
    }

    #[test]
    fn latency_is_smoothed() {
        let mut c = RiseFall::new(1, 1, Health::UNKNOWN);
        c.observe(&pass(10));
        assert_eq!(c.health().latency, Some(Duration::from_millis(10)));
        c.observe(&pass(20));
        let l = c.health().latency.expect("measured").as_secs_f64();
        assert!((l - 0.013).abs() < 1e-9, "{l}");
        c.observe(&fail()); // no response: latency unchanged
        assert!((c.health().latency.expect("kept").as_secs_f64() - 0.013).abs() < 1e-9);
    }
}
