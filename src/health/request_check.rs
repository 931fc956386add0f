//! One backend's request checks: a `GET` of `health.request_check_path` (`/version`) with the
//! kubelet's client certificate, so through API Priority and Fairness in the kubelet's own
//! priority level, made by the backend's monitor right after a probe on the probe's kept
//! connection, at most once per `health.request_check_interval` (30 s, ±10 %; the first at a
//! random point of the first interval, so a fleet's checks have no common phase), and only while
//! the backend is ready. `overload`'s rule reads each answer; the monitor sends a change of verdict
//! to the table's writer, which ranks a degraded backend after the healthy ones.
//!
//! A check never dials: with no usable connection kept (the latest probe failed, or the
//! connection is due for its five-minute re-dial) the round is skipped and counted. So checks add
//! no connection and no TLS handshake to the apiserver, only one `GET` per interval.
//!
//! Owns when a check is due and what a result changes. Does not own the rule (`overload`), the
//! connection (`probe::HttpsProbe::get`) or the ranking (`pick`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::probe::Unanswered;
use super::JITTER_PERCENT;
use crate::backend::BackendLive;
use crate::config::HealthConfig;
use crate::https::Answer;
use crate::jitter::Jitter;
use crate::overload::{Found, Judge, Seen};

/// Healthy checks in a row that take a degraded verdict back (one check makes it).
pub const HEALTHY_TO_CLEAR: u32 = 2;

/// Pins the interval for labs and tests (a duration such as `2s`), below the 30 s a config may
/// set, when the checks are on: read where a backend's monitor starts; never for production.
pub const INTERVAL_ENV: &str = "READYPRISM_REQUEST_CHECK_INTERVAL";

/// A backend's request checks: when the next is due, the rule's history, the verdict said.
pub(crate) struct RequestChecks {
    /// What a check `GET`s.
    pub path: String,
    every: Duration,
    due: Instant,
    jitter: Jitter,
    judge: Judge,
    /// The verdict the table holds; its reason's text is kept while what degrades it is the same
    /// (a slow answer's latency or a `429`'s `Retry-After` is no change).
    said: Option<Arc<str>>,
    /// What degraded it, as said; `None` when healthy or not known (a verdict kept across a
    /// reload: any new reason then replaces it).
    said_found: Option<Found>,
    /// Healthy checks in a row while degraded is said: [`HEALTHY_TO_CLEAR`] take it back.
    healthy: u32,
}

/// What a check or a change of state did to the verdict: `Some(new)` when it changed.
pub(crate) type Changed = Option<Option<Arc<str>>>;

impl RequestChecks {
    /// The checks of backend `name` as `health` sets them, from `now`, starting from the verdict
    /// the table holds; `None` when they are off.
    pub fn new(
        health: &HealthConfig,
        name: &str,
        said: Option<Arc<str>>,
        now: Instant,
    ) -> Option<RequestChecks> {
        let configured = Some(health.request_check_interval).filter(|d| !d.is_zero())?;
        let every = pinned_interval().unwrap_or(configured);
        // Uniform over the first interval: a draw around half of it, as far either way.
        let first = Jitter::seeded(name, 100).around(every / 2);
        Some(RequestChecks {
            path: health.request_check_path.clone(),
            every,
            due: now + first,
            jitter: Jitter::seeded(name, JITTER_PERCENT),
            judge: Judge::default(),
            said,
            said_found: None,
            healthy: 0,
        })
    }

    /// Whether a check is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        now >= self.due
    }

    /// Folds a check's answer (made at `now`), counted in `live`; the verdict if it changed.
    pub fn fold(
        &mut self,
        got: Result<Answer, Unanswered>,
        timeout: Duration,
        live: &BackendLive,
        now: Instant,
    ) -> Changed {
        self.due = now + self.jitter.around(self.every);
        let Some(seen) = seen(got, timeout) else {
            // No news of the backend: its verdict stands.
            live.request_checks[Found::Skipped.index()].fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let judged = self.judge.judge(&seen);
        live.request_checks[judged.found.index()].fetch_add(1, Ordering::Relaxed);
        self.due = self.due.max(now + judged.hold);
        self.say(judged.degraded.map(|why| (judged.found, why)))
    }

    /// The backend is not ready: not ranked among the ready ones, so not degraded either (at
    /// once).
    pub fn not_ready(&mut self) -> Changed {
        self.healthy = HEALTHY_TO_CLEAR;
        self.say(None)
    }

    /// Says `verdict` (what degrades it, and why) if it is a change: degraded or not, or
    /// degraded by something else. Degraded is taken back only after [`HEALTHY_TO_CLEAR`]
    /// healthy checks in a row, so an apiserver that refuses some requests and serves others
    /// (a priority level at its limit) is not ranked up and down at every check.
    fn say(&mut self, verdict: Option<(Found, Arc<str>)>) -> Changed {
        if verdict.is_some() {
            self.healthy = 0;
        } else if self.said.is_some() {
            self.healthy += 1;
            if self.healthy < HEALTHY_TO_CLEAR {
                return None;
            }
        }
        let found = verdict.as_ref().map(|v| v.0);
        let same = match &verdict {
            None => self.said.is_none(),
            Some(_) => self.said.is_some() && self.said_found == found,
        };
        if same {
            return None;
        }
        self.said_found = found;
        self.said = verdict.map(|v| v.1);
        Some(self.said.clone())
    }
}

/// What the rule reads of a check's result; `None` when no `GET` was made (no usable connection
/// kept, this node short of resources, or no connection could be made).
fn seen(got: Result<Answer, Unanswered>, timeout: Duration) -> Option<Seen> {
    match got {
        Ok(answer) => Some(Seen::Answered {
            status: answer.status.as_u16(),
            latency: answer.latency,
            retry_after: answer
                .retry_after
                .as_deref()
                .and_then(|s| s.trim().parse().ok())
                .map(Duration::from_secs),
        }),
        Err(Unanswered::NoAnswer(_)) => Some(Seen::NoAnswer { timeout }),
        Err(Unanswered::ThisNode(_) | Unanswered::NotKept | Unanswered::Unreached) => None,
    }
}

/// The interval [`INTERVAL_ENV`] pins, if it is set to a duration that is not zero.
fn pinned_interval() -> Option<Duration> {
    let text = std::env::var(INTERVAL_ENV).ok()?;
    crate::config::DurationValue::parse(&text)
        .ok()
        .map(|d| d.0)
        .filter(|d| !d.is_zero())
}

/// The log line of a change of verdict.
pub(crate) fn log(backend: &str, verdict: &Option<Arc<str>>) {
    match verdict {
        Some(reason) => {
            tracing::warn!(backend, reason = &**reason, "backend degraded: its request check finds it overloaded; ranked after the healthy backends for new connections, nothing closed")
        }
        None => tracing::info!(backend, "backend no longer degraded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::https::BodyEnd;
    use hyper::StatusCode;

    fn answer(status: u16, ms: u64) -> Result<Answer, Unanswered> {
        Ok(Answer {
            status: StatusCode::from_u16(status).expect("a status"),
            latency: Duration::from_millis(ms),
            body: Vec::new(),
            end: BodyEnd::Whole,
            retry_after: (status == 429).then(|| "1".to_string()),
        })
    }

    fn checks() -> (RequestChecks, BackendLive, Instant) {
        let now = Instant::now();
        let health = crate::testing::fixtures::health_config();
        let c = RequestChecks::new(&health, "10.0.0.1:6443", None, now).expect("on by default");
        (c, BackendLive::default(), now)
    }

    #[test]
    fn the_first_check_is_due_within_the_first_interval_and_the_next_after_one_more() {
        let (mut c, live, now) = checks();
        assert!(
            c.due(now + Duration::from_secs(30)),
            "within the first 30 s"
        );
        let at = now + Duration::from_secs(30);
        assert_eq!(
            c.fold(answer(200, 2), Duration::from_secs(3), &live, at),
            None
        );
        assert!(
            !c.due(at + Duration::from_secs(26)),
            "not before 30 s −10 %"
        );
        assert!(c.due(at + Duration::from_secs(33)), "by 30 s +10 %");
    }

    #[test]
    fn a_change_is_said_once_while_what_degrades_it_stays_the_same() {
        let (mut c, live, now) = checks();
        let t = Duration::from_secs(3);
        for _ in 0..3 {
            assert_eq!(
                c.fold(answer(200, 20), t, &live, now),
                None,
                "healthy: no change"
            );
        }
        let slow = c.fold(answer(200, 900), t, &live, now);
        assert!(slow.is_some_and(|d| d.is_some_and(|why| why.starts_with("slow"))));
        assert_eq!(
            c.fold(answer(200, 950), t, &live, now),
            None,
            "still slow: no change"
        );
        let throttled = c.fold(answer(429, 1), t, &live, now);
        assert!(throttled.is_some_and(|d| d.is_some_and(|why| why.contains("429"))));
        assert_eq!(
            c.fold(answer(200, 21), t, &live, now),
            None,
            "one healthy check: still degraded"
        );
        let again = c.fold(answer(429, 1), t, &live, now);
        assert_eq!(again, None, "degraded again, as it was: no change");
        assert_eq!(c.fold(answer(200, 22), t, &live, now), None);
        assert_eq!(
            c.fold(answer(200, 21), t, &live, now),
            Some(None),
            "two healthy checks in a row: healthy again"
        );
        assert_eq!(c.not_ready(), None, "nothing to take back");
        let counts: Vec<u64> = live
            .request_checks
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect();
        assert_eq!(
            counts,
            [6, 2, 2, 0, 0],
            "healthy, throttled, slow, no answer, skipped"
        );
    }

    #[test]
    fn a_round_with_no_connection_kept_is_skipped_and_changes_nothing() {
        let (mut c, live, now) = checks();
        let t = Duration::from_secs(3);
        assert!(c.fold(answer(429, 1), t, &live, now).is_some());
        assert_eq!(c.fold(Err(Unanswered::NotKept), t, &live, now), None);
        assert_eq!(
            live.request_checks[Found::Skipped.index()].load(Ordering::Relaxed),
            1
        );
        assert_eq!(c.not_ready(), Some(None), "not ready: not degraded");
    }

    #[test]
    fn a_verdict_kept_across_a_reload_is_taken_back_by_a_healthy_answer() {
        let now = Instant::now();
        let health = crate::testing::fixtures::health_config();
        let kept = Some(Arc::from("HTTP 429 Too Many Requests"));
        let mut c = RequestChecks::new(&health, "a:1", kept, now).expect("on");
        let live = BackendLive::default();
        let t = Duration::from_secs(3);
        assert_eq!(c.fold(answer(200, 2), t, &live, now), None);
        assert_eq!(c.fold(answer(200, 2), t, &live, now), Some(None));
    }

    #[test]
    fn zero_turns_the_checks_off() {
        let mut health = crate::testing::fixtures::health_config();
        health.request_check_interval = Duration::ZERO;
        assert!(RequestChecks::new(&health, "a:1", None, Instant::now()).is_none());
    }
}
