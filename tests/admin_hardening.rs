//! The admin port and `readyprism status` against hostile input, on the app run from its config file: a backend
//! whose `/readyz` body drives terminals, an endpoint that sends absurd or oversized answers, and a
//! local process that floods the admin port with stalled connections.
#![allow(clippy::disallowed_types)] // OS threads and child processes, not tokio's clock

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::admin::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};

use crate::support::Running;
use crate::support::*;

/// `readyprism status --admin ADDR [EXTRA]`: exit code, stdout as bytes, stderr.
fn status(admin: &str, extra: &[&str]) -> (i32, Vec<u8>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(["status", "--admin", admin])
        .args(extra)
        .output()
        .expect("run status");
    let err = stderr(&o);
    (o.status.code().unwrap_or(-1), o.stdout, err)
}

/// What a terminal would act on: C0 controls other than a newline, DEL, C1 controls.
fn terminal_controls(out: &[u8]) -> Vec<char> {
    String::from_utf8_lossy(out)
        .chars()
        .filter(|&c| c.is_control() && c != '\n')
        .collect()
}

/// An endpoint ([`readyprism::testing::answers`]) with a 200 JSON answer, as text.
fn canned_json(body: &str) -> String {
    readyprism::testing::answers(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
    .to_string()
}

#[test]
fn status_shows_a_hostile_readyz_body_as_visible_escapes() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "hostile-body.yaml", "");
    // Sets the terminal title, clears the screen, then a CSI as one C1 character.
    let body = "\x1b]0;owned\x07\x1b[2J\u{9b}31m[-]etcd failed\x7f";
    a.control
        .readyz_answer
        .store(Some(Arc::new((500, body.to_string()))));
    let p = Running::start(&file);
    rt.block_on(poll("the hostile body is the last error", || {
        let (_, doc) = blocking_get(p.admin, "/status");
        doc.contains("owned")
    }));
    let (code, out, err) = status(&p.admin.to_string(), &[]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        terminal_controls(&out),
        Vec::<char>::new(),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.contains("HTTP 500: \\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m[-]etcd failed\\x7f"),
        "{out}"
    );
    // The JSON view says the same, as JSON escapes.
    let (_, json, _) = status(&p.admin.to_string(), &["--json"]);
    assert_eq!(
        terminal_controls(&json),
        Vec::<char>::new(),
        "{:?}",
        String::from_utf8_lossy(&json)
    );
    let doc: serde_json::Value = serde_json::from_slice(&json).expect("--json is JSON");
    assert_eq!(
        doc["backends"][0]["last_error"],
        "HTTP 500: \\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m[-]etcd failed\\x7f",
        "kept as visible escapes from the probe on"
    );
}

#[test]
fn status_never_prints_a_negative_zero_latency() {
    let doc = serde_json::json!({
        "zone": "dc-a", "ready": true, "mode": "normal", "shutting_down": false,
        "client_cert": "loaded", "generation": 1,
        "backends": [{
            "address": "10.0.1.10:6443", "zone": "dc-a", "state": "ready", "latency_ms": -0.0,
            "last_error": null, "answering": true, "active_connections": 0, "rank": 0,
        }],
    });
    let admin = canned_json(&doc.to_string());
    let (code, out, err) = status(&admin, &[]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains(" 0.00ms") && !out.contains("-0.00ms"), "{out}");
}

#[test]
fn status_cuts_absurd_cells_from_whatever_answers_on_the_admin_address() {
    let address = "a".repeat(300);
    let doc = serde_json::json!({
        "zone": "dc-\u{9b}2J", "ready": true, "mode": "normal", "shutting_down": false,
        "client_cert": "loaded", "generation": 1,
        "backends": [{
            "address": address, "zone": "dc-a\u{7f}", "state": "ready", "latency_ms": 1e308,
            "last_error": "\x1b[2J".repeat(2000), "answering": true, "active_connections": 1,
            "rank": 0,
        }],
    });
    let admin = canned_json(&doc.to_string());
    let (code, out, err) = status(&admin, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        terminal_controls(&out),
        Vec::<char>::new(),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    let out = String::from_utf8_lossy(&out).to_string();
    // docs/admin.md's guarantee: a cell is at most 80 characters (the last error 220).
    assert!(out.contains(&format!("{}… ", "a".repeat(79))), "{out}");
    assert!(
        out.contains(">100s") && !out.contains("0000000000"),
        "{out}"
    );
    assert!(out.lines().all(|l| l.chars().count() < 600), "{out}");
    assert!(
        out.contains("dc-\\u{9b}2J") && out.contains("dc-a\\x7f"),
        "{out}"
    );

    let (_, json, _) = status(&admin, &["--json"]);
    assert_eq!(
        terminal_controls(&json),
        Vec::<char>::new(),
        "{:?}",
        String::from_utf8_lossy(&json)
    );
    let back: serde_json::Value = serde_json::from_slice(&json).expect("--json is JSON");
    assert_eq!(back, doc, "the same document, escaped");
}

#[test]
fn status_is_not_ready_when_the_document_names_no_ready_backend() {
    let doc = serde_json::json!({
        "zone": null, "ready": true, "mode": "normal", "shutting_down": false,
        "client_cert": "none", "generation": 1, "backends": [],
    });
    let (code, out, err) = status(&canned_json(&doc.to_string()), &[]);
    assert_eq!(code, 1, "nothing to route to: {err}");
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.contains("ready NO") && out.contains("(no backends configured)"),
        "{out}"
    );
}

#[test]
fn status_says_when_the_endpoint_answered_but_not_with_http_or_with_too_much() {
    let big = {
        let mut r = b"HTTP/1.1 200 OK\r\ncontent-length: 2097152\r\n\r\n".to_vec();
        r.resize(r.len() + (2 << 20), b' ');
        r
    };
    let admin = readyprism::testing::answers(big).to_string();
    let (code, _, err) = status(&admin, &[]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim(),
        format!("readyprism status: admin endpoint {admin} answered with more than 1 MiB")
    );

    let admin = readyprism::testing::answers(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()).to_string();
    let (code, _, err) = status(&admin, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with(&format!(
            "readyprism status: admin endpoint {admin} did not answer HTTP: "
        )),
        "{err}"
    );
}

#[test]
fn the_admin_405_names_the_methods_it_serves() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "allow.yaml", "");
    let p = Running::start(&file);
    let mut s = TcpStream::connect(p.admin).expect("connect");
    s.write_all(b"POST /livez HTTP/1.0\r\nHost: x\r\ncontent-length: 0\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("answer");
    let answer = answer.to_ascii_lowercase();
    assert!(answer.starts_with("http/1.0 405"), "{answer}");
    assert!(answer.contains("\r\nallow: get, head\r\n"), "{answer}");
}

/// A local process holding `n` admin connections that each sent half a request head, reopening
/// every one that is closed, until dropped.
struct Flood {
    stop: Arc<AtomicBool>,
    /// Connections opened so far, reopenings included.
    opened: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(admin: SocketAddr, n: usize) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, opened) = (stop.clone(), opened.clone());
            move || {
                let mut held: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
                while !stop.load(Ordering::Relaxed) {
                    for slot in held.iter_mut() {
                        let open = match slot {
                            Some(s) => matches!(
                                s.read(&mut [0u8; 64]),
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
                            ),
                            None => false,
                        };
                        if !open {
                            *slot = stalled(admin);
                            opened.fetch_add(u64::from(slot.is_some()), Ordering::Relaxed);
                        }
                    }
                    // Pacing, not waiting for anything: a sweep per 2 ms keeps a core for the rest.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        Flood {
            stop,
            opened,
            thread: Some(thread),
        }
    }

    fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A connection that sent half a request head and no more (non-blocking from then on).
fn stalled(admin: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_millis(200)).ok()?;
    s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n").ok()?;
    s.set_nonblocking(true).ok()?;
    Some(s)
}

#[test]
fn stalled_admin_connections_reopened_forever_cannot_starve_livez_or_readyz() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "flood.yaml", "");
    let p = Running::start(&file);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    let began = Instant::now();
    let flood = Flood::start(p.admin, 2 * MAX_CONNECTIONS);
    rt.block_on(poll("the flood fills the cap and keeps reopening", || {
        flood.opened() > 2 * MAX_CONNECTIONS as u64
    }));
    // Every probe is answered at its first try, with the flood reopening all the while.
    for round in 0..5 {
        for (path, want) in [("/livez", "ok\n"), ("/readyz", "ok\n")] {
            let answer = blocking_get(p.admin, path);
            assert_eq!(answer, (200, want.to_string()), "{path}, round {round}");
        }
    }
    // ... long before a stalled head could time out and free a slot: the newcomers were let in
    // by shedding, not by the head timeout.
    let took = began.elapsed();
    assert!(
        took < HEADER_READ_TIMEOUT / 2,
        "{took:?}: the answers may have waited for the {HEADER_READ_TIMEOUT:?} head timeout"
    );
    let opened_during = flood.opened();
    drop(flood);
    assert!(
        opened_during > 2 * MAX_CONNECTIONS as u64,
        "the flood kept reopening"
    );
    // A newcomer let in while the cap is held by stalled connections sheds one, and counts it:
    // more than twice the cap were opened and none ends by itself this soon.
    let (_, text) = blocking_get(p.admin, "/metrics");
    let shed = metric(&text, "readyprism_admin_connections_shed_total", "").unwrap_or(0.0);
    assert!(
        shed >= MAX_CONNECTIONS as f64,
        "shed {shed} of {opened_during} opened over a cap of {MAX_CONNECTIONS}"
    );
}
