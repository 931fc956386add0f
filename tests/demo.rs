//! `readyprism demo` on the real binary: its run to the end, the plain lines it prints to a pipe,
//! `--print-config` (a config `check` accepts), and the hint when its port is taken.

use std::process::Command;

use crate::support::*;

/// Runs `readyprism demo --duration DURATION` on ports 0 to its end; its stdout, once it exited 0.
fn run_demo(duration: &str) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(["demo", "--duration", duration])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .output()
        .expect("run demo");
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn demo_with_a_duration_exits_zero_when_it_ends() {
    let out = run_demo("3s");
    assert!(
        out.contains("dc-a") && out.contains("dc-b") && out.contains("witness"),
        "{out}"
    );
    assert!(out.contains("demo over"), "{out}");
}

/// The demo's fourth apiserver, `new-cp`, joins the simulated cluster's Endpoints object at 10 s;
/// discovery adds it, and once dc-a loses quorum again (12 s) the demo's clients land on it.
#[test]
fn demo_shows_a_fourth_apiserver_joining_through_discovery_to_take_traffic() {
    let out = run_demo("22s");
    let summary = out
        .lines()
        .find(|l| l.starts_with("demo over"))
        .unwrap_or_else(|| panic!("no summary: {out}"));
    assert!(
        summary.contains("new-cp"),
        "no connection landed on the joined apiserver: {summary}"
    );
    assert!(
        out.contains("new-cp ready"),
        "the view shows the joined apiserver, ready: {out}"
    );
}

#[test]
fn demo_piped_prints_one_short_plain_line_a_second_naming_the_apiservers() {
    let out = run_demo("3s");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with("demo over"))
        .collect();
    assert!(!lines.is_empty(), "{out}");
    for line in &lines {
        assert!(line.starts_with('['), "one line per refresh: {line:?}");
        assert!(line.chars().count() <= 100, "short: {line:?}");
        assert!(line.chars().all(|c| !c.is_control()), "plain: {line:?}");
        assert!(
            !line.contains("127.0.0.1"),
            "names, not addresses: {line:?}"
        );
        for name in ["dc-a", "dc-b", "witness"] {
            assert!(line.contains(name), "{name} in {line:?}");
        }
    }
    assert!(lines[0].contains("dc-a unready"), "{out}");
}

#[test]
fn demo_print_config_is_a_config_that_check_accepts() {
    let o = readyprism(&["demo", "--print-config"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let yaml = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        yaml.starts_with("# The config `readyprism demo` runs"),
        "{yaml}"
    );
    assert!(yaml.contains("simulated apiservers"), "{yaml}");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("demo.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let file = file.display().to_string();
    let check = readyprism(&["check", "--skip-node-files", "--config", &file]);
    assert!(check.status.success(), "{}\n{yaml}", stderr(&check));
}

/// Runs the demo with `flag` on a port another socket holds; its stderr, once it failed.
fn demo_on_taken(flag: &str, other: &str) -> (String, String) {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args([
            "demo",
            "--duration",
            "1s",
            flag,
            &addr,
            other,
            "127.0.0.1:0",
        ])
        .output()
        .expect("run demo");
    assert!(!o.status.success(), "{o:?}");
    (addr, stderr(&o))
}

#[test]
fn demo_on_a_taken_port_suggests_another() {
    for (flag, other) in [("--listen", "--admin"), ("--admin", "--listen")] {
        let (addr, err) = demo_on_taken(flag, other);
        assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
        assert!(
            err.contains(&format!("readyprism demo {flag} 127.0.0.1:0")),
            "{err}"
        );
        assert!(!err.contains("KubePrism"), "not a node's balancer: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
}
