//! The machine the benches that run the real binary run on: what `results.json` says of it, and
//! its open-file limit. Not the processes they start there (`process.rs`).

#![allow(dead_code)] // each bench uses what it needs

use std::collections::BTreeMap;
use std::process::Command;

/// A text file (under `/proc`), or "" where it cannot be read.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// CPU model, cores, kernel and load average at the end: what every bench records of the
/// machine; a bench inserts its own entries (the tools' versions) beside them.
pub fn machine() -> BTreeMap<&'static str, String> {
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    BTreeMap::from([
        ("cpu", cpu),
        ("cores", cores.to_string()),
        (
            "kernel",
            read("/proc/sys/kernel/osrelease").trim().to_string(),
        ),
        ("loadavg_at_end", read("/proc/loadavg").trim().to_string()),
    ])
}

/// This process's open-file limits, `(soft, hard)`: `usize::MAX` for unlimited, `(0, 0)` where
/// `/proc/self/limits` does not say.
pub fn open_file_limits() -> (usize, usize) {
    read("/proc/self/limits")
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| {
                f.get(i)
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(usize::MAX)
            };
            (n(3), n(4))
        })
        .unwrap_or((0, 0))
}

/// Raises the soft open-file limit to the hard one with util-linux `prlimit` (the processes a
/// bench starts inherit it). Best effort: the caller reads the limits again and says if they are
/// still too low.
pub fn raise_open_file_limit() {
    let (_, hard) = open_file_limits();
    let hard = if hard == usize::MAX {
        "unlimited".to_string()
    } else {
        hard.to_string()
    };
    let _ = Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={hard}:{hard}"))
        .status();
}
