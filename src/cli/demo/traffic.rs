//! The demo's own clients and what they saw: one short connection per tick (like `kubectl get`)
//! and one long-lived connection (like kubelet's watch) that is re-opened whenever the balancer
//! closes it.
//!
//! Speaks the fake apiserver's raw protocol: `RAW\n`, then one line naming the apiserver reached.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::{interval, sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::{IO_TIMEOUT, RECENT, TICK};

/// What the demo's clients observed, shared between them and the screen.
#[derive(Debug, Clone, Default)]
pub(super) struct Traffic {
    /// The last [`RECENT`] landings (apiserver names, or `FAILED`), oldest first.
    pub recent: VecDeque<String>,
    /// Connections that reached an apiserver, by name.
    pub per_backend: BTreeMap<String, u64>,
    /// Connections that failed before naming an apiserver.
    pub failed: u64,
    /// Where the long-lived connection is now; `None` while it is being re-opened.
    pub long_on: Option<String>,
    /// Times the balancer closed the long-lived connection.
    pub long_moves: u64,
    /// Where the long-lived connection was when the balancer last closed it, until it is re-opened.
    pub long_closed_on: Option<String>,
    /// The latest move of the long-lived connection: from, to.
    pub long_last_move: Option<(String, String)>,
}

impl Traffic {
    /// A connection reached `name`.
    pub fn landed(&mut self, name: &str) {
        *self.per_backend.entry(name.to_string()).or_default() += 1;
        self.remember(name);
    }

    /// A connection failed before naming an apiserver.
    pub fn failed(&mut self) {
        self.failed += 1;
        self.remember("FAILED");
    }

    fn remember(&mut self, what: &str) {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(what.to_string());
    }
}

/// Applies `f` to the shared record (a poisoned lock still holds valid counters).
pub(super) fn record<T>(traffic: &Mutex<Traffic>, f: impl FnOnce(&mut Traffic) -> T) -> T {
    f(&mut traffic.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Connects through the balancer with the fake's raw protocol; answers the apiserver's name.
async fn open(addr: SocketAddr) -> std::io::Result<(BufReader<TcpStream>, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(b"RAW\n").await?;
    let mut reader = BufReader::new(stream);
    let mut name = String::new();
    if reader.read_line(&mut name).await? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed before naming its apiserver",
        ));
    }
    Ok((reader, name.trim().to_string()))
}

async fn open_bounded(
    addr: SocketAddr,
    stop: &CancellationToken,
) -> Option<std::io::Result<(BufReader<TcpStream>, String)>> {
    tokio::select! {
        _ = stop.cancelled() => None,
        r = timeout(IO_TIMEOUT, open(addr)) => Some(r.unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))),
    }
}

/// One short connection per tick, like a `kubectl get` from the node.
pub(super) async fn short_clients(
    addr: SocketAddr,
    traffic: Arc<Mutex<Traffic>>,
    stop: CancellationToken,
) {
    let mut tick = interval(TICK);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match open_bounded(addr, &stop).await {
            None => return,
            Some(Ok((_conn, name))) => record(&traffic, |t| t.landed(&name)),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "demo: short connection failed");
                record(&traffic, Traffic::failed);
            }
        }
    }
}

/// A long-lived connection, like kubelet's watch connection: held until the balancer closes it
/// (its apiserver turned unready), then re-opened at once.
pub(super) async fn long_lived_client(
    addr: SocketAddr,
    traffic: Arc<Mutex<Traffic>>,
    stop: CancellationToken,
) {
    loop {
        let (mut conn, name) = match open_bounded(addr, &stop).await {
            None => return,
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "demo: long-lived connection failed; retrying");
                record(&traffic, Traffic::failed);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = sleep(TICK) => continue,
                }
            }
        };
        record(&traffic, |t| {
            t.landed(&name);
            if let Some(from) = t.long_closed_on.take() {
                t.long_last_move = Some((from, name.clone()));
            }
            t.long_on = Some(name.clone());
        });
        let mut buf = [0u8; 256];
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                r = conn.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
            }
        }
        record(&traffic, |t| {
            t.long_on = None;
            t.long_moves += 1;
            t.long_closed_on = Some(name);
        });
    }
}
