//! A test as the balancer's client: raw connections through the proxy (`RAW\n`, the fake's
//! greeting, read to EOF) and GETs from the admin server, async or from blocking code. It does not
//! start fakes or balancers (`lab.rs`).

use std::future::Future;
use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::patience;

/// A raw connection through the balancer: sends `RAW\n`, returns the stream and the greeting
/// (the fake apiserver's name), or `None` if the balancer closed the connection.
pub async fn raw(proxy: SocketAddr) -> Option<(BufReader<TcpStream>, String)> {
    let mut s = TcpStream::connect(proxy)
        .await
        .expect("connect to balancer");
    s.write_all(b"RAW\n").await.ok()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    match tokio::time::timeout(patience(), r.read_line(&mut line))
        .await
        .expect("greeting in time")
    {
        Ok(n) if n > 0 => Some((r, line.trim().to_string())),
        _ => None,
    }
}

/// Name of the fake that a new connection through the balancer reaches.
pub async fn landed(proxy: SocketAddr) -> String {
    raw(proxy).await.expect("balancer relayed the connection").1
}

/// Reads until EOF or error; returns what was read.
pub async fn read_to_end(r: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(patience(), r.read_to_end(&mut out))
        .await
        .expect("EOF in time");
    out
}

/// Whether `c` still relays: `ping` comes back (a closed stream reads its end instead).
pub async fn echoes(c: &mut BufReader<TcpStream>) -> bool {
    if c.get_mut().write_all(b"ping").await.is_err() {
        return false;
    }
    let mut back = [0u8; 4];
    let read = tokio::time::timeout(patience(), c.read_exact(&mut back))
        .await
        .expect("an answer or an end in time");
    read.is_ok() && &back == b"ping"
}

/// How many of `streams` still relay, each asked for an echo in turn ([`echoes`]).
pub async fn echoing(streams: &mut [BufReader<TcpStream>]) -> usize {
    let mut n = 0;
    for c in streams {
        n += usize::from(echoes(c).await);
    }
    n
}

/// GET `path` from the admin server; returns (status code, body).
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let a = readyprism::cli::http::get(&admin.to_string(), path)
        .await
        .expect("admin answers");
    (a.status, a.body)
}

/// [`admin_get`] for synchronous code (polls of a child process); code 0 if unreachable. Runs on
/// a thread of its own, so it may be called from inside a runtime too.
pub fn blocking_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let admin = admin.to_string();
    on_own_thread(|| readyprism::cli::http::get(&admin, path))
        .map_or((0, String::new()), |a| (a.status, a.body))
}

/// Runs the future `make` returns to its end on a runtime of its own on a thread of its own:
/// blocking code can wait for it even when it is called from inside a runtime.
pub fn on_own_thread<T: Send, F: Future<Output = T>>(make: impl FnOnce() -> F + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(make())
        })
        .join()
        .expect("the thread of its own")
    })
}

/// Every backend's state, in config order, from `/status` at `admin` (blocking).
pub fn admin_states(admin: SocketAddr) -> Vec<readyprism::verdict::State> {
    admin_status(admin)
        .backends
        .iter()
        .map(|b| b.state)
        .collect()
}

/// The `/status` document at `admin` (blocking).
pub fn admin_status(admin: SocketAddr) -> readyprism::admin::StatusDoc {
    serde_json::from_str(&blocking_get(admin, "/status").1).expect("status")
}

/// One sample from `/metrics` at `admin` (`labels` matched as a substring), 0 when absent
/// (blocking).
pub fn admin_metric(admin: SocketAddr, name: &str, labels: &str) -> f64 {
    let text = blocking_get(admin, "/metrics").1;
    super::metric(&text, name, labels).unwrap_or(0.0)
}

/// Connections to the backend at `address` closed for `reason`, from `/metrics` at `admin`
/// (blocking).
pub fn admin_closes(admin: SocketAddr, address: &str, reason: &str) -> u64 {
    let labels = format!("backend=\"{address}\",reason=\"{reason}\"");
    admin_metric(admin, "readyprism_connections_closed_total", &labels) as u64
}
