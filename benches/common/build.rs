//! What the benches that run the real binary share: where they write, the `readyprism` release
//! binary (built now unless one is named), and a tool's version line.

#![allow(dead_code)] // each bench uses what it needs

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/release` (where the bench and the `readyprism` binary live) and `target/<out>`, made.
pub fn dirs(out: &str) -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().expect("bench executable path");
    // target/release/deps/<bench>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("bench binary inside target/<profile>/deps")
        .to_path_buf();
    let out = profile_dir.parent().expect("target dir").join(out);
    std::fs::create_dir_all(&out).expect("create the bench's output directory");
    (profile_dir, out)
}

/// The balancer under test: the binary named by the environment variable `var`, or this tree's
/// release binary, built now (`cargo bench` does not build a bin target for a bench, and sets no
/// `CARGO_BIN_EXE_*` for it).
pub fn readyprism_binary(profile_dir: &Path, var: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = profile_dir.parent().expect("target dir");
    let mut cmd = Command::new(cargo);
    // What cargo set for this bench (package name, manifest, OUT_DIR) would differ from the
    // outer build's environment and make build scripts that watch it (ring's) run again, twice
    // per bench run.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR")
            || k == "OUT_DIR"
        {
            cmd.env_remove(k.as_ref());
        }
    }
    let status = cmd
        .args([
            "build",
            "--release",
            "--bin",
            "readyprism",
            "--manifest-path",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cargo build --release --bin readyprism failed"
    );
    profile_dir.join("readyprism")
}

/// First line of `prog args` (stdout or stderr), or `None` if it does not run.
pub fn version(prog: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(prog).args(args).output().ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status
        .success()
        .then(|| text.lines().next().unwrap_or_default().trim().to_string())
}
