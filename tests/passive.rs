//! Passive health and failing open without stranding anyone: failed client dials count as failed
//! checks, a connection goes on to the not-ready backends before it is given up, and failing open
//! prefers backends that answer.

use readyprism::verdict::State::{Ready, Unready};

use crate::support::*;

#[tokio::test]
async fn refused_client_dials_turn_a_ready_backend_unready_like_failed_probes() {
    let lab = Lab::new();
    // Probes only at start-up: whatever changes now, the client dials find it.
    let (local, _remote, app) = lab.local_and_remote(SLOW_PROBES).await;
    let proxy = app.listen_addrs()[0];
    // New connections are refused while the kept-alive probe connection still answers.
    local.close_listener();
    for _ in 0..2 {
        assert_eq!(landed(proxy).await, "remote", "the retry saves each client");
    }
    let doc = wait_states(&app, &[Unready, Ready]).await;
    assert_eq!(
        doc.backends[0].last_error.as_deref(),
        Some("dial: connection refused")
    );
    assert!(!doc.backends[0].answering);
    // Unready now: new connections no longer pay a dial to it.
    for _ in 0..3 {
        assert_eq!(landed(proxy).await, "remote");
    }
    assert_eq!(
        dial_failures(&app, &addr(&local)),
        2,
        "fall = 2, then no more"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn failing_open_a_connection_whose_ready_candidates_all_fail_goes_on_to_the_others() {
    let lab = Lab::new();
    for (policy, relayed) in [("fail_open", true), ("refuse", false)] {
        let ready = lab.fake("ready").await;
        let unready = lab.fake("unready").await;
        unready.control.set_ready(false);
        let extra = format!("{SLOW_PROBES}when_none_ready: {policy}\n");
        let app = lab
            .start(&lab.yaml(
                "dc-a",
                &[(addr(&ready), "dc-a"), (addr(&unready), "dc-b")],
                &extra,
            ))
            .await;
        wait_states(&app, &[Ready, Unready]).await;
        ready.close_listener(); // still ready: its probe connection lives
        let got = raw(app.listen_addrs()[0]).await.map(|(_, name)| name);
        if relayed {
            assert_eq!(
                got.as_deref(),
                Some("unready"),
                "{policy}: no client-visible failure"
            );
        } else {
            assert_eq!(got, None, "{policy}: closed");
        }
        app.shutdown().await;
    }
}

#[tokio::test]
async fn failing_open_prefers_answering_backends_closing_connections_to_silent_ones() {
    let lab = Lab::new();
    let local = lab.fake("local").await;
    local.control.set_ready(false);
    let remote = lab.fake("remote").await;
    remote.control.set_ready(false);
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&local), "dc-a"), (addr(&remote), "dc-b")],
            "",
        ))
        .await;
    let doc = wait_states(&app, &[Unready, Unready]).await;
    assert!(doc.backends.iter().all(|b| b.answering), "500s are answers");
    let (mut on_local, name) = raw(app.listen_addrs()[0]).await.expect("failed open");
    assert_eq!(name, "local", "both answer: zone order");

    // The local apiserver stops answering at all (its /readyz outlasts the probe timeout).
    local
        .control
        .set_readyz_delay(std::time::Duration::from_secs(5));
    let doc = wait_until(&app, "local silent", |d| !d.backends[0].answering).await;
    assert!(doc.backends[1].answering, "{doc:?}");
    assert!(
        read_to_end(&mut on_local).await.is_empty(),
        "closed so it re-dials one that answers"
    );
    for _ in 0..3 {
        assert_eq!(landed(app.listen_addrs()[0]).await, "remote");
    }
    app.shutdown().await;
}
