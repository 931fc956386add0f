//! Picking: readiness, zone, latency, sharing, dial retry, no-ready policies.

use std::time::Duration;

use readyprism::verdict::State::{Ready, Unready};

use readyprism::admin::status::{Mode, StatusDoc};

use crate::support::*;

#[tokio::test]
async fn unready_backend_that_accepts_tcp_fastest_is_never_picked() {
    let lab = Lab::new();
    let local = lab.fake("local").await; // same zone, no delay: fastest on every measure
    local.control.set_ready(false);
    let b = lab.fake("b").await;
    b.control.set_readyz_delay(Duration::from_millis(20));
    let w = lab.fake("witness").await;
    w.control.set_readyz_delay(Duration::from_millis(40));
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[
                (addr(&local), "dc-a"),
                (addr(&b), "dc-b"),
                (addr(&w), "witness"),
            ],
            "",
        ))
        .await;
    wait_states(&app, &[Unready, Ready, Ready]).await;
    let proxy = app.listen_addrs()[0];
    for _ in 0..20 {
        assert_ne!(landed(proxy).await, "local");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn ready_same_zone_backend_wins_over_faster_remote() {
    let lab = Lab::new();
    // 300 ms against ~0: a gap no scheduling noise on a loaded machine closes.
    let local = lab.fake("local").await;
    local.control.set_readyz_delay(Duration::from_millis(300));
    let remote = lab.fake("remote").await;
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&remote), "dc-b"), (addr(&local), "dc-a")],
            WIDE_GAP_PROBES,
        ))
        .await;
    wait_states(&app, &[Ready, Ready]).await;
    let snap = wait_probed(&app, 2).await;
    assert!(
        snap.backends[1].latency_ms > snap.backends[0].latency_ms,
        "the local one is the slower: {snap:?}"
    );
    let proxy = app.listen_addrs()[0];
    for _ in 0..10 {
        assert_eq!(landed(proxy).await, "local");
    }
    app.shutdown().await;
}

/// Probes that tolerate a 300 ms `/readyz` (and a 1 s handshake) with room to spare.
const WIDE_GAP_PROBES: &str = "health: { interval: 3s, timeout: 2s, fast_interval: 200ms }\n";

// Sharing among near-equal backends is table-tested in `pick.rs`: measured latencies on a loaded
// machine are too noisy to show a 25 % band end to end.
#[tokio::test]
async fn lower_readyz_latency_wins_among_remotes() {
    let lab = Lab::new();
    let slow = lab.fake("slow").await;
    slow.control.set_readyz_delay(Duration::from_millis(300));
    let fast = lab.fake("fast").await;
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&slow), "dc-b"), (addr(&fast), "dc-c")],
            WIDE_GAP_PROBES,
        ))
        .await;
    wait_states(&app, &[Ready, Ready]).await;
    wait_probed(&app, 2).await;
    let proxy = app.listen_addrs()[0];
    for _ in 0..10 {
        assert_eq!(landed(proxy).await, "fast");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn refused_dial_goes_to_the_next_backend_without_client_visible_failure() {
    let lab = Lab::new();
    // Long interval: after the first probe both stay "ready" while we stop the local one.
    let (local, remote, app) = lab.local_and_remote(SLOW_PROBES).await;
    let proxy = app.listen_addrs()[0];
    assert_eq!(landed(proxy).await, "local");
    local.stop().await;
    for _ in 0..5 {
        assert_eq!(landed(proxy).await, "remote");
    }
    // Two refused dials (fall) made it unready; no dial after that.
    assert_eq!(app.status().backends[0].state, Unready);
    assert_eq!(dial_failures(&app, &addr(&local)), 2);
    // Both gone before the health checks notice: the client is closed and it is counted.
    remote.stop().await;
    assert!(raw(proxy).await.is_none());
    let t = admin_get(app.admin_addr(), "/metrics").await.1;
    assert_eq!(
        metric(
            &t,
            "readyprism_connections_rejected_total",
            "reason=\"all_dials_failed\""
        ),
        Some(1.0)
    );
    app.shutdown().await;
}

#[tokio::test]
async fn no_ready_backend_fails_open_by_default() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    a.control.set_ready(false);
    let app = lab
        .start(&lab.yaml("dc-a", &[(addr(&a), "dc-a")], ""))
        .await;
    wait_states(&app, &[Unready]).await;
    assert_eq!(landed(app.listen_addrs()[0]).await, "a");
    let (code, body) = admin_get(app.admin_addr(), "/status").await;
    assert_eq!(code, 200);
    let v: StatusDoc = serde_json::from_str(&body).expect("a status document");
    assert_eq!(v.mode, Mode::FailOpen);
    assert!(!v.ready);
    let t = admin_get(app.admin_addr(), "/metrics").await.1;
    assert_eq!(
        metric(&t, "readyprism_connections_failed_open_total", ""),
        Some(1.0)
    );
    assert_eq!(admin_get(app.admin_addr(), "/readyz").await.0, 503);
    app.shutdown().await;
}

#[tokio::test]
async fn no_ready_backend_with_refuse_closes_clients() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    a.control.set_ready(false);
    let app = lab
        .start(&lab.yaml("dc-a", &[(addr(&a), "dc-a")], "when_none_ready: refuse\n"))
        .await;
    wait_states(&app, &[Unready]).await;
    assert!(
        raw(app.listen_addrs()[0]).await.is_none(),
        "refused connection must be closed"
    );
    assert!(
        a.control
            .readyz_hits
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
    );
    assert_eq!(app.status().mode, Mode::Refuse);
    // Once it is ready again, clients get through.
    a.control.set_ready(true);
    wait_states(&app, &[Ready]).await;
    let (mut held, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "a");
    // The last ready backend fails: with refuse its connections are closed even so.
    a.control.set_ready(false);
    wait_states(&app, &[Unready]).await;
    assert!(
        read_to_end(&mut held).await.is_empty(),
        "closed: refuse means no traffic to failing backends"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn status_reports_every_backend_with_rank() {
    let lab = Lab::new();
    let local = lab.fake("local").await;
    let remote = lab.fake("remote").await;
    remote.control.set_ready(false);
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&remote), "dc-b"), (addr(&local), "dc-a")],
            "",
        ))
        .await;
    wait_states(&app, &[Unready, Ready]).await;
    let (_conn, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "local");
    let v: serde_json::Value =
        serde_json::from_str(&admin_get(app.admin_addr(), "/status").await.1).expect("json");
    assert_eq!(v["zone"], "dc-a");
    assert_eq!(v["ready"], true);
    let bs = v["backends"].as_array().expect("backends");
    assert_eq!(bs[0]["address"], addr(&remote));
    assert_eq!(bs[0]["state"], "unready");
    assert_eq!(
        bs[0]["last_error"],
        "readyz 500: etcd, etcd-readiness failed"
    );
    assert_eq!(bs[0]["rank"], serde_json::Value::Null);
    assert_eq!(bs[1]["state"], "ready");
    assert_eq!(bs[1]["zone"], "dc-a");
    assert_eq!(bs[1]["rank"], 0);
    assert_eq!(bs[1]["active_connections"], 1);
    assert!(bs[1]["latency_ms"].as_f64().expect("latency") > 0.0);
    assert_eq!(bs[1]["last_error"], serde_json::Value::Null);
    assert_eq!(admin_get(app.admin_addr(), "/livez").await.0, 200);
    assert_eq!(admin_get(app.admin_addr(), "/readyz").await.0, 200);
    app.shutdown().await;
}

#[tokio::test]
async fn dial_that_times_out_goes_to_the_next_backend() {
    let lab = Lab::new();
    // Once it stops accepting and its one-slot queue is full, dials to it hang.
    let listener = readyprism::testing::short_queue().expect("short queue");
    let holed = lab.cluster.fake_on("holed", listener);
    let other = lab.fake("other").await;
    let extra = &format!("{SLOW_PROBES}connect_timeout: 300ms\n");
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&holed), "dc-a"), (addr(&other), "dc-b")],
            extra,
        ))
        .await;
    wait_states(&app, &[Ready, Ready]).await;
    holed.control.set_accepting(false);
    let mut fillers = Vec::new();
    for _ in 0..16 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(holed.addr),
        )
        .await
        {
            Ok(Ok(s)) => fillers.push(s),
            _ => break, // the queue is full: dials now hang
        }
    }
    assert_eq!(landed(app.listen_addrs()[0]).await, "other");
    assert_eq!(dial_failures(&app, &addr(&holed)), 1);
    assert_eq!(
        app.status().backends[0].state,
        Ready,
        "the retry saved the client; one failed dial of fall 2"
    );
    // A second timed-out dial: unready, with the dial as the reason.
    assert_eq!(landed(app.listen_addrs()[0]).await, "other");
    let doc = wait_states(&app, &[Unready, Ready]).await;
    assert_eq!(
        doc.backends[0].last_error.as_deref(),
        Some("dial: timeout after 300ms")
    );
    app.shutdown().await;
}

#[tokio::test]
async fn latency_is_the_readyz_answer_time_not_the_connect_or_tls_time() {
    let lab = Lab::new();
    // Slow to connect (TLS handshake 1 s) but answers /readyz at once: if the handshake counted,
    // it would measure 1 s, far above the other's 300 ms; as it does not, it measures ~0.
    let far_handshake = lab.fake("slow-handshake").await;
    far_handshake
        .control
        .set_handshake_delay(Duration::from_secs(1));
    // Quick to connect, slow to answer.
    let slow_answer = lab.fake("slow-answer").await;
    slow_answer
        .control
        .set_readyz_delay(Duration::from_millis(300));
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&slow_answer), "dc-b"), (addr(&far_handshake), "dc-c")],
            WIDE_GAP_PROBES,
        ))
        .await;
    let snap = wait_states(&app, &[Ready, Ready]).await;
    let (answer, handshake) = (
        snap.backends[0].latency_ms.expect("measured"),
        snap.backends[1].latency_ms.expect("measured"),
    );
    assert!(
        handshake < answer,
        "handshake time must not count: {snap:?}"
    );
    for _ in 0..5 {
        assert_eq!(landed(app.listen_addrs()[0]).await, "slow-handshake");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn listeners_of_both_address_families_relay() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a")], "").replace(
        "listen: [\"127.0.0.1:0\"]",
        "listen: [\"127.0.0.1:0\", \"[::1]:0\"]",
    );
    let app = lab.start(&yaml).await;
    wait_states(&app, &[Ready]).await;
    let addrs = app.listen_addrs();
    assert!(addrs[1].is_ipv6());
    for l in addrs {
        assert_eq!(landed(l).await, "a");
    }
    app.shutdown().await;
}
