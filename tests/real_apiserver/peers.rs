//! The real clients and the real peer, through the balancers, against a real kube-apiserver: the
//! kubelet's own lease controller (`lease-client`, k8s.io/component-helpers v0.37.2 with the
//! kubelet's transport) registers its Node and renews its lease through readyprism and through
//! Talos's KubePrism (go-loadbalancer v0.5.0 with Talos's options), its watch and its lease
//! requests sharing one HTTP/2 connection as the kubelet's do. This is what the partition lab's
//! stand-ins (`tests/lab/kubelet.py`, HAProxy as KubePrism) are to be replaced with.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Rig, ONE_AT_A_TIME};
use crate::support::real::real_bin;

/// A child whose stdout JSON lines are collected; killed on drop.
pub(super) struct Logged {
    child: Child,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Logged {
    pub(super) fn spawn(mut cmd: Command, log: &Path) -> Logged {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log"))
            .spawn()
            .expect("spawn");
        let out = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    sink.lock().expect("lines").push(v);
                }
            }
        });
        Logged { child, lines }
    }

    pub(super) fn lines(&self) -> Vec<serde_json::Value> {
        self.lines.lock().expect("lines").clone()
    }
}

/// The lease client's requests of `client` (`lease`, `main`) that got a 2xx.
pub(super) fn ok_requests(lines: &[serde_json::Value], client: &str) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter(|l| {
            l["client"] == client
                && l["status"]
                    .as_u64()
                    .is_some_and(|s| (200..300).contains(&s))
        })
        .cloned()
        .collect()
}

/// The lease client's command line against `server` for `node`, with the test CA and the
/// kubelet's certificate (written to the rig's directory); a 4 s lease: a renewal a second.
pub(super) fn lease_command(rig: &Rig, bin: &Path, server: SocketAddr, node: &str) -> Command {
    let dir = rig.dir.path();
    let (cert, key) = (dir.join("node.crt"), dir.join("node.key"));
    std::fs::write(&cert, &rig.cluster.client.cert_pem).expect("cert");
    std::fs::write(&key, &rig.cluster.client.key_pem).expect("key");
    let mut cmd = Command::new(bin);
    cmd.args(["--server", &format!("https://{server}"), "--node", node])
        .args(["--ca", &rig.files.client_ca])
        .arg("--cert")
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .args(["--node-lease-duration-seconds", "4"]);
    cmd
}

/// Runs the lease client against `server` until it has renewed its lease three times; returns
/// its request lines.
async fn renewals(
    rig: &Rig,
    bin: &Path,
    server: SocketAddr,
    node: &str,
    tag: &str,
) -> Vec<serde_json::Value> {
    let dir = rig.dir.path();
    let cmd = lease_command(rig, bin, server, node);
    let client = Logged::spawn(cmd, &dir.join(format!("lease-client-{tag}.log")));
    let start = Instant::now();
    loop {
        let lines = client.lines();
        if ok_requests(&lines, "lease").len() >= 4 {
            return lines;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{tag}: the lease was not renewed three times within 60 s: {lines:?}\nstderr: {}",
            std::fs::read_to_string(dir.join(format!("lease-client-{tag}.log")))
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the lines show: the Node registered, lease requests that succeeded, and every request on
/// one connection (one local address).
fn check_kubelet_like(tag: &str, lines: &[serde_json::Value]) {
    assert!(
        lines.iter().any(|l| l["event"] == "registered"),
        "{tag}: the Node was not registered: {lines:?}"
    );
    let mut locals: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["local"].as_str())
        .filter(|a| !a.is_empty())
        .collect();
    locals.sort_unstable();
    locals.dedup();
    assert_eq!(
        locals.len(),
        1,
        "{tag}: the watch and the lease did not share one connection: {locals:?}"
    );
    assert!(
        !ok_requests(lines, "main").is_empty(),
        "{tag}: no list or watch of the Node succeeded: {lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_lease_client_renews_through_readyprism_and_through_kubeprism() {
    let _one = ONE_AT_A_TIME.lock().await;
    let what = "the kubelet's lease client through readyprism and KubePrism";
    let Some(rig) = Rig::new(what, 4) else {
        return;
    };
    let (Some(lease), Some(kubeprism)) = (
        real_bin("lease-client", "lease-client", what),
        real_bin("kubeprism", "kubeprism", what),
    ) else {
        return;
    };
    let (_real, _sim) = rig.pair("peers", &[], &[]).await;

    // Through readyprism, in front of the real apiserver alone.
    let app = rig.balancer(&[(rig.real_addr, "dc-a")], "").await;
    let listen = app.listen_addrs()[0];
    let lines = renewals(&rig, &lease, listen, "test-node", "readyprism").await;
    check_kubelet_like("through readyprism", &lines);
    app.shutdown().await;

    // Through KubePrism, as Talos runs it, on a port of its own.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("addr").port()
    };
    let mut cmd = Command::new(&kubeprism);
    cmd.args([
        "--port",
        &port.to_string(),
        "--endpoints",
        &rig.real_addr.to_string(),
    ]);
    let prism = Logged::spawn(cmd, &rig.dir.path().join("kubeprism.log"));
    let started = Instant::now();
    while !prism.lines().iter().any(|l| l["event"] == "started") {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "KubePrism did not start: {:?}",
            prism.lines()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let through = SocketAddr::from(([127, 0, 0, 1], port));
    let lines = renewals(&rig, &lease, through, "test-node", "kubeprism").await;
    check_kubelet_like("through KubePrism", &lines);
}
