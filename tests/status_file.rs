//! The cause of a NotReady node readable without Kubernetes: the status file follows `/status`,
//! `readyprism status --file` renders it, a status file that cannot be written never stops the
//! balancer (nor does a FIFO or a stalled pipe stop `status --file`), an unready backend's
//! changed reason is logged once, and `/config` shows the resolved config. All on the app run from its config file (the binary where a test needs the process).
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use readyprism::admin::StatusDoc;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State;

use crate::support::process::Proc;
use crate::support::unwritable::Unwritable;
use crate::support::*;

fn read_doc(path: &Path) -> Option<StatusDoc> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn status(p: &impl Balancer) -> StatusDoc {
    serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status")
}

/// Polls `f` until it gives a value, within [`patience`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + patience();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the status file at `path` holds a document for which `pred` holds.
fn wait_file(path: &Path, what: &str, pred: impl Fn(&StatusDoc) -> bool) -> StatusDoc {
    wait_for(&format!("the status file shows {what}"), || {
        read_doc(path).filter(&pred)
    })
}

#[test]
fn the_status_file_follows_a_backend_turning_unready() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    std::fs::create_dir(lab.path("state")).expect("mkdir");
    let file = lab.path("state").join("status.json");
    let extra = format!("status_file: {}\n", file.display());
    let (a, config) = lab.fake_and_config(&rt, "node.yaml", &extra);
    let p = Running::start(&config);
    let ready = wait_file(&file, "the backend ready", |d| {
        d.backends.first().is_some_and(|b| b.state == State::Ready)
    });
    let b = &ready.backends[0];
    assert_eq!(b.address, addr(&a));
    assert!(b.since.is_some() && b.last_check.is_some(), "{b:?}");
    let c = ready.config.as_ref().expect("the config's status");
    assert_eq!(c.file.as_deref(), Some(config.to_str().expect("utf-8")));
    assert!(c.last_reload.is_none(), "{c:?}");

    a.control.set_ready(false);
    let unready = wait_file(&file, "the backend unready", |d| {
        d.backends
            .first()
            .is_some_and(|b| b.state == State::Unready)
    });
    let b = &unready.backends[0];
    assert!(b.consecutive_failures >= 1, "{b:?}");
    assert!(
        b.last_error
            .as_deref()
            .is_some_and(|e| e == "readyz 500: etcd, etcd-readiness failed"),
        "{b:?}"
    );
    assert!(b.since >= ready.backends[0].since, "{b:?}");
    // The file says what /status says (the same document, a moment apart).
    let live = status(&p);
    assert_eq!(live.backends[0].state, State::Unready);
    assert_eq!(live.backends[0].last_error, b.last_error);
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(lab.path("state"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["status.json"]);
    drop(p);
}

#[test]
fn status_file_renders_the_admin_ports_table_from_a_path_or_stdin() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let file = lab.path("status.json");
    let extra = format!("status_file: {}\n", file.display());
    let (a, config) = lab.fake_and_config(&rt, "node.yaml", &extra);
    let p = Running::start(&config);
    wait_file(&file, "the backend ready", |d| {
        d.backends.first().is_some_and(|b| b.state == State::Ready)
    });
    let path = file.to_str().expect("utf-8");
    let from_path = readyprism(&["status", "--file", path]);
    assert_eq!(from_path.status.code(), Some(0), "{}", stderr(&from_path));
    let table = String::from_utf8_lossy(&from_path.stdout).to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("node zone dc-a"), "{table}");
    assert!(
        lines[1].starts_with("BACKEND") && lines[1].contains("SINCE"),
        "{table}"
    );
    assert!(
        lines[2].starts_with(&addr(&a)) && lines[2].contains("ready"),
        "{table}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains(&format!("config {}", config.display()))),
        "{table}"
    );
    // The same bytes through stdin (`talosctl read … | readyprism status --file -`).
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(["status", "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let bytes = std::fs::read(&file).expect("read");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&bytes)
        .expect("write");
    let from_stdin = child.wait_with_output().expect("wait");
    assert_eq!(from_stdin.status.code(), Some(0), "{}", stderr(&from_stdin));
    let again = readyprism(&["status", "--file", path]);
    // The file may have been rewritten between the two reads: compare with a read of the
    // same bytes where it matters (the layout), and the rows' first columns.
    let stdin_table = String::from_utf8_lossy(&from_stdin.stdout).to_string();
    assert_eq!(stdin_table.lines().nth(1), lines.get(1).copied());
    assert!(
        stdin_table
            .lines()
            .nth(2)
            .is_some_and(|l| l.starts_with(&addr(&a))),
        "{stdin_table}"
    );
    assert_eq!(again.status.code(), Some(0));
    // Not a status file: exit 2 and why.
    let junk = lab.write("junk.json", "{\"ready\": true}");
    let bad = readyprism(&["status", "--file", &junk]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("not a readyprism status file"),
        "{}",
        stderr(&bad)
    );
    drop(p);
}

/// Waits for `child` to exit within `bound`; kills it and fails saying `what` blocked if not.
fn exited_within(child: &mut std::process::Child, bound: Duration, what: &str) -> Option<i32> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`readyprism status --file` from {what} still blocked after {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn status_file_from_a_fifo_or_a_stalled_pipe_gives_up_saying_so() {
    use rustix::fs::{FileType, Mode, CWD};
    let lab = Lab::new();
    let fifo = lab.path("status.fifo");
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).expect("mkfifo");
    let status_file = |file: &Path, stdin: Stdio| {
        std::process::Command::new(env!("CARGO_BIN_EXE_readyprism"))
            .args(["status", "--file"])
            .arg(file)
            .stdin(stdin)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    // Nobody opens the FIFO to write; the pipe's writer holds it open and writes nothing.
    let mut from_fifo = status_file(&fifo, Stdio::null());
    let mut from_pipe = status_file(Path::new("-"), Stdio::piped());
    let _silent_writer = from_pipe.stdin.take().expect("stdin");
    let bound = readyprism::cli::status::FILE_TIMEOUT + patience();
    for (what, child) in [
        ("a FIFO", &mut from_fifo),
        ("a stalled pipe", &mut from_pipe),
    ] {
        let code = exited_within(child, bound, what);
        let mut said = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut said)
            .expect("stderr");
        assert_eq!(code, Some(2), "{what}: {said}");
        assert!(
            said.contains("cannot read the status file: it did not end within 10s"),
            "{what}: {said}"
        );
        assert_eq!(said.trim().lines().count(), 1, "{what}: one line: {said}");
    }
}

/// The balancer that may not write its status `file`: one WARN naming the file, and it serves
/// and probes on, several probes later still with that one WARN.
fn runs_on_with_one_warn(p: &impl Balancer, file: &Path) {
    let warned = p.wait_log(
        "the status file cannot be written; the balancer runs on without it",
        |_| true,
    );
    assert_eq!(warned["level"], "WARN");
    let error = warned["fields"]["error"].as_str().expect("error");
    assert!(
        error.starts_with(&format!("{}:", file.display())),
        "{error}"
    );
    let first = wait_for("the backend ready", || {
        Some(status(p)).filter(|s| s.backends[0].state == State::Ready)
    });
    assert_eq!(blocking_get(p.admin, "/readyz").0, 200);
    let probed = |s: &StatusDoc| s.backends[0].last_check.clone();
    let seen = probed(&first);
    wait_for("a new probe", || (probed(&status(p)) != seen).then_some(()));
    let warns = p
        .logs()
        .into_iter()
        .filter(|v| {
            v["fields"]["message"]
                == "the status file cannot be written; the balancer runs on without it"
        })
        .count();
    assert_eq!(warns, 1, "one WARN over several probes");
}

#[test]
fn an_unwritable_status_directory_is_one_warn_while_the_service_runs_on() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let dir = lab.path("not-yet");
    let file = dir.join("status.json");
    let extra = format!("status_file: {}\n", file.display());
    let (_a, config) = lab.fake_and_config(&rt, "node.yaml", &extra);
    let p = Running::start(&config);
    runs_on_with_one_warn(&p, &file);
    // Once the directory exists, the file is written (retried within a second or so).
    std::fs::create_dir(&dir).expect("mkdir");
    wait_file(&file, "the backend ready", |d| {
        d.backends.first().is_some_and(|b| b.state == State::Ready)
    });
    p.wait_log("the status file is written again", |_| true);
    drop(p);
}

/// The directory exists but may not be written (SELinux enforcing denies the Talos extension's
/// label `/var/lib`, docs/admin.md): one WARN naming the file, the balancer serves on, and the
/// file is written once the directory may be written again.
#[test]
fn a_read_only_status_directory_is_one_warn_while_the_service_runs_on() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let dir = lab.path("read-only");
    std::fs::create_dir(&dir).expect("mkdir");
    let file = dir.join("status.json");
    let read_only = Unwritable::new(&dir);
    let extra = format!("status_file: {}\n", file.display());
    let (_a, config) = lab.fake_and_config(&rt, "node.yaml", &extra);
    let p = Running::start(&config);
    runs_on_with_one_warn(&p, &file);
    assert!(!file.exists(), "nothing written into a read-only directory");
    drop(read_only);
    wait_file(&file, "the backend ready", |d| {
        d.backends.first().is_some_and(|b| b.state == State::Ready)
    });
    drop(p);
}

#[test]
fn an_unready_backend_failing_for_another_reason_is_logged_once() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, config) = lab.fake_and_config(&rt, "node.yaml", "status_file: \"\"\n");
    let p = Running::start(&config);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    a.control.set_ready(false);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "unready");
    // Now it stops answering in time: another reason.
    a.control.set_readyz_delay(Duration::from_secs(30));
    let changed = p.wait_log("an unready backend fails for another reason", |_| true);
    assert_eq!(changed["level"], "WARN");
    assert_eq!(changed["fields"]["backend"], addr(&a));
    assert!(
        changed["fields"]["was"]
            .as_str()
            .is_some_and(|w| w == "readyz 500: etcd, etcd-readiness failed"),
        "{changed}"
    );
    assert!(
        changed["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("timeout")),
        "{changed}"
    );
    // Three more failed probes with that reason: still one line.
    let failures = status(&p).backends[0].consecutive_failures;
    wait_for("three more failed probes", || {
        (status(&p).backends[0].consecutive_failures >= failures + 3).then_some(())
    });
    let said = p
        .logs()
        .into_iter()
        .filter(|v| v["fields"]["message"] == "an unready backend fails for another reason")
        .count();
    assert_eq!(said, 1);
    // No backend is ready: the alarm names each backend's reason.
    let alarm = p.wait_log(
        "no backend is ready; failing open: routing to all backends",
        |_| true,
    );
    assert!(
        alarm["fields"]["backends"]
            .as_str()
            .is_some_and(|b| b.starts_with(&format!("{} unready: readyz 500: etcd", addr(&a)))),
        "{alarm}"
    );
    drop(p);
}

/// The balancer started by `start` with no status file from `node.yaml` in `lab`: its runtime
/// and fake apiserver (kept for the test's length), its config file, and the balancer.
fn running_without_a_status_file<P>(
    lab: &Lab,
    start: impl FnOnce(&Path) -> P,
) -> (
    tokio::runtime::Runtime,
    FakeApiserver,
    std::path::PathBuf,
    P,
) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (a, config) = lab.fake_and_config(&rt, "node.yaml", "status_file: \"\"\n");
    let p = start(&config);
    (rt, a, config, p)
}

#[test]
fn the_admin_port_shows_the_running_config() {
    let lab = Lab::new();
    let (_rt, _a, _, p) = running_without_a_status_file(&lab, Running::start);
    let (code, yaml) = blocking_get(p.admin, "/config");
    assert_eq!(code, 200);
    assert!(
        yaml.contains("status_file: ''") || yaml.contains("status_file: \"\""),
        "{yaml}"
    );
    assert!(
        yaml.contains(&format!("ca: {}", lab.path("ca.crt").display())),
        "{yaml}"
    );
    assert!(!yaml.contains("BEGIN"), "no key material: {yaml}");
    drop(p);
}

#[test]
fn a_rejected_reload_shows_in_status_with_its_error() {
    let lab = Lab::new();
    // A process: the reload is a hang-up.
    let (_rt, _a, config, p) = running_without_a_status_file(&lab, Proc::start);
    // A rejected reload shows in /status with its error; the running config stays.
    let good = std::fs::read_to_string(&config).expect("read");
    std::fs::write(&config, format!("{good}health: {{ rise: 0 }}\n")).expect("write");
    p.signal("HUP");
    let reload = wait_for("a reload in /status", || {
        status(&p).config.and_then(|c| c.last_reload)
    });
    assert_eq!(
        serde_json::to_value(reload.result).expect("json"),
        "rejected"
    );
    assert!(
        reload
            .error
            .as_deref()
            .is_some_and(|e| e.contains("node.yaml")),
        "{reload:?}"
    );
    drop(p);
}
