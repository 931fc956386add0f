//! Dead paths and SYN black holes on the real binary, in a network namespace of the test's own
//! with iptables: a backend that stops acknowledging is cut by TCP's user timeout and counted as
//! a failed check, and a black-holed backend gets exactly the planned SYNs (3 per dial, none
//! from the kernel) and at most one per second from probes. Namespaces need root, `ip`,
//! `iptables` and `python3` (the client inside the namespace); without them these tests say why
//! they are skipped, unless `READYPRISM_REQUIRE_NETNS=1`, which makes that a failure.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

use crate::support::netns::{self, Netns};
use crate::support::process::Proc;
use crate::support::*;

/// The backends' addresses, on the namespace's `lo`.
const DEAD: &str = "10.88.0.2";
const GOOD: &str = "10.88.0.3";
const PORT: u16 = 6443;
/// The balancer's default `dead_path_timeout`.
const USER_TIMEOUT: Duration = Duration::from_secs(10);

/// The test's node: a namespace with [`DEAD`] and [`GOOD`] on `lo`, checked for `iptables` and
/// `python3`.
struct Node {
    ns: Netns,
}

impl Node {
    fn make() -> Result<Netns, String> {
        let ns = Netns::new("rpd")?.on_lo(&[&format!("{DEAD}/32"), &format!("{GOOD}/32")])?;
        ns.run("iptables", &["-L", "INPUT", "-n"])?;
        ns.run("python3", &["-c", "pass"])?;
        Ok(ns)
    }

    /// Starts `readyprism sim-apiserver` named `name` on `ip:PORT` with the lab's CA.
    fn apiserver(&mut self, lab: &Lab, name: &str, ip: &str) {
        let cert = lab.cluster.ca.server(&[DEAD, GOOD]).expect("server cert");
        let (crt, key) = (
            lab.write(&format!("{name}.crt"), &cert.cert_pem),
            lab.write(&format!("{name}.key"), &cert.key_pem),
        );
        let ca = lab.path("ca.crt").display().to_string();
        let listen = format!("{ip}:{PORT}");
        let child = self
            .ns
            .command(env!("CARGO_BIN_EXE_readyprism"))
            .args(["sim-apiserver", "--name", name, "--listen", &listen])
            .args(["--cert", &crt, "--key", &key, "--client-ca", &ca])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sim-apiserver");
        self.ns.children.push(child);
        let up = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)";
        rt_poll("the apiserver listens", || {
            self.ns
                .run("python3", &["-c", up, ip, &PORT.to_string()])
                .is_ok()
        });
    }

    /// The balancer's `/metrics`, fetched inside the namespace.
    fn metrics(&self, p: &Proc) -> String {
        let url = format!("http://{}/metrics", p.admin);
        let get = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())";
        self.ns.run("python3", &["-c", get, &url]).expect("metrics")
    }

    /// Packets counted by the INPUT rule commented `tag`.
    fn counted(&self, tag: &str) -> u64 {
        let table = self
            .ns
            .run("iptables", &["-L", "INPUT", "-n", "-v", "-x"])
            .expect("iptables -L");
        iptables::packets(&table, tag).unwrap_or_else(|| panic!("no rule {tag}: {table}"))
    }
}

/// The node, or `None` after saying why the test is skipped.
fn node(test: &str) -> Option<Node> {
    netns::or_skip(test, Node::make()).map(|ns| Node { ns })
}

/// The balancer in the namespace, in zone dc-a, in front of `backends` (`(ip, zone)`), with
/// `health`.
fn balancer(lab: &Lab, node: &Node, backends: &[(&str, &str)], health: &str) -> Proc {
    Proc::start_under(&node.ns.exec(), &configure(lab, backends, health))
}

/// Writes the balancer's config (as [`balancer`] takes it); returns its path.
fn configure(lab: &Lab, backends: &[(&str, &str)], health: &str) -> std::path::PathBuf {
    let list: String = backends
        .iter()
        .map(|(ip, zone)| format!("  - {{ address: \"{ip}:{PORT}\", zone: {zone} }}\n"))
        .collect();
    let yaml = lab
        .yaml("dc-a", &[], health)
        .replace("backends:\n", &format!("backends:\n{list}"));
    let file = lab.path("readyprism.yaml");
    std::fs::write(&file, yaml).expect("write");
    file
}

fn became(p: &Proc, ip: &str, to: &'static str) -> serde_json::Value {
    let backend = format!("{ip}:{PORT}");
    p.wait_log("backend state changed", move |v| {
        v["fields"]["backend"] == backend.as_str() && v["fields"]["to"] == to
    })
}

fn records(p: &Proc) -> Vec<serde_json::Value> {
    p.logs()
        .into_iter()
        .filter(|v| v["fields"]["message"] == "connection ended")
        .collect()
}

/// A client in the namespace: one raw connection through the balancer; prints the greeting,
/// then on a line on stdin sends `argv[3]` bytes and waits for the connection's end (at most
/// `argv[2]` seconds in all).
const HOLD: &str = r#"
import json, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"RAW\n")
print(json.dumps({"name": s.makefile("rb").readline().decode().strip()}), flush=True)
sys.stdin.readline()
start = time.monotonic()
s.settimeout(float(sys.argv[2]))
error = None
try:
    s.sendall(b"x" * int(sys.argv[3]))
    while s.recv(65536):
        pass
except OSError as e:
    error = str(e)
print(json.dumps({"closed_after": time.monotonic() - start, "error": error}), flush=True)
"#;

/// A dead path cut by TCP: a balancer in front of one backend (probed at start-up only, fall 1,
/// and `extra` config; reloaded with `reload` config instead once ready, if given), a client whose
/// connection's path dies both ways once it is relayed, then sends `bytes`. Returns the balancer
/// and how long after its send the client was cut.
fn cut_dead_path(
    node: &mut Node,
    lab: &Lab,
    (extra, reload): (&str, Option<&str>),
    bound: Duration,
    bytes: usize,
) -> (Proc, f64) {
    node.apiserver(lab, "dead", DEAD);
    // Probes only at start-up, fall 1: whatever turns it unready now is the dead path.
    let health = "health: { interval: 60s, timeout: 2s, fast_interval: 1s, fall: 1 }\n";
    let p = balancer(lab, node, &[(DEAD, "dc-a")], &format!("{health}{extra}"));
    became(&p, DEAD, "ready");
    if let Some(reload) = reload {
        configure(lab, &[(DEAD, "dc-a")], &format!("{health}{reload}"));
        p.signal("HUP");
        p.wait_log("config reloaded", |_| true);
    }
    let bound = bound.as_secs_f64();
    let mut client = node
        .ns
        .command("python3")
        .args(["-c", HOLD, &p.listen.port().to_string(), &bound.to_string()])
        .arg(bytes.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut out = BufReader::new(client.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("greeting");
    assert!(line.contains("\"dead\""), "relayed: {line}");
    // The path dies both ways: nothing from or to the backend arrives any more.
    for rule in [["-d", DEAD, "--dport"], ["-s", DEAD, "--sport"]] {
        let port = PORT.to_string();
        let args = [
            "-I", "INPUT", "-p", "tcp", rule[0], rule[1], rule[2], &port, "-j", "DROP",
        ];
        node.ns.run("iptables", &args).expect("iptables");
    }
    let mut stdin = client.stdin.take().expect("stdin");
    writeln!(stdin, "go").expect("go");
    line.clear();
    out.read_line(&mut line).expect("the connection's end");
    let _ = client.wait();
    let end: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    let took = end["closed_after"].as_f64().expect("closed_after");
    eprintln!("dead path: client cut after {took:.2} s ({end})");
    assert!(took < bound, "cut within the user timeout: {took} s");
    (p, took)
}

#[test]
fn a_backend_that_stops_acknowledging_is_cut_by_tcp_as_a_failed_check() {
    let test = "a_backend_that_stops_acknowledging_is_cut_by_tcp_as_a_failed_check";
    let Some(mut node) = node(test) else {
        return;
    };
    let lab = Lab::new();
    let (p, _) = cut_dead_path(&mut node, &lab, ("", None), USER_TIMEOUT + patience(), 1000);
    let record = p.wait_log("connection ended", |v| v["fields"]["reason"] == "dead_path");
    assert_eq!(record["fields"]["ended_by"], "balancer", "{record}");
    let error = record["fields"]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("backend: "), "{record}");
    let change = became(&p, DEAD, "unready");
    assert_eq!(
        change["fields"]["reason"],
        "relay: data to the backend unacknowledged for 10s (dead_path_timeout, TCP user timeout)",
        "a failed check from the dead path: {change}"
    );
    let labels = format!("backend=\"{DEAD}:{PORT}\",reason=\"dead_path\"");
    let text = node.metrics(&p);
    assert_eq!(
        metric(&text, "readyprism_connections_closed_total", &labels),
        Some(1.0)
    );
}

/// `dead_path_timeout: 3s` from the start; and the same set by a reload (from `0s`: none).
const CUT_IN_3S: (&str, Option<&str>) = ("dead_path_timeout: 3s\n", None);
const RELOADED_TO_3S: (&str, Option<&str>) =
    ("dead_path_timeout: 0s\n", Some("dead_path_timeout: 3s\n"));

#[test]
fn a_dead_path_is_cut_after_the_configured_dead_path_timeout() {
    let test = "a_dead_path_is_cut_after_the_configured_dead_path_timeout";
    let Some(mut node) = node(test) else {
        return;
    };
    let lab = Lab::new();
    let set = Duration::from_secs(3);
    let (p, took) = cut_dead_path(&mut node, &lab, CUT_IN_3S, USER_TIMEOUT, 1000);
    // Not before the timeout (the kernel's timer starts at the relay's send, after the client's),
    // and well before the 10 s default: 3 s plus scheduling, however loaded the machine.
    assert!(
        took >= set.as_secs_f64() - 0.5
            && took < (USER_TIMEOUT - Duration::from_secs(2)).as_secs_f64(),
        "cut after about {set:?}, not the 10 s default: {took:.2} s"
    );
    let change = became(&p, DEAD, "unready");
    assert_eq!(
        change["fields"]["reason"],
        "relay: data to the backend unacknowledged for 3s (dead_path_timeout, TCP user timeout)",
        "{change}"
    );
}

#[test]
fn a_dead_path_whose_writes_are_stuck_is_still_a_dead_path() {
    let test = "a_dead_path_whose_writes_are_stuck_is_still_a_dead_path";
    let Some(mut node) = node(test) else {
        return;
    };
    let lab = Lab::new();
    // 8 MiB: every buffer on the way fills, the balancer's write to the backend is stuck, and
    // its leg is sampled (retransmitting: unacknowledged) before TCP gives up.
    let (p, _) = cut_dead_path(&mut node, &lab, CUT_IN_3S, USER_TIMEOUT, 8 << 20);
    let record = p.wait_log("connection ended", |_| true);
    assert_eq!(record["fields"]["reason"], "dead_path", "{record}");
    assert!(
        record["fields"]["to_backend_bytes"].as_u64() < Some(8 << 20),
        "the write was stuck: {record}"
    );
    became(&p, DEAD, "unready");
}

#[test]
fn a_reloaded_dead_path_timeout_applies_to_new_backend_legs() {
    let test = "a_reloaded_dead_path_timeout_applies_to_new_backend_legs";
    let Some(mut node) = node(test) else {
        return;
    };
    let lab = Lab::new();
    // Started with it off (the kernel would hold the dead leg for minutes), reloaded to 3 s
    // before the client connects: its leg is cut in about 3 s.
    let (p, took) = cut_dead_path(&mut node, &lab, RELOADED_TO_3S, USER_TIMEOUT, 1000);
    assert!(
        took < (USER_TIMEOUT - Duration::from_secs(2)).as_secs_f64(),
        "cut after about 3 s: {took:.2} s"
    );
    let record = p.wait_log("connection ended", |_| true);
    assert_eq!(record["fields"]["reason"], "dead_path", "{record}");
}

/// A client in the namespace: `argv[2]` raw connections through the balancer, one after another,
/// each printing the greeting of the backend it reached.
const DIALS: &str = r#"
import json, socket, sys
for _ in range(int(sys.argv[2])):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
    s.sendall(b"RAW\n")
    print(json.dumps({"name": s.makefile("rb").readline().decode().strip()}), flush=True)
    s.close()
"#;

#[test]
fn a_syn_black_hole_gets_three_syns_per_dial_with_probes_at_most_one_a_second() {
    let test = "a_syn_black_hole_gets_three_syns_per_dial_with_probes_at_most_one_a_second";
    let Some(mut node) = node(test) else {
        return;
    };
    let lab = Lab::new();
    node.apiserver(&lab, "holed", DEAD);
    node.apiserver(&lab, "good", GOOD);
    // The defaults: probe every 5 s, timeout 3 s, fast_interval 1 s, fall 2.
    let health = "health: { interval: 5s, timeout: 3s, fast_interval: 1s }\n";
    let p = balancer(&lab, &node, &[(DEAD, "dc-a"), (GOOD, "dc-b")], health);
    became(&p, DEAD, "ready");
    became(&p, GOOD, "ready");
    // SYNs to the local backend vanish; its kept probe connection lives on.
    let syns = "rp-syn-black-hole";
    let mut rule: Vec<String> = vec!["-I".into(), "INPUT".into()];
    rule.extend(iptables::syns_to(DEAD, PORT, syns));
    rule.extend(["-j".into(), "DROP".into()]);
    let rule: Vec<&str> = rule.iter().map(String::as_str).collect();
    node.ns.run("iptables", &rule).expect("iptables");
    let started = std::time::Instant::now();
    let names = node
        .ns
        .run("python3", &["-c", DIALS, &p.listen.port().to_string(), "3"])
        .expect("client");
    assert_eq!(
        names.matches("\"good\"").count(),
        3,
        "every client saved: {names}"
    );
    became(&p, DEAD, "unready");
    rt_poll("three records", || records(&p).len() == 3);
    // Each client dial to the black hole sent exactly 3 SYNs, then went on to the good backend.
    let mut client_dials = 0;
    for r in records(&p) {
        let (dials, attempts) = (
            r["fields"]["dials"].as_u64(),
            r["fields"]["attempts"].as_u64(),
        );
        if dials == Some(2) {
            assert_eq!(attempts, Some(3 + 1), "{r}");
            client_dials += 1;
        } else {
            assert_eq!((dials, attempts), (Some(1), Some(1)), "{r}");
        }
    }
    assert!(client_dials >= 1, "the first client dialed the black hole");

    // Probes dial afresh (the failed client dial dropped the kept connection) into the hole: let
    // three fail, reading the counters as the third does (the next is seconds away).
    let backend = format!("backend=\"{DEAD}:{PORT}\"");
    let fails = |text: &str| failed_checks(text, &backend) as u64;
    let mut text = node.metrics(&p);
    let probes = loop {
        let (n, syn_count) = (fails(&text), node.counted(syns));
        if n >= 3 {
            break (n, syn_count);
        }
        assert!(
            started.elapsed() < patience() * 3,
            "three failed probes: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text = node.metrics(&p);
    };
    let (probe_dials, syn_count) = probes;
    let elapsed = started.elapsed().as_secs_f64();
    let probe_syns = syn_count - 3 * client_dials;
    eprintln!(
        "black hole: {syn_count} SYNs in {elapsed:.1} s: {client_dials} client dials x 3, \
         {probe_dials} probe dials = {probe_syns} SYNs, {:.2} probe SYNs/s",
        probe_syns as f64 / elapsed
    );
    assert_eq!(
        syn_count,
        3 * (client_dials + probe_dials),
        "every dial sent exactly its 3 attempts, the kernel no retransmission"
    );
    let reattempts = metric(&text, "readyprism_dial_reattempts_total", &backend);
    assert_eq!(reattempts, Some((2 * (client_dials + probe_dials)) as f64));
    assert!(
        probe_syns as f64 <= elapsed,
        "at most one probe SYN per second: {probe_syns} in {elapsed:.1} s"
    );
}

/// Polls `cond` every 20 ms until it holds, for at most [`patience`].
fn rt_poll(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + patience();
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
