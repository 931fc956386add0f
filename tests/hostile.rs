//! Hostile peers and faults: the balancer keeps serving, says why, and holds its resources.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use readyprism::app::App;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::Ready;

use crate::support;
use crate::support::*;

/// An HTTP exchange on a fresh admin connection; `None` if the server closed it unanswered.
async fn admin_answer(admin: std::net::SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect(admin).await.ok()?;
    s.write_all(b"GET /livez HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    tokio::time::timeout(patience(), s.read_to_string(&mut out))
        .await
        .ok()?
        .ok()?;
    (!out.is_empty()).then_some(out)
}

/// 100 half-sent requests (a slowloris) to the admin port of a balancer in front of one ready
/// fake: the fake, the balancer and the stalled connections, oldest first.
async fn slowloris(lab: &Lab) -> (FakeApiserver, App, Vec<TcpStream>) {
    let (a, app) = lab.one_ready("").await;
    let admin = app.admin_addr();
    // The head never ends.
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(admin).await.expect("connect");
        s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        slow.push(s);
    }
    (a, app, slow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_server_caps_connections_by_shedding_the_oldest_stalled_ones() {
    use readyprism::admin::MAX_CONNECTIONS;
    let lab = Lab::new();
    let (_a, app, mut slow) = slowloris(&lab).await;
    let admin = app.admin_addr();
    // The cap holds: each one past it shed the oldest, so the first ones are closed at once.
    for s in &mut slow[..100 - MAX_CONNECTIONS] {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(patience(), s.read_to_end(&mut buf)).await;
        assert!(closed.is_ok(), "an old stalled connection was not shed");
    }
    // ... while the newer ones are all still held (their head timeout is far off).
    for (i, s) in slow.iter().enumerate().skip(100 - MAX_CONNECTIONS) {
        let r = s.try_read(&mut [0u8; 1]);
        assert!(
            matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "stalled connection {i} was closed, not one of the oldest: {r:?}"
        );
    }
    // A complete request is answered, not turned away: it sheds the next oldest stalled one.
    let answer = admin_answer(admin).await.expect("answered at the cap");
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    // The relay is untouched by the admin server's trouble.
    assert_eq!(landed(app.listen_addrs()[0]).await, "a");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_server_cuts_half_sent_requests_at_its_header_read_timeout() {
    use readyprism::admin::MAX_CONNECTIONS;
    let lab = Lab::new();
    let (_a, app, mut slow) = slowloris(&lab).await;
    let admin = app.admin_addr();
    // The header-read timeout closes every half-sent request left...
    for s in &mut slow[100 - MAX_CONNECTIONS..] {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(patience(), s.read_to_end(&mut buf)).await;
        assert!(
            closed.is_ok(),
            "a half-sent request was held past the patience"
        );
    }
    // ... and the admin server answers as before.
    let answer = eventually("admin answers again", || admin_answer(admin)).await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_send_garbage_reset_or_never_send_do_not_disturb_the_others() {
    let lab = Lab::new();
    let (_a, app) = lab.one_ready("").await;
    let proxy = app.listen_addrs()[0];
    let mut silent = Vec::new();
    for i in 0..30 {
        let mut s = TcpStream::connect(proxy).await.expect("connect");
        match i % 3 {
            0 => {
                let _ = s.write_all(&[0xff; 4096]).await; // garbage: relayed, the backend hangs up
            }
            1 => {
                let _ = socket2::SockRef::from(&s).set_linger(Some(std::time::Duration::ZERO));
                drop(s); // reset at once
                continue;
            }
            _ => {} // connect and never send
        }
        silent.push(s);
    }
    for _ in 0..5 {
        assert_eq!(landed(proxy).await, "a", "others are served throughout");
    }
    assert_eq!(app.status().backends[0].state, Ready);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_gets_backpressure_not_buffering() {
    let lab = Lab::new();
    let (a, app) = lab.one_ready("").await;
    // The echo backend sends back all we write; we never read: every buffer on the way fills.
    let (mut conn, _) = raw(app.listen_addrs()[0]).await.expect("relayed");
    let chunk = vec![7u8; 64 * 1024];
    let mut written = 0usize;
    loop {
        match tokio::time::timeout(
            std::time::Duration::from_secs(1),
            conn.get_mut().write_all(&chunk),
        )
        .await
        {
            Ok(Ok(())) => written += chunk.len(),
            _ => break, // the write stalls: backpressure reached the client
        }
        assert!(
            written < 256 << 20,
            "256 MiB accepted without reading: buffering, not backpressure"
        );
    }
    let to_backend = backend_metric(
        &app,
        "readyprism_bytes_total",
        &addr(&a),
        ",direction=\"to_backend\"",
    );
    // What the balancer took is what the sockets' buffers hold, not what the client offered.
    assert!(
        to_backend < 64 << 20,
        "relayed {to_backend} bytes with nobody reading"
    );
    assert_eq!(
        landed(app.listen_addrs()[0]).await,
        "a",
        "others are served meanwhile"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_backend_that_resets_mid_stream_ends_that_connection_only() {
    let lab = Lab::new();
    let (local, _remote, app) = lab.local_and_remote(SLOW_PROBES).await;
    let (mut conn, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "local");
    local.stop().await; // closes its connections mid-stream
    let _ = read_to_end(&mut conn).await; // ends (EOF or reset), never hangs
    assert_eq!(landed(app.listen_addrs()[0]).await, "remote");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_stalls_mid_response_holds_only_its_own_connections() {
    let lab = Lab::new();
    let (local, _remote, app) = lab.local_and_remote("").await;
    let proxy = app.listen_addrs()[0];
    local.control.set_raw_stall_after(16 * 1024);
    let stalled = || async {
        let (mut conn, name) = raw(proxy).await.expect("relayed");
        assert_eq!(name, "local");
        conn.get_mut()
            .write_all(&[7u8; 64 * 1024])
            .await
            .expect("sent");
        let mut half = vec![0u8; 16 * 1024];
        tokio::time::timeout(patience(), conn.read_exact(&mut half))
            .await
            .expect("the first part in time")
            .expect("the first part");
        conn
    };
    let mut stalled = [stalled().await, stalled().await];
    // No idle timeout cuts them (a quiet watch is normal), and the others are served meanwhile.
    local.control.set_raw_stall_after(0);
    for _ in 0..20 {
        assert_eq!(landed(proxy).await, "local");
    }
    let mut more = [0u8; 1];
    for conn in stalled.iter_mut() {
        let r = tokio::time::timeout(std::time::Duration::from_millis(300), conn.read(&mut more));
        assert!(
            r.await.is_err(),
            "a stalled connection is neither cut nor fed"
        );
    }
    poll("the served ones are done", || {
        app.status().backends[0].active_connections == 2
    })
    .await;
    // The backend turning unready closes the stalled ones, as any of its connections. (A client
    // that closes while the backend stalls is let go after `relay::HALF_CLOSED_IDLE`: a unit
    // test in `relay.rs`, on a paused clock.)
    local.control.set_ready(false);
    for conn in stalled.iter_mut() {
        let _ = read_to_end(conn).await;
    }
    poll("nothing left on the stalled backend", || {
        app.status().backends[0].active_connections == 0
    })
    .await;
    assert_eq!(landed(proxy).await, "remote");
    app.shutdown().await;
}

#[test]
fn running_out_of_descriptors_is_logged_once_per_burst_then_recovers() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "fds.yaml", "");
    // About 20 descriptors are in use after start; 48 leaves room for a dozen relayed connections.
    let p = support::process::Proc::start_under(&["prlimit", "--nofile=48:48", "--"], &file);
    let proxy = p.listen;
    let held: Vec<std::net::TcpStream> = (0..60)
        .filter_map(|_| std::net::TcpStream::connect(proxy).ok())
        .collect();
    p.wait_log("accept failed; backing off", |_| true);
    // A burst of failures is one line, however long it lasts.
    rt.block_on(poll("the backoff loop ran for a while", || {
        p.logs()
            .iter()
            .any(|v| v["fields"]["message"] == "accept failed; backing off")
    }));
    // A negative needs a window: several backoff rounds (100 ms each) must add no line.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let failures = p
        .logs()
        .iter()
        .filter(|v| v["fields"]["message"] == "accept failed; backing off")
        .count();
    assert_eq!(failures, 1, "one line per burst");
    drop(held);
    let landed_again = rt.block_on(eventually("recovered", || async {
        let (_, name) = raw(proxy).await?;
        Some(name)
    }));
    assert_eq!(landed_again, "a");
    // Our own descriptor shortage is no fault of the backend: it stays ready.
    assert!(
        !p.logs()
            .iter()
            .any(|v| v["fields"]["message"] == "backend state changed"
                && v["fields"]["to"] == "unready"),
        "the backend was marked unready by our own EMFILE"
    );
}

#[test]
fn probes_that_meet_this_nodes_descriptor_shortage_leave_the_backend_ready() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "probe-fds.yaml", "");
    let p = support::process::Proc::start_under(&["prlimit", "--nofile=48:48", "--"], &file);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    // Admin connections that never send hold a descriptor each until the header timeout (5 s),
    // and those left in the queue take every descriptor that frees up meanwhile.
    let held: Vec<std::net::TcpStream> = (0..60)
        .filter_map(|_| std::net::TcpStream::connect(p.admin).ok())
        .collect();
    p.wait_log("accept failed; backing off", |_| true);
    // One failed answer drops the kept probe connection; its descriptor goes to a queued admin
    // connection, so the next probe's dial meets EMFILE: a failure of this node, not of `a`.
    a.control.fail_next(1);
    let short = p.wait_log(
        "probe not made: this node is short of resources; backend health unchanged",
        |_| true,
    );
    assert!(
        short["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r == "dial: this node: out of file descriptors (process limit)"),
        "the same wording as a client dial's: {short}"
    );
    drop(held);
    p.wait_log("probing again after a shortage on this node", |_| true);
    let logs = p.logs();
    let line = |m: &str| logs.iter().filter(|v| v["fields"]["message"] == m).count();
    assert_eq!(
        line("probe not made: this node is short of resources; backend health unchanged"),
        1,
        "one line per spell"
    );
    assert!(
        !logs
            .iter()
            .any(|v| v["fields"]["message"] == "backend state changed"
                && v["fields"]["to"] == "unready"),
        "the backend was marked unready by our own EMFILE"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_sends_after_the_client_left_frees_the_connection() {
    let lab = Lab::new();
    let (_a, app) = lab.one_ready("").await;
    for _ in 0..10 {
        let (mut conn, _) = raw(app.listen_addrs()[0]).await.expect("relayed");
        // The echo backend is still sending this back when the client resets and goes.
        let _ = conn.get_mut().write_all(&vec![1u8; 1 << 20]).await;
        let _ = socket2::SockRef::from(conn.get_ref()).set_linger(Some(std::time::Duration::ZERO));
        drop(conn);
    }
    poll("no connection left behind", || {
        app.status().backends[0].active_connections == 0
    })
    .await;
    assert_eq!(landed(app.listen_addrs()[0]).await, "a");
    app.shutdown().await;
}

#[tokio::test]
async fn a_readyz_that_trickles_its_answer_is_a_timeout_while_the_others_serve() {
    let lab = Lab::new();
    let (local, _remote, app) = lab.local_and_remote("").await;
    // Status and headers at once, then one byte every 100 ms: the probe's budget covers it all.
    local
        .control
        .set_readyz_trickle(std::time::Duration::from_millis(100));
    let doc = wait_states(&app, &[readyprism::verdict::State::Unready, Ready]).await;
    assert_eq!(
        doc.backends[0].last_error.as_deref(),
        Some("timeout after 800ms"),
        "{doc:?}"
    );
    assert_eq!(landed(app.listen_addrs()[0]).await, "remote");
    app.shutdown().await;
}

#[test]
#[allow(clippy::disallowed_types)] // blocking code on this thread, not tokio's clock
fn client_dials_that_meet_this_nodes_shortage_blame_no_backend_nor_try_another() {
    use std::io::{Read, Write};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = rt.block_on(async { (lab.fake("a").await, lab.fake("b").await) });
    let file = lab.path("dial-fds.yaml");
    let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], "");
    std::fs::write(&file, yaml).expect("write");
    let p = support::process::Proc::start_under(&["prlimit", "--nofile=48:48", "--"], &file);
    rt.block_on(poll("both ready", || {
        blocking_get(p.admin, "/status")
            .1
            .matches("\"ready\"")
            .count()
            >= 2
    }));
    let short = |p: &support::process::Proc| {
        p.logs().into_iter().find(|v| {
            v["fields"]["message"] == "connection ended"
                && v["fields"]["reason"] == "this_node_short"
        })
    };
    // Relayed connections take two descriptors each. Once one is left, a client is accepted and
    // its dial meets EMFILE; once none is, clients wait in the accept queue, and a probe
    // connection dropped by a failed check frees one for the next of them.
    let mut held = Vec::new();
    let deadline = std::time::Instant::now() + patience();
    let record = loop {
        if let Some(r) = short(&p) {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "no dial met EMFILE");
        let mut c = std::net::TcpStream::connect(p.listen).expect("connect");
        c.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .expect("timeout");
        let _ = c.write_all(b"RAW\n");
        let mut greeting = [0u8; 2];
        if c.read_exact(&mut greeting).is_err() {
            a.control.fail_next(1);
        }
        held.push(c);
    };
    assert_eq!(
        record["fields"]["dials"].as_u64(),
        Some(1),
        "no other backend is tried for this node's shortage: {record}"
    );
    drop(held);
    rt.block_on(poll("admin answers again", || {
        blocking_get(p.admin, "/livez").0 == 200
    }));
    let text = blocking_get(p.admin, "/metrics").1;
    for backend in [addr(&a), addr(&b)] {
        let labels = format!("backend=\"{backend}\"");
        assert_eq!(
            metric(&text, "readyprism_dial_failures_total", &labels),
            Some(0.0),
            "this node's EMFILE is not the apiserver's failure: {backend}"
        );
    }
    let local = metric(
        &text,
        "readyprism_local_dial_failures_total",
        "reason=\"descriptors\"",
    );
    assert!(local >= Some(1.0), "counted apart: {local:?}");
}
