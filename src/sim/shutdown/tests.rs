//! The graceful shutdown's timeline on a real fake apiserver: each step waited for as an event
//! (the phase), never a sleep; a step that must not come yet is an hour away.

use std::time::Duration;

use crate::sim::apiserver::{FakeApiserver, Phase, Plan};
use crate::testing::Cluster;

/// Never reached in a test: the step after it must not have happened.
const HOUR: Duration = Duration::from_secs(3600);
/// A step a test waits for.
const SHORT: Duration = Duration::from_millis(20);

/// Waits (at most a minute, however loaded the machine) until the fake's phase is `phase`.
async fn wait_phase(fake: &FakeApiserver, phase: Phase) {
    let mut phases = fake.control.shutdown_phase();
    tokio::time::timeout(Duration::from_secs(60), phases.wait_for(|p| *p == phase))
        .await
        .expect("the phase in time")
        .expect("the fake is alive");
}

/// The `[-]` lines of a body.
fn failed_lines(body: &str) -> Vec<&str> {
    body.lines().filter(|l| l.starts_with("[-]")).collect()
}

#[tokio::test]
async fn a_draining_apiserver_fails_only_its_shutdown_check() {
    let cluster = Cluster::new("drain");
    let fake = cluster.fake("a");
    fake.begin_shutdown(HOUR, HOUR);
    assert_eq!(*fake.control.shutdown_phase().borrow(), Phase::Draining);
    // A connection made after the start: still accepted.
    let mut conn = cluster.connect(fake.addr).await.expect("still accepting");
    let (status, body) = conn.get("/readyz").await.expect("answered");
    assert_eq!(status, 500);
    assert_eq!(failed_lines(&body), ["[-]shutdown failed: reason withheld"]);
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    let served = conn.get("/version").await.expect("answered");
    assert_eq!(served.0, 200, "everything else is still served");
    let excluded = conn
        .get("/readyz?exclude=shutdown")
        .await
        .expect("answered");
    assert_eq!(excluded, (200, "ok".to_string()));
    let livez = conn.get("/livez").await.expect("answered");
    assert_eq!(livez, (200, "ok".to_string()), "not a liveness failure");
}

#[tokio::test]
async fn after_the_delay_new_dials_are_refused_while_open_connections_are_served() {
    let cluster = Cluster::new("unlisten");
    let fake = cluster.fake("a");
    let mut kept = cluster.connect(fake.addr).await.expect("connect");
    fake.begin_shutdown(SHORT, HOUR);
    wait_phase(&fake, Phase::Unlistened).await;
    let dial = tokio::net::TcpStream::connect(fake.addr).await;
    assert_eq!(
        dial.map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused)
    );
    let (status, body) = kept.get("/readyz").await.expect("still served");
    assert_eq!(
        (status, failed_lines(&body)),
        (500, vec!["[-]shutdown failed: reason withheld"])
    );
}

#[tokio::test]
async fn after_the_grace_open_connections_are_closed() {
    let cluster = Cluster::new("close");
    let fake = cluster.fake("a");
    let mut kept = cluster.connect(fake.addr).await.expect("connect");
    assert_eq!(kept.get("/readyz").await.expect("answered").0, 200);
    fake.begin_shutdown(SHORT, SHORT);
    wait_phase(&fake, Phase::Closed).await;
    // The connection's task ends at its next turn: asked until it has.
    let closed = async {
        while kept.get("/readyz").await.is_ok() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), closed)
        .await
        .expect("the connection is closed");
}

#[tokio::test]
async fn a_graceful_shutdown_runs_to_its_end() {
    let cluster = Cluster::new("end");
    let fake = cluster.fake("a");
    tokio::time::timeout(
        Duration::from_secs(60),
        fake.shut_down(Plan {
            delay: SHORT,
            grace: SHORT,
            send_retry_after: false,
        }),
    )
    .await
    .expect("the shutdown ends");
    assert_eq!(*fake.control.shutdown_phase().borrow(), Phase::Closed);
    assert!(cluster.connect(fake.addr).await.is_err(), "refused");
}

#[tokio::test]
async fn a_second_shutdown_does_not_restart_the_first() {
    let cluster = Cluster::new("twice");
    let fake = cluster.fake("a");
    fake.begin_shutdown(SHORT, HOUR);
    wait_phase(&fake, Phase::Unlistened).await;
    fake.begin_shutdown(HOUR, HOUR);
    assert_eq!(*fake.control.shutdown_phase().borrow(), Phase::Unlistened);
}

#[tokio::test]
async fn with_send_retry_after_new_requests_get_429_until_those_in_flight_drain() {
    let cluster = Cluster::new("retry-after");
    let fake = cluster.fake("a");
    // A request in flight (`/slow`, held 2 s) that the shutdown must wait for.
    let mut slow = cluster.connect(fake.addr).await.expect("connect");
    let in_flight = tokio::spawn(async move { slow.get("/slow").await });
    let mut flight = fake.control.in_flight.subscribe();
    tokio::time::timeout(Duration::from_secs(60), flight.wait_for(|n| *n == 1))
        .await
        .expect("the slow request in flight in time")
        .expect("alive");
    fake.begin_shutdown_as(Plan {
        delay: SHORT,
        grace: HOUR,
        send_retry_after: true,
    });
    wait_phase(&fake, Phase::Rejecting).await;
    let mut conn = cluster.connect(fake.addr).await.expect("still listening");
    let (status, headers, body) = conn.get_with_headers("/version").await.expect("answered");
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"5"[..])
    );
    assert_eq!(
        headers.get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    // The health endpoints are exempt (`isRequestExemptFromRetryAfter`).
    let mut conn = cluster.connect(fake.addr).await.expect("still listening");
    let (status, body) = conn.get("/readyz").await.expect("answered");
    assert_eq!(
        (status, failed_lines(&body)),
        (500, vec!["[-]shutdown failed: reason withheld"])
    );
    // Once the slow request is answered the listener closes.
    let answered = in_flight
        .await
        .expect("task")
        .expect("the slow request is answered");
    assert_eq!(answered.0, 200);
    wait_phase(&fake, Phase::Unlistened).await;
}
