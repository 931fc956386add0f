//! One plain-HTTP GET to a local admin endpoint, bounded in time and size: what `status` and the
//! tests use to read `/status`, `/metrics`, `/readyz`.
//!
//! Not the health probe (`health::probe`), which keeps a TLS connection alive between requests.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{header, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Bound on the whole exchange (connect + request + body): an admin server answers from memory,
/// so anything slower means the daemon is wedged, and a CLI must not hang.
pub const GET_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest body accepted; a `/status` is a few hundred bytes per backend, so 1 MiB is generous.
pub const MAX_BODY: usize = 1 << 20;

/// Why a GET got no answer.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// Connecting or talking failed.
    #[error("cannot reach admin endpoint {addr}: {reason}")]
    Unreachable {
        /// The address as given.
        addr: String,
        /// Short reason, e.g. `connection refused`.
        reason: String,
    },
    /// No answer within [`GET_TIMEOUT`].
    #[error("cannot reach admin endpoint {addr}: no answer within {}s", GET_TIMEOUT.as_secs())]
    Timeout {
        /// The address as given.
        addr: String,
    },
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The body (at most [`MAX_BODY`] bytes), lossily decoded as UTF-8.
    pub body: String,
}

/// GETs `http://{addr}{path}` (a leading `http://` on `addr` is accepted) within [`GET_TIMEOUT`].
pub async fn get(addr: &str, path: &str) -> Result<Answer, GetError> {
    let addr = addr
        .strip_prefix("http://")
        .unwrap_or(addr)
        .trim_end_matches('/');
    match tokio::time::timeout(GET_TIMEOUT, exchange(addr, path)).await {
        Ok(r) => r,
        Err(_) => Err(GetError::Timeout {
            addr: addr.to_string(),
        }),
    }
}

async fn exchange(addr: &str, path: &str) -> Result<Answer, GetError> {
    let unreachable = |reason: String| GetError::Unreachable {
        addr: addr.to_string(),
        reason,
    };
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| unreachable(io_reason(&e)))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let req = Request::get(path)
        .header(header::HOST, addr)
        .header(header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(format!("bad request: {e}")))?;
    // `sender` moves into the request future, so the connection future ends once it is done.
    let exchange = async move {
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await?
            .to_bytes();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
    };
    let (result, conn_result) = tokio::join!(exchange, conn);
    let (status, body) = result.map_err(|e| unreachable(e.to_string()))?;
    if let Err(e) = conn_result {
        tracing::debug!(error = %e, "admin connection ended with an error after the answer");
    }
    Ok(Answer {
        status: status.as_u16(),
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// `connection refused` rather than `Connection refused (os error 111)` for the common kinds.
fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused | ConnectionReset | ConnectionAborted | AddrNotAvailable | TimedOut
        | HostUnreachable | NetworkUnreachable => e.kind().to_string(),
        _ => e.to_string(),
    }
}
