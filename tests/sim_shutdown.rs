//! `readyprism sim-apiserver`'s graceful shutdown on SIGTERM (`--shutdown-delay`,
//! `--shutdown-grace`), the interface the partition lab drives: `/readyz` fails only `shutdown`
//! while everything is still served, then the listener closes, then the process exits 0.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;

/// A running `readyprism sim-apiserver` with its JSON log lines collected; killed when dropped.
struct Sim {
    child: Child,
    lines: Arc<Mutex<Vec<serde_json::Value>>>,
    addr: SocketAddr,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sim {
    /// Starts one on 127.0.0.1:0 with the lab's CA and `extra` flags; waits until it listens.
    fn start(lab: &Lab, extra: &[&str]) -> Sim {
        let server = lab.cluster.ca.server(&["127.0.0.1"]).expect("cert");
        let cert = lab.write("server.crt", &server.cert_pem);
        let key = lab.write("server.key", &server.key_pem);
        let ca = lab.path("ca.crt").display().to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_readyprism"))
            .args(["--log-format", "json", "sim-apiserver", "--name", "site-a"])
            .args(["--listen", "127.0.0.1:0"])
            .args(["--cert", &cert, "--key", &key, "--client-ca", &ca])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sim-apiserver");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    sink.lock().expect("lines").push(v);
                }
            }
        });
        let mut sim = Sim {
            child,
            lines,
            addr: "0.0.0.0:0".parse().expect("addr"),
        };
        let listening = sim.wait_log("simulated apiserver listening");
        sim.addr = listening["fields"]["listen"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("the address it listens on");
        sim
    }

    /// Waits for the first log line with `message`; returns it.
    fn wait_log(&self, message: &str) -> serde_json::Value {
        let deadline = Instant::now() + patience();
        loop {
            let found = self
                .lines
                .lock()
                .expect("lines")
                .iter()
                .find(|v| v["fields"]["message"] == message)
                .cloned();
            if let Some(v) = found {
                return v;
            }
            assert!(Instant::now() < deadline, "no log {message:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log messages so far, in order.
    fn messages(&self) -> Vec<String> {
        let lines = self.lines.lock().expect("lines");
        lines
            .iter()
            .filter_map(|v| v["fields"]["message"].as_str().map(str::to_string))
            .collect()
    }

    fn term(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -TERM");
    }

    /// Waits (at most `limit`) for the exit.
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(start.elapsed() < limit, "did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// GETs `path` on a new connection to `addr`: status and body.
fn get(lab: &Lab, addr: SocketAddr, path: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut conn = lab.cluster.connect(addr).await.expect("connect");
        conn.get(path).await.expect("answered")
    })
}

#[test]
fn on_sigterm_the_sim_apiserver_fails_only_its_shutdown_check_while_serving() {
    let lab = Lab::new();
    let mut sim = Sim::start(
        &lab,
        &["--shutdown-delay", "10m", "--shutdown-grace", "10m"],
    );
    assert_eq!(get(&lab, sim.addr, "/readyz"), (200, "ok".to_string()));
    sim.term();
    sim.wait_log("graceful shutdown: /readyz fails the shutdown check");
    let (status, body) = get(&lab, sim.addr, "/readyz");
    assert_eq!(status, 500, "{body}");
    let failed: Vec<&str> = body.lines().filter(|l| l.starts_with("[-]")).collect();
    assert_eq!(failed, ["[-]shutdown failed: reason withheld"]);
    assert_eq!(
        get(&lab, sim.addr, "/name"),
        (200, "site-a".to_string()),
        "still served"
    );
    // A second signal ends the drain at once.
    sim.term();
    assert!(sim.wait_exit(patience()).success());
}

#[test]
fn after_sigterm_the_sim_apiserver_exits_zero_once_its_shutdown_window_has_passed() {
    let lab = Lab::new();
    let mut sim = Sim::start(&lab, &["--shutdown-delay", "1s", "--shutdown-grace", "1s"]);
    let sent = Instant::now();
    sim.term();
    assert!(sim.wait_exit(patience() + Duration::from_secs(2)).success());
    // A lower bound only: timers never fire early, however loaded the machine.
    assert!(
        sent.elapsed() >= Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    let messages = sim.messages();
    let at = |m: &str| {
        messages
            .iter()
            .position(|x| x == m)
            .unwrap_or_else(|| panic!("{m:?} in {messages:?}"))
    };
    assert!(
        at("graceful shutdown: /readyz fails the shutdown check")
            < at("graceful shutdown: the listener is closed"),
        "{messages:?}"
    );
}
