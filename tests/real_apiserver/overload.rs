//! The request check held to a real kube-apiserver under API Priority and Fairness: the kubelet's
//! identity is given a priority level of its own with no queue (`Reject`) and no borrowing, whose
//! few seats slow `POST`s of the same identity hold. `/readyz` stays green (exempt), the request
//! check's `GET /version` meets the level's `429` with its `Retry-After`, and readyprism (the
//! binary, its check pinned to 1 s) ranks the real apiserver after the simulated one, closes
//! nothing, and ranks it first again once the seats are free. A check on a real apiserver that is
//! not overloaded finds it healthy.

use std::net::SocketAddr;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::{Rig, ONE_AT_A_TIME};
use crate::support::kubectl_available;
use crate::support::process::Proc;

/// How long a step on the real apiserver may take: a new priority level is configured by its
/// controller within seconds, and the machine is loaded.
const STEP: Duration = Duration::from_secs(60);

/// Polls `cond` every 200 ms until it holds; fails naming `what` after [`STEP`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !tokio::task::block_in_place(&mut cond) {
        assert!(Instant::now() < deadline, "not within {STEP:?}: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kubelet certificate's user (`readyprism::testing::Cluster`'s client).
const NODE_USER: &str = "system:node:test-node";

/// A priority level of one nominal share (3 seats of kube-apiserver's default 600), none lent or
/// borrowed, rejecting what finds no seat; and a flow schema putting every request of the node's
/// user in it, matched before `system-nodes` (500).
fn tight_level() -> String {
    format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: readyprism-test-tight}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {{type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: readyprism-test-node}}
spec:
  priorityLevelConfiguration: {{name: readyprism-test-tight}}
  matchingPrecedence: 100
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: User, user: {{name: \"{NODE_USER}\"}}}}]
    resourceRules: [{{verbs: [\"*\"], apiGroups: [\"*\"], resources: [\"*\"], namespaces: [\"*\"], clusterScope: true}}]
    nonResourceRules: [{{verbs: [\"*\"], nonResourceURLs: [\"*\"]}}]
"
    )
}

/// Seats held at once: more than the level's 3, so every seat stays taken.
const HOGS: usize = 8;

/// The hogs give up by then even if the test never stops them (it failed first).
const HOG_LIMIT: Duration = Duration::from_secs(300);

/// Holds seats of the node's priority level until `stop` (at most [`HOG_LIMIT`]): each hog sends, as the node, the head of
/// a `POST` of an Event and then its body one byte a second (the handler reads the body inside the
/// seat), starting over when the apiserver answers (a `429` when no seat was free, a timeout).
fn hog(rig: &Rig, addr: SocketAddr, stop: CancellationToken) {
    let tls = TlsConnector::from(rig.cluster.client_tls());
    let until = Instant::now() + HOG_LIMIT;
    for _ in 0..HOGS {
        let (tls, stop) = (tls.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() && Instant::now() < until {
                let held = async {
                    let tcp = TcpStream::connect(addr).await?;
                    let mut s = tls.connect(ServerName::from(addr.ip()), tcp).await?;
                    let head = format!(
                        "POST /api/v1/namespaces/default/events HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
                    );
                    s.write_all(head.as_bytes()).await?;
                    while Instant::now() < until {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        s.write_all(b" ").await?;
                    }
                    Ok(())
                };
                let r: std::io::Result<()> = tokio::select! {
                    () = stop.cancelled() => Ok(()),
                    r = held => r,
                };
                let _ = r;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_apiserver_whose_priority_level_refuses_the_kubelet_is_ranked_down() {
    let _one = ONE_AT_A_TIME.lock().await;
    let what = "the request check against a real kube-apiserver's priority and fairness";
    if !kubectl_available(what) {
        return;
    }
    let Some(rig) = Rig::new(what, 8) else {
        return;
    };
    let (_real, _sim) = rig.pair("overload", &[], &[]).await;
    let dir = rig.dir.path();
    let pem = dir.join("kubelet.pem");
    std::fs::write(&pem, rig.cluster.client.combined_pem()).expect("kubelet pem");
    let yaml = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\nzone: dc-a\nstatus_file: \"\"\ntls:\n  ca: {}\n  client_cert: {}\nbackends:\n  - {{ address: \"{}\", zone: dc-a }}\n  - {{ address: \"{}\", zone: dc-b }}\n",
        rig.files.client_ca,
        pem.display(),
        rig.real_addr,
        rig.sim_addr
    );
    let config = dir.join("overload.yaml");
    std::fs::write(&config, yaml).expect("config");
    let p = tokio::task::block_in_place(|| {
        Proc::start_with_env(&config, &[("READYPRISM_REQUEST_CHECK_INTERVAL", "1s")])
    });
    let real = rig.real_addr.to_string();
    let healthy = format!("backend=\"{real}\",result=\"healthy\"");
    until("three healthy checks of the real apiserver", || {
        p.metric("readyprism_request_checks_total", &healthy) >= 3.0
    })
    .await;
    let status = tokio::task::block_in_place(|| p.status());
    assert_eq!(status.backends[0].degraded, None, "not overloaded: healthy");
    assert_eq!(status.backends[0].rank, Some(0), "home first");

    // The kubelet's identity in a level of three seats, all held.
    let admin = rig.admin_kubeconfig();
    let applied = tokio::task::block_in_place(|| {
        let file = dir.join("tight-level.yaml");
        std::fs::write(&file, tight_level()).expect("level yaml");
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&admin)
            .args(["apply", "-f"])
            .arg(&file)
            .output()
            .expect("kubectl")
    });
    assert!(
        applied.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let stop = CancellationToken::new();
    let began = Instant::now();
    hog(&rig, rig.real_addr, stop.clone());
    until("the real apiserver degraded by its 429", || {
        p.status().backends[0].degraded.is_some()
    })
    .await;
    let status = tokio::task::block_in_place(|| p.status());
    let why = status.backends[0].degraded.clone().unwrap_or_default();
    eprintln!("degraded {:?} after the hogs began: {why}", began.elapsed());
    assert!(why.starts_with("HTTP 429 Too Many Requests"), "{why}");
    assert_eq!(
        status.backends[0].state,
        readyprism::verdict::State::Ready,
        "/readyz is exempt: still ready"
    );
    assert_eq!(status.backends[1].rank, Some(0), "the healthy one first");
    assert_eq!(status.backends[0].rank, Some(1), "then the degraded one");

    stop.cancel();
    until("healthy again once the seats are free", || {
        p.status().backends[0].degraded.is_none()
    })
    .await;
    let status = tokio::task::block_in_place(|| p.status());
    assert_eq!(status.backends[0].rank, Some(0), "home first again");
}
