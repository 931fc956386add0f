//! The client side: accept, pick, dial with retry, relay, and close when the backend turns unready.
//!
//! The accept path takes no lock: one snapshot load per connection, released before the first
//! await. Each connection's errors end in its own task. Does not own the order (`pick`) or the byte
//! pump (`relay`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::backend::{BackendLive, BackendSpec, State};
use crate::metrics::Metrics;
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
    /// Process-wide counters (per-backend handles live in the snapshot).
    pub metrics: Arc<Metrics>,
    /// Connection tasks, for draining at shutdown.
    pub conns: TaskTracker,
    /// Cancelled when connections still open after the grace period must be cut.
    pub cut: CancellationToken,
    rr: AtomicUsize,
}

impl Proxy {
    /// A proxy routing by `table`.
    pub fn new(table: Arc<Table>, metrics: Arc<Metrics>) -> Arc<Proxy> {
        Arc::new(Proxy {
            table,
            metrics,
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
        // A second plan only if the first lost candidates to an eviction while we dialed: the new
        // snapshot then has the backends that replaced them.
        for _ in 0..2 {
            let plan = self.plan(seq);
            if plan.candidates.is_empty() {
                self.metrics.rejected_no_backend.inc();
                tracing::debug!("no ready backend; refusing");
                return;
            }
            match self.dial_first(&plan).await {
                Dialed::Connected(backend, i, evict) => {
                    let target = &plan.candidates[i];
                    tune(&backend);
                    if target.failing {
                        self.metrics.failed_open.inc();
                    }
                    self.relay(&client, backend, &target.spec, &target.live, evict, seq)
                        .await;
                    return;
                }
                Dialed::Cut => return,
                Dialed::Exhausted { evicted: true } => continue,
                Dialed::Exhausted { evicted: false } => break,
            }
        }
        self.metrics.rejected_all_dials_failed.inc();
        tracing::debug!(%peer, "every backend failed to dial; closing client connection");
    }

    /// The only snapshot access on this path: copy out what to dial, then let the snapshot go.
    fn plan(&self, seq: usize) -> Plan {
        let snap = self.table.load();
        let pick = snap.pick(seq);
        let candidates = pick
            .order()
            .iter()
            .map(|&i| {
                let b = &snap.backends[i];
                Target {
                    spec: b.spec.clone(),
                    live: b.live.clone(),
                    epoch: b.evict_epoch,
                    failing: b.health.state == State::Unready,
                }
            })
            .collect();
        Plan {
            candidates,
            connect_timeout: snap.connect_timeout,
        }
    }

    /// Dials the candidates in order until one connects, before any byte is relayed.
    async fn dial_first(&self, plan: &Plan) -> Dialed {
        let mut evicted = false;
        for (
            i,
            Target {
                spec, live, epoch, ..
            },
        ) in plan.candidates.iter().enumerate()
        {
            // Subscribe before dialing and compare with the snapshot's epoch: an eviction between
            // the snapshot and now, or during the dial, moves us to the next candidate.
            let mut evict = live.evict.subscribe();
            if *evict.borrow_and_update() != *epoch {
                evicted = true;
                continue;
            }
            let dial = TcpStream::connect((spec.host.as_str(), spec.port));
            let dialed = tokio::select! {
                _ = self.cut.cancelled() => return Dialed::Cut,
                r = tokio::time::timeout(plan.connect_timeout, dial) => r,
            };
            match dialed {
                Ok(Ok(_)) if evict.has_changed().unwrap_or(true) => evicted = true,
                Ok(Ok(backend)) => return Dialed::Connected(backend, i, evict),
                Ok(Err(e)) => {
                    live.metrics.dial_failures.inc();
                    tracing::debug!(backend = %spec.address, error = %e, "dial failed; trying the next backend");
                }
                Err(_) => {
                    live.metrics.dial_failures.inc();
                    tracing::debug!(backend = %spec.address, "dial timed out; trying the next backend");
                }
            }
        }
        Dialed::Exhausted { evicted }
    }

    /// Relays until either side ends, the backend is evicted, or shutdown cuts the connection.
    async fn relay(
        &self,
        client: &TcpStream,
        backend: TcpStream,
        spec: &BackendSpec,
        live: &BackendLive,
        mut evict: watch::Receiver<u64>,
        seq: usize,
    ) {
        let m = &live.metrics;
        m.connections.inc();
        let _active = Active::count(&m.active);
        tracing::debug!(backend = %spec.address, "relaying");
        let evicted = async {
            // A closed channel cannot happen while `live` is borrowed; treat it as an eviction.
            let _ = evict.changed().await;
            tokio::time::sleep(spread(seq)).await;
        };
        tokio::select! {
            r = crate::relay::relay(client, &backend, &m.bytes_to_backend, &m.bytes_to_client) => {
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
    }
}

/// What to dial for one client connection, copied out of a snapshot.
struct Plan {
    /// Backends in pick order.
    candidates: Vec<Target>,
    connect_timeout: Duration,
}

/// One backend to dial, as the snapshot showed it.
struct Target {
    spec: Arc<BackendSpec>,
    live: Arc<BackendLive>,
    /// The eviction epoch in the snapshot; a different current value means evicted since.
    epoch: u64,
    /// Known to fail its checks: relaying to it is failing open.
    failing: bool,
}

enum Dialed {
    /// Connected to `candidates[index]`, with its eviction receiver.
    Connected(TcpStream, usize, watch::Receiver<u64>),
    /// Every candidate failed; `evicted` if some were skipped as evicted since the snapshot.
    Exhausted { evicted: bool },
    /// Shutdown cut the connection while dialing.
    Cut,
}

/// Counts a connection in the `active` gauge for as long as it lives, even if a task panics.
struct Active<'a>(&'a Gauge);

impl<'a> Active<'a> {
    fn count(gauge: &'a Gauge) -> Self {
        gauge.inc();
        Active(gauge)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// TCP_NODELAY (kubelet's requests are small and latency-bound) and keepalive, best effort.
fn tune(stream: &TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
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
