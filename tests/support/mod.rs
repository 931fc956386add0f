//! Test fixtures: a lab with an in-memory CA, fake apiservers on port 0, a balancer started from
//! YAML, and waits on table generations or polls with deadlines (never fixed sleeps).
//!
//! The files: `lab.rs` the [`Lab`] (a `readyprism::testing::Cluster` with its files on disk,
//! config YAML, starting a balancer), `wait.rs` the waits and [`patience`], `metrics.rs` reading
//! `/metrics`, `client.rs` raw connections and admin GETs, `running.rs` the app in process started from a
//! config file with its own log capture (`logs.rs`), `process.rs` the real binary as a child
//! process, `observed.rs` what tests read of either (listeners, logs, admin answers), `netns.rs` network namespaces (a test's own, and the primitives the partition lab
//! builds on), `installer.rs` Talos installers as the imager lays them out, `iptables.rs` rule
//! text. This file holds the rest: addresses (a fake's, one that
//! refuses, from `readyprism::testing`), whether `kubectl` is there, and `readyprism ARGS...` run
//! to completion.

use readyprism::sim::apiserver::FakeApiserver;
pub mod installer;
pub mod iptables;
pub mod netns;
pub mod process;
pub mod real;
pub mod unwritable;

mod client;
mod lab;
mod logs;
mod metrics;
mod observed;
mod running;
mod wait;

pub use client::{
    admin_closes, admin_get, admin_metric, admin_states, admin_status, blocking_get, echoes,
    echoing, landed, on_own_thread, raw, read_to_end,
};
pub use lab::{Lab, SLOW_PROBES};
pub use metrics::{
    backend_metric, dial_failures, failed_checks, metric, state_changes, unready_closes,
};
pub use observed::Balancer;
pub use running::Running;
pub use wait::{eventually, patience, poll, wait_probed, wait_states, wait_until};

/// An address that refuses connections for as long as the returned socket lives, as text
/// (the form configs and commands take).
pub fn refusing_addr() -> (socket2::Socket, String) {
    let (held, addr) = readyprism::testing::refusing().expect("a refusing address");
    (held, addr.to_string())
}

/// Whether `kubectl` is on PATH. Without it a test skips what needs kubectl, saying so on stderr
/// as `SKIPPED <what>`, so a plain `cargo test` on a laptop works; with
/// `READYPRISM_REQUIRE_KUBECTL=1` (set by `.ci/run`) a missing kubectl fails the test instead.
pub fn kubectl_available(what: &str) -> bool {
    let found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("READYPRISM_REQUIRE_KUBECTL").as_deref() != Ok("1"),
            "kubectl is not on PATH, and READYPRISM_REQUIRE_KUBECTL=1 requires it"
        );
        eprintln!(
            "SKIPPED {what}: kubectl is not on PATH (install it, e.g. Debian's kubernetes-client, \
             to run it)"
        );
    }
    found
}

pub fn addr(f: &FakeApiserver) -> String {
    f.addr.to_string()
}

/// `readyprism ARGS...` run to completion (no zone from the environment).
pub fn readyprism(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(args)
        .env_remove("READYPRISM_ZONE")
        .output()
        .expect("run readyprism")
}

/// A finished command's stderr as text.
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}
