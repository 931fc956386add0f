//! `check`'s look at the paths readyprism writes on the node: the discovery cache and the status
//! file. Each one that cannot hold its file is one WARN placed at its field; `check` still
//! succeeds (the balancer runs without them).

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// A config with discovery on and its cache at `cache` (`discovery.cache` is at line 7, column 3),
/// and a status file the lab's directory can hold.
fn cache_config(lab: &Lab, name: &str, cache: &Path, endpoints: bool) -> String {
    let status = lab.path("status.json");
    paths_config(lab, name, cache, endpoints, &status)
}

/// A config with discovery's cache at `cache` (line 7, column 3) and the status file at `status`
/// (line 8, column 1).
fn paths_config(lab: &Lab, name: &str, cache: &Path, endpoints: bool, status: &Path) -> String {
    let text = format!(
        "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: {}\ndiscovery:\n  endpoints: {endpoints}\n  cache: {}\nstatus_file: \"{}\"\n",
        lab.path("ca.crt").display(),
        cache.display(),
        status.display()
    );
    lab.write(name, &text)
}

/// `check --config file` with `extra` arguments: it succeeds (a cache path never fails `check`);
/// answers its stderr.
fn check_ok(file: &str, extra: &[&str]) -> String {
    let mut args = vec!["check", "--config", file];
    args.extend_from_slice(extra);
    let o = readyprism(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stderr(&o)
}

/// The one WARN line `check` printed about the discovery cache, placed at its field and line.
fn cache_warning(err: &str, file: &str) -> String {
    let prefix = format!("readyprism check: WARN: {file}:7:3: discovery.cache: ");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "one warning at discovery.cache in:\n{err}");
    lines[0][prefix.len()..].to_string()
}

#[test]
fn check_warns_when_the_discovery_cache_path_is_not_a_regular_file() {
    let lab = Lab::new();
    let state = lab.path("state");
    std::fs::create_dir(&state).expect("mkdir");
    // A directory where the file should be (the path of the directory itself, or a slip).
    let file = cache_config(&lab, "dir.yaml", &state, true);
    let warned = cache_warning(&check_ok(&file, &[]), &file);
    assert_eq!(
        warned,
        format!(
            "{} is a directory, not a regular file: the discovery cache is neither read nor written there",
            state.display()
        )
    );
    // A symbolic link: the cache is never written through one.
    let link = state.join("backends.json");
    std::os::unix::fs::symlink(lab.path("elsewhere.json"), &link).expect("symlink");
    let file = cache_config(&lab, "link.yaml", &link, true);
    let warned = cache_warning(&check_ok(&file, &[]), &file);
    assert!(
        warned.contains("is a symbolic link, not a regular file"),
        "{warned}"
    );
    // A regular file that is not a cache (a mistyped path): never written over.
    let kubeconfig = lab.write("kubeconfig", "apiVersion: v1\nkind: Config\n");
    let file = cache_config(&lab, "foreign.yaml", Path::new(&kubeconfig), true);
    let warned = cache_warning(&check_ok(&file, &[]), &file);
    assert!(
        warned.starts_with(&format!("{kubeconfig}: not a readyprism discovery cache")),
        "{warned}"
    );
}

#[test]
fn check_warns_when_the_discovery_cache_directory_is_missing() {
    let lab = Lab::new();
    let missing = lab.path("no-such-dir");
    let cache = missing.join("backends.json");
    let file = cache_config(&lab, "missing.yaml", &cache, true);
    let warned = cache_warning(&check_ok(&file, &[]), &file);
    assert_eq!(
        warned,
        format!(
            "{}: its directory {} does not exist: the discovery cache cannot be written",
            cache.display(),
            missing.display()
        )
    );
    // A file where the directory should be.
    let plain = lab.write("plain", "");
    let cache = Path::new(&plain).join("backends.json");
    let file = cache_config(&lab, "plain.yaml", &cache, true);
    let warned = cache_warning(&check_ok(&file, &[]), &file);
    assert!(
        warned.contains(&format!(
            "its directory {plain} is a regular file, not a directory"
        )),
        "{warned}"
    );
}

#[test]
fn check_warns_when_the_discovery_cache_directory_is_not_writable() {
    let lab = Lab::new();
    let state = lab.path("state");
    std::fs::create_dir(&state).expect("mkdir");
    let cache = state.join("backends.json");
    let file = cache_config(&lab, "ro.yaml", &cache, true);
    // Root writes through any mode bits, so the directory is a read-only mount, in a mount
    // namespace of this command's own.
    let probe = Command::new("unshare").args(["--mount", "true"]).output();
    if let Some(why) = match probe {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(stderr(&o)),
        Err(e) => Some(e.to_string()),
    } {
        assert!(
            std::env::var("READYPRISM_REQUIRE_NETNS").as_deref() != Ok("1"),
            "a mount namespace is required (READYPRISM_REQUIRE_NETNS=1): {why}"
        );
        eprintln!("SKIPPED check_warns_when_the_discovery_cache_directory_is_not_writable: no mount namespace here: {why}");
        return;
    }
    let script = "mount -t tmpfs -o ro readyprism-test \"$1\" && shift && exec \"$@\"";
    let bin = env!("CARGO_BIN_EXE_readyprism");
    let dir = state.display().to_string();
    let o = Command::new("unshare")
        .args([
            "--mount", "sh", "-c", script, "sh", &dir, bin, "check", "--config", &file,
        ])
        .output()
        .expect("run unshare");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let warned = cache_warning(&stderr(&o), &file);
    assert_eq!(
        warned,
        format!(
            "{}: its directory {dir} is not writable: Read-only file system (os error 30): the discovery cache cannot be written",
            cache.display()
        )
    );
}

#[test]
fn check_says_nothing_of_a_discovery_cache_path_that_can_hold_it_or_is_not_used_here() {
    let lab = Lab::new();
    let state = lab.path("state");
    std::fs::create_dir(&state).expect("mkdir");
    let cache = state.join("backends.json");
    // A first start (no cache yet), then a cache written by readyprism.
    let file = cache_config(&lab, "ok.yaml", &cache, true);
    assert!(!check_ok(&file, &[]).contains("WARN"));
    std::fs::write(&cache, "{\"version\":1,\"backends\":[]}").expect("write");
    assert!(!check_ok(&file, &[]).contains("WARN"));
    // Discovery off: the cache is neither read nor written; checked for another node: its
    // directories are that node's.
    let bad = lab.path("no-such-dir").join("backends.json");
    let off = cache_config(&lab, "off.yaml", &bad, false);
    assert!(!check_ok(&off, &[]).contains("WARN"));
    let elsewhere = cache_config(&lab, "elsewhere.yaml", &bad, true);
    assert!(!check_ok(&elsewhere, &["--skip-node-files"]).contains("WARN"));
}

/// The one WARN line `check` printed about the status file, placed at its field and line.
fn status_warning(err: &str, file: &str) -> String {
    let prefix = format!("readyprism check: WARN: {file}:8:1: status_file: ");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "one warning at status_file in:\n{err}");
    lines[0][prefix.len()..].to_string()
}

#[test]
fn check_warns_when_the_status_file_directory_is_missing() {
    let lab = Lab::new();
    let cache = lab.path("backends.json");
    let missing = lab.path("no-such-dir");
    let status = missing.join("status.json");
    let file = paths_config(&lab, "missing.yaml", &cache, true, &status);
    let warned = status_warning(&check_ok(&file, &[]), &file);
    assert_eq!(
        warned,
        format!(
            "{}: its directory {} does not exist: the status file cannot be written",
            status.display(),
            missing.display()
        )
    );
}

#[test]
fn check_warns_when_the_status_file_path_holds_another_file() {
    let lab = Lab::new();
    let cache = lab.path("backends.json");
    // A mistyped path: the kubeconfig is never written over.
    let kubeconfig = lab.write("kubeconfig", "apiVersion: v1\nkind: Config\n");
    let file = paths_config(&lab, "other.yaml", &cache, true, Path::new(&kubeconfig));
    let warned = status_warning(&check_ok(&file, &[]), &file);
    assert!(
        warned.starts_with(&format!("{kubeconfig}: not a readyprism status file (")),
        "{warned}"
    );
    assert!(
        warned.ends_with("the status file is never written"),
        "{warned}"
    );
}

#[test]
fn check_says_nothing_of_a_status_file_that_is_off_or_checked_for_another_node() {
    let lab = Lab::new();
    let cache = lab.path("backends.json");
    let bad = lab.path("no-such-dir").join("status.json");
    let off = paths_config(&lab, "off.yaml", &cache, true, Path::new(""));
    assert!(
        !check_ok(&off, &[]).contains("WARN"),
        "status_file: \"\" is off"
    );
    let elsewhere = paths_config(&lab, "elsewhere.yaml", &cache, true, &bad);
    assert!(!check_ok(&elsewhere, &["--skip-node-files"]).contains("WARN"));
}
