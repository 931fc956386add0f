//! The client side: accept, pick, dial with retry, relay, and close when the backend turns unready.
//!
//! The accept path takes no lock: one snapshot load per connection, released before the first
//! await. Each connection's errors end in its own task. Does not own the order (`pick`) or the byte
//! pump (`relay`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backend::{BackendLive, BackendSpec};
use crate::pick::Pick;
use crate::table::Table;

/// Connections of an unready backend are closed spread over this window, so thousands of watch
/// clients do not re-dial the next apiserver in the same millisecond; well inside the 1 s promise.
pub const EVICT_SPREAD: Duration = Duration::from_millis(500);

/// Pause after a failed accept (e.g. EMFILE) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// TCP keepalive idle time on both legs: finds dead peers behind NAT within about a minute.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

/// Shared by every listener and connection.
#[derive(Debug)]
pub struct Proxy {
    /// Routing state.
    pub table: Arc<Table>,
    /// Connection tasks, for draining at shutdown.
    pub conns: TaskTracker,
    /// Cancelled when connections still open after the grace period must be cut.
    pub cut: CancellationToken,
    rr: AtomicUsize,
}

impl Proxy {
    /// A proxy routing by `table`.
    pub fn new(table: Arc<Table>) -> Arc<Proxy> {
        Arc::new(Proxy {
            table,
            conns: TaskTracker::new(),
            cut: CancellationToken::new(),
            rr: AtomicUsize::new(0),
        })
    }

    /// Accepts on `listener` until `stop` is cancelled. Established connections are not affected by
    /// `stop`; they end on their own, by eviction, or by [`Proxy::cut`].
    pub async fn serve(self: Arc<Self>, listener: TcpListener, stop: CancellationToken) {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((client, peer)) => {
                    let span = tracing::debug_span!("conn", %peer);
                    self.conns
                        .spawn(self.clone().handle(client, peer).instrument(span));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; backing off");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            }
        }
    }

    async fn handle(self: Arc<Self>, client: TcpStream, peer: SocketAddr) {
        tune(&client);
        let seq = self.rr.fetch_add(1, Ordering::Relaxed);
        // The only snapshot access on this path: copy out what to dial, then let it go.
        let (plan, connect_timeout, panic) = {
            let snap = self.table.load();
            let pick = snap.pick(seq);
            let plan: Vec<(Arc<BackendSpec>, Arc<BackendLive>)> = pick
                .order()
                .iter()
                .map(|&i| (snap.backends[i].spec.clone(), snap.backends[i].live.clone()))
                .collect();
            (plan, snap.connect_timeout, matches!(pick, Pick::Panic(_)))
        };
        if plan.is_empty() {
            tracing::debug!("no ready backend; refusing");
            return;
        }
        for (spec, live) in plan {
            // Subscribe before dialing: an eviction that races the dial still reaches us.
            let mut evict = live.evict.subscribe();
            let dialed = tokio::select! {
                _ = self.cut.cancelled() => return,
                r = tokio::time::timeout(connect_timeout, TcpStream::connect((spec.host.as_str(), spec.port))) => r,
            };
            let backend = match dialed {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    live.metrics.dial_failures.inc();
                    tracing::debug!(backend = %spec.address, error = %e, "dial failed; trying the next backend");
                    continue;
                }
                Err(_) => {
                    live.metrics.dial_failures.inc();
                    tracing::debug!(backend = %spec.address, "dial timed out; trying the next backend");
                    continue;
                }
            };
            tune(&backend);
            let m = &live.metrics;
            m.connections.inc();
            m.active.inc();
            tracing::debug!(backend = %spec.address, panic, "relaying");
            let evicted = async {
                // Only a change of value counts; a dropped sender (never happens while `live` is held) would end the wait too.
                let _ = evict.changed().await;
                tokio::time::sleep(spread(seq)).await;
            };
            tokio::select! {
                r = crate::relay::relay(&client, &backend, &m.bytes_to_backend, &m.bytes_to_client) => {
                    if let Err(e) = r {
                        tracing::debug!(backend = %spec.address, error = %e, "connection ended with error");
                    }
                }
                _ = evicted => {
                    m.closed_unready.inc();
                    tracing::debug!(backend = %spec.address, "backend turned unready; closing connection");
                }
                _ = self.cut.cancelled() => {}
            }
            m.active.dec();
            return;
        }
        tracing::debug!(%peer, "every backend failed to dial; closing client connection");
    }
}

/// TCP_NODELAY (kubelet's requests are small and latency-bound) and keepalive, best effort.
fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let ka = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(Duration::from_secs(10))
        .with_retries(3);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&ka) {
        tracing::debug!(error = %e, "cannot set TCP keepalive");
    }
}

/// A per-connection delay in [0, EVICT_SPREAD), spread by the connection's sequence number.
fn spread(seq: usize) -> Duration {
    let frac = (seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44; // 20 bits
    EVICT_SPREAD.mul_f64(frac as f64 / (1u64 << 20) as f64)
}
