//! The simulated apiserver's etcd readiness check, as kube-apiserver's: a linearizable read of one
//! key against its own etcd member, through etcd's JSON gateway (`POST /v3/kv/range`), within a
//! budget. A member without a leader cannot serve a linearizable read, so an apiserver whose etcd
//! lost quorum answers `/readyz` with 500 while it still accepts TCP and TLS.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// kube-apiserver's etcd readiness budget.
pub const READ_BUDGET: Duration = Duration::from_secs(2);

/// `{"key": base64("readyz")}`: any key will do; the read's linearizability is the point.
const RANGE_BODY: &str = r#"{"key":"cmVhZHl6"}"#;

/// One linearizable read against the member at `client_url` (`http://host:port`); `Err` says why
/// in the words `/readyz` prints after `[-]etcd failed: `.
pub async fn linearizable_read(client_url: &str) -> Result<(), String> {
    match tokio::time::timeout(READ_BUDGET, read(client_url)).await {
        Ok(r) => r,
        Err(_) => Err(format!("timeout after {}s", READ_BUDGET.as_secs())),
    }
}

async fn read(client_url: &str) -> Result<(), String> {
    let authority = client_url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{client_url}: only http:// etcd client URLs"))?
        .trim_end_matches('/');
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await; // ends with the request; errors surface on it
    });
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v3/kv/range")
        .header(header::HOST, authority)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(RANGE_BODY.as_bytes())))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), 64 * 1024)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status.is_success() {
        Ok(())
    } else {
        let text = String::from_utf8_lossy(&body);
        Err(format!("HTTP {}: {}", status.as_u16(), text.trim()))
    }
}
