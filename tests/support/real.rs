//! Where the real upstream parts are: the binaries `tests/real/build` put in its cache (a real
//! kube-apiserver, etcd 3.7, KubePrism, the kubelet's lease client). A test never builds them (a
//! cold kube-apiserver build takes half an hour); without them it says it skipped and why, unless
//! `READYPRISM_REQUIRE_REAL=1` (set by `.ci/run`, which builds them first) makes that a failure.

use std::path::PathBuf;
use std::process::Command;

/// The path of binary `name` of part `part` (`kube-apiserver`, `etcd`, `kubeprism`, `lease-client`, …), if built; else
/// `None` after printing `SKIPPED <what>: …` (or failing under `READYPRISM_REQUIRE_REAL=1`).
pub fn real_bin(part: &str, name: &str, what: &str) -> Option<PathBuf> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real/build");
    let dir = Command::new(script)
        .args(["--print-dir", part])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let bin = dir.map(|d| d.join("bin").join(name));
    match bin {
        Some(b) if b.is_file() => Some(b),
        found => {
            let why = match found {
                Some(b) => format!("{} is not built (run tests/real/build {part})", b.display()),
                None => "tests/real/build could not say where (is Go on PATH?)".to_string(),
            };
            assert!(
                std::env::var("READYPRISM_REQUIRE_REAL").as_deref() != Ok("1"),
                "{what}: {why}, and READYPRISM_REQUIRE_REAL=1 requires it"
            );
            eprintln!("SKIPPED {what}: {why}");
            None
        }
    }
}
