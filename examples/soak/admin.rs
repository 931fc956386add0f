//! The soak's admin-port side: a plain HTTP/1.1 GET, and a local flood of admin connections that
//! never send, send half a head, or reconnect as soon as they are shed, while a probe checks that
//! `/livez` keeps answering as kubelet's liveness probe needs.
//!
//! Owns the flood and the probe and their counts. Does not own the config edits (`edits`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::task::TaskTracker;

/// Connections that connect and never send a byte (more than the admin cap of 64 on their own
/// together with the others).
const SILENT: usize = 32;
/// Connections that send a request head without its final blank line and wait.
const HALF: usize = 32;
/// Loops that connect, send half a head, drop it at once and connect again.
const CHURN: usize = 16;
/// A flooder whose connection ended connects again after this: bounded, so the flood measures
/// the admin server, not how fast this machine's other users get a core.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
/// How long a churn loop holds each connection.
const CHURN_HOLD: Duration = Duration::from_millis(20);
/// The `/livez` probe's period (kubelet's is 10 s; this is 40 times as demanding).
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// kubelet's default `timeoutSeconds`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

const HALF_HEAD: &[u8] = b"GET /livez HTTP/1.1\r\nHost: soak\r\n";

/// What the flood and the probe saw.
#[derive(Debug, Default)]
pub struct Flood {
    /// Flood connections opened.
    pub connects: AtomicU64,
    /// Flood connections the balancer ended (shed, head timeout, or answered and closed).
    pub ended_by_server: AtomicU64,
    /// Flood connects that failed.
    pub connect_failed: AtomicU64,
    /// `/livez` answered 200 within [`PROBE_TIMEOUT`].
    pub livez_ok: AtomicU64,
    /// `/livez` not answered 200 within [`PROBE_TIMEOUT`].
    pub livez_failed: AtomicU64,
    /// Longest run of consecutive `/livez` failures (kubelet restarts the pod after 3).
    pub livez_failed_run: AtomicU64,
    /// Slowest `/livez` answer, in milliseconds.
    pub livez_slowest_ms: AtomicU64,
}

/// Starts the flood (`SILENT + HALF + CHURN` connections at once) and the `/livez` probe on
/// `admin` until `end`.
pub fn spawn(tasks: &TaskTracker, admin: SocketAddr, end: Instant, flood: &Arc<Flood>) {
    for i in 0..SILENT + HALF + CHURN {
        let f = flood.clone();
        let (send, hold) = match i {
            i if i < SILENT => (&b""[..], None),
            i if i < SILENT + HALF => (HALF_HEAD, None),
            _ => (HALF_HEAD, Some(CHURN_HOLD)),
        };
        tasks.spawn(flooder(admin, send, hold, end, f));
    }
    tasks.spawn(probe(admin, end, flood.clone()));
}

/// One flooder: connects, sends `send`, holds the connection until the balancer ends it (or for
/// `hold`), and connects again.
async fn flooder(
    admin: SocketAddr,
    send: &'static [u8],
    hold: Option<Duration>,
    end: Instant,
    f: Arc<Flood>,
) {
    while Instant::now() < end {
        let Ok(mut s) = TcpStream::connect(admin).await else {
            f.connect_failed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        };
        f.connects.fetch_add(1, Ordering::Relaxed);
        if !send.is_empty() && s.write_all(send).await.is_err() {
            f.ended_by_server.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let left = end.saturating_duration_since(Instant::now());
        let wait = hold.map_or(left, |h| h.min(left));
        let mut buf = [0u8; 512];
        if tokio::time::timeout(wait, s.read(&mut buf)).await.is_ok() {
            f.ended_by_server.fetch_add(1, Ordering::Relaxed);
        }
        drop(s);
        if hold.is_none() {
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
}

/// kubelet's liveness probe, more often: a fresh connection, `GET /livez`, 200 within the timeout.
async fn probe(admin: SocketAddr, end: Instant, f: Arc<Flood>) {
    let mut run = 0;
    while Instant::now() < end {
        let started = Instant::now();
        match get(admin, "/livez", PROBE_TIMEOUT).await {
            Some((200, _)) => {
                run = 0;
                f.livez_ok.fetch_add(1, Ordering::Relaxed);
                let ms = started.elapsed().as_millis() as u64;
                f.livez_slowest_ms.fetch_max(ms, Ordering::Relaxed);
            }
            other => {
                run += 1;
                f.livez_failed.fetch_add(1, Ordering::Relaxed);
                f.livez_failed_run.fetch_max(run, Ordering::Relaxed);
                eprintln!(
                    "/livez not answered 200 within {PROBE_TIMEOUT:?}: {:?}",
                    other.map(|o| o.0)
                );
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// `GET path` on a fresh connection: the status code and body, or `None` if not answered within
/// `timeout`.
pub async fn get(admin: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let exchange = async {
        let mut s = TcpStream::connect(admin).await.ok()?;
        // The admin server answers `/status` and `/metrics` only to a Host that names it.
        let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    };
    tokio::time::timeout(timeout, exchange).await.ok()?
}
