//! Each apiserver's shutdown window, learned from its probes (its first `[-]shutdown` answer to
//! its first refused dial), shown in `/status` and `/metrics`, and fitted into: a later hand-off to
//! that apiserver spreads its closes over 0.7 of it when that is shorter than `handoff_window`. An
//! apiserver that closes its listener right after passing its checks gave no window: counted, and
//! a WARN naming `--shutdown-delay-duration`.

use std::sync::Arc;

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State;
use tokio::net::TcpListener;

use crate::support::*;

/// kube-apiserver's `/readyz` while it shuts down gracefully.
const SHUTTING_DOWN: &str =
    "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n";

fn drain(fake: &FakeApiserver) {
    let answer = (500, SHUTTING_DOWN.to_string());
    fake.control.readyz_answer.store(Some(Arc::new(answer)));
}

/// A fake named `name` on a listener of the test's own at `port` (0: any), so a later one can
/// take the same address, as a restarted apiserver does.
async fn fake_at(lab: &Lab, name: &str, port: u16) -> FakeApiserver {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    lab.cluster.fake_on(name, listener)
}

#[tokio::test]
async fn a_learned_shutdown_window_shortens_the_next_hand_off_to_that_apiserver() {
    let lab = Lab::new();
    let a = fake_at(&lab, "a", 0).await;
    let b = lab.fake("b").await;
    let port = a.addr.port();
    // A hand-off window no test waits out: only the learned window can make the closes come.
    let yaml = lab.yaml(
        "dc-a",
        &[(addr(&a), "dc-a"), (addr(&b), "dc-b")],
        // Not paced when `a` is back (pacing: `tests/reentry.rs`).
        "handoff_window: 10m\nreentry_window: 0s\n",
    );
    let app = lab.start(&yaml).await;
    wait_states(&app, &[State::Ready, State::Ready]).await;

    // A graceful restart: `[-]shutdown` answers, then the listener closes.
    drain(&a);
    wait_states(&app, &[State::Unready, State::Ready]).await;
    a.close_listener();
    a.stop().await;
    drop(a);
    let learned = wait_until(&app, "a learned shutdown window", |s| {
        s.backends[0].shutdown_window_s.is_some()
    })
    .await;
    let window = learned.backends[0].shutdown_window_s.expect("learned");
    let text = app.metrics_text();
    let gauge = metric(
        &text,
        "readyprism_backend_shutdown_window_seconds",
        &format!("backend=\"127.0.0.1:{port}\""),
    );
    assert!(
        gauge.is_some_and(|g| (g - window).abs() < 0.1),
        "gauge {gauge:?}, status {window}"
    );

    // The apiserver is back at the same address and takes a connection; then it drains again.
    let a = fake_at(&lab, "a", port).await;
    wait_states(&app, &[State::Ready, State::Ready]).await;
    // Four connections: the closes are spread over the window (the first at its start), so with
    // the setting's 10 minutes the others would wait minutes.
    let mut on_a = Vec::new();
    for _ in 0..4 {
        let (c, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
        assert_eq!(name, "a", "zone order");
        on_a.push(c);
    }
    drain(&a);
    // Every one closed within 0.7 of the learned window, not the 10 minutes of the setting.
    for c in &mut on_a {
        let _ = read_to_end(c).await;
        assert!(!echoes(c).await, "a connection is still open");
    }
    let handoffs = unready_closes(&app, &addr(&a), Some("handoff"));
    assert_eq!(handoffs, 4, "closed as hand-offs");
    let closed = metric(
        &app.metrics_text(),
        "readyprism_backend_closed_without_shutdown_window_total",
        &format!("backend=\"127.0.0.1:{port}\""),
    );
    assert_eq!(closed, Some(0.0), "it had a window");
}

#[tokio::test]
async fn an_apiserver_that_stops_listening_right_after_passing_gave_no_window() {
    let lab = Lab::new();
    let a = fake_at(&lab, "a", 0).await;
    let b = lab.fake("b").await;
    let id = addr(&a);
    let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], "");
    let app = lab.start(&yaml).await;
    wait_states(&app, &[State::Ready, State::Ready]).await;
    // `--shutdown-delay-duration` 0: the listener closes before any probe saw `[-]shutdown`.
    a.close_listener();
    a.stop().await;
    let counted = || {
        metric(
            &app.metrics_text(),
            "readyprism_backend_closed_without_shutdown_window_total",
            &format!("backend=\"{id}\""),
        )
    };
    poll("a close without a window counted", || {
        counted() == Some(1.0)
    })
    .await;
    let status = app.status();
    assert_eq!(
        status.backends[0].shutdown_window_s, None,
        "nothing learned"
    );
}
