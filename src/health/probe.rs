//! One backend's `/readyz` probe: the shared HTTPS client (`https`), its connection kept alive
//! between probes so steady state costs no TLS handshake, re-dialled when stale. The request check
//! (`request_check`) is one more `GET` on the same kept connection right after a probe
//! ([`HttpsProbe::get`]): it adds no connection and no handshake to the apiserver.
//!
//! Owns keeping the connection, one retry on a stale one, and what an answer means for the
//! check. Does not own the client (`https`), the schedule (`health`) or the state (`verdict`).

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use tokio::time::Instant;

use super::rise_fall::Outcome;
use crate::backend::{BackendLive, BackendSpec};
use crate::config::DurationValue;
use crate::https::reason::{answer_reason, Reason};
use crate::https::{self, Answer, ConnectError, GetError};
use crate::tls::{unix_now, TlsSource, TlsState};
use crate::verdict::{FailClass, FailingChecks, Reach};

/// Most of an answer we read. A `/readyz?verbose` body is ~2 KiB; anything longer is cut off and the
/// connection dropped, so a hostile backend cannot make us buffer without bound.
pub const MAX_READYZ_BODY: usize = 8 * 1024;

/// A kept probe connection is re-dialled once it is this old, healthy or not: a path that stopped
/// accepting *new* connections (SYN black hole, full accept queue, conntrack exhaustion) is then
/// found without client traffic. At most 12 TLS handshakes per backend per node-hour.
pub const MAX_CONN_AGE: Duration = Duration::from_secs(5 * 60);

/// The real [`Probe`]: HTTPS `GET <path>` to one backend over at most one kept-alive connection.
#[derive(Debug)]
pub struct HttpsProbe {
    spec: Arc<BackendSpec>,
    /// The backend's live state: its address memory, shared with client dials.
    live: Arc<BackendLive>,
    path: String,
    tls: Arc<TlsSource>,
    conn: Option<https::Conn>,
}

/// Whether the next probe may use `conn`: same TLS material, still open, and younger than
/// [`MAX_CONN_AGE`].
fn reusable(conn: &https::Conn, tls_generation: u64, now: Instant) -> bool {
    !conn.is_closed() && fresh(conn.tls_generation, conn.dialed, tls_generation, now)
}

/// Why one probe attempt failed; each kind is handled differently by [`HttpsProbe::probe`].
#[derive(Debug)]
enum Failure {
    /// Failed before any answer on a reused connection: the server may just have closed it
    /// idle, so the probe retries once on a fresh connection before it counts.
    Stale(Reason),
    /// Could not be made for want of something on this node (descriptors, memory): no news of
    /// the backend.
    ThisNode(String),
    /// The backend failed the check (an [`Outcome::Fail`]: how far it got, and why).
    Backend(Outcome),
    /// A `GET` that may not dial found no usable kept connection.
    NotKept,
}

/// A failed check that got no HTTP answer; `reach` says whether its dial connected.
fn unanswered(reason: Reason, reach: Reach) -> Outcome {
    Outcome::Fail {
        reason: reason.text.into(),
        class: reason.class,
        checks: FailingChecks::none(),
        reach,
    }
}

/// A probe that could not be made for a reason on this node, not the backend's (out of file
/// descriptors or memory): it says nothing about the backend, whose health stays as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inconclusive(pub String);

/// One health probe of one backend; [`HttpsProbe`] is the real one, tests script their own.
pub trait Probe: Send {
    /// Probes once, bounded by `timeout` end to end.
    fn probe(
        &mut self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Outcome, Inconclusive>> + Send;

    /// Drops any kept connection, so the next probe dials afresh.
    fn reset(&mut self);

    /// One `GET` of `path` on the kept connection, never dialling ([`HttpsProbe::get`]); a
    /// scripted probe has none to make.
    fn get(
        &mut self,
        _path: &str,
        _timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Answer, Unanswered>> + Send {
        std::future::ready(Err(Unanswered::NotKept))
    }
}

impl Probe for HttpsProbe {
    fn probe(
        &mut self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Outcome, Inconclusive>> + Send {
        HttpsProbe::probe(self, timeout)
    }

    fn reset(&mut self) {
        self.conn = None;
    }

    fn get(
        &mut self,
        path: &str,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Answer, Unanswered>> + Send {
        HttpsProbe::get(self, path, timeout)
    }
}

impl HttpsProbe {
    /// A probe with no connection yet.
    pub fn new(
        spec: Arc<BackendSpec>,
        live: Arc<BackendLive>,
        path: String,
        tls: Arc<TlsSource>,
    ) -> Self {
        HttpsProbe {
            spec,
            live,
            path,
            tls,
            conn: None,
        }
    }

    /// One probe, bounded by `timeout` end to end. Any failure drops the connection.
    pub async fn probe(&mut self, timeout: Duration) -> Result<Outcome, Inconclusive> {
        let path = std::mem::take(&mut self.path);
        let fetched = self.fetch(&path, timeout, true).await;
        self.path = path;
        let result = fetched.and_then(|answer| self.readyz(answer));
        if result.is_err() {
            self.conn = None; // a failed check proves nothing about the connection
        }
        match result {
            Ok(latency) => Ok(Outcome::Pass { latency }),
            Err(Failure::ThisNode(reason)) => Err(Inconclusive(reason)),
            // A second stale failure (on the fresh connection) is the backend's.
            Err(Failure::Stale(reason)) => Ok(unanswered(reason, Reach::Connected)),
            Err(Failure::Backend(outcome)) => Ok(outcome),
            // A probe always may dial.
            Err(Failure::NotKept) => Err(Inconclusive("no connection kept".to_string())),
        }
    }

    /// One `GET` of `path` on the kept connection, bounded by `timeout` end to end: the answer
    /// whatever its status, or why there was none. It never dials: with no usable connection kept
    /// (the latest probe failed, or it is due for its five-minute re-dial) no `GET` is made. Any
    /// failure drops the connection.
    pub async fn get(&mut self, path: &str, timeout: Duration) -> Result<Answer, Unanswered> {
        match self.fetch(path, timeout, false).await {
            Ok(answer) => Ok(answer),
            Err(Failure::ThisNode(reason)) => Err(Unanswered::ThisNode(reason)),
            // Closed idle under us: no news of the backend.
            Err(Failure::Stale(_) | Failure::NotKept) => Err(Unanswered::NotKept),
            Err(Failure::Backend(Outcome::Fail {
                reach: Reach::Unreached,
                ..
            })) => Err(Unanswered::Unreached),
            Err(Failure::Backend(Outcome::Fail { reason, .. })) => {
                Err(Unanswered::NoAnswer(reason.to_string()))
            }
            Err(Failure::Backend(Outcome::Pass { .. })) => {
                Err(Unanswered::NoAnswer("no answer".to_string()))
            }
        }
    }

    /// One `GET` of `path` bounded by `timeout` on the kept connection, dialled if need be and
    /// `dials`; the failure as the probe classes it.
    async fn fetch(
        &mut self,
        path: &str,
        timeout: Duration,
        dials: bool,
    ) -> Result<Answer, Failure> {
        let attempt = self.attempt(path, timeout, dials);
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Backend(unanswered(
                Reason {
                    text: format!("timeout after {}", DurationValue(timeout)),
                    class: FailClass::Timeout,
                },
                Reach::Connected,
            ))),
        };
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    async fn attempt(
        &mut self,
        path: &str,
        timeout: Duration,
        dials: bool,
    ) -> Result<Answer, Failure> {
        let tls = self.tls.current();
        let now = Instant::now();
        let reusable = self
            .conn
            .as_ref()
            .is_some_and(|c| reusable(c, tls.generation, now));
        if !reusable {
            self.conn = None;
            if !dials {
                return Err(Failure::NotKept);
            }
            self.conn = Some(self.dial(&tls, timeout).await?);
        }
        match self.request(path, reusable).await {
            Err(Failure::Stale(reason)) if !dials => Err(Failure::Stale(reason)),
            Err(Failure::Stale(_)) => {
                self.conn = Some(self.dial(&tls, timeout).await?);
                self.request(path, false).await
            }
            r => r,
        }
    }

    async fn dial(&self, tls: &TlsState, budget: Duration) -> Result<https::Conn, Failure> {
        https::connect(&self.spec, &self.live, tls, budget)
            .await
            .map_err(|e| match e {
                ConnectError::ThisNode(reason) => Failure::ThisNode(reason),
                ConnectError::Unreached(reason) => {
                    Failure::Backend(unanswered(reason, Reach::Unreached))
                }
                ConnectError::Backend(reason) => {
                    Failure::Backend(unanswered(reason, Reach::Connected))
                }
            })
    }

    async fn request(&mut self, path: &str, reused: bool) -> Result<Answer, Failure> {
        let conn = self.conn.as_mut().ok_or_else(|| {
            let reason = Reason {
                text: "HTTP: no connection".to_string(),
                class: FailClass::Other,
            };
            Failure::Backend(unanswered(reason, Reach::Connected))
        })?;
        let answer = conn
            .get(path, self.spec.id.as_str(), "*/*", MAX_READYZ_BODY)
            .await
            .map_err(|e| match e {
                GetError::NoAnswer(reason) if reused => Failure::Stale(reason),
                GetError::NoAnswer(reason) => {
                    Failure::Backend(unanswered(reason, Reach::Connected))
                }
                e => {
                    let reason = Reason {
                        text: e.to_string(),
                        class: FailClass::Other,
                    };
                    Failure::Backend(unanswered(reason, Reach::Connected))
                }
            })?;
        if !answer.complete() {
            self.conn = None; // unread bytes would poison the next request
        }
        Ok(answer)
    }

    /// What an answer means for the `/readyz` check: its latency when it passed.
    fn readyz(&self, answer: Answer) -> Result<Duration, Failure> {
        if answer.status == StatusCode::OK {
            return Ok(answer.latency);
        }
        let ours = self.tls.current().client_cert.left(unix_now());
        let (checks, reason) = match draining_retry_after(&answer) {
            Some(reason) => (FailingChecks::of(&[SHUTDOWN_CHECK]), reason),
            None => {
                let checks = FailingChecks::parse(&answer.body);
                let reason = answer_reason(answer.status.as_u16(), &answer.body, &checks, ours);
                (checks, reason)
            }
        };
        Err(Failure::Backend(Outcome::failed_answer(
            reason.text.into(),
            reason.class,
            checks,
            answer.status.as_u16(),
            answer.latency,
        )))
    }
}

/// Why [`HttpsProbe::get`] got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// For want of something on this node (descriptors, memory): no news of the backend.
    ThisNode(String),
    /// No usable connection was kept: no `GET` made.
    NotKept,
    /// The connection could not be made.
    Unreached,
    /// Connected, and no answer in time (or a broken one): why.
    NoAnswer(String),
}

/// The check a graceful shutdown fails, as kube-apiserver names it.
const SHUTDOWN_CHECK: &str = "shutdown";

/// A `429` with `Retry-After` is kube-apiserver past its shutdown delay with
/// `--shutdown-send-retry-after` (k8s.io/apiserver `pkg/server/filters/with_retry_after.go`): it
/// sends it to new requests while those in flight drain. It counts as draining, as `[-]shutdown`
/// does, not as a failed check. (`/readyz`, `/livez` and `/healthz` are exempt there, so a probe
/// meets it only on another `health.path`.)
fn draining_retry_after(answer: &Answer) -> Option<Reason> {
    let after = answer.retry_after.as_deref()?;
    (answer.status == StatusCode::TOO_MANY_REQUESTS).then(|| Reason {
        text: format!("HTTP 429, Retry-After: {after}: draining (a graceful shutdown)"),
        class: FailClass::HttpOther,
    })
}

/// Whether a connection dialed at `dialed` with TLS material `conn_generation` may still be used at
/// `now`, when the current material is `tls_generation`.
fn fresh(conn_generation: u64, dialed: Instant, tls_generation: u64, now: Instant) -> bool {
    conn_generation == tls_generation && now.saturating_duration_since(dialed) < MAX_CONN_AGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_connections_are_redialled_every_five_minutes() {
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        assert!(fresh(1, t0, 1, t0 + 4 * minute));
        assert!(
            !fresh(1, t0, 1, t0 + 5 * minute),
            "five minutes old: redial"
        );
    }

    #[test]
    fn kept_connections_are_redialled_on_new_tls_material() {
        let t0 = Instant::now();
        assert!(!fresh(1, t0, 2, t0), "new certificates: redial");
    }
}
