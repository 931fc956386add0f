//! Samples the balancer about once a second while a schedule plays: `/livez`, the gauges of
//! `/metrics` the invariants read, and its process's descriptors and resident memory. Does not
//! judge the samples (`invariants.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::partition::cast::{site_of, wall, ADMIN};
use crate::partition::netlab::{Host, NetLab};

/// One sample; `t` in seconds from the schedule's start.
#[derive(Clone, Debug)]
pub struct Sample {
    pub t: f64,
    pub pid: u32,
    /// `/livez` answered 200.
    pub live: bool,
    /// Open descriptors and resident memory (KiB); `None` if the process is gone.
    pub fds: Option<usize>,
    /// Of those, the ones neither a socket nor a pipe (files, devices, epoll, eventfd, timerfd,
    /// inotify): they do not come and go with connections.
    pub fixed_fds: Option<usize>,
    pub rss_kib: Option<u64>,
    /// `readyprism_no_ready_backends`.
    pub no_ready: Option<f64>,
    /// `readyprism_connections_active` by site.
    pub active: BTreeMap<Host, f64>,
    /// Failed health checks so far by site (`readyprism_health_checks_total{result="fail"}`;
    /// starts again from 0 after a restart or a removal).
    pub failed: BTreeMap<Host, f64>,
}

const EVERY: Duration = Duration::from_secs(1);

/// Fetches `/livez` and `/metrics` in one Python run inside the node's namespace.
const SCRIPT: &str = r##"
import sys, urllib.request
base = sys.argv[1]
try:
    live = urllib.request.urlopen(base + "/livez", timeout=3).status == 200
except Exception:
    live = False
print("LIVE" if live else "DEAD")
try:
    print(urllib.request.urlopen(base + "/metrics", timeout=3).read().decode())
except Exception as e:
    print("# metrics failed:", e)
"##;

/// Open descriptors, and those neither a socket nor a pipe.
fn fds(pid: u32) -> (Option<usize>, Option<usize>) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (None, None);
    };
    let (mut all, mut fixed) = (0, 0);
    for entry in dir.flatten() {
        all += 1;
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if !target.starts_with("socket:") && !target.starts_with("pipe:") {
            fixed += 1;
        }
    }
    (Some(all), Some(fixed))
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// What a sample reads of `/metrics`.
#[derive(Debug, Default)]
struct Read {
    no_ready: Option<f64>,
    active: BTreeMap<Host, f64>,
    failed: BTreeMap<Host, f64>,
}

/// The `backend` label's site in `labels`.
fn site_in(labels: &str) -> Option<Host> {
    labels
        .split("backend=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(site_of)
}

/// `name{labels} value` lines: the gauges and failed checks, by the `backend` label's site.
fn parse(metrics: &str) -> Read {
    let mut read = Read::default();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if name == "readyprism_no_ready_backends" {
            read.no_ready = Some(value);
        } else if let Some(labels) = name.strip_prefix("readyprism_connections_active{") {
            if let Some(site) = site_in(labels) {
                read.active.insert(site, value);
            }
        } else if let Some(labels) = name.strip_prefix("readyprism_health_checks_total{") {
            if let Some(site) = site_in(labels).filter(|_| labels.contains("result=\"fail\"")) {
                *read.failed.entry(site).or_default() += value;
            }
        }
    }
    read
}

fn sample(lab: &NetLab, pid: u32, t0: f64) -> Sample {
    let url = format!("http://{ADMIN}");
    let out = lab
        .output(
            Host::Node,
            "python3",
            &["-c", SCRIPT, &url],
            &[],
            Duration::from_secs(10),
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let live = out.starts_with("LIVE");
    let Read {
        no_ready,
        active,
        failed,
    } = parse(&out);
    let (fds, fixed_fds) = fds(pid);
    Sample {
        t: wall() - t0,
        pid,
        live,
        fds,
        fixed_fds,
        rss_kib: rss_kib(pid),
        no_ready,
        active,
        failed,
    }
}

/// Samples until `stop` is set; returns the samples.
pub fn run(lab: &NetLab, pid: &AtomicU32, t0: f64, stop: &AtomicBool) -> Vec<Sample> {
    let mut out = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let began = wall();
        out.push(sample(lab, pid.load(Ordering::SeqCst), t0));
        let rest = EVERY.as_secs_f64() - (wall() - began);
        if rest > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(rest));
        }
    }
    out
}

#[test]
fn chaos_sampler_reads_the_gauges_by_site() {
    let text = "# HELP x\nreadyprism_no_ready_backends 0\nreadyprism_connections_active{backend=\"10.77.1.1:6443\"} 2\n\
        readyprism_health_checks_total{backend=\"10.77.3.1:6443\",result=\"pass\"} 9\n\
        readyprism_health_checks_total{backend=\"10.77.3.1:6443\",result=\"fail\",reason=\"timeout\"} 2\n\
        readyprism_health_checks_total{backend=\"10.77.3.1:6443\",result=\"fail\",reason=\"not_ready\"} 1\n";
    let read = parse(text);
    assert_eq!(read.no_ready, Some(0.0));
    assert_eq!(read.active.get(&Host::DcA), Some(&2.0));
    assert_eq!(read.failed.get(&Host::Witness), Some(&3.0));
}
