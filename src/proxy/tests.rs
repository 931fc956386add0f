//! The proxy's unit tests: what a connection does between the snapshot and the relay, and what
//! an idle one costs.

use super::*;
use crate::backend::{Backend, BackendLive, Routing};
use crate::testing::{holds, says};
use crate::verdict::Health;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use tokio::io::AsyncReadExt;

/// A snapshot entry for a backend at `addr` in `state`.
fn backend(addr: SocketAddr, state: State) -> Backend {
    let live = Arc::new(BackendLive::default());
    Backend {
        spec: crate::testing::fixtures::spec(&addr.to_string(), None),
        health: Health {
            state,
            latency: Some(Duration::from_millis(1)),
            reach: Some(crate::verdict::Reach::answered(
                200,
                Duration::from_millis(1),
            )),
            last_failure: None,
            pending: None,
        },
        evict_epoch: live.eviction.epoch(),
        degraded: None,
        live,
    }
}

/// A proxy serving `backends` on a port of its own; stop it with the token.
async fn serving(backends: Vec<Backend>) -> (Arc<Proxy>, SocketAddr, CancellationToken) {
    let table = Table::new();
    table.test_publish(Snapshot {
        generation: 1,
        routing: Routing::default(),
        backends,
    });
    let proxy = Proxy::new(table, Arc::new(Metrics::default()));
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let at = l.local_addr().expect("addr");
    let stop = CancellationToken::new();
    tokio::spawn(proxy.clone().serve(l, stop.clone()));
    (proxy, at, stop)
}

/// Polls `ok` until it holds, within a deadline far beyond any wait here.
async fn until(what: &str, ok: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Everything `c` still receives, until the proxy closes it.
async fn rest(c: &mut TcpStream) -> String {
    let mut got = String::new();
    c.read_to_string(&mut got).await.expect("read");
    got
}

#[tokio::test]
async fn a_backend_evicted_after_the_snapshot_was_read_is_not_connected() {
    let (first, second) = (says("first"), says("second"));
    let backends = vec![backend(first, State::Ready), backend(second, State::Ready)];
    // The eviction fires, but the snapshot new connections read still offers `first`: the
    // window between reading a snapshot and watching for evictions.
    backends[0].live.eviction.evict_now();
    let (proxy, at, stop) = serving(backends).await;
    let mut c = TcpStream::connect(at).await.expect("connect");
    assert_eq!(rest(&mut c).await, "second");
    stop.cancel();
    proxy.drain(Duration::ZERO).await;
}

#[tokio::test]
async fn when_every_ready_backend_fails_to_dial_the_connection_fails_open_to_the_fallback() {
    let (_held, refused) = crate::testing::refusing().expect("refusing");
    let backends = vec![
        backend(refused, State::Ready),
        backend(says("unready"), State::Unready),
    ];
    let (proxy, at, stop) = serving(backends).await;
    let mut c = TcpStream::connect(at).await.expect("connect");
    assert_eq!(rest(&mut c).await, "unready");
    assert_eq!(proxy.metrics.failed_open.get(), 1);
    stop.cancel();
    proxy.drain(Duration::ZERO).await;
}

#[tokio::test]
async fn the_shutdown_cut_closes_an_idle_connection_as_shutdown_not_as_an_eviction() {
    let b = backend(holds(), State::Ready);
    let live = b.live.clone();
    let (proxy, at, stop) = serving(vec![b]).await;
    let mut c = TcpStream::connect(at).await.expect("connect");
    until("relayed", || live.active.load(Ordering::Relaxed) == 1).await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), proxy.drain(Duration::ZERO))
        .await
        .expect("the cut ends the connection");
    assert_eq!(rest(&mut c).await, "", "closed");
    let closes: Vec<u64> = live
        .counters
        .closes
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .collect();
    assert_eq!(
        closes,
        vec![0; CloseReason::ALL.len()],
        "no eviction counted"
    );
}

#[tokio::test]
async fn the_shutdown_cut_does_not_wait_for_an_evicted_connections_turn_to_close() {
    let b = backend(holds(), State::Ready);
    let live = b.live.clone();
    let (proxy, at, stop) = serving(vec![b]).await;
    // Connection 0's turn comes at once (no spread), connection 1's 62 % into the failback
    // window (6 s).
    let mut first = TcpStream::connect(at).await.expect("connect");
    until("first relayed", || live.active.load(Ordering::Relaxed) == 1).await;
    let mut second = TcpStream::connect(at).await.expect("connect");
    until("second relayed", || {
        live.active.load(Ordering::Relaxed) == 2
    })
    .await;
    live.eviction
        .bump_to(live.eviction.next(), CloseReason::Failback);
    assert_eq!(rest(&mut first).await, "", "its turn came at once");
    let failbacks = || live.counters.closes[CloseReason::Failback.index()].load(Ordering::Relaxed);
    assert_eq!(failbacks(), 1);
    stop.cancel();
    proxy.drain(Duration::ZERO).await;
    assert_eq!(rest(&mut second).await, "");
    assert_eq!(
        failbacks(),
        1,
        "cut before its turn: a shutdown, not a failback close"
    );
}

/// The most a connection's future may take in a test build (`size_of_val`, deterministic per
/// compiler and profile): the largest that keeps its tokio task at 512 B. tokio's task is the
/// future + 112 B (a 32 B header, 8 B of task tracker, 24 B of core, a 48 B trailer; read with
/// `RUSTC_BOOTSTRAP=1 cargo rustc --release --lib -- -Zprint-type-sizes`), rounded up to 128 B:
/// a release future of at most 400 B makes a 512 B task, one B more a 640 B task. A release
/// build's future is 16 B smaller than a test build's (its `TcpStream`s take 32 B, not 40), so
/// 416 B here. Measured: 416 B here, 400 B in release (a 512 B task), with no byte to spare;
/// 504 / 488 B (a 640 B task) before the record took 48 B instead of 64, a direction's offsets
/// 4 B instead of 8 and the relay raced its stop without `select!`; 976 B before the dial was
/// boxed and the two stop waiters became one.
const CONNECTION_FUTURE_BOUND: usize = 416;

#[tokio::test]
async fn an_idle_connection_keeps_only_the_relay_state() {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let _client = TcpStream::connect(l.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (accepted, peer) = l.accept().await.expect("accept");
    let proxy = Proxy::new(Table::new(), Arc::new(Metrics::default()));
    let handle = proxy.clone().connection(accepted, peer);
    let size = std::mem::size_of_val(&handle);
    eprintln!("connection future: {size} B (bound {CONNECTION_FUTURE_BOUND} B)");
    assert!(
        size <= CONNECTION_FUTURE_BOUND,
        "a connection's future grew to {size} B, over {CONNECTION_FUTURE_BOUND} B: something of the dial lives across the relay, or a second waiter is back"
    );
}
