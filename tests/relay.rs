//! Relaying: half-close, and closing connections of a backend that turns unready.

use std::time::Duration;

use readyprism::health::verdict::State::{Ready, Unready};
use tokio::io::AsyncWriteExt;

use crate::support::*;

/// The balancer spreads the closes of an evicted backend's connections over this window.
const EVICT_WINDOW: Duration = Duration::from_millis(500);

#[tokio::test]
async fn half_close_reaches_the_backend_and_the_response_still_flows_back() {
    let lab = Lab::new();
    let (_a, app) = lab.one_ready("").await;
    let (mut conn, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "a");
    conn.get_mut().write_all(b"hello").await.expect("write");
    conn.get_mut().shutdown().await.expect("half-close");
    assert_eq!(read_to_end(&mut conn).await, b"hellobye\n");
    app.shutdown().await;
}

#[tokio::test]
async fn connections_to_a_backend_are_closed_within_a_second_of_it_turning_unready() {
    let lab = Lab::new();
    let (local, _remote, app) = lab.local_and_remote("").await;
    let proxy = app.listen_addrs()[0];
    let mut on_local = Vec::new();
    for _ in 0..5 {
        let (c, name) = raw(proxy).await.expect("relayed");
        assert_eq!(name, "local");
        on_local.push(c);
    }
    // A connection on the remote backend (local is refused meanwhile by making it unready later).
    local.control.set_ready(false);
    wait_states(&app, &[Unready, Ready]).await;
    let turned = tokio::time::Instant::now();
    for c in &mut on_local {
        read_to_end(c).await;
    }
    let took = turned.elapsed();
    assert!(took <= Duration::from_secs(1), "closed after {took:?}");
    let (mut on_remote, name) = raw(proxy).await.expect("relayed");
    assert_eq!(name, "remote");
    assert_eq!(
        unready_closes(&app, &addr(&local), Some("turned_unready")),
        5
    );

    // Within failback_after (60 s by default) a connection does not move: local comes back, the
    // remote connection stays.
    local.control.set_ready(true);
    wait_states(&app, &[Ready, Ready]).await;
    assert_eq!(landed(proxy).await, "local");
    on_remote
        .get_mut()
        .write_all(b"still here")
        .await
        .expect("write");
    on_remote.get_mut().shutdown().await.expect("half-close");
    assert_eq!(read_to_end(&mut on_remote).await, b"still herebye\n");
    app.shutdown().await;
}

#[tokio::test]
async fn while_nothing_is_ready_connections_stay_and_move_once_a_backend_is_ready() {
    let lab = Lab::new();
    let (local, remote, app) = lab.local_and_remote("").await;
    let (mut on_local, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "local");
    let closed = || unready_closes(&app, &addr(&local), None);

    // A cluster-wide outage: remote first, then local. Closing would only re-dial the same set.
    remote.control.set_ready(false);
    wait_states(&app, &[Ready, Unready]).await;
    local.control.set_ready(false);
    wait_states(&app, &[Unready, Unready]).await; // published together with any eviction
                                                  // A negative can only be shown over a window: longer than the eviction spread.
    tokio::time::sleep(2 * EVICT_WINDOW).await;
    assert_eq!(closed(), 0, "no eviction while nothing is ready");
    on_local.get_mut().write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 4];
    tokio::io::AsyncReadExt::read_exact(&mut on_local, &mut buf)
        .await
        .expect("still relayed");
    assert_eq!(&buf, b"ping");

    // The remote recovers first: the connection on the still-unready local one is closed.
    remote.control.set_ready(true);
    wait_states(&app, &[Unready, Ready]).await;
    assert!(
        read_to_end(&mut on_local).await.is_empty(),
        "closed to re-dial a ready backend"
    );
    assert_eq!(closed(), 1);
    assert_eq!(
        unready_closes(&app, &addr(&local), Some("left_none_ready")),
        1,
        "closed because a backend is ready again"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_brings_a_connection_home_once_the_local_backend_stays_ready_and_never_while_it_flaps(
) {
    let lab = Lab::new();
    // 5 s: well above a flap's ready spell here (turning unready takes a probe interval, 1 s,
    // plus a fast re-probe), well below the test's patience.
    let (local, remote, app) = lab.local_and_remote("failback_after: 5s\n").await;
    local.control.set_ready(false);
    wait_states(&app, &[Unready, Ready]).await;
    let (mut away, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "remote");
    let failbacks = || unready_closes(&app, &addr(&remote), Some("failback"));

    // Flapping: each ready spell is shorter than failback_after, so the connection stays.
    for _ in 0..2 {
        local.control.set_ready(true);
        wait_states(&app, &[Ready, Ready]).await;
        local.control.set_ready(false);
        wait_states(&app, &[Unready, Ready]).await;
    }
    away.get_mut().write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 4];
    tokio::io::AsyncReadExt::read_exact(&mut away, &mut buf)
        .await
        .expect("still relayed after the flaps");
    assert_eq!(failbacks(), 0, "never while the local backend flaps");

    // The local backend comes back for good: within failback_after + the 10 s spread, the
    // connection is closed so its client re-dials home.
    local.control.set_ready(true);
    wait_states(&app, &[Ready, Ready]).await;
    let closed = tokio::time::timeout(
        Duration::from_secs(5 + 10) + patience(),
        tokio::io::AsyncReadExt::read_to_end(&mut away, &mut Vec::new()),
    )
    .await;
    assert!(closed.is_ok(), "the away connection was closed");
    assert_eq!(failbacks(), 1, "counted as a failback close");
    assert_eq!(
        landed(app.listen_addrs()[0]).await,
        "local",
        "the client re-dials home"
    );
    assert_eq!(
        unready_closes(&app, &addr(&local), None),
        0,
        "the local backend's connections stay"
    );
    app.shutdown().await;
}
