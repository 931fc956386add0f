//! Relaying: half-close, a backend's reset passed on to its client, and closing connections of a
//! backend that turns unready.

use std::time::Duration;

use readyprism::verdict::State::{Ready, Unready};
use tokio::io::AsyncWriteExt;

use crate::support::*;

#[tokio::test]
async fn half_close_reaches_the_backend_while_the_response_still_flows_back() {
    let lab = Lab::new();
    let (_a, app) = lab.one_ready("").await;
    let (mut conn, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "a");
    conn.get_mut().write_all(b"hello").await.expect("write");
    conn.get_mut().shutdown().await.expect("half-close");
    assert_eq!(read_to_end(&mut conn).await, b"hellobye\n");
    app.shutdown().await;
}

#[test]
fn a_backend_that_resets_its_connection_has_the_client_reset_too_not_ended() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "reset.yaml", "");
    let p = Running::start(&file);
    rt.block_on(poll("ready", || {
        blocking_get(p.admin, "/status").1.contains("\"ready\"")
    }));
    // The apiserver aborts the stream once the client speaks (a crash, a killed stream).
    a.control.set_raw_reset(true);
    let (mut conn, name) = rt.block_on(raw(p.listen)).expect("relayed");
    assert_eq!(name, "a");
    let ended = rt.block_on(async {
        conn.get_mut().write_all(b"ping").await.expect("write");
        let mut rest = Vec::new();
        tokio::time::timeout(
            patience(),
            tokio::io::AsyncReadExt::read_to_end(&mut conn, &mut rest),
        )
        .await
        .expect("the connection ends in time")
        .map_err(|e| e.kind())
    });
    assert_eq!(
        ended,
        Err(std::io::ErrorKind::ConnectionReset),
        "the client reads a reset, not an end of stream that passes for a whole answer"
    );
    let r = p.wait_log("connection ended", |v| v["fields"]["reason"] == "error");
    assert_eq!(r["fields"]["ended_by"], "backend", "{r}");
    assert!(
        r["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("backend: ") && e.contains("reset")),
        "{r}"
    );
}

#[tokio::test]
async fn connections_to_a_backend_are_closed_within_a_second_of_it_turning_unready() {
    let lab = Lab::new();
    // Not paced when local is back (pacing: `tests/reentry.rs`).
    let (local, _remote, app) = lab.local_and_remote("reentry_window: 0s\n").await;
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
async fn while_nothing_is_ready_connections_stay_until_a_backend_is_ready() {
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
    tokio::time::sleep(2 * readyprism::testing::EVICT_SPREAD).await;
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
async fn failback_brings_a_connection_home_only_once_the_local_backend_stays_ready() {
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

/// `(all, pipes)`: the descriptors `pid` holds, and how many of them are pipes, leaving out
/// the sockets of connections to its admin port (`admin`): this test's own `/status` request
/// may not have been closed by the server yet when the count is taken. A fresh-clone CI run
/// under load failed so, one socket short of the connection's two, "(16, 2)" for "(17, 2)";
/// holding an admin connection open across the first count reproduces it exactly.
fn descriptors(pid: u32, admin: u16) -> (usize, usize) {
    let admin_conns = connections_on_port(admin);
    let links: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| !admin_conns.contains(l))
        .collect();
    let pipes = links.iter().filter(|l| l.starts_with("pipe:")).count();
    (links.len(), pipes)
}

/// `socket:[inode]` of every TCP connection (not a listener) whose local port is `port`, from
/// /proc/net/tcp and tcp6 (the local address is `hex-ip:hex-port`, the state 0A is LISTEN).
fn connections_on_port(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|h| u16::from_str_radix(h, 16).ok());
            if local_port == Some(port) && *state != "0A" {
                out.push(format!("socket:[{inode}]"));
            }
        }
    }
    out
}

/// Test bytes: no period, so a lost, doubled or reordered chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i ^ (i >> 13)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect()
}

#[test]
fn bulk_through_the_binary_is_spliced_through_pipes_released_once_idle() {
    use tokio::io::AsyncReadExt;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let a = rt.block_on(lab.fake("a"));
    let file = lab.path("splice.yaml");
    // One probe, then none for the test's length: a probe that times out on a loaded machine
    // drops its kept connection and dials a new one, which would move the descriptor counts
    // this test compares. (The admin sockets are left out of the counts for the same reason:
    // see `descriptors`.)
    let quiet = "health: { interval: 10m, timeout: 5s, fast_interval: 150ms, rise: 1 }\n";
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], quiet)).expect("write");
    // A process: its descriptors are counted in /proc.
    let p = process::Proc::start(&file);
    rt.block_on(poll("ready", || {
        blocking_get(p.admin, "/status").1.contains("\"ready\"")
    }));
    let pid = p.pid();
    let descriptors = |pid| descriptors(pid, p.admin.port());
    let (before, pipes) = descriptors(pid);
    rt.block_on(async {
        let (conn, name) = raw(p.listen).await.expect("relayed");
        assert_eq!(name, "a");
        let (mut r, mut w) = conn.into_inner().into_split();
        let connected = descriptors(pid);
        assert_eq!(
            connected,
            (before + 2, pipes),
            "a connection is two sockets"
        );

        // Small exchanges (up to 4 KiB, as a kubelet's) copy: no pipe.
        for i in 0..20u8 {
            let msg = vec![i; 1 + usize::from(i) * 210];
            w.write_all(&msg).await.expect("write");
            let mut got = vec![0u8; msg.len()];
            r.read_exact(&mut got).await.expect("echo");
            assert_eq!(got, msg);
        }
        assert_eq!(descriptors(pid), connected, "no pipe for small exchanges");

        // 24 MiB up and echoed down, byte-identical.
        let data = pattern(24 << 20);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&sent).await.expect("bulk write");
            w
        });
        let mut got = vec![0u8; data.len()];
        r.read_exact(&mut got).await.expect("echo of the bulk");
        assert!(got == data, "byte-identical");
        let mut w = writer.await.expect("writer");
        // Most of it went by splice, and `readyprism_spliced_bytes_total` says so.
        let text = blocking_get(p.admin, "/metrics").1;
        let spliced = metric(&text, "readyprism_spliced_bytes_total", "").unwrap_or(0.0);
        assert!(
            spliced >= (data.len() as f64) * 2.0 * 0.75,
            "spliced {spliced} of 2 x {} bytes",
            data.len()
        );

        // Idle beyond the release: the connection, still open, holds its two sockets only.
        poll("pipes closed once idle", || descriptors(pid) == connected).await;
        w.write_all(b"still here").await.expect("write");
        let mut got = [0u8; 10];
        r.read_exact(&mut got).await.expect("echo");
        assert_eq!(&got, b"still here");

        // The pipes, seen: a bulk echo that stalls after 16 MiB (more than the relay's socket
        // buffers hold) while the client does not read leaves bytes in a pipe each way.
        a.control.set_raw_stall_after(16 << 20);
        let (conn, _) = raw(p.listen).await.expect("relayed");
        let (mut r, mut w) = conn.into_inner().into_split();
        let data = pattern(64 << 20);
        let sent = data.clone();
        let flood = tokio::spawn(async move { w.write_all(&sent).await });
        poll("a pipe each way", || descriptors(pid).1 == pipes + 2 * 2).await;
        let mut got = vec![0u8; 16 << 20];
        r.read_exact(&mut got)
            .await
            .expect("the echo up to the stall");
        assert!(got[..] == data[..16 << 20], "byte-identical");
        flood.abort();
    });
}
