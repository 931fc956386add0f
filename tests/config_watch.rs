//! The config file watch on the app run from its config file (the binary where a test needs the process): every edit applied while the file is readable
//! (after a failed read, during start-up, with the mtime kept), retried when it names a file that
//! comes later, and nothing at the path (a FIFO, a directory, 2 MiB) ever stalls or reloads.
//!
//! Blocking code on OS threads beside the app's thread or child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::support::process::Proc;
use crate::support::*;

const CANNOT_USE: &str = "the config file cannot be used; the running config stays";
const REJECTED: &str = "config reload rejected; the running config stays";

fn backends(p: &impl Balancer) -> Vec<(String, Option<String>)> {
    let doc: readyprism::admin::StatusDoc =
        serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status");
    doc.backends
        .into_iter()
        .map(|b| (b.address, b.zone))
        .collect()
}

fn addresses(p: &impl Balancer) -> Vec<String> {
    backends(p).into_iter().map(|(a, _)| a).collect()
}

fn reloads(p: &impl Balancer, result: &str) -> Option<f64> {
    let t = blocking_get(p.admin, "/metrics").1;
    metric(
        &t,
        "readyprism_config_reloads_total",
        &format!("result=\"{result}\""),
    )
}

fn count_logs(p: &impl Balancer, message: &str) -> usize {
    p.logs()
        .iter()
        .filter(|v| v["fields"]["message"] == message)
        .count()
}

/// Replaces `file` by rename, as Talos and editors write, with an mtime an hour ago when `old`
/// (so only the fixes under test, not a fresh timestamp, can make it seen).
fn rename_in(file: &Path, text: &[u8], old: bool) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    if old {
        set_mtime(&tmp, SystemTime::now() - Duration::from_secs(3600));
    }
    std::fs::rename(&tmp, file).expect("rename");
}

fn set_mtime(file: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|f| f.set_modified(t))
        .expect("set mtime");
}

/// The pid of the `readyprism` process running with `config` (not a wrapper's).
fn pid_of(config: &Path) -> Option<u32> {
    let want = config.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let mut args = cmdline.split(|&b| b == 0);
        let is_ours = args.next()?.ends_with(b"readyprism") && args.any(|a| a == want);
        is_ours.then_some(pid)
    })
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect(program);
    assert!(out.status.success(), "{program} {args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn an_edit_whose_read_fails_is_applied_once_the_file_can_be_read() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("b")));
    let file = lab.path("emfile.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], SLOW_PROBES)).expect("write");
    // A process: its descriptor limit is lowered with prlimit.
    let p = Proc::start(&file);
    let pid = pid_of(&file).expect("pid").to_string();
    let soft = run(
        "prlimit",
        &[
            "--pid",
            &pid,
            "--nofile",
            "--raw",
            "--noheadings",
            "-o",
            "SOFT",
        ],
    );
    // Out of descriptors: the stat works, the open fails (EMFILE), as with a flood of clients.
    run("prlimit", &["--pid", &pid, "--nofile=0:"]);
    let two = lab.yaml(
        "dc-a",
        &[(addr(&a), "dc-a"), (addr(&b), "dc-b")],
        SLOW_PROBES,
    );
    rename_in(&file, two.as_bytes(), true);
    let warned = p.wait_log(CANNOT_USE, |_| true);
    let why = warned["fields"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("Too many open files"), "{why}");
    run("prlimit", &["--pid", &pid, &format!("--nofile={soft}:")]);
    // The same file, untouched since its failed read, is read again and applied.
    rt.block_on(poll("b added once the file could be read", || {
        addresses(&p) == [addr(&a), addr(&b)]
    }));
    p.wait_log("the config file is readable again", |_| true);
    assert_eq!(reloads(&p, "failure"), Some(0.0), "not a rejected config");
}

/// strace can trace here (installed, ptrace allowed); with `READYPRISM_REQUIRE_STRACE=1` it must.
fn strace_works() -> bool {
    let works = Command::new("strace")
        .args(["-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        assert!(
            std::env::var_os("READYPRISM_REQUIRE_STRACE").is_none(),
            "strace cannot trace here"
        );
        eprintln!("skipped: strace is missing or cannot trace here");
    }
    works
}

#[test]
fn an_edit_during_start_up_is_applied() {
    if !strace_works() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("b")));
    let file = lab.path("startup.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let two = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], "");
    // The process stops (SIGSTOP, injected by strace) when it first opens the CA: after the
    // config is loaded, before the app has started. The edit lands then, and it continues.
    let ca = lab.path("ca.crt").display().to_string();
    let trace = lab.path("strace.out");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = Instant::now() + patience();
            let (mut edited, mut handled) = (false, 0);
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                // strace writes this line once the process (each of its threads) has stopped.
                let stops = std::fs::read_to_string(&trace)
                    .unwrap_or_default()
                    .matches("--- stopped by SIGSTOP ---")
                    .count();
                if stops > handled {
                    if !edited {
                        rename_in(&file, two.as_bytes(), false);
                        edited = true;
                    }
                    let pid = pid_of(&file).expect("pid");
                    run("kill", &["-CONT", &pid.to_string()]);
                    handled = stops;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(edited, "the process never stopped at the CA");
        });
        let trace = trace.display().to_string();
        let strace = [
            "strace",
            "-f",
            "-qq",
            "-o",
            &trace,
            "-P",
            &ca,
            "-e",
            "trace=openat",
            "-e",
            "inject=openat:signal=SIGSTOP:when=1",
            "--",
        ];
        // A process: strace stops its threads at their first open of the CA.
        let p = Proc::start_under(&strace, &file);
        // Resumed until the end: every thread's first open of the CA stops it (strace counts per
        // thread), and the certificate watcher reads it on a blocking-pool thread of its own.
        rt.block_on(poll("the edit made during start-up applies", || {
            addresses(&p) == [addr(&a), addr(&b)]
        }));
        done.store(true, Ordering::Relaxed);
    });
}

#[test]
fn a_fifo_at_the_config_path_is_warned_about_without_stopping_the_proxy_or_admin() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "fifo.yaml", "");
    let p = Running::start(&file);
    let fifo = lab.path("fifo.yaml.fifo");
    run("mkfifo", &[&fifo.display().to_string()]);
    std::fs::rename(&fifo, &file).expect("rename");
    let warned = p.wait_log(CANNOT_USE, |_| true);
    let why = warned["fields"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("not a regular file (a FIFO)"), "{why}");
    // Ticks keep running into the FIFO; the runtime thread never blocks on it.
    assert_eq!(blocking_get(p.admin, "/livez").0, 200, "admin answers");
    assert_eq!(rt.block_on(landed(p.listen)), "a", "the proxy relays");
    let zone_b = lab.yaml("dc-a", &[(addr(&a), "dc-b")], "");
    rename_in(&file, zone_b.as_bytes(), false);
    rt.block_on(poll("the file that replaced the FIFO applies", || {
        backends(&p) == [(addr(&a), Some("dc-b".into()))]
    }));
    p.wait_log("the config file is readable again", |_| true);
    assert_eq!(count_logs(&p, CANNOT_USE), 1, "one WARN for the spell");
}

#[test]
fn a_config_over_1_mib_is_refused_whenever_it_is_read() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "big.yaml", "");
    let mut big = lab.yaml("dc-a", &[(addr(&a), "dc-b")], "").into_bytes();
    big.extend(b"#".repeat(2 << 20));
    big.push(b'\n');
    let huge = lab.path("huge.yaml");
    std::fs::write(&huge, &big).expect("write");
    let expected = format!("{}: larger than 1 MiB; not loaded", huge.display());
    for command in ["check", "run"] {
        let out = readyprism(&[command, "--config", &huge.display().to_string()]);
        assert!(!out.status.success(), "{command} refuses it");
        assert_eq!(
            stderr(&out).trim(),
            format!("readyprism: {expected}"),
            "{command}"
        );
    }
    let p = Running::start(&file);
    rename_in(&file, &big, false);
    let rejected = p.wait_log(REJECTED, |_| true);
    let err = rejected["fields"]["error"].as_str().unwrap_or_default();
    assert!(err.ends_with("larger than 1 MiB; not loaded"), "{err}");
    rt.block_on(poll("counted", || reloads(&p, "failure") == Some(1.0)));
    assert_eq!(
        backends(&p),
        [(addr(&a), Some("dc-a".into()))],
        "the running config stays"
    );
}

#[test]
fn a_same_size_edit_that_keeps_the_mtime_is_applied() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "preserve.yaml", "");
    let mtime = SystemTime::now() - Duration::from_secs(3600);
    set_mtime(&file, mtime);
    // The watch reads the file on its first tick, as the run starts; its stamp is trusted at
    // once, the mtime being an hour old.
    let p = Running::start(&file);
    let edited = lab.yaml("dc-a", &[(addr(&a), "dc-b")], "");
    assert_eq!(
        edited.len(),
        std::fs::metadata(&file).expect("stat").len() as usize
    );
    // `cp --preserve=timestamps` / `rsync --inplace -t`: same inode, same size, same mtime.
    std::fs::write(&file, &edited).expect("write in place");
    set_mtime(&file, mtime);
    rt.block_on(poll("the edit applies", || {
        backends(&p) == [(addr(&a), Some("dc-b".into()))]
    }));
}

#[test]
fn a_slow_in_place_write_is_applied_whole_never_as_a_rejection() {
    use std::io::Write;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("b")));
    let file = lab.path("slow.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let p = Running::start(&file);
    let next = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], "");
    // A writer that truncates, writes a head, and finishes more than a watch tick later: the
    // scenario is the pause, so it is a fixed one (nothing is being waited for).
    let mut f = std::fs::File::create(&file).expect("truncate");
    f.write_all(&next.as_bytes()[..40]).expect("head");
    f.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(1500));
    f.write_all(&next.as_bytes()[40..]).expect("rest");
    drop(f);
    rt.block_on(poll("the whole edit applies", || {
        addresses(&p) == [addr(&a), addr(&b)]
    }));
    assert_eq!(
        reloads(&p, "failure"),
        Some(0.0),
        "the half-written file was not rejected"
    );
    assert_eq!(count_logs(&p, REJECTED), 0);
    assert_eq!(reloads(&p, "success"), Some(1.0), "applied once, whole");
}

#[test]
fn a_rejected_config_is_retried_until_the_ca_it_names_appears_counted_once() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("b")));
    let file = lab.path("retry.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let p = Running::start(&file);
    let ca = lab.path("ca.crt").display().to_string();
    let later_ca = lab.path("later-ca.crt").display().to_string();
    let next = lab
        .yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], "")
        .replace(&ca, &later_ca);
    rename_in(&file, next.as_bytes(), false);
    let rejected = p.wait_log(REJECTED, |_| true);
    let err = rejected["fields"]["error"].as_str().unwrap_or_default();
    assert!(err.contains("tls.ca"), "{err}");
    // Retried (every 5 s), still rejected: neither counted nor logged again.
    p.wait_log("the rejected config is still rejected", |_| true);
    assert_eq!(reloads(&p, "failure"), Some(1.0), "counted once");
    assert_eq!(count_logs(&p, REJECTED), 1, "logged once");
    // The CA lands (as a ConfigMap or Talos may write it, a step after the config).
    std::fs::copy(&ca, &later_ca).expect("copy ca");
    rt.block_on(poll("the config applies without another edit", || {
        addresses(&p) == [addr(&a), addr(&b)]
    }));
    p.wait_log("config reloaded", |v| v["fields"]["retried"] == true);
    rt.block_on(poll("one success", || reloads(&p, "success") == Some(1.0)));
    assert_eq!(reloads(&p, "failure"), Some(1.0));
}

#[test]
fn a_directory_at_the_config_path_is_warned_about_reloading_nothing() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "dir.yaml", "");
    let p = Running::start(&file);
    std::fs::remove_file(&file).expect("rm");
    std::fs::create_dir(&file).expect("mkdir");
    let warned = p.wait_log(CANNOT_USE, |_| true);
    let why = warned["fields"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("not a regular file (a directory)"), "{why}");
    std::fs::remove_dir(&file).expect("rmdir");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-b")], "")).expect("write");
    p.wait_log("the config file is readable again", |_| true);
    rt.block_on(poll("the new file applies", || {
        backends(&p) == [(addr(&a), Some("dc-b".into()))]
    }));
    // One WARN for the directory (and one more if a tick saw the path empty in between).
    let directory = p
        .logs()
        .iter()
        .filter(|v| v["fields"]["message"] == CANNOT_USE)
        .filter(|v| {
            v["fields"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("(a directory)"))
        })
        .count();
    assert_eq!(directory, 1, "one WARN for the directory");
    assert_eq!(reloads(&p, "failure"), Some(0.0), "never a reload");
    assert_eq!(reloads(&p, "success"), Some(1.0));
}
