//! Health checking: timeouts, hysteresis, reasons, connection reuse, client certificates.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use readyprism::admin::status::CertStatus;
use readyprism::sim::apiserver::{Behaviour, FakeApiserver};
use readyprism::verdict::State::{Ready, Unready};

use crate::support::*;

/// The client certificate (DER) the fake saw in its latest handshake.
fn presented(a: &FakeApiserver) -> Option<Vec<u8>> {
    a.control.last_client_cert.load().as_deref().cloned()
}

/// Waits until the balancer's probes present `cert` to `a`.
async fn wait_presented(a: &FakeApiserver, what: &str, cert: &[u8]) {
    poll(what, || presented(a).as_deref() == Some(cert)).await;
}

#[tokio::test]
async fn backend_that_accepts_tcp_but_never_answers_tls_is_unready_by_timeout_with_no_clients() {
    let lab = Lab::new();
    let hung = lab.fake("hung").await;
    hung.control.set_mode(Behaviour::Hang);
    let tls_only = lab.fake("tls-only").await;
    tls_only.control.set_mode(Behaviour::HangHttp);
    let good = lab.fake("good").await;
    good.control.set_readyz_delay(Duration::from_millis(30));
    let app = lab
        .start(&lab.yaml("dc-a", &[(addr(&hung), "dc-a"), (addr(&good), "dc-b")], ""))
        .await;
    let snap = wait_states(&app, &[Unready, Ready]).await;
    assert_eq!(
        snap.backends[0].last_error.as_deref(),
        Some("timeout after 800ms")
    );
    for _ in 0..5 {
        assert_eq!(landed(app.listen_addrs()[0]).await, "good");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn failure_reasons_name_the_cause() {
    let lab = Lab::new();
    let (_held, refused) = refusing_addr();
    let reset = lab.fake("reset").await;
    reset.control.set_mode(Behaviour::Reset);
    // A server whose certificate comes from another CA.
    let other = readyprism::sim::pki::Ca::new("other-ca").expect("ca");
    let other_server = other.server(&["127.0.0.1"]).expect("cert");
    let tls = readyprism::sim::apiserver::server_tls(&other, &other_server).expect("tls");
    let stranger = readyprism::testing::fake_serving("stranger", tls);
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(refused, "a"), (addr(&reset), "b"), (addr(&stranger), "c")],
            "",
        ))
        .await;
    let snap = wait_states(&app, &[Unready, Unready, Unready]).await;
    let reasons: Vec<String> = snap
        .backends
        .iter()
        .map(|b| b.last_error.clone().unwrap_or_default())
        .collect();
    assert_eq!(reasons[0], "dial: connection refused");
    assert!(reasons[1].starts_with("TLS: "), "{reasons:?}");
    assert_eq!(reasons[2], "TLS: unknown issuer");
    app.shutdown().await;
}

#[tokio::test]
async fn a_single_probe_result_never_flips_the_state() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    // fall: 2 and rise: 2 (defaults).
    let app = lab
        .start(&lab.yaml("dc-a", &[(addr(&a), "dc-a")], ""))
        .await;
    wait_states(&app, &[Ready]).await;
    let hits = || a.control.readyz_hits.load(SeqCst);

    // One failure: stays ready, and the failure is visible as the last error.
    a.control.fail_next(1);
    let before = hits();
    wait_until(&app, "the failure is recorded", |s| {
        s.backends[0].last_error.is_some()
    })
    .await;
    poll("a pass after the failure", || hits() >= before + 3).await;
    assert_eq!(app.status().backends[0].state, Ready);
    assert_eq!(
        state_changes(&app, &addr(&a), "unready"),
        0,
        "never flipped"
    );

    // Failing for good: unready.
    a.control.set_ready(false);
    wait_states(&app, &[Unready]).await;

    // One pass: stays unready.
    let before = hits();
    a.control.pass_next(1);
    poll("the pass and a failure after it", || hits() >= before + 3).await;
    assert_eq!(app.status().backends[0].state, Unready);
    assert_eq!(
        state_changes(&app, &addr(&a), "ready"),
        1,
        "only the start-up transition"
    );

    // Two passes: ready.
    a.control.pass_next(2);
    wait_states(&app, &[Ready]).await;
    app.shutdown().await;
}

#[tokio::test]
async fn probe_connection_is_kept_alive_between_probes() {
    let lab = Lab::new();
    let (a, app) = lab.one_ready("").await;
    poll("several probes", || a.control.readyz_hits.load(SeqCst) >= 5).await;
    assert_eq!(
        a.control.handshakes.load(SeqCst),
        1,
        "steady state costs no TLS handshake"
    );
    // A failure drops the connection; the next probe dials afresh.
    a.control.fail_next(1);
    let before = a.control.readyz_hits.load(SeqCst);
    poll("probes after the failure", || {
        a.control.readyz_hits.load(SeqCst) >= before + 3
    })
    .await;
    assert_eq!(a.control.handshakes.load(SeqCst), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn a_healthy_probe_connection_is_redialled_after_five_minutes() {
    // Five minutes pass on the runtime's clock in two jumps (4 min, then 2 min); each jump brings
    // the next probe forward. A kept connection proves nothing about new ones, so at 6 minutes
    // old it is replaced: at most 12 handshakes per backend-hour.
    let lab = Lab::new();
    let (a, app) = lab.one_ready(SLOW_PROBES).await;
    assert_eq!(a.control.handshakes.load(SeqCst), 1);
    for (jump, handshakes) in [(240, 1), (120, 2)] {
        let hits = a.control.readyz_hits.load(SeqCst);
        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(jump)).await;
        tokio::time::resume();
        poll("the next probe", || {
            a.control.readyz_hits.load(SeqCst) > hits
        })
        .await;
        assert_eq!(
            a.control.handshakes.load(SeqCst),
            handshakes,
            "after {jump} s more"
        );
    }
    assert_eq!(app.status().backends[0].state, Ready);
    app.shutdown().await;
}

#[tokio::test]
async fn probes_present_the_client_cert_from_when_it_appears_through_its_rotation() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    let cert_path = lab.path("kubelet-client-current.pem");
    std::fs::remove_file(&cert_path).expect("remove cert");
    let app = lab
        .start(&lab.yaml("dc-a", &[(addr(&a), "dc-a")], ""))
        .await;
    wait_states(&app, &[Ready]).await;
    assert!(presented(&a).is_none(), "anonymous probe");
    assert_eq!(app.status().client_cert, CertStatus::Absent);

    // Kubelet finishes its TLS bootstrap: the certificate appears.
    std::fs::write(&cert_path, lab.cluster.client.combined_pem()).expect("write cert");
    let first = lab.cluster.client.cert_der.clone();
    wait_presented(&a, "probe presents the new cert", first.as_slice()).await;
    assert_eq!(app.status().client_cert, CertStatus::Loaded);

    // Kubelet rotates it: a new file swapped in by rename, as kubelet does with its symlink.
    let rotated = lab.cluster.ca.client("test-node").expect("cert");
    let tmp = lab.path("kubelet-client-new.pem");
    std::fs::write(&tmp, rotated.combined_pem()).expect("write");
    std::fs::rename(&tmp, &cert_path).expect("rename");
    wait_presented(
        &a,
        "probe presents the rotated cert",
        rotated.cert_der.as_slice(),
    )
    .await;
    app.shutdown().await;
}

#[tokio::test]
async fn a_new_ca_file_is_picked_up_without_reload() {
    let lab = Lab::new();
    let other = readyprism::sim::pki::Ca::new("rotated-cluster-ca").expect("ca");
    let server = other.server(&["127.0.0.1"]).expect("cert");
    // Served with a certificate from the new CA; still accepts kubelet certs from the old one.
    let tls = readyprism::sim::apiserver::server_tls(&lab.cluster.ca, &server).expect("tls");
    let a = readyprism::testing::fake_serving("a", tls);
    let app = lab.alone_behind_balancer(&a, "").await;
    let snap = wait_states(&app, &[Unready]).await;
    assert_eq!(
        snap.backends[0].last_error.as_deref(),
        Some("TLS: unknown issuer")
    );
    // The operator installs the new CA bundle (old + new), no SIGHUP.
    std::fs::write(
        lab.path("ca.crt"),
        format!("{}{}", lab.cluster.ca.cert_pem, other.cert_pem),
    )
    .expect("write ca");
    wait_states(&app, &[Ready]).await;
    app.shutdown().await;
}

#[tokio::test]
async fn an_apiserver_rejecting_our_client_certificate_says_so() {
    let lab = Lab::new();
    // Trusts only another CA for clients: our kubelet certificate is refused after the handshake.
    let other = readyprism::sim::pki::Ca::new("other-client-ca").expect("ca");
    let server = lab.cluster.ca.server(&["127.0.0.1"]).expect("cert");
    let strict = readyprism::sim::apiserver::strict_server_tls(&other, &server).expect("tls");
    let a = readyprism::testing::fake_serving("a", strict);
    let app = lab.alone_behind_balancer(&a, "").await;
    let snap = wait_states(&app, &[Unready]).await;
    let reason = snap.backends[0].last_error.clone().unwrap_or_default();
    assert_eq!(
        reason,
        "the apiserver refused our client certificate: unknown ca"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_redirecting_readyz_fails_naming_the_redirect() {
    let lab = Lab::new();
    let redirecting = lab.fake("redirecting").await;
    redirecting
        .control
        .readyz_answer
        .store(Some(std::sync::Arc::new((
            302,
            "see /elsewhere".to_string(),
        ))));
    let app = lab.alone_behind_balancer(&redirecting, "").await;
    let snap = wait_states(&app, &[Unready]).await;
    assert_eq!(
        snap.backends[0].last_error.as_deref(),
        Some("HTTP 302: see /elsewhere")
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_huge_readyz_answer_is_read_only_up_to_a_bound() {
    let lab = Lab::new();
    let huge = lab.fake("huge").await;
    huge.control
        .readyz_answer
        .store(Some(std::sync::Arc::new((200, "x".repeat(4 << 20)))));
    let app = lab.alone_behind_balancer(&huge, "").await;
    wait_states(&app, &[Ready]).await;
    // A body past the bound is not read to the end: that connection is dropped, the next probe redials.
    poll("a few probes", || {
        huge.control.readyz_hits.load(SeqCst) >= 3
    })
    .await;
    assert!(huge.control.handshakes.load(SeqCst) >= 2);
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_certificate_that_disappears_stays_in_use_until_a_valid_one_appears() {
    let lab = Lab::new();
    let (a, app) = lab.one_ready("").await;
    let expiry = || {
        metric(
            &app.metrics_text(),
            "readyprism_client_cert_expiry_timestamp_seconds",
            "",
        )
    };
    let before = expiry().expect("expiry exported");
    let cert_path = lab.path("kubelet-client-current.pem");
    std::fs::remove_file(&cert_path).expect("remove cert");
    // Let the watcher see the removal (it checks every second), then make the probe redial.
    let hits = a.control.readyz_hits.load(SeqCst);
    poll("probes go on", || {
        a.control.readyz_hits.load(SeqCst) >= hits + 3
    })
    .await;
    a.control.fail_next(1); // drops the probe connection: the next one is a fresh handshake
    let handshakes = a.control.handshakes.load(SeqCst);
    poll("a fresh probe connection", || {
        a.control.handshakes.load(SeqCst) > handshakes
            && a.control.readyz_hits.load(SeqCst) > hits + 4
    })
    .await;
    assert_eq!(
        presented(&a).as_deref(),
        Some(lab.cluster.client.cert_der.as_slice()),
        "still presents the certificate it had"
    );
    assert_eq!(app.status().client_cert, CertStatus::Loaded);
    assert_eq!(expiry(), Some(before), "and still exports its expiry");
    // A valid one appears: it is used.
    let rotated = lab.cluster.ca.client("test-node").expect("cert");
    std::fs::write(&cert_path, rotated.combined_pem()).expect("write");
    wait_presented(
        &a,
        "probe presents the new cert",
        rotated.cert_der.as_slice(),
    )
    .await;
    app.shutdown().await;
}
