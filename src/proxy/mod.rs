//! The client side: accept, pick, dial with retry, relay, close when the backend turns unready,
//! and one record per connection at its end.
//!
//! The accept path takes no lock: one snapshot load per connection, released before the first
//! await. Each connection's errors end in its own task. Does not own the order (`pick`), the byte
//! pump (`relay`), the dial (`dial`) or the eviction protocol (`eviction`).

mod record;
mod sockets;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::accept::Acceptor;
use crate::backend::{BackendLive, BackendSpec};
use crate::dial::{Blame, Tally};
use crate::eviction::{CloseReason, EvictionWatch};
use crate::health::verdict::State;
use crate::metrics::Metrics;
use crate::relay::Moved;
use crate::table::Table;
use record::{End, Record};
pub use sockets::listen;

/// `TCP_USER_TIMEOUT` on the backend leg: once data we relayed to the backend has stayed
/// unacknowledged this long, the kernel aborts the connection (`ETIMEDOUT`), the client is cut
/// and re-dials, and the backend gets a failed check (a dead path: nothing else at L4 notices a
/// backend that stopped acknowledging while a request is in flight). HAProxy calls it `tcp-ut`.
///
/// It must not fire on a lossy but working path. Linux retransmits an unacknowledged segment
/// after its RTO (at least 200 ms plus the smoothed RTT), doubling: at 0.2, 0.6, 1.4, 3.0, 6.2,
/// 12.6 s after the first send with a 200 ms RTO. Within 10 s that is 6 transmissions for any
/// RTO up to 10 s / 31 ≈ 320 ms (round trips up to ~120 ms). At 20 % loss each way (scenario 6)
/// a transmission goes unanswered when it or its ACK is lost, at worst 1 − 0.8² = 36 %: all six
/// fail with 0.36⁶ ≈ 0.2 % for one flight of data (0.2⁶ ≈ 0.006 % counting data loss alone, as
/// the backend's own answers carry the ACK again). 5 s would leave 5 transmissions (0.36⁵ ≈
/// 0.6 %), 3 s only 4 (1.7 %): a lossy link would be cut, and flap passive health. A flight
/// stalled 10 s has also outlasted the lab client's (and client-go's typical) per-request
/// patience, so the abort turns a hang into a reset a client retries, not a success into an error.
/// Keepalive still finds dead idle legs; with the user timeout set Linux aborts an idle leg once
/// a keepalive probe goes unanswered for this long.
pub const BACKEND_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// Shared by every listener and connection.
#[derive(Debug)]
pub struct Proxy {
    table: Arc<Table>,
    metrics: Arc<Metrics>,
    /// Connection tasks, for draining at shutdown.
    conns: TaskTracker,
    /// Cancelled when connections still open after the grace period must be cut.
    cut: CancellationToken,
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
    /// `stop`; they end on their own, by eviction, or by [`Proxy::drain`].
    pub async fn serve(self: Arc<Self>, listener: TcpListener, stop: CancellationToken) {
        let mut acceptor = Acceptor::new("listen", listener, stop);
        while let Some((client, peer)) = acceptor.next().await {
            let span = tracing::debug_span!("conn", %peer);
            self.conns
                .spawn(self.clone().handle(client, peer).instrument(span));
        }
    }

    /// Waits up to `grace` for every connection to end, then cuts the rest and waits for them.
    /// Call once the listeners have stopped.
    pub async fn drain(&self, grace: Duration) {
        self.conns.close();
        let open = self.conns.len();
        if open > 0 {
            tracing::info!(open, ?grace, "draining connections");
        }
        if tokio::time::timeout(grace, self.conns.wait())
            .await
            .is_err()
        {
            tracing::info!(
                open = self.conns.len(),
                "grace period over; closing remaining connections"
            );
            self.cut.cancel();
            self.conns.wait().await;
        }
    }

    /// One client connection, from accept to its record. Its socket options came with the
    /// accept, from the listener ([`listen`]).
    async fn handle(self: Arc<Self>, client: TcpStream, peer: SocketAddr) {
        let mut record = Record::new(peer);
        let moved = Moved::default();
        let end = self.route(&client, &mut record, &moved).await;
        record.log(&end, &moved);
    }

    /// Picks, dials and relays one client connection; returns how it ended.
    async fn route(&self, client: &TcpStream, record: &mut Record, moved: &Moved) -> End {
        let seq = self.rr.fetch_add(1, Ordering::Relaxed);
        // A second plan only if the first lost targets to an eviction while we dialed: the new
        // snapshot then has the backends that replaced them.
        for _ in 0..2 {
            let plan = self.plan(seq);
            if plan.targets.is_empty() {
                self.metrics.rejected_no_backend.inc();
                return End::NoReadyBackend;
            }
            match self.dial_first(&plan, record).await {
                Dialed::Connected(backend, i, evict) => {
                    let target = &plan.targets[i];
                    if target.state == State::Unready {
                        self.metrics.failed_open.inc();
                    }
                    record.connected(target.spec.clone(), i);
                    return self
                        .relay(client, backend, &target.live, evict, seq, moved)
                        .await;
                }
                Dialed::Cut => return End::Shutdown,
                Dialed::ThisNodeShort => return End::ThisNodeShort,
                Dialed::Exhausted { evicted: true } => continue,
                Dialed::Exhausted { evicted: false } => break,
            }
        }
        self.metrics.rejected_all_dials_failed.inc();
        End::AllDialsFailed
    }

    /// The only snapshot access on this path: copy out what to dial, then let the snapshot go.
    fn plan(&self, seq: usize) -> Plan {
        let snap = self.table.load();
        let (pick, fallback) = snap.pick(seq);
        let targets = pick
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
            targets,
            connect_timeout: snap.routing.connect_timeout,
        }
    }

    /// Dials the targets in order until one connects, before any byte is relayed. A dial that
    /// fails for the backend's fault is reported to its monitor as a failed check; one that fails
    /// for this node's shortage ends the connection at once (every other backend would fail
    /// the same way) and is counted apart, against no backend.
    async fn dial_first(&self, plan: &Plan, record: &mut Record) -> Dialed {
        let mut evicted = false;
        for (i, t) in plan.targets.iter().enumerate() {
            // Watch before dialing, from the snapshot's epoch: an eviction between the snapshot
            // and now, or during the dial, moves us to the next target.
            let Some(evict) = t.live.eviction.watch_from(t.epoch) else {
                evicted = true;
                continue;
            };
            record.dials += 1;
            let tally = Tally::default();
            let dial = crate::dial::connect(
                &t.spec.host,
                t.spec.port,
                plan.connect_timeout,
                &tally,
                &t.live.addresses,
                &sockets::BACKEND,
            );
            let dialed = tokio::select! {
                _ = self.cut.cancelled() => {
                    t.live.count_dial(&tally);
                    return Dialed::Cut;
                }
                r = dial => r,
            };
            record.attempts += t.live.count_dial(&tally);
            match dialed {
                Ok(_) if evict.fired() => evicted = true,
                Ok(backend) => {
                    t.live.dials.connected();
                    return Dialed::Connected(backend, i, evict);
                }
                Err(e) if e.blame() == Blame::ThisNode => {
                    self.metrics.local_dial_failure(e.label());
                    tracing::debug!(backend = %t.spec.id, error = %e, "this node cannot dial; closing the client connection");
                    return Dialed::ThisNodeShort;
                }
                Err(e) => {
                    t.live
                        .counters
                        .dial_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(backend = %t.spec.id, error = %e, "dial failed; trying the next backend");
                    t.live.dials.report(e.to_string());
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
        live: &BackendLive,
        mut evict: EvictionWatch,
        seq: usize,
        moved: &Moved,
    ) -> End {
        let _active = live.count_active();
        let evicted = async {
            let why = evict.wait().await;
            tokio::time::sleep(spread(seq, why.spread())).await;
            why
        };
        let relay = crate::relay::relay(client, &backend, moved, &live.counters.bytes);
        tokio::select! {
            r = relay => match r {
                Ok(ended) => End::from(ended),
                Err(e) if e.backend_timed_out() => {
                    // A dead path: a passive failure of the backend, as a failed dial is.
                    live.counters.closes[CloseReason::DeadPath.index()].fetch_add(1, Ordering::Relaxed);
                    live.dials.report(format!(
                        "relay: data to the backend unacknowledged for {:?} (TCP user timeout)",
                        BACKEND_USER_TIMEOUT
                    ));
                    End::DeadPath(e.to_string())
                }
                Err(e) => End::Error(e.to_string()),
            },
            why = evicted => {
                live.counters.closes[why.index()].fetch_add(1, Ordering::Relaxed);
                End::Evicted(why)
            }
            _ = self.cut.cancelled() => End::Shutdown,
        }
    }
}

/// What to dial for one client connection, copied out of a snapshot.
struct Plan {
    /// Backends in pick order (the picker's order, then the fail-open fallback).
    targets: Vec<Target>,
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
    /// Connected to `targets[index]`, with its eviction watch.
    Connected(TcpStream, usize, EvictionWatch),
    /// Every target failed; `evicted` if some were skipped as evicted since the snapshot.
    Exhausted { evicted: bool },
    /// This node could not dial (descriptors, ports, memory).
    ThisNodeShort,
    /// Shutdown cut the connection while dialing.
    Cut,
}

/// A per-connection delay in [0, window), spread by the connection's sequence number.
fn spread(seq: usize, window: Duration) -> Duration {
    let frac = (seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44; // 20 bits
    window.mul_f64(frac as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendId, Routing, Snapshot};
    use crate::health::verdict::Health;
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
        let metrics = Arc::new(Metrics::default());
        let backend = |addr: SocketAddr| {
            let id = BackendId::new(&addr.to_string());
            let live = Arc::new(BackendLive::default());
            Backend {
                spec: Arc::new(BackendSpec {
                    id,
                    host: addr.ip().to_string(),
                    port: addr.port(),
                    zone: None,
                    server_name: rustls_pki_types::ServerName::try_from("x").expect("name"),
                    source: crate::backend::BackendSource::Config,
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
