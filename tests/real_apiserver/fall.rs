//! The balancer in front of a real kube-apiserver whose etcd member loses quorum: how long until
//! the backend is unready, and what the operator reads (the failing checks, or a timeout). A real
//! apiserver answers such a `/readyz` after about 4 s (two 2 s etcd checks one after another),
//! over the default 3 s probe timeout; `docs/behaviour.md` ("Slow /readyz on quorum loss") holds
//! the decision and the figures of a by-hand run of these cycles for three probe settings.
//!
//! `READYPRISM_REAL_FALL_CYCLES` (default 1) cycles per setting; `READYPRISM_REAL_FALL_ALL=1`
//! runs every setting, not only the default.

use std::time::Duration;

use readyprism::app::App;
use readyprism::verdict::State;
use tokio::time::Instant;

use super::{write_record, Rig, ONE_AT_A_TIME};

/// The settings compared: the defaults; a timeout over the real answer time; the `etcd` check
/// excluded (its twin `etcd-readiness` still reads etcd), which halves the answer time.
const SETTINGS: [(&str, &str); 3] = [
    ("default (timeout 3s)", ""),
    ("timeout 4.5s", "timeout: 4500ms"),
    (
        "path /readyz?exclude=etcd",
        "path: \"/readyz?exclude=etcd\"",
    ),
];

/// Waits (at most `limit`) until the one backend's state is `state`; the status row then.
async fn wait_state(
    app: &App,
    state: State,
    limit: Duration,
) -> readyprism::admin::status::BackendStatus {
    let start = Instant::now();
    loop {
        let row = app.status().backends[0].clone();
        if row.state == state {
            return row;
        }
        assert!(
            start.elapsed() < limit,
            "not {state:?} within {limit:?}: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balancer_finds_a_real_apiserver_without_quorum_unready() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(rig) = Rig::new(
        "the balancer in front of a real apiserver without quorum",
        3,
    ) else {
        return;
    };
    let cycles: usize = std::env::var("READYPRISM_REAL_FALL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let all = std::env::var("READYPRISM_REAL_FALL_ALL").as_deref() == Ok("1");
    let (_real, _sim) = rig.pair("fall", &[], &[]).await;
    let mut record = Vec::new();
    for (name, health) in SETTINGS.iter().take(if all { SETTINGS.len() } else { 1 }) {
        let app = rig
            .balancer(
                &[(rig.real_addr, "dc-a")],
                &format!("health: {{ {health} }}\n"),
            )
            .await;
        let mut falls = Vec::new();
        for cycle in 0..cycles {
            // A different point of the 5 s probe cycle each time.
            tokio::time::sleep(Duration::from_millis(1000 + 1700 * cycle as u64 % 5000)).await;
            let lost = Instant::now();
            rig.etcd.stop(&[1, 2]);
            let row = wait_state(&app, State::Unready, Duration::from_secs(40)).await;
            let after = lost.elapsed().as_secs_f64();
            rig.etcd.resume(&[1, 2]);
            eprintln!(
                "{name}: unready {after:.2} s after quorum was lost; last error {:?}, failing {:?}",
                row.last_error, row.failing_checks
            );
            falls.push(serde_json::json!({"unready_after_s": after, "last_error": row.last_error, "failing_checks": row.failing_checks}));
            wait_state(&app, State::Ready, Duration::from_secs(60)).await;
            // The default: a real apiserver's answer comes after the probe gave up.
            if health.is_empty() {
                let said = row.last_error.clone().unwrap_or_default();
                assert!(
                    said.contains("timeout") || !row.failing_checks.is_empty(),
                    "unready for no stated reason: {row:?}"
                );
            }
        }
        record.push(serde_json::json!({"setting": name, "falls": falls}));
        app.shutdown().await;
    }
    write_record("fall", &serde_json::Value::Array(record));
}
