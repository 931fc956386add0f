//! One linearizable read of an etcd member, as kube-apiserver's readiness check makes it: for the
//! cluster's own checks (`EtcdCluster`) and for a scenario's faults, which have only the lab.

use std::time::Duration;

use tokio::time::Instant;

use super::client_url;
use crate::partition::netlab::{Host, NetLab};

/// The budget of a linearizable read, as kube-apiserver's etcd readiness check has it.
const READ_BUDGET: Duration = Duration::from_secs(2);

/// The outcome of one linearizable read.
#[derive(Clone, Debug)]
pub struct ReadResult {
    pub member: Host,
    pub ok: bool,
    pub elapsed: Duration,
    /// `HTTP 200` or the failure (`TimeoutError: timed out`, `HTTP 503: ...`).
    pub detail: String,
}

/// `netprobe.py`'s arguments for one linearizable read of `site`'s member.
fn args(site: Host) -> [String; 4] {
    [
        "post".to_string(),
        format!("{}/v3/kv/range", client_url(site)),
        // {"key": base64("readyprism")}; "serializable" unset = linearizable.
        r#"{"key":"cmVhZHlwcmlzbQ=="}"#.to_string(),
        READ_BUDGET.as_secs_f64().to_string(),
    ]
}

/// Starts a read as [`read`] makes it and returns at once: its process, whose stdout has the
/// outcome as JSON (`"ok"`); for a fault that must not wait on it.
pub fn spawn_read(lab: &NetLab, site: Host) -> std::process::Child {
    lab.command(site, "python3")
        .arg(crate::partition::netlab::lab_dir().join("netprobe.py"))
        .args(args(site))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn netprobe.py")
}

/// A linearizable read (`POST /v3/kv/range`, etcd's JSON gateway) against one member, from its
/// own site, with a 2 s budget: what kube-apiserver's etcd readiness check does.
pub fn read(lab: &NetLab, site: Host) -> ReadResult {
    let args = args(site);
    let started = Instant::now();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match lab.netprobe(site, &args, Duration::from_secs(10)) {
        Ok(v) => {
            let ok = v["ok"].as_bool().unwrap_or(false);
            let detail = match v["error"].as_str() {
                Some(e) => format!(
                    "{e}{}",
                    v["body"]
                        .as_str()
                        .map(|b| format!(": {}", b.trim()))
                        .unwrap_or_default()
                ),
                None => format!("HTTP {}", v["status"]),
            };
            let elapsed = v["elapsed_ms"]
                .as_f64()
                .map(|ms| Duration::from_secs_f64(ms / 1000.0))
                .unwrap_or_else(|| started.elapsed());
            ReadResult {
                member: site,
                ok,
                elapsed,
                detail,
            }
        }
        Err(e) => ReadResult {
            member: site,
            ok: false,
            elapsed: started.elapsed(),
            detail: e,
        },
    }
}
