//! The apiserver HTTPS client the probe and discovery share: a connection dialed the way client
//! connections are (the backend's address memory, its attempts raced), TLS verified against the
//! backend's server name with the cluster CA and the kubelet's certificate, then HTTP/1; a `GET`
//! as readyprism sends it, its body read up to a limit.
//!
//! Owns the connection, the request, bounded reading and the words for failures (`reason`). Does
//! not own when to ask or what an answer means (`health`, `discovery`), nor keeping a connection
//! between requests (the probe's choice).

pub mod reason;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::{header, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::backend::{BackendLive, BackendSpec, News};
use crate::dial::{Blame, SocketOptions};
use crate::tls::TlsState;
use reason::{http_reason, tls_reason, Reason};

/// One HTTPS connection to a backend. Dropping it closes it.
#[derive(Debug)]
pub struct Conn {
    sender: SendRequest<Empty<Bytes>>,
    driver: JoinHandle<()>,
    /// The TLS material it was made with ([`TlsState::generation`]).
    pub tls_generation: u64,
    /// When it was made.
    pub dialed: Instant,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Why a connection could not be made, worded for `/status` and the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// For want of something on this node (descriptors, ports, memory): no news of the backend.
    #[error("{0}")]
    ThisNode(String),
    /// The backend's fault: the dial got no connection (SYNs unanswered, refused, unreachable).
    #[error("{0}")]
    Unreached(Reason),
    /// The backend's fault: connected, then TLS or the HTTP handshake failed.
    #[error("{0}")]
    Backend(Reason),
}

/// Why a `GET` on a connection got no answer, worded for `/status` and the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    /// The request could not be built (a path or host HTTP does not allow).
    #[error("HTTP: bad request: {0}")]
    BadRequest(String),
    /// The connection failed before an answer arrived (closed, reset, our certificate refused).
    #[error("{0}")]
    NoAnswer(Reason),
}

/// An HTTP answer, its body read up to the limit asked for.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// From sending the request to the answer's head.
    pub latency: Duration,
    /// The body, at most the limit.
    pub body: Vec<u8>,
    /// How the body ended.
    pub end: BodyEnd,
    /// Its `Retry-After` header, if it has one (a graceful shutdown's `429` with
    /// `--shutdown-send-retry-after`).
    pub retry_after: Option<String>,
}

/// How an answer's body ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyEnd {
    /// All of it was read.
    Whole,
    /// It was longer than the limit: the rest is unread.
    OverLimit,
    /// It broke off before its end (the connection closed or failed): hyper's words.
    Cut(String),
}

impl Answer {
    /// Whether that was all of the body: else the connection has unread bytes or is broken and
    /// must not be used again.
    pub fn complete(&self) -> bool {
        self.end == BodyEnd::Whole
    }
}

/// A probe's or poll's socket: TCP_NODELAY, so the TLS handshake's and the request's small
/// writes go out at once; no keepalive or user timeout (the caller's budget bounds it).
const NODELAY: SocketOptions = SocketOptions {
    nodelay: true,
    ..SocketOptions::NONE
};

/// A fresh HTTPS connection to `spec`: the dial path client connections use (with the backend's
/// address memory and its dial counters), TLS verified against `spec.server_name`, then an HTTP/1
/// handshake. The dial is bounded by `budget`; the rest by the caller.
pub async fn connect(
    spec: &BackendSpec,
    live: &BackendLive,
    tls: &TlsState,
    budget: Duration,
) -> Result<Conn, ConnectError> {
    let tally = crate::dial::Tally::default();
    let memory = &live.dial_memory;
    let tcp = crate::dial::connect(&spec.host, spec.port, budget, &tally, memory, &NODELAY).await;
    live.count_dial(&tally);
    let tcp = tcp.map_err(|e| match e.blame() {
        Blame::ThisNode => ConnectError::ThisNode(e.to_string()),
        Blame::Backend => ConnectError::Unreached(Reason {
            text: e.to_string(),
            class: e.class(),
        }),
    })?;
    // A new connection to the backend worked: evidence for passive health, as a client's is.
    live.inbox.tell(News::Connected);
    let stream = TlsConnector::from(tls.client.clone())
        .connect(spec.server_name.clone(), tcp)
        .await
        .map_err(|e| ConnectError::Backend(tls_reason(&e)))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ConnectError::Backend(http_reason(&e)))?;
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

impl Conn {
    /// Whether the peer or an error has closed it.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// `GET path` with `Host: host` and `Accept: accept`, reading at most `limit` bytes of the
    /// body. Not bounded in time: the caller times it out. A connection whose answer was not
    /// [`Answer::complete`] has unread bytes and must not be used again.
    pub async fn get(
        &mut self,
        path: &str,
        host: &str,
        accept: &'static str,
        limit: usize,
    ) -> Result<Answer, GetError> {
        let no_answer = |e: hyper::Error| GetError::NoAnswer(http_reason(&e));
        self.sender.ready().await.map_err(no_answer)?;
        let req = request(path, host, accept).map_err(|e| GetError::BadRequest(e.to_string()))?;
        let start = Instant::now();
        let resp = self.sender.send_request(req).await.map_err(no_answer)?;
        let latency = start.elapsed();
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let (body, end) = read_bounded(resp.into_body(), limit).await;
        Ok(Answer {
            status,
            latency,
            body,
            end,
            retry_after,
        })
    }
}

/// One `GET path` on a fresh connection to `spec`, asking for JSON, reading at most `limit`
/// bytes of the body; any failure before an answer as its words. Not bounded in time beyond the
/// dial's `budget`: the caller times it out. Discovery's poll.
pub async fn get_once(
    spec: &BackendSpec,
    live: &BackendLive,
    tls: &TlsState,
    path: &str,
    budget: Duration,
    limit: usize,
) -> Result<Answer, String> {
    let mut conn = connect(spec, live, tls, budget)
        .await
        .map_err(|e| e.to_string())?;
    conn.get(path, spec.id.as_str(), "application/json", limit)
        .await
        .map_err(|e| e.to_string())
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

/// Reads at most `limit` bytes, and says how the body ended.
async fn read_bounded(mut body: hyper::body::Incoming, limit: usize) -> (Vec<u8>, BodyEnd) {
    let mut out = Vec::new();
    loop {
        match body.frame().await {
            None => return (out, BodyEnd::Whole),
            Some(Err(e)) => return (out, BodyEnd::Cut(http_reason(&e).text)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = limit - out.len();
                    out.extend_from_slice(&data[..data.len().min(room)]);
                    if data.len() > room {
                        return (out, BodyEnd::OverLimit);
                    }
                }
            }
        }
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests;
