//! The client side: accept, pick, dial with retry, relay, close when the backend turns unready
//! (unless that is called off before the connection's turn), and one record per connection at
//! its end.
//!
//! The accept path takes no lock: one snapshot load per connection, kept while it dials and
//! released before the relay, which keeps only the backend it relays to. Each connection's
//! errors end in its own task. Does not own the order (`pick`), the byte pump (`relay`), the
//! dial (`dial`) or the eviction protocol (`eviction`).

mod paced;
mod quiet;
mod race;
mod record;
mod sockets;
mod turn;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accept::Acceptor;
use crate::backend::{Active, News, Snapshot};
use crate::dial::{Blame, Tally};
use crate::eviction::{CloseReason, EvictionWatch, Stop};
use crate::metrics::Metrics;
use crate::pick::Order;
use crate::relay::Moved;
use crate::table::Table;
use crate::verdict::State;
use race::First;
use record::{End, Leg, Record};
pub use sockets::listen;

/// Shared by every listener and connection.
#[derive(Debug)]
pub struct Proxy {
    table: Arc<Table>,
    metrics: Arc<Metrics>,
    /// Connection tasks, for draining at shutdown.
    conns: TaskTracker,
    /// Cancelled when connections still open after the grace period must be cut. Heard by dials
    /// and by evicted connections waiting their turn to close; a relayed connection hears its
    /// backend's [`crate::eviction::Eviction::shut`] instead (one waiter while idle, not two).
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
            self.conns.spawn(self.clone().connection(client, peer));
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
            // The token reaches dials and evicted connections waiting their turn; the others
            // wait on their backend's eviction, shut here. A backend no longer in the snapshot
            // was removed, so its connections were evicted and hear the token.
            self.cut.cancel();
            for b in &self.table.load().backends {
                b.live.eviction.shut();
            }
            self.conns.wait().await;
        }
    }

    /// What is spawned for a client connection accepted from `peer`: the task an idle
    /// connection costs. No span per connection: it would live in every idle connection's task
    /// (40 B); the record and the dial's debug events name the client instead.
    fn connection(
        self: Arc<Self>,
        client: TcpStream,
        peer: SocketAddr,
    ) -> impl Future<Output = ()> {
        self.handle(client, Record::new(peer))
    }

    /// One client connection, from its accept (`record` starts then) to its record. Its socket
    /// options came with the accept, from the listener ([`listen`]). Not an
    /// `async fn`: an async fn keeps its arguments twice in its future (as passed and as bound),
    /// and this future is what an idle connection costs.
    #[allow(clippy::manual_async_fn, reason = "an async fn's future is larger")]
    fn handle(self: Arc<Self>, client: TcpStream, mut record: Record) -> impl Future<Output = ()> {
        async move {
            // The dial phase is boxed and gone before the relay: its plan, timers and sockets
            // take no room in the task of a connection that then sits idle for hours.
            let link = match Box::pin(self.route(&mut record)).await {
                Ok(link) => link,
                Err(end) => return record.log(&end, &Moved::default()),
            };
            // The relay, written out here rather than in a function of its own: a second
            // future would hold its own references to what this one holds.
            let (moved, total) = (&link.moved, &link.live.counters.bytes);
            let relay = crate::relay::relay(&client, &link.backend, moved, total);
            let end = match race::race(relay, self.stop(&link, record.seq())).await {
                First::Work(r) => relay_ended(&client, &link, r),
                First::Stop(why) => stopped(&link, why),
            };
            record.log(&end, &link.moved);
            // The sockets are closed one runtime turn later: what this turn's events woke (a new
            // client's accept and dial, another connection's bytes) runs first, and the teardown
            // (two deregistrations and two closes, which send the FINs) after it, as HAProxy
            // orders its own work. Measured (`cargo bench --bench proxy`, the connect scenario): a client that
            // reconnects as its last connection ends gets its first byte ~15 µs sooner when the
            // connect scenario runs alone; after the round-trip scenario the gain is within the
            // noise. It costs 0.24 `epoll_wait` per connection and no other syscall.
            tokio::task::yield_now().await;
        }
    }

    /// Picks and dials for one client connection; returns what the relay needs, or how the
    /// connection ended without one.
    async fn route(&self, record: &mut Record) -> Result<Link, End> {
        let seq = self.rr.fetch_add(1, Ordering::Relaxed);
        record.number(seq);
        // A second plan only if the first lost targets to an eviction while we dialed: the new
        // snapshot then has the backends that replaced them.
        for again in [false, true] {
            let plan = if again {
                self.plan(seq)
            } else {
                match self.paced_plan(seq).await {
                    Some(plan) => plan,
                    None => return Err(End::Shutdown),
                }
            };
            if plan.order.pick().order().is_empty() {
                self.metrics.rejected_no_backend.inc();
                return Err(End::NoReadyBackend);
            }
            match self.dial_first(&plan, record).await {
                Dialed::Connected {
                    stream: backend,
                    index,
                    rank,
                    watch,
                } => {
                    let target = &plan.snap.backends[index];
                    if target.health.state == State::Unready {
                        self.metrics.failed_open.inc();
                    }
                    record.connected(target.spec.clone(), rank);
                    return Ok(Link {
                        backend,
                        live: target.live.count_active(),
                        watch,
                        moved: Moved::default(),
                    });
                }
                Dialed::Cut => return Err(End::Shutdown),
                Dialed::ThisNodeShort => return Err(End::ThisNodeShort),
                Dialed::Exhausted { evicted: true } => continue,
                Dialed::Exhausted { evicted: false } => break,
            }
        }
        self.metrics.rejected_all_dials_failed.inc();
        Err(End::AllDialsFailed)
    }

    /// The only snapshot access on this path: one load, kept for the dial (not the relay).
    fn plan(&self, seq: usize) -> Picked {
        let snap = self.table.load();
        Picked {
            order: snap.order(seq, Instant::now(), crate::backend::reentry_draw(seq)),
            snap,
        }
    }

    /// A new connection's first plan. When every ready backend's re-entry paces it, the plan
    /// made after waiting for its soonest point: at most the re-entry window, once per
    /// connection, counted. `None` if shutdown cuts the wait.
    async fn paced_plan(&self, seq: usize) -> Option<Picked> {
        let plan = self.plan(seq);
        let began = Instant::now();
        let Some(at) = plan.paced_until(began, crate::backend::reentry_draw(seq)) else {
            plan.count_deferred();
            return Some(plan);
        };
        drop(plan);
        self.metrics.reentry_waits.inc();
        tokio::select! {
            _ = self.cut.cancelled() => return None,
            () = tokio::time::sleep_until(at) => {}
        }
        self.metrics
            .reentry_wait_seconds
            .inc_by(began.elapsed().as_secs_f64());
        Some(self.plan(seq))
    }

    /// Dials the targets in order until one connects, before any byte is relayed: the picker's
    /// order, then (failing open) the fallback, worked out only once the picker's order is
    /// exhausted. A dial that fails for the backend's fault is reported to its monitor as a
    /// failed check; one that fails for this node's shortage ends the connection at once (every
    /// other backend would fail the same way) and is counted apart, against no backend.
    async fn dial_first(&self, plan: &Picked, record: &mut Record) -> Dialed {
        let mut evicted = false;
        let options = sockets::backend(plan.snap.routing.dead_path_timeout);
        let ranked = plan
            .order
            .pick()
            .order()
            .iter()
            .copied()
            .chain(std::iter::once_with(|| plan.order.fallback()).flatten());
        for (rank, index) in ranked.enumerate() {
            let t = &plan.snap.backends[index];
            // Watch before dialing, from the snapshot's epoch: an eviction between the snapshot
            // and now, or during the dial, moves us to the next target.
            let Some(watch) = t.live.eviction.watch_from(t.evict_epoch) else {
                evicted = true;
                continue;
            };
            record.dialing();
            let tally = Tally::default();
            let dial = crate::dial::connect(
                &t.spec.host,
                t.spec.port,
                plan.snap.routing.connect_timeout,
                &tally,
                &t.live.dial_memory,
                &options,
            );
            let dialed = tokio::select! {
                _ = self.cut.cancelled() => {
                    t.live.count_dial(&tally);
                    return Dialed::Cut;
                }
                r = dial => r,
            };
            record.attempted(t.live.count_dial(&tally));
            match dialed {
                Ok(_) if t.live.eviction.fired(watch) => evicted = true,
                Ok(stream) => {
                    t.live.inbox.tell(News::Connected);
                    return Dialed::Connected {
                        stream,
                        index,
                        rank,
                        watch,
                    };
                }
                Err(e) if e.blame() == Blame::ThisNode => {
                    self.metrics.local_dial_failure(e.label());
                    tracing::debug!(client = %record.client(), backend = %t.spec.id, error = %e, "this node cannot dial; closing the client connection");
                    return Dialed::ThisNodeShort;
                }
                Err(e) => {
                    t.live
                        .counters
                        .dial_failures
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(client = %record.client(), backend = %t.spec.id, error = %e, "dial failed; trying the next backend");
                    t.live.inbox.tell(News::DialFailed(e.to_string()));
                }
            }
        }
        Dialed::Exhausted { evicted }
    }

    /// Completes when `link`'s connection (number `seq`) must be closed: with the reason once
    /// its turn after an eviction has come, `None` at shutdown's cut. Not an `async fn` (its
    /// arguments would be kept twice), nor a block in the caller (that would hold a reference
    /// per field of `link`).
    #[allow(clippy::manual_async_fn, reason = "an async fn's future is larger")]
    fn stop<'a>(
        &'a self,
        link: &'a Link,
        seq: u32,
    ) -> impl Future<Output = Option<CloseReason>> + 'a {
        async move {
            match link.live.eviction.stopped(link.watch).await {
                Stop::Shutdown => None,
                // After an eviction only, so boxed: its timer and the waiters it needs
                // meanwhile take no room in every idle connection.
                Stop::Evicted(why, by) => Box::pin(self.evicted(why, by, seq, link)).await,
            }
        }
    }

    /// An evicted connection's turn to close ([`turn::close_turn`]: the sooner of the bumps'
    /// turns stands); `None` if shutdown cuts it first.
    async fn evicted(
        &self,
        why: CloseReason,
        by: EvictionWatch,
        seq: u32,
        link: &Link,
    ) -> Option<CloseReason> {
        // The setting, or less: 0.7 of the backend's learned shutdown window.
        let handoff = || {
            let setting = self.table.load().routing.handoff_window;
            link.live.shutdown_window.fit(setting)
        };
        turn::close_turn(
            &link.live.eviction,
            (why, by),
            seq,
            handoff,
            &link.moved,
            &self.cut,
        )
        .await
    }
}

/// What to dial for one client connection: the snapshot it was picked from (one reference, kept
/// for the dial only, so the fallback and every target's eviction epoch come from the same
/// snapshot as the pick), and the order.
struct Picked {
    snap: Arc<Snapshot>,
    order: Order,
}

/// What the relay keeps of the dial: the backend leg and its backend, nothing of the plan; and
/// the connection's tally, which the relay adds to and its stop reads (a hand-off waits on it).
struct Link {
    backend: TcpStream,
    /// Counted active as long as the link lives.
    live: Active,
    watch: EvictionWatch,
    /// Bytes relayed each way, and which way the latest went.
    moved: Moved,
}

enum Dialed {
    /// Connected to `snap.backends[index]`, candidate number `rank`, with its eviction watch.
    Connected {
        stream: TcpStream,
        index: usize,
        rank: usize,
        watch: EvictionWatch,
    },
    /// Every target failed; `evicted` if some were skipped as evicted since the snapshot.
    Exhausted { evicted: bool },
    /// This node could not dial (descriptors, ports, memory).
    ThisNodeShort,
    /// Shutdown cut the connection while dialing.
    Cut,
}

/// How a relay that ended by itself ended the connection. A backend leg that TCP gave up on (data
/// unacknowledged for the leg's `dead_path_timeout`) is a dead path: a passive failure of the
/// backend, as a failed dial is; unless the backend had stopped reading (a zero window, as the
/// relay sampled it): a stalled reader, alive, counted apart and not against its health. A backend that reset its leg gets the client's leg reset too, when it is
/// closed: the client sees the abort, not a clean end.
fn relay_ended(
    client: &TcpStream,
    link: &Link,
    r: Result<crate::relay::Ended, crate::relay::RelayError>,
) -> End {
    match r {
        Ok(ended) => End::from(ended),
        Err(e @ crate::relay::RelayError::StalledReader(_)) => {
            link.live.counters.closes[CloseReason::StalledReader.index()]
                .fetch_add(1, Ordering::Relaxed);
            End::StalledReader(e.to_string())
        }
        Err(e) if e.backend_timed_out() => {
            link.live.counters.closes[CloseReason::DeadPath.index()]
                .fetch_add(1, Ordering::Relaxed);
            link.live.inbox.tell(News::DialFailed(format!(
                "relay: data to the backend unacknowledged for {} (dead_path_timeout, TCP user timeout)",
                sockets::user_timeout_text(&link.backend)
            )));
            End::DeadPath(e.to_string())
        }
        Err(e) => {
            if e.backend_reset() {
                sockets::reset_on_close(client);
            }
            End::Error {
                leg: match e {
                    crate::relay::RelayError::Client(_) => Leg::Client,
                    crate::relay::RelayError::Backend(_)
                    | crate::relay::RelayError::StalledReader(_) => Leg::Backend,
                },
                error: e.to_string(),
            }
        }
    }
}

/// How a connection the balancer stopped ended: evicted (`Some(why)`, counted against its
/// backend) or cut at shutdown.
fn stopped(link: &Link, why: Option<CloseReason>) -> End {
    match why {
        Some(why) => {
            link.live.counters.closes[why.index()].fetch_add(1, Ordering::Relaxed);
            End::Evicted(why)
        }
        None => End::Shutdown,
    }
}

#[cfg(test)]
mod tests;
