//! The client side: accept, pick, dial with retry, relay, and close when the backend turns unready.
//!
//! The accept path takes no lock: one snapshot load per connection, released before the first
//! await. Each connection's errors end in its own task. Does not own the order (`pick`), the byte
//! pump (`relay`) or the eviction protocol (`backend::Eviction`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::accept::Acceptor;
use crate::backend::{BackendLive, BackendSpec, EvictionWatch};
use crate::health::state::State;
use crate::metrics::Metrics;
use crate::table::Table;

/// Connections of an unready backend are closed spread over this window, so thousands of watch
/// clients do not re-dial the next apiserver in the same millisecond; well inside the 1 s promise.
pub const EVICT_SPREAD: Duration = Duration::from_millis(500);

/// TCP keepalive idle time on both legs: finds dead peers behind NAT within about a minute.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

/// Shared by every listener and connection.
#[derive(Debug)]
pub struct Proxy {
    table: Arc<Table>,
    metrics: Arc<Metrics>,
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
        let mut acceptor = Acceptor::new("listen", listener, stop);
        while let Some((client, peer)) = acceptor.next().await {
            let span = tracing::debug_span!("conn", %peer);
            self.conns
                .spawn(self.clone().handle(client, peer).instrument(span));
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
                    if target.state == State::Unready {
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
        let (pick, fallback) = snap.pick(seq);
        let candidates = pick
            .order()
            .iter()
            .chain(&fallback)
            .map(|&i| {
                let b = &snap.backends[i];
                Target {
                    spec: b.spec.clone(),
                    live: b.live.clone(),
                    epoch: b.evict_epoch,
                    state: b.health.state,
                }
            })
            .collect();
        Plan {
            candidates,
            connect_timeout: snap.routing.connect_timeout,
        }
    }

    /// Dials the candidates in order until one connects, before any byte is relayed. A refused or
    /// timed-out dial is reported to the backend's monitor as a failed check.
    async fn dial_first(&self, plan: &Plan) -> Dialed {
        let mut evicted = false;
        for (i, t) in plan.candidates.iter().enumerate() {
            // Watch before dialing, from the snapshot's epoch: an eviction between the snapshot
            // and now, or during the dial, moves us to the next candidate.
            let Some(evict) = t.live.eviction.watch_from(t.epoch) else {
                evicted = true;
                continue;
            };
            let dial = crate::dial::connect(&t.spec.host, t.spec.port);
            let dialed = tokio::select! {
                _ = self.cut.cancelled() => return Dialed::Cut,
                r = tokio::time::timeout(plan.connect_timeout, dial) => r,
            };
            match dialed {
                Ok(Ok(_)) if evict.fired() => evicted = true,
                Ok(Ok(backend)) => return Dialed::Connected(backend, i, evict),
                Ok(Err(e)) => {
                    t.live.metrics.dial_failures.inc();
                    tracing::debug!(backend = %t.spec.id, error = %e, "dial failed; trying the next backend");
                    if let Some(reason) = dial_reason(&e) {
                        t.live.dials.report(reason);
                    }
                }
                Err(_) => {
                    t.live.metrics.dial_failures.inc();
                    tracing::debug!(backend = %t.spec.id, "dial timed out; trying the next backend");
                    let timeout = crate::config::DurationValue(plan.connect_timeout);
                    t.live
                        .dials
                        .report(format!("dial: timeout after {timeout}"));
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
        mut evict: EvictionWatch,
        seq: usize,
    ) {
        let m = &live.metrics;
        m.connections.inc();
        let _active = live.count_active();
        tracing::debug!(backend = %spec.id, "relaying");
        let evicted = async {
            evict.wait().await;
            tokio::time::sleep(spread(seq)).await;
        };
        tokio::select! {
            r = crate::relay::relay(client, &backend, &m.bytes_to_backend, &m.bytes_to_client) => {
                if let Err(e) = r {
                    tracing::debug!(backend = %spec.id, error = %e, "connection ended with error");
                }
            }
            _ = evicted => {
                m.closed_unready.inc();
                tracing::debug!(backend = %spec.id, "backend turned unready; closing connection");
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
    /// The snapshot's eviction epoch for this backend.
    epoch: u64,
    /// Its state in the snapshot: `Unready` means relaying to it is failing open.
    state: State,
}

enum Dialed {
    /// Connected to `candidates[index]`, with its eviction watch.
    Connected(TcpStream, usize, EvictionWatch),
    /// Every candidate failed; `evicted` if some were skipped as evicted since the snapshot.
    Exhausted { evicted: bool },
    /// Shutdown cut the connection while dialing.
    Cut,
}

/// The failed-check reason for a dial error that says something about the backend; `None` for
/// errors of this node (out of descriptors or ports), which must not turn a backend unready.
fn dial_reason(e: &std::io::Error) -> Option<String> {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => Some("dial: connection refused".to_string()),
        ConnectionReset | HostUnreachable | NetworkUnreachable | TimedOut => {
            Some(format!("dial: {}", e.kind()))
        }
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendId, Routing, Snapshot};
    use crate::health::state::Health;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A plain TCP backend that writes `name` to every connection.
    async fn named(name: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_backend_evicted_after_the_snapshot_was_read_is_not_connected() {
        let metrics = Arc::new(Metrics::new());
        let backend = |addr: SocketAddr| {
            let id = BackendId::new(&addr.to_string());
            let live = Arc::new(BackendLive::new(metrics.backend(&id)));
            Backend {
                spec: Arc::new(BackendSpec {
                    id,
                    host: addr.ip().to_string(),
                    port: addr.port(),
                    zone: None,
                    server_name: rustls_pki_types::ServerName::try_from("x").expect("name"),
                }),
                health: Health {
                    state: State::Ready,
                    latency: Some(Duration::from_millis(1)),
                    last_error: None,
                    answering: true,
                },
                evict_epoch: live.eviction.epoch(),
                live,
            }
        };
        let (first, second) = (named("first").await, named("second").await);
        let table = Table::new();
        let snap = Snapshot {
            generation: 1,
            routing: Routing::default(),
            backends: vec![backend(first), backend(second)],
        };
        // The eviction fires, but the snapshot new connections read still offers `first`: the
        // window between reading a snapshot and watching for evictions.
        snap.backends[0].live.eviction.evict_now();
        table.test_publish(snap);
        let proxy = Proxy::new(table, metrics);
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let at = l.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let served = tokio::spawn(proxy.clone().serve(l, stop.clone()));
        let mut c = TcpStream::connect(at).await.expect("connect");
        let mut got = String::new();
        c.read_to_string(&mut got).await.expect("read");
        assert_eq!(got, "second");
        stop.cancel();
        proxy.cut.cancel();
        served.await.expect("serve ends");
    }
}
