//! Whether an apiserver is overloaded, as its request path shows it: the rule that reads one
//! request check's answer against the backend's own history. Pure: no clock, no I/O.
//!
//! `/readyz` is exempt from API Priority and Fairness, so a saturated apiserver passes it while
//! its clients get `429`. The request check (`health::request_check`) makes a `GET` the node is
//! allowed, with the kubelet's identity, through the same priority level as the kubelet's own
//! requests, and this rule reads what it got: a `429`, no answer within the probe timeout, or an
//! answer far slower than the backend's own average makes it **degraded**. A degraded backend is
//! ranked after the healthy ready ones for new connections (`pick`); nothing is closed.

use std::sync::Arc;
use std::time::Duration;

/// An answer this many times slower than the backend's average is slow.
pub const SLOW_FACTOR: u32 = 5;

/// No answer faster than this is slow, whatever the average: a loopback average of a millisecond
/// would otherwise make a 6 ms answer "overloaded".
pub const SLOW_FLOOR: Duration = Duration::from_millis(250);

/// Answers needed before slowness is judged: the average of fewer says little.
pub const WARM_UP: u32 = 3;

/// The longest `Retry-After` honoured: a degraded backend is checked again by then.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// What one request check got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// An HTTP answer: its status, the time from request to head, its `Retry-After` in seconds.
    Answered {
        /// The HTTP status.
        status: u16,
        /// From sending the request to the answer's head.
        latency: Duration,
        /// Its `Retry-After`, when it had one in seconds.
        retry_after: Option<Duration>,
    },
    /// No answer within the timeout, or the connection broke before one.
    NoAnswer {
        /// The check's timeout.
        timeout: Duration,
    },
}

/// What one check found, for the count by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// An answer in its usual time (any status but `429`), or one while warming up.
    Healthy,
    /// `429 Too Many Requests`.
    Throttled,
    /// An answer far slower than the average.
    Slow,
    /// No answer within the timeout.
    NoAnswer,
    /// No check made: the kept connection was in use by a probe or none was kept (a check
    /// never dials), or this node was short of resources. Not judged.
    Skipped,
}

impl Found {
    /// Every result, in the metric's order.
    pub const ALL: [Found; 5] = [
        Found::Healthy,
        Found::Throttled,
        Found::Slow,
        Found::NoAnswer,
        Found::Skipped,
    ];

    /// The metric's `result` label.
    pub fn label(self) -> &'static str {
        match self {
            Found::Healthy => "healthy",
            Found::Throttled => "throttled",
            Found::Slow => "slow",
            Found::NoAnswer => "no_answer",
            Found::Skipped => "skipped",
        }
    }

    /// Its place in [`Found::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// What it found.
    pub found: Found,
    /// Why the backend is degraded (for `/status`, the status file and the log); `None`: it is not.
    pub degraded: Option<Arc<str>>,
    /// The next check waits at least this long (a `429`'s `Retry-After`, bounded).
    pub hold: Duration,
}

/// A backend's request-check history: the average of its normal answers.
#[derive(Debug, Clone, Default)]
pub struct Judge {
    /// Smoothed latency of the answers judged normal (neither slow nor `429`).
    average: Option<Duration>,
    /// How many answers the average holds (saturates at [`WARM_UP`]).
    answers: u32,
}

impl Judge {
    /// Reads one check. Only normal answers feed the average, so an apiserver that stays slow
    /// stays degraded until it answers as it did; a `429`, no answer and a slow answer leave the
    /// average as it was.
    pub fn judge(&mut self, seen: &Seen) -> Judged {
        let normal = |found| Judged {
            found,
            degraded: None,
            hold: Duration::ZERO,
        };
        match *seen {
            Seen::Answered {
                status: 429,
                retry_after,
                ..
            } => {
                let hold = retry_after.unwrap_or_default().min(MAX_RETRY_AFTER);
                let after = retry_after
                    .map(|d| format!(", Retry-After: {}s", d.as_secs()))
                    .unwrap_or_default();
                Judged {
                    found: Found::Throttled,
                    degraded: Some(format!("HTTP 429 Too Many Requests{after}").into()),
                    hold,
                }
            }
            Seen::Answered { latency, .. } => match self.slow(latency) {
                Some(average) => Judged {
                    found: Found::Slow,
                    degraded: Some(
                        format!(
                            "slow: answered in {}ms against its average of {}ms",
                            latency.as_millis(),
                            average.as_millis()
                        )
                        .into(),
                    ),
                    hold: Duration::ZERO,
                },
                None => {
                    self.fold(latency);
                    normal(Found::Healthy)
                }
            },
            Seen::NoAnswer { timeout } => Judged {
                found: Found::NoAnswer,
                degraded: Some(format!("no answer within {}ms", timeout.as_millis()).into()),
                hold: Duration::ZERO,
            },
        }
    }

    /// The average `latency` is slow against, if it is.
    fn slow(&self, latency: Duration) -> Option<Duration> {
        let average = self.average.filter(|_| self.answers >= WARM_UP)?;
        (latency > SLOW_FLOOR && latency > average * SLOW_FACTOR).then_some(average)
    }

    /// Folds a normal answer into the average (a quarter of the way to it).
    fn fold(&mut self, latency: Duration) {
        self.average = Some(match self.average {
            None => latency,
            Some(a) if latency >= a => a + (latency - a) / 4,
            Some(a) => a - (a - latency) / 4,
        });
        self.answers = (self.answers + 1).min(WARM_UP);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_result_is_at_its_index() {
        for (i, f) in super::Found::ALL.iter().enumerate() {
            assert_eq!(f.index(), i, "{}", f.label());
        }
    }

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn answered(status: u16, latency: Duration) -> Seen {
        Seen::Answered {
            status,
            latency,
            retry_after: None,
        }
    }

    /// A judge that has seen `n` normal answers of `latency`.
    fn warmed(n: u32, latency: Duration) -> Judge {
        let mut j = Judge::default();
        for _ in 0..n {
            assert_eq!(j.judge(&answered(200, latency)).degraded, None);
        }
        j
    }

    #[test]
    fn a_429_is_degraded_and_its_retry_after_holds_the_next_check_up_to_five_minutes() {
        let mut j = Judge::default();
        let throttled = |s| Seen::Answered {
            status: 429,
            latency: ms(2),
            retry_after: Some(Duration::from_secs(s)),
        };
        let first = j.judge(&throttled(7));
        assert_eq!(
            first.degraded.as_deref(),
            Some("HTTP 429 Too Many Requests, Retry-After: 7s")
        );
        assert_eq!(first.hold, Duration::from_secs(7));
        assert_eq!(first.found, Found::Throttled);
        assert_eq!(j.judge(&throttled(3600)).hold, MAX_RETRY_AFTER);
        assert!(
            j.judge(&answered(429, ms(2))).degraded.is_some(),
            "without Retry-After too"
        );
    }

    #[test]
    fn an_answer_five_times_its_average_and_above_the_floor_is_slow() {
        let mut j = warmed(3, ms(100));
        let judged = j.judge(&answered(200, ms(501)));
        assert_eq!(
            judged.degraded.as_deref(),
            Some("slow: answered in 501ms against its average of 100ms")
        );
        assert_eq!(judged.found, Found::Slow);
        assert_eq!(j.judge(&answered(200, ms(499))).degraded, None, "under 5×");
    }

    #[test]
    fn an_answer_under_the_floor_is_never_slow_however_fast_the_average() {
        assert_eq!(
            warmed(3, ms(1)).judge(&answered(200, ms(249))).degraded,
            None
        );
        assert!(warmed(3, ms(1))
            .judge(&answered(200, ms(251)))
            .degraded
            .is_some());
    }

    #[test]
    fn slowness_is_judged_only_after_three_answers() {
        let mut j = warmed(2, ms(60));
        assert_eq!(
            j.judge(&answered(200, ms(2000))).degraded,
            None,
            "warming up"
        );
        let mut j = warmed(3, ms(60));
        assert!(j.judge(&answered(200, ms(2000))).degraded.is_some());
    }

    #[test]
    fn slow_answers_do_not_feed_the_average_so_a_slow_apiserver_stays_degraded() {
        let mut j = warmed(3, ms(60));
        for _ in 0..20 {
            assert!(j.judge(&answered(200, ms(900))).degraded.is_some());
        }
        assert_eq!(
            j.judge(&answered(200, ms(70))).degraded,
            None,
            "back to normal"
        );
    }

    #[test]
    fn any_status_but_429_is_an_answer_its_latency_is_judged_by() {
        // A node not allowed the path still passes priority and fairness first.
        let mut j = warmed(3, ms(50));
        assert_eq!(j.judge(&answered(403, ms(60))).degraded, None);
        assert!(j.judge(&answered(404, ms(900))).degraded.is_some());
    }

    #[test]
    fn no_answer_within_the_timeout_is_degraded() {
        let mut j = warmed(3, ms(50));
        let judged = j.judge(&Seen::NoAnswer {
            timeout: Duration::from_secs(3),
        });
        assert_eq!(judged.degraded.as_deref(), Some("no answer within 3000ms"));
        assert_eq!(judged.found, Found::NoAnswer);
    }
}
