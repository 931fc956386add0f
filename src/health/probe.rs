//! One backend's `/readyz` client: HTTPS with the cluster CA and the kubelet client certificate,
//! keeping its connection alive between probes so steady state costs no TLS handshake.
//!
//! Owns dialing, the request, bounded reading of the answer and the failure reason. Does not own
//! the schedule (`health`) or the state (`health::verdict`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::{header, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::reason::{first_line, http_reason, tls_reason};
use super::rise_fall::Outcome;
use crate::backend::{BackendLive, BackendSpec};
use crate::config::DurationValue;
use crate::dial::{Blame, SocketOptions};
use crate::tls::{TlsSource, TlsState};

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
    conn: Option<Conn>,
}

#[derive(Debug)]
struct Conn {
    sender: SendRequest<Empty<Bytes>>,
    driver: JoinHandle<()>,
    tls_generation: u64,
    dialed: Instant,
}

impl Conn {
    /// Whether the next probe may use this connection: same TLS material, still open, and younger
    /// than [`MAX_CONN_AGE`].
    fn reusable(&self, tls_generation: u64, now: Instant) -> bool {
        !self.sender.is_closed() && fresh(self.tls_generation, self.dialed, tls_generation, now)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Why one probe attempt failed; each kind is handled differently by [`HttpsProbe::probe`].
#[derive(Debug)]
enum Failure {
    /// Failed before any answer on a reused connection: the server may just have closed it
    /// idle, so the probe retries once on a fresh connection before it counts.
    Stale(String),
    /// Could not be made for want of something on this node (descriptors, memory): no news of
    /// the backend.
    ThisNode(String),
    /// The backend failed the check; `latency` is set when an HTTP answer (not 200) arrived.
    Backend {
        reason: String,
        latency: Option<Duration>,
    },
}

impl Failure {
    /// A failure of the backend with no HTTP answer (dial, TLS, a broken connection).
    fn unanswered(reason: String) -> Self {
        Failure::Backend {
            reason,
            latency: None,
        }
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
        let result = match tokio::time::timeout(timeout, self.attempt(timeout)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::unanswered(format!(
                "timeout after {}",
                DurationValue(timeout)
            ))),
        };
        if result.is_err() {
            self.conn = None;
        }
        match result {
            Ok(latency) => Ok(Outcome::Pass { latency }),
            Err(Failure::ThisNode(reason)) => Err(Inconclusive(reason)),
            // A second stale failure (on the fresh connection) is the backend's.
            Err(Failure::Stale(reason)) => Ok(Outcome::dial_failed(reason.into())),
            Err(Failure::Backend { reason, latency }) => Ok(Outcome::Fail {
                reason: reason.into(),
                latency,
            }),
        }
    }

    async fn attempt(&mut self, timeout: Duration) -> Result<Duration, Failure> {
        let tls = self.tls.current();
        let now = Instant::now();
        let reusable = self
            .conn
            .as_ref()
            .is_some_and(|c| c.reusable(tls.generation, now));
        if !reusable {
            self.conn = None;
            self.conn = Some(self.dial(&tls, timeout).await?);
        }
        match self.request(reusable).await {
            Err(Failure::Stale(_)) => {
                self.conn = Some(self.dial(&tls, timeout).await?);
                self.request(false).await
            }
            r => r,
        }
    }

    async fn dial(&self, tls: &TlsState, budget: Duration) -> Result<Conn, Failure> {
        connect(&self.spec, &self.live, tls, budget).await
    }

    async fn request(&mut self, reused: bool) -> Result<Duration, Failure> {
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| Failure::unanswered("HTTP: no connection".to_string()))?;
        let stale = |e: hyper::Error| {
            if reused {
                Failure::Stale(http_reason(&e))
            } else {
                Failure::unanswered(http_reason(&e))
            }
        };
        conn.sender.ready().await.map_err(stale)?;
        let req = request(&self.path, self.spec.id.as_str(), "*/*")
            .map_err(|e| Failure::unanswered(format!("HTTP: bad request: {e}")))?;
        let start = Instant::now();
        let resp = conn.sender.send_request(req).await.map_err(stale)?;
        let latency = start.elapsed();
        let status = resp.status();
        let (body, complete) = read_bounded(resp.into_body(), MAX_READYZ_BODY).await;
        if !complete {
            self.conn = None; // unread bytes would poison the next request
        }
        if status == StatusCode::OK {
            return Ok(latency);
        }
        let reason = match first_line(&body) {
            Some(line) => format!("HTTP {}: {line}", status.as_u16()),
            None => format!("HTTP {}", status.as_u16()),
        };
        Err(Failure::Backend {
            reason,
            latency: Some(latency),
        })
    }
}

/// A probe's socket: TCP_NODELAY, so the TLS handshake's and the request's small writes go out
/// at once; no keepalive or user timeout (the probe's budget bounds it).
const NODELAY: SocketOptions = SocketOptions {
    nodelay: true,
    ..SocketOptions::NONE
};

/// A fresh HTTPS connection to `spec`: the dial path client connections use (with the backend's
/// address memory), TLS verified against `spec.server_name`, then an HTTP/1 handshake.
async fn connect(
    spec: &BackendSpec,
    live: &BackendLive,
    tls: &TlsState,
    budget: Duration,
) -> Result<Conn, Failure> {
    let tally = crate::dial::Tally::default();
    let memory = &live.dial_memory;
    let tcp = crate::dial::connect(&spec.host, spec.port, budget, &tally, memory, &NODELAY).await;
    live.count_dial(&tally);
    let tcp = tcp.map_err(|e| match e.blame() {
        Blame::ThisNode => Failure::ThisNode(e.to_string()),
        Blame::Backend => Failure::unanswered(e.to_string()),
    })?;
    let stream = TlsConnector::from(tls.client.clone())
        .connect(spec.server_name.clone(), tcp)
        .await
        .map_err(|e| Failure::unanswered(tls_reason(&e)))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Failure::unanswered(http_reason(&e)))?;
    let driver = tokio::spawn(async move {
        // Ends when the connection closes; errors surface on the next request instead.
        let _ = connection.await;
    });
    Ok(Conn {
        sender,
        driver,
        tls_generation: tls.generation,
        dialed: Instant::now(),
    })
}

/// One `GET path` on a fresh connection to `spec` (the probe's dial, TLS and HTTP client),
/// reading at most `limit` bytes of the body: the status, the body read, and whether it was all
/// of it. Any failure before an answer is the reason as the probe words it. Not bounded in time:
/// the caller times it out. Discovery's poll.
pub(crate) async fn get(
    spec: &BackendSpec,
    live: &BackendLive,
    tls: &TlsState,
    path: &str,
    budget: Duration,
    limit: usize,
) -> Result<(StatusCode, Vec<u8>, bool), String> {
    let failed = |f: Failure| match f {
        Failure::Stale(r) | Failure::ThisNode(r) | Failure::Backend { reason: r, .. } => r,
    };
    let mut conn = connect(spec, live, tls, budget).await.map_err(failed)?;
    let req = request(path, spec.id.as_str(), "application/json")
        .map_err(|e| format!("HTTP: bad request: {e}"))?;
    conn.sender.ready().await.map_err(|e| http_reason(&e))?;
    let resp = conn
        .sender
        .send_request(req)
        .await
        .map_err(|e| http_reason(&e))?;
    let status = resp.status();
    let (body, complete) = read_bounded(resp.into_body(), limit).await;
    Ok((status, body, complete))
}

/// `GET path` as readyprism sends it.
fn request(
    path: &str,
    host: &str,
    accept: &'static str,
) -> Result<Request<Empty<Bytes>>, hyper::http::Error> {
    Request::get(path)
        .header(header::HOST, host)
        .header(
            header::USER_AGENT,
            concat!("readyprism/", env!("CARGO_PKG_VERSION")),
        )
        .header(header::ACCEPT, accept)
        .body(Empty::<Bytes>::new())
}

/// Whether a connection dialed at `dialed` with TLS material `conn_generation` may still be used at
/// `now`, when the current material is `tls_generation`.
fn fresh(conn_generation: u64, dialed: Instant, tls_generation: u64, now: Instant) -> bool {
    conn_generation == tls_generation && now.saturating_duration_since(dialed) < MAX_CONN_AGE
}

/// Reads at most `limit` bytes; `complete` is false if the body was longer or broke.
async fn read_bounded(mut body: hyper::body::Incoming, limit: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        match body.frame().await {
            None => return (out, true),
            Some(Err(_)) => return (out, false),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = limit - out.len();
                    out.extend_from_slice(&data[..data.len().min(room)]);
                    if data.len() > room {
                        return (out, false);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_connections_are_redialled_every_five_minutes_and_on_new_tls_material() {
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        assert!(fresh(1, t0, 1, t0 + 4 * minute));
        assert!(
            !fresh(1, t0, 1, t0 + 5 * minute),
            "five minutes old: redial"
        );
        assert!(!fresh(1, t0, 2, t0), "new certificates: redial");
        // 5 s probes for an hour: one handshake per five minutes at most.
        let per_hour = Duration::from_secs(3600).as_secs() / MAX_CONN_AGE.as_secs();
        assert_eq!(per_hour, 12);
    }
}
