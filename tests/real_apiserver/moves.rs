//! What client-go does when readyprism moves its connection: the kubelet's lease client (its lease
//! controller, one informer's watch and a GET a second, all on one HTTP/2 connection) through
//! readyprism in front of two real kube-apiservers, the local one (zone dc-a, where the connection
//! goes) restarted gracefully. Counted from the client's own record: requests that failed, new
//! connections (re-dials), lists after the first (re-lists), and when the first request succeeded
//! on a new connection (moved-by); beside readyprism's closes by reason. Figures in
//! `target/real-apiserver/moves.json` and `docs/real-parts.md`.

use std::time::Duration;

use tokio::time::Instant;

use super::kube::{KubeApiserver, Launch};
use super::peers::{lease_command, ok_requests, Logged};
use super::{write_record, Rig, ONE_AT_A_TIME};
use crate::support::real::real_bin;
use crate::support::{metric, unready_closes};

/// What the client showed after the restart began.
#[derive(Debug)]
struct Seen {
    failed: usize,
    redials: usize,
    relists: usize,
    moved_after: Option<f64>,
}

fn figures(lines: &[serde_json::Value], term: f64) -> Seen {
    let after: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["start"].as_f64().is_some_and(|s| s >= term))
        .collect();
    let before_locals: Vec<&str> = lines
        .iter()
        .filter(|l| l["start"].as_f64().is_some_and(|s| s < term))
        .filter_map(|l| l["local"].as_str())
        .collect();
    let failed = after
        .iter()
        .filter(|l| {
            l.get("error").is_some() || l["status"].as_u64().is_some_and(|s| s >= 500 || s == 429)
        })
        .count();
    let mut new_locals: Vec<&str> = after
        .iter()
        .filter_map(|l| l["local"].as_str())
        .filter(|a| !a.is_empty() && !before_locals.contains(a))
        .collect();
    new_locals.sort_unstable();
    new_locals.dedup();
    let relists = after
        .iter()
        .filter(|l| l["client"] == "main" && l["method"] == "GET" && l["path"] == "/api/v1/nodes")
        .count();
    let moved_after = after
        .iter()
        .find(|l| {
            l["status"]
                .as_u64()
                .is_some_and(|s| (200..300).contains(&s))
                && l["local"]
                    .as_str()
                    .is_some_and(|a| !before_locals.contains(&a))
        })
        .and_then(|l| Some(l["start"].as_f64()? + l["seconds"].as_f64()? - term));
    Seen {
        failed,
        redials: new_locals.len(),
        relists,
        moved_after,
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_through_readyprism_when_its_apiserver_restarts() {
    let _one = ONE_AT_A_TIME.lock().await;
    let what = "client-go through readyprism across an apiserver restart";
    let Some(rig) = Rig::new(what, 5) else {
        return;
    };
    let Some(lease) = real_bin("lease-client", "lease-client", what) else {
        return;
    };
    let variants: [(&str, &[&str]); 2] = [
        ("no shutdown delay (Talos's default)", &[]),
        (
            "--shutdown-delay-duration=10s",
            &["--shutdown-delay-duration=10s"],
        ),
    ];
    let mut record = Vec::new();
    for (i, (name, flags)) in variants.into_iter().enumerate() {
        let dir = rig.dir.path();
        let start = |tag: &str, addr, member: usize, extra: &[&str]| {
            let etcd_url = rig.etcd.url(member);
            let launch = Launch {
                dir,
                tag,
                files: &rig.files,
                addr,
                etcd_url: &etcd_url,
                extra,
            };
            KubeApiserver::start(&rig.apiserver_bin, &launch)
        };
        let mut local = start(&format!("moves-{i}-local"), rig.real_addr, 0, flags);
        let mut far = start(&format!("moves-{i}-far"), rig.second_addr, 1, flags);
        for (addr, k) in [(rig.real_addr, &mut local), (rig.second_addr, &mut far)] {
            let settled = rig
                .settle(addr, Duration::from_secs(10), Duration::from_secs(240), k)
                .await;
            settled.unwrap_or_else(|e| panic!("{e}; its log:\n{}", k.tail(30)));
        }
        let backends = [(rig.real_addr, "dc-a"), (rig.second_addr, "dc-b")];
        let app = rig.balancer(&backends, "").await;
        let mut cmd = lease_command(&rig, &lease, app.listen_addrs()[0], "test-node");
        cmd.args(["--get-interval", "1s"]);
        let client = Logged::spawn(cmd, &dir.join(format!("lease-client-moves-{i}.log")));
        // Steady: three renewals, all through the local apiserver.
        let wait_for = |n: usize, what: &str, limit: Duration| {
            let (client, what) = (&client, what.to_string());
            async move {
                let start = Instant::now();
                while ok_requests(&client.lines(), "lease").len() < n {
                    assert!(start.elapsed() < limit, "{what}: {:?}", client.lines());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        wait_for(
            3,
            "three renewals before the restart",
            Duration::from_secs(60),
        )
        .await;
        let term = now();
        local.term();
        let renewed = ok_requests(&client.lines(), "lease").len();
        // The client's lease renewed five more times, with the local apiserver gone or going.
        wait_for(
            renewed + 5,
            "five renewals after the restart began",
            Duration::from_secs(90),
        )
        .await;
        let _ = tokio::task::block_in_place(|| local.wait_exit(Duration::from_secs(90)));
        let seen = figures(&client.lines(), term);
        let local_addr = rig.real_addr.to_string();
        let closes: Vec<(&str, u64)> = [
            "turned_unready",
            "left_none_ready",
            "refusing",
            "silent",
            "handoff",
        ]
        .into_iter()
        .map(|r| (r, unready_closes(&app, &local_addr, Some(r))))
        .filter(|(_, n)| *n > 0)
        .collect();
        let handoffs = closes
            .iter()
            .find(|(r, _)| *r == "handoff")
            .map_or(0, |(_, n)| *n);
        // What readyprism learned of the apiserver's shutdown: a window with the delay, a close
        // without one (counted, WARN) with none. Its next probe tells, at most an interval away.
        let learned = || {
            let window = app.status().backends[0].shutdown_window_s;
            let text = app.metrics_text();
            let labels = format!("backend=\"{local_addr}\"");
            let without = metric(
                &text,
                "readyprism_backend_closed_without_shutdown_window_total",
                &labels,
            );
            (window, without.unwrap_or(0.0))
        };
        let asked = Instant::now();
        while learned().0.is_none()
            && learned().1 < 1.0
            && asked.elapsed() < Duration::from_secs(15)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (window, without) = learned();
        eprintln!("{name}: client {seen:?}; readyprism closes {closes:?}; learned window {window:?}, closes without one {without}");
        record.push(serde_json::json!({
            "variant": name, "failed_requests": seen.failed, "redials": seen.redials,
            "relists": seen.relists, "moved_after_s": seen.moved_after,
            "learned_window_s": window, "closed_without_window": without,
            "readyprism_closes": closes.iter().map(|(r, n)| serde_json::json!({"reason": r, "n": n})).collect::<Vec<_>>(),
        }));
        assert!(
            seen.redials >= 1,
            "{name}: the client never re-dialled: {seen:?}"
        );
        assert!(
            seen.moved_after.is_some(),
            "{name}: no request succeeded on a new connection: {seen:?}"
        );
        if flags.is_empty() {
            assert_eq!(
                (window, without),
                (None, 1.0),
                "{name}: a close without a shutdown window, counted once"
            );
        } else {
            assert!(
                window.is_some_and(|w| w > 0.0),
                "{name}: no shutdown window learned ({without} closes without one)"
            );
        }
        if !flags.is_empty() {
            // With a shutdown window readyprism hands the connection off inside it, at a quiet
            // moment: the client loses nothing.
            assert_eq!(
                seen.failed, 0,
                "{name}: requests failed across a hand-off: {seen:?}"
            );
            assert!(
                handoffs >= 1,
                "{name}: readyprism did not hand the connection off: {closes:?}"
            );
        }
        drop(client);
        app.shutdown().await;
        drop(far);
    }
    write_record("moves", &serde_json::Value::Array(record));
}
