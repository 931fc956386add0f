//! `readyprism status`: fetches the admin `/status` document and renders it for an operator.
//!
//! Owns the HTTP fetch (one request, bounded in time and size), the human table and the exit-code
//! decision. Does not own the document's shape: `admin::status_json` does.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{header, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Bound on the whole fetch (connect + request + body): the admin server answers from memory, so
/// anything slower means the daemon is wedged, and a CLI must not hang.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// Largest `/status` body accepted; a few hundred bytes per backend, so 1 MiB is generous.
const MAX_BODY: usize = 1 << 20;

/// Exit code: at least one backend is ready.
pub const EXIT_READY: u8 = 0;
/// Exit code: the balancer answered but no backend is ready (or it is shutting down).
pub const EXIT_NOT_READY: u8 = 1;
/// Exit code: the admin endpoint could not be reached or did not answer with a status document.
pub const EXIT_UNREACHABLE: u8 = 2;

/// Why the status document could not be fetched. Every variant maps to [`EXIT_UNREACHABLE`].
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Connecting or talking to the admin endpoint failed.
    #[error("cannot reach admin endpoint {addr}: {reason}")]
    Unreachable {
        /// The address as given.
        addr: String,
        /// Short reason, e.g. `connection refused`.
        reason: String,
    },
    /// The admin endpoint did not answer within [`FETCH_TIMEOUT`].
    #[error("cannot reach admin endpoint {addr}: no answer within {}s", FETCH_TIMEOUT.as_secs())]
    Timeout {
        /// The address as given.
        addr: String,
    },
    /// The endpoint answered, but not with 200.
    #[error("admin endpoint {addr} answered HTTP {status} on /status")]
    Http {
        /// The address as given.
        addr: String,
        /// The HTTP status.
        status: u16,
    },
    /// The body is not a JSON object.
    #[error("admin endpoint {addr} answered /status with invalid JSON: {reason}")]
    BadJson {
        /// The address as given.
        addr: String,
        /// What is wrong.
        reason: String,
    },
}

/// A fetched status document.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The body exactly as received (printed by `--json`).
    pub body: String,
    /// The parsed document.
    pub doc: Value,
}

/// GETs `http://{admin}/status` (a leading `http://` on `admin` is accepted) within [`FETCH_TIMEOUT`].
pub async fn fetch(admin: &str) -> Result<Fetched, StatusError> {
    let addr = admin
        .strip_prefix("http://")
        .unwrap_or(admin)
        .trim_end_matches('/');
    match tokio::time::timeout(FETCH_TIMEOUT, fetch_inner(addr)).await {
        Ok(r) => r,
        Err(_) => Err(StatusError::Timeout {
            addr: addr.to_string(),
        }),
    }
}

async fn fetch_inner(addr: &str) -> Result<Fetched, StatusError> {
    let unreachable = |reason: String| StatusError::Unreachable {
        addr: addr.to_string(),
        reason,
    };
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| unreachable(io_reason(&e)))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let req = Request::get("/status")
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
    if status != StatusCode::OK {
        return Err(StatusError::Http {
            addr: addr.to_string(),
            status: status.as_u16(),
        });
    }
    let bad = |reason: String| StatusError::BadJson {
        addr: addr.to_string(),
        reason,
    };
    let body = String::from_utf8(body.to_vec()).map_err(|_| bad("not UTF-8".to_string()))?;
    let doc: Value = serde_json::from_str(&body).map_err(|e| bad(e.to_string()))?;
    if !doc.is_object() {
        return Err(bad("not a JSON object".to_string()));
    }
    Ok(Fetched { body, doc })
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

/// [`EXIT_READY`] if the document says `"ready": true`, else [`EXIT_NOT_READY`].
pub fn exit_code(doc: &Value) -> u8 {
    if doc.get("ready").and_then(Value::as_bool) == Some(true) {
        EXIT_READY
    } else {
        EXIT_NOT_READY
    }
}

/// The human view of a status document: a summary line, then one row per backend with columns
/// BACKEND, ZONE, STATE, LATENCY, ACTIVE, RANK, LAST ERROR. RANK is 1-based (1 = dialed first);
/// `-` marks a missing value. Multi-line errors are folded onto one line.
pub fn render_table(doc: &Value) -> String {
    let mut out = String::new();
    let s = |k: &str| doc.get(k).and_then(Value::as_str);
    let ready = match doc.get("ready").and_then(Value::as_bool) {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    };
    let _ = write!(
        out,
        "node zone {}  ready {}  mode {}  client cert {}",
        s("zone").unwrap_or("-"),
        ready,
        s("mode").unwrap_or("-"),
        s("client_cert").unwrap_or("-"),
    );
    if doc.get("shutting_down").and_then(Value::as_bool) == Some(true) {
        out.push_str("  SHUTTING DOWN");
    }
    out.push('\n');

    let header = [
        "BACKEND",
        "ZONE",
        "STATE",
        "LATENCY",
        "ACTIVE",
        "RANK",
        "LAST ERROR",
    ];
    let mut rows: Vec<[String; 7]> = vec![header.map(String::from)];
    let backends = doc
        .get("backends")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    rows.extend(backends.iter().map(backend_cells));
    let mut widths = [0usize; 7];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if backends.is_empty() {
        out.push_str("(no backends configured)\n");
    }
    out
}

/// One backend of a status document as the table's cells, in column order (`-` for missing).
pub fn backend_cells(b: &Value) -> [String; 7] {
    let text = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
    let dash = || "-".to_string();
    let latency = b.get("latency_ms").and_then(Value::as_f64).map(format_ms);
    let active = b
        .get("active_connections")
        .and_then(Value::as_u64)
        .map(|n| n.to_string());
    let rank = b
        .get("rank")
        .and_then(Value::as_u64)
        .map(|r| (r + 1).to_string());
    let error = text("last_error").map(|e| {
        e.split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    });
    [
        text("address").unwrap_or_else(dash),
        text("zone").unwrap_or_else(dash),
        text("state").unwrap_or_else(dash),
        latency.unwrap_or_else(dash),
        active.unwrap_or_else(dash),
        rank.unwrap_or_else(dash),
        error.filter(|e| !e.is_empty()).unwrap_or_else(dash),
    ]
}

/// `0.25ms` below a millisecond (LAN), `12.3ms` above.
fn format_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.2}ms")
    } else {
        format!("{ms:.1}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "zone": "dc-a", "ready": true, "mode": "normal", "shutting_down": false,
            "client_cert": "loaded", "generation": 7,
            "backends": [
                {"address": "10.0.1.10:6443", "zone": "dc-a", "state": "unready", "latency_ms": 0.31,
                 "last_error": "HTTP 500: [+]ping ok\n[-]etcd failed", "active_connections": 0, "rank": null},
                {"address": "10.0.2.10:6443", "zone": "dc-b", "state": "ready", "latency_ms": 23.26,
                 "last_error": null, "active_connections": 12, "rank": 0},
                {"address": "[fd00::3]:6443", "zone": null, "state": "unknown", "latency_ms": null,
                 "last_error": null, "active_connections": 0, "rank": null},
            ],
        })
    }

    #[test]
    fn table_shows_summary_and_one_aligned_row_per_backend() {
        let want = "\
node zone dc-a  ready yes  mode normal  client cert loaded
BACKEND         ZONE  STATE    LATENCY  ACTIVE  RANK  LAST ERROR
10.0.1.10:6443  dc-a  unready  0.31ms   0       -     HTTP 500: [+]ping ok; [-]etcd failed
10.0.2.10:6443  dc-b  ready    23.3ms   12      1     -
[fd00::3]:6443  -     unknown  -        0       -     -
";
        assert_eq!(render_table(&sample()), want);
    }

    #[test]
    fn table_flags_not_ready_and_shutting_down() {
        let doc = json!({"zone": null, "ready": false, "mode": "fail_open", "shutting_down": true,
                         "client_cert": "anonymous", "backends": []});
        let table = render_table(&doc);
        assert!(
            table.starts_with(
                "node zone -  ready NO  mode fail_open  client cert anonymous  SHUTTING DOWN\n"
            ),
            "{table}"
        );
        assert!(table.ends_with("(no backends configured)\n"), "{table}");
    }

    #[test]
    fn exit_code_follows_the_ready_field() {
        assert_eq!(exit_code(&sample()), EXIT_READY);
        assert_eq!(exit_code(&json!({"ready": false})), EXIT_NOT_READY);
        assert_eq!(exit_code(&json!({})), EXIT_NOT_READY);
    }

    #[tokio::test]
    async fn closed_port_is_reported_as_unreachable_in_one_line() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let err = fetch(&addr).await.expect_err("nothing listens");
        assert_eq!(
            err.to_string(),
            format!("cannot reach admin endpoint {addr}: connection refused")
        );
    }

    #[tokio::test]
    async fn non_json_answer_is_an_error() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await.expect("read request");
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello")
                .await
                .expect("write");
        });
        let err = fetch(&addr).await.expect_err("not JSON");
        assert!(matches!(err, StatusError::BadJson { .. }), "{err}");
        server.await.expect("server task");
    }
}
