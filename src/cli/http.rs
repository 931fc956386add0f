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

/// Why a GET got no usable answer. The wording says whether the endpoint was reached at all.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// Connecting failed.
    #[error("cannot reach admin endpoint {addr}: {reason}")]
    Unreachable {
        /// The address as given.
        addr: String,
        /// Short reason, e.g. `connection refused`.
        reason: String,
    },
    /// No connection within [`GET_TIMEOUT`].
    #[error("cannot reach admin endpoint {addr}: no connection within {}s", GET_TIMEOUT.as_secs())]
    Timeout {
        /// The address as given.
        addr: String,
    },
    /// Connected, but what came back is not an HTTP answer, or the connection ended before one.
    #[error("admin endpoint {addr} did not answer HTTP: {reason}")]
    NotHttp {
        /// The address as given.
        addr: String,
        /// What went wrong, e.g. `invalid HTTP version parsed`.
        reason: String,
    },
    /// Connected, but no whole answer within [`GET_TIMEOUT`].
    #[error("admin endpoint {addr} accepted the connection but did not answer within {}s", GET_TIMEOUT.as_secs())]
    NoAnswer {
        /// The address as given.
        addr: String,
    },
    /// The body is longer than [`MAX_BODY`].
    #[error("admin endpoint {addr} answered with more than {} MiB", MAX_BODY >> 20)]
    TooLarge {
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
    let deadline = tokio::time::Instant::now() + GET_TIMEOUT;
    let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            return Err(GetError::Unreachable {
                addr: addr.to_string(),
                reason: io_reason(&e),
            })
        }
        Err(_) => {
            return Err(GetError::Timeout {
                addr: addr.to_string(),
            })
        }
    };
    match tokio::time::timeout_at(deadline, exchange(stream, addr, path)).await {
        Ok(r) => r,
        Err(_) => Err(GetError::NoAnswer {
            addr: addr.to_string(),
        }),
    }
}

/// Why an exchange on a connected stream failed.
enum Failed {
    Http(hyper::Error),
    TooLarge,
}

async fn exchange(stream: TcpStream, addr: &str, path: &str) -> Result<Answer, GetError> {
    let not_http = |reason: String| GetError::NotHttp {
        addr: addr.to_string(),
        reason,
    };
    // The address reached, not a name it was given: the admin server answers a `Host` that is
    // an address it was reached at, and refuses other DNS names (`admin::host`).
    let host = stream
        .peer_addr()
        .map_or_else(|_| addr.to_string(), |a| a.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| not_http(e.to_string()))?;
    let req = Request::get(path)
        .header(header::HOST, host)
        .header(header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| not_http(format!("bad request: {e}")))?;
    // `sender` moves into the request future, so the connection future ends once it is done.
    let exchange = async move {
        let resp = sender.send_request(req).await.map_err(Failed::Http)?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(e) => Failed::Http(*e),
                Err(_) => Failed::TooLarge, // the limit is the only other error `Limited` adds
            })?
            .to_bytes();
        Ok::<_, Failed>((status, body))
    };
    let (result, conn_result) = tokio::join!(exchange, conn);
    let (status, body) = result.map_err(|e| match e {
        Failed::Http(e) => not_http(e.to_string()),
        Failed::TooLarge => GetError::TooLarge {
            addr: addr.to_string(),
        },
    })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::answers;

    #[tokio::test]
    async fn an_endpoint_that_accepts_but_never_answers_is_not_called_unreachable() {
        let addr = crate::testing::holds().to_string();
        let err = get(&addr, "/status").await.expect_err("no answer");
        assert_eq!(
            err.to_string(),
            format!("admin endpoint {addr} accepted the connection but did not answer within 3s")
        );
    }

    #[tokio::test]
    async fn an_endpoint_that_answers_but_not_http_or_too_much_is_not_called_unreachable() {
        let addr = answers(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()).to_string();
        let err = get(&addr, "/status").await.expect_err("not HTTP");
        assert!(matches!(err, GetError::NotHttp { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with(&format!("admin endpoint {addr} did not answer HTTP: ")),
            "{err}"
        );

        let mut big = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            MAX_BODY + 1
        )
        .into_bytes();
        big.resize(big.len() + MAX_BODY + 1, b'x');
        let addr = answers(big).to_string();
        let err = get(&addr, "/status").await.expect_err("too large");
        assert_eq!(
            err.to_string(),
            format!("admin endpoint {addr} answered with more than 1 MiB")
        );
    }
}
