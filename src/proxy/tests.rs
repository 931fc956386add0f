//! The proxy's unit tests: what a connection does between the snapshot and the relay, and what
//! an idle one costs.

use super::*;
use crate::backend::{Backend, BackendId, BackendSpec, Routing};
use crate::health::verdict::Health;
use std::net::SocketAddr;
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

/// The most a connection's future may take (`size_of_val`, deterministic per compiler and
/// profile): in this build it was 616 B and the future of the dial-and-relay-in-one `handle`
/// before 1720 B (976 B in a release build, 2 waiters and the dial state resident). tokio
/// adds ~150 B of task header and rounds the task to 128 B.
const CONNECTION_FUTURE_BOUND: usize = 700;

#[tokio::test]
async fn an_idle_connection_keeps_only_the_relay_state() {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let _client = TcpStream::connect(l.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (accepted, peer) = l.accept().await.expect("accept");
    let proxy = Proxy::new(Table::new(), Arc::new(Metrics::default()));
    let handle = proxy.clone().handle(accepted, Record::new(peer));
    let size = std::mem::size_of_val(&handle);
    eprintln!("connection future: {size} B (bound {CONNECTION_FUTURE_BOUND} B)");
    assert!(
        size <= CONNECTION_FUTURE_BOUND,
        "a connection's future grew to {size} B, over {CONNECTION_FUTURE_BOUND} B: something of the dial lives across the relay, or a second waiter is back"
    );
}
