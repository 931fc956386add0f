//! Each apiserver's shutdown window, learned from its probes: from the first answer failing only
//! `shutdown` (kube-apiserver's graceful shutdown has begun) to the first refused dial (its listener
//! closed) or the first `429` with `Retry-After` (`--shutdown-send-retry-after`: new requests
//! refused while those in flight drain), as `--shutdown-delay-duration` sets it. A hand-off to that backend then spreads its
//! closes over `min(handoff_window, 0.7 × learned)` (`backend::LearnedWindow::fit`), so they end
//! before the listener closes.
//!
//! An apiserver that refuses a dial right after passing its checks, with no `[-]shutdown` seen
//! between, gave no window: a graceful restart with `--shutdown-delay-duration` 0 (Talos's
//! default), or a crash, which a balancer cannot tell apart. That is reported, so the operator can
//! set the delay.
//!
//! Pure: told each probe's outcome and the time. Does not own the probe schedule (`health`), where
//! the learned value is kept (`backend::LearnedWindow`) or the closes (`proxy::turn`).

use std::time::Duration;

use tokio::time::Instant;

use super::rise_fall::Outcome;
use crate::verdict::FailClass;

/// What one probe's outcome taught.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Learned {
    /// A shutdown window, from the first `[-]shutdown` answer to the first refused dial.
    Window(Duration),
    /// The listener closed right after passing checks, with no `[-]shutdown` seen.
    NoWindow,
}

/// One backend's watch for its shutdown window.
#[derive(Debug, Default, Clone)]
pub struct ShutdownWindow {
    /// When the current drain was first seen.
    drain_seen: Option<Instant>,
    /// The latest probe passed.
    passed: bool,
}

impl ShutdownWindow {
    /// Folds in one probe's `outcome` at `now`.
    pub fn observe(&mut self, outcome: &Outcome, now: Instant) -> Option<Learned> {
        let learned = match outcome {
            Outcome::Pass { .. } => {
                // A drain that ends in a pass was called off, or the apiserver came back.
                self.drain_seen = None;
                None
            }
            // Only a `429` with `Retry-After` fails `shutdown` alone outside 5xx (`probe.rs`): new
            // requests are refused from here on, so the window ends as at a refused dial.
            Outcome::Fail {
                reach,
                class: FailClass::HttpOther,
                ..
            } if reach.is_draining() => self
                .drain_seen
                .take()
                .map(|seen| Learned::Window(now.duration_since(seen))),
            Outcome::Fail { reach, .. } if reach.is_draining() => {
                self.drain_seen.get_or_insert(now);
                None
            }
            Outcome::Fail {
                class: FailClass::Refused,
                ..
            } => match self.drain_seen.take() {
                Some(seen) => Some(Learned::Window(now.duration_since(seen))),
                None if self.passed => Some(Learned::NoWindow),
                None => None,
            },
            // Anything else (a timeout, another failing check) neither starts nor ends a drain.
            Outcome::Fail { .. } => None,
        };
        self.passed = matches!(outcome, Outcome::Pass { .. });
        learned
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::verdict::{FailingChecks, Reach};

    fn pass() -> Outcome {
        Outcome::Pass {
            latency: Duration::from_millis(2),
        }
    }

    fn answered(checks: &[&str]) -> Outcome {
        Outcome::failed_answer(
            Arc::from("readyz 500"),
            FailClass::Http5xx,
            FailingChecks::of(checks),
            500,
            Duration::from_millis(2),
        )
    }

    fn failed(class: FailClass) -> Outcome {
        Outcome::Fail {
            reason: Arc::from("dial"),
            class,
            checks: FailingChecks::none(),
            reach: Reach::Unreached,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_runs_from_the_first_drain_answer_to_the_first_refused_dial() {
        let t0 = Instant::now();
        let mut w = ShutdownWindow::default();
        assert_eq!(w.observe(&pass(), t0), None);
        assert_eq!(
            w.observe(&answered(&["shutdown"]), t0 + Duration::from_secs(1)),
            None
        );
        assert_eq!(
            w.observe(&answered(&["shutdown"]), t0 + Duration::from_secs(6)),
            None
        );
        let refused = w.observe(&failed(FailClass::Refused), t0 + Duration::from_secs(11));
        assert_eq!(refused, Some(Learned::Window(Duration::from_secs(10))));
        // Still refused: nothing more to learn.
        assert_eq!(
            w.observe(&failed(FailClass::Refused), t0 + Duration::from_secs(16)),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_with_retry_after_ends_the_window_as_a_refused_dial_does() {
        let t0 = Instant::now();
        let mut w = ShutdownWindow::default();
        w.observe(&answered(&["shutdown"]), t0);
        let retry_after = Outcome::failed_answer(
            Arc::from("HTTP 429, Retry-After: 5: draining (a graceful shutdown)"),
            FailClass::HttpOther,
            FailingChecks::of(&["shutdown"]),
            429,
            Duration::from_millis(2),
        );
        assert_eq!(
            w.observe(&retry_after, t0 + Duration::from_secs(7)),
            Some(Learned::Window(Duration::from_secs(7)))
        );
        // The listener's close that follows the drain teaches nothing more.
        assert_eq!(
            w.observe(&failed(FailClass::Refused), t0 + Duration::from_secs(20)),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_dial_right_after_a_pass_is_no_window() {
        let t0 = Instant::now();
        let mut w = ShutdownWindow::default();
        w.observe(&pass(), t0);
        assert_eq!(
            w.observe(&failed(FailClass::Refused), t0),
            Some(Learned::NoWindow)
        );
        // A timeout after a pass is not a closed listener.
        let mut w = ShutdownWindow::default();
        w.observe(&pass(), t0);
        assert_eq!(w.observe(&failed(FailClass::Timeout), t0), None);
        assert_eq!(
            w.observe(&failed(FailClass::Refused), t0),
            None,
            "not right after a pass"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_that_ends_in_a_pass_or_names_another_check_learns_nothing() {
        let t0 = Instant::now();
        let mut w = ShutdownWindow::default();
        w.observe(&answered(&["shutdown"]), t0);
        w.observe(&pass(), t0 + Duration::from_secs(5));
        // The refusal now follows a pass, not a drain.
        assert_eq!(
            w.observe(&failed(FailClass::Refused), t0 + Duration::from_secs(6)),
            Some(Learned::NoWindow)
        );
        let mut w = ShutdownWindow::default();
        w.observe(&answered(&["shutdown", "etcd"]), t0);
        assert_eq!(
            w.observe(&failed(FailClass::Refused), t0 + Duration::from_secs(6)),
            None
        );
    }
}
