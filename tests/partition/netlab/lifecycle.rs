//! How a lab comes and goes: the checks that decide skip or fail (root, tools), the sweep of what
//! dead test processes left, the watchdog, and cleanup on drop. It does not wire the network
//! (`topology.rs`) or hold the lab's accessors (`mod.rs`).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use super::{lab_dir, lab_print, on_path, output_within, skip, NetLab, Rtts};
use crate::support::netns::{self, run};

enum StartError {
    /// The machine cannot host the lab (not root, no netns): skip unless required.
    Skip(String),
    /// The machine should host it but building it failed: always a failure.
    Fail(String),
}

static LAB_COUNTER: AtomicU32 = AtomicU32::new(1);
static SWEEP: Once = Once::new();

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Removes what labs of dead test processes left (killed with SIGKILL, say, together with their
/// watchdog): namespaces and scratch directories named `rplab-<pid>-<n>-*` whose pid is gone.
fn sweep_stale() {
    let mut names: Vec<String> = run(&["ip", "netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    for dir in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            names.extend(
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    let mut stale = std::collections::BTreeSet::new();
    for name in names {
        let parts: Vec<&str> = name.splitn(4, '-').collect();
        if parts.len() == 4 && parts[0] == "rplab" {
            if let (Ok(pid), Ok(_)) = (parts[1].parse::<u32>(), parts[2].parse::<u32>()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    stale.insert(format!("rplab-{}-{}", parts[1], parts[2]));
                }
            }
        }
    }
    for prefix in stale {
        lab_print(&format!(
            "partition lab: removing what a dead test process left: {prefix}-*"
        ));
        let _ = output_within(
            Command::new("sh")
                .arg(lab_dir().join("cleanup.sh"))
                .arg(&prefix),
            Duration::from_secs(30),
        );
    }
}

impl NetLab {
    /// Builds the lab with the field report's delays, or returns `None` after printing why it is
    /// skipped (not root, no network namespaces, a tool missing). With `READYPRISM_REQUIRE_NETNS=1`
    /// a skip panics instead. A lab that should build but does not always panics.
    pub fn start(test: &str) -> Option<NetLab> {
        NetLab::start_with(test, Rtts::FIELD)
    }

    /// [`NetLab::start`] with other round-trip times.
    pub fn start_with(test: &str, rtts: Rtts) -> Option<NetLab> {
        match NetLab::try_start(rtts) {
            Ok(lab) => Some(lab),
            Err(StartError::Skip(reason)) => {
                skip(test, &reason);
                None
            }
            Err(StartError::Fail(reason)) => panic!("{test}: building the partition lab: {reason}"),
        }
    }

    fn try_start(rtts: Rtts) -> Result<NetLab, StartError> {
        match effective_uid() {
            Some(0) => {}
            Some(uid) => {
                return Err(StartError::Skip(format!(
                    "needs root for network namespaces (euid {uid})"
                )))
            }
            None => return Err(StartError::Skip("cannot read the euid".into())),
        }
        for tool in [
            "ip",
            "iptables",
            "iptables-restore",
            "python3",
            "sh",
            "kill",
        ] {
            if !on_path(tool) {
                return Err(StartError::Skip(format!(
                    "`{tool}` is not installed (see tests/lab/README.md)"
                )));
            }
        }
        SWEEP.call_once(sweep_stale);

        let prefix = format!(
            "rplab-{}-{}",
            std::process::id(),
            LAB_COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let dir = tempfile::Builder::new()
            .prefix(&format!("{prefix}-"))
            .tempdir()
            .map_err(|e| StartError::Fail(format!("tempdir: {e}")))?;

        // The watchdog first, so that whatever happens from here on is cleaned up.
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(r#"while read -r _; do :; done; exec sh "$0" "$1""#)
            .arg(lab_dir().join("cleanup.sh"))
            .arg(&prefix)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| StartError::Fail(format!("spawn watchdog: {e}")))?;
        let watchdog_pipe = watchdog.stdin.take();

        let mut lab = NetLab {
            prefix,
            rtts,
            dir: Some(dir),
            watchdog: Some(watchdog),
            watchdog_pipe,
            delayers: Vec::new(),
            listeners: Mutex::new(BTreeMap::new()),
            next_fault: AtomicU32::new(1),
        };

        let br = lab.bridge_ns();
        netns::add(&br).map_err(|e| StartError::Skip(format!("`ip netns add` failed: {e}")))?;
        lab.build().map_err(StartError::Fail)?;
        Ok(lab)
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // Our own children first (SIGKILL and reap), then whatever else runs in the namespaces.
        if let Ok(mut l) = self.listeners.lock() {
            l.clear();
        }
        self.delayers.clear();
        let panicking = std::thread::panicking();
        let mut cleanup = Command::new("sh");
        cleanup.arg(lab_dir().join("cleanup.sh")).arg(&self.prefix);
        if panicking {
            cleanup.arg("keep-logs");
        }
        let _ = output_within(&mut cleanup, Duration::from_secs(30));
        // Done: the watchdog is not needed (and must not remove the logs kept after a panic).
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        drop(self.watchdog_pipe.take());
        if let Some(dir) = self.dir.take() {
            if panicking {
                lab_print(&format!(
                    "partition lab: logs kept in {}",
                    dir.keep().display()
                ));
            }
        }
    }
}
