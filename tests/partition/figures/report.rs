//! A scenario's output: its figures as the lines it prints, and its [`Timeline`] saved as JSON
//! under `<target>/partition-lab/` (the one part of `figures` that touches the disk). It does not
//! compute the figures (`figures.rs`).

use crate::partition::timeline::Timeline;

fn opt(v: Option<f64>) -> String {
    v.map(|s| format!("{s:.2} s"))
        .unwrap_or_else(|| "never".to_string())
}

/// The figures as the lines a scenario prints.
pub fn report(t: &Timeline) -> String {
    let mut out = format!("{}\n  fault: {}\n", t.title, t.fault);
    for p in &t.phases {
        out.push_str(&format!(
            "  {} ({:+.1}..{:+.1} s, good: {}): {} requests; first on good {}, all on good {}, stream on good {} \
             (longest gap {:.2} s); {} errors, {} retried, {} took >= connect_timeout, slowest {:.2} s ({}); changes: [{}]\n",
            p.name,
            p.from,
            p.to,
            p.good.join("/"),
            p.requests,
            opt(p.first_good),
            opt(p.all_good),
            opt(p.stream_good),
            p.stream_gap,
            p.errors,
            p.retried,
            p.slow,
            p.slowest,
            p.slowest_site.as_deref().unwrap_or("-"),
            p.changes.join(", "),
        ));
        out.push_str(&format!(
            "    lease: longest gap between renewals {:.2} s, {} failed attempts",
            p.lease_gap, p.lease_failures
        ));
        if !t.slow.is_empty() {
            out.push_str(&format!(
                "; in-flight request on good {}, {} failed",
                opt(p.inflight_good),
                p.inflight_errors
            ));
        }
        out.push('\n');
        for e in &p.error_samples {
            out.push_str(&format!("    error: {e}\n"));
        }
    }
    out
}

/// Where the run's record goes: `<target>/partition-lab/<scenario>.json`.
pub fn results_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("partition-lab")
}

/// Writes the record; returns its path.
pub fn save(t: &Timeline) -> std::path::PathBuf {
    let dir = results_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
    let path = dir.join(format!("{}.json", t.scenario));
    let json = serde_json::to_string_pretty(t).expect("timeline to JSON");
    std::fs::write(&path, json).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    path
}
