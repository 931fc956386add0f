//! Which balancers a run puts side by side, and where the ones that are not ours come from:
//! HAProxy on PATH, KubePrism from `tests/real/build`'s cache. `HERD_KINDS` names the kinds (each
//! named one is then required); without it readyprism and HAProxy are required and KubePrism runs
//! when it is built, unless `HERD_REQUIRE_KUBEPRISM=1` requires it. Not how they are configured
//! and started (`fleet.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::fleet::Kind;

/// The kinds of this run, with what was found of the others' binaries.
pub struct Lineup {
    /// In [`Kind::ALL`]'s order, readyprism first.
    pub kinds: Vec<Kind>,
    /// HAProxy's version line, when it runs.
    pub haproxy: Option<String>,
    /// KubePrism, when it runs.
    pub kubeprism: Option<Kubeprism>,
}

/// The KubePrism binary `tests/real/build kubeprism` built.
pub struct Kubeprism {
    /// `bin/kubeprism` in the part's cache directory (or `HERD_KUBEPRISM`).
    pub bin: PathBuf,
    /// go-loadbalancer's version and the Go that built it, from the part's `build.json`.
    pub version: String,
}

/// How much a run wants a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Missing is a failure.
    Required,
    /// Missing is said and the run goes on without it.
    IfPresent,
    /// Not in this run.
    Left,
}

/// Finds the kinds the environment asks for; `Err` says what is missing and how to get it.
pub fn choose() -> Result<Lineup, String> {
    let kinds_var = std::env::var("HERD_KINDS").ok();
    let require_kubeprism = std::env::var("HERD_REQUIRE_KUBEPRISM").is_ok_and(|v| v == "1");
    let wants = wants(kinds_var.as_deref(), require_kubeprism)?;
    let want = |k: Kind| {
        wants
            .iter()
            .find(|(w, _)| *w == k)
            .map_or(Want::Left, |(_, w)| *w)
    };
    let haproxy = match want(Kind::Haproxy) {
        Want::Left => None,
        w => match crate::build::version("haproxy", &["-v"]) {
            Some(v) => Some(v),
            None if w == Want::Required => return Err("HAProxy is required (`haproxy` not on PATH; Debian: apt-get install haproxy; or leave it out with HERD_KINDS=readyprism,kubeprism)".to_string()),
            None => None,
        },
    };
    let kubeprism = match want(Kind::Kubeprism) {
        Want::Left => None,
        w => match find_kubeprism() {
            Ok(k) => Some(k),
            Err(why) if w == Want::Required => {
                let by = if require_kubeprism {
                    "HERD_REQUIRE_KUBEPRISM=1"
                } else {
                    "HERD_KINDS"
                };
                return Err(format!("KubePrism is required by {by}, but {why}"));
            }
            Err(why) => {
                eprintln!(
                    "herd bench: KubePrism left out: {why}. The run goes on with readyprism and HAProxy; HERD_REQUIRE_KUBEPRISM=1 makes this a failure"
                );
                None
            }
        },
    };
    let kinds = Kind::ALL
        .into_iter()
        .filter(|k| match k {
            // `wants` has made sure of it.
            Kind::Readyprism => true,
            Kind::Paced => want(Kind::Paced) != Want::Left,
            Kind::Haproxy => haproxy.is_some(),
            Kind::Kubeprism => kubeprism.is_some(),
        })
        .collect();
    Ok(Lineup {
        kinds,
        haproxy,
        kubeprism,
    })
}

/// What the run wants of each kind. readyprism is always in it (the ratios are its).
fn wants(kinds_var: Option<&str>, require_kubeprism: bool) -> Result<Vec<(Kind, Want)>, String> {
    let Some(list) = kinds_var else {
        let kubeprism = if require_kubeprism {
            Want::Required
        } else {
            Want::IfPresent
        };
        return Ok(vec![
            (Kind::Readyprism, Want::Required),
            (Kind::Paced, Want::Left),
            (Kind::Haproxy, Want::Required),
            (Kind::Kubeprism, kubeprism),
        ]);
    };
    let mut named = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| {
                format!("HERD_KINDS: unknown kind {name:?} (readyprism, readyprism-paced, haproxy, kubeprism)")
            })?;
        named.push(kind);
    }
    if !named.contains(&Kind::Readyprism) {
        return Err("HERD_KINDS must name readyprism: every ratio is readyprism's".to_string());
    }
    if require_kubeprism && !named.contains(&Kind::Kubeprism) {
        return Err("HERD_REQUIRE_KUBEPRISM=1 but HERD_KINDS leaves kubeprism out".to_string());
    }
    Ok(Kind::ALL
        .into_iter()
        .map(|k| {
            let w = if named.contains(&k) {
                Want::Required
            } else {
                Want::Left
            };
            (k, w)
        })
        .collect())
}

/// `HERD_KUBEPRISM`, or `bin/kubeprism` in the directory `tests/real/build --print-dir kubeprism`
/// names; `Err` says why there is none and how to build it.
fn find_kubeprism() -> Result<Kubeprism, String> {
    if let Some(p) = std::env::var_os("HERD_KUBEPRISM") {
        let bin = PathBuf::from(p);
        return if bin.is_file() {
            Ok(Kubeprism {
                version: "HERD_KUBEPRISM".to_string(),
                bin,
            })
        } else {
            Err(format!("HERD_KUBEPRISM={} is not a file", bin.display()))
        };
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real/build");
    let out = Command::new(&script)
        .args(["--print-dir", "kubeprism"])
        .output()
        .map_err(|e| format!("{} did not run: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`tests/real/build --print-dir kubeprism` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let bin = dir.join("bin").join("kubeprism");
    if !bin.is_file() {
        return Err(format!(
            "it is not built ({} is missing; run tests/real/build kubeprism, which needs Go)",
            bin.display()
        ));
    }
    Ok(Kubeprism {
        version: build_version(&dir.join("build.json")),
        bin,
    })
}

/// The part of `tests/real/build`'s `build.json` the results name.
#[derive(Deserialize)]
struct Built {
    version: String,
    go: String,
}

/// "go-loadbalancer v0.5.0 (go1.26.8)", or what is wrong with `build.json`.
fn build_version(path: &Path) -> String {
    let read = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Built>(&t).map_err(|e| e.to_string()));
    match read {
        Ok(b) => format!("go-loadbalancer {} ({})", b.version, b.go),
        Err(e) => format!("unknown ({}: {e})", path.display()),
    }
}
