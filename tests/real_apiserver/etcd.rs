//! A real three-member etcd 3.7 cluster on loopback addresses of a test's own (127.A.B.1-3, ports
//! 2379/2380), built by `tests/real/build etcd`: the apiservers' store, whose quorum a test takes
//! away by stopping two members (`SIGSTOP`: the process stays, its sockets stay open and silent,
//! as behind a partition) and gives back (`SIGCONT`).
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{on_own_thread, patience};

/// The running members; killed on drop.
pub struct Etcd {
    members: Vec<Child>,
    /// `127.A.B.` of this cluster; member `i` is at `127.A.B.(i+1)`.
    pub prefix: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for m in &mut self.members {
            let _ = signal(m.id(), "CONT");
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

/// Sends `SIG<name>` to `pid` with kill(1).
pub fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

impl Etcd {
    /// Starts three members with `etcd` from `bin` under `dir` (logs in `dir/etcd-N.log`) on
    /// `prefix` (`127.A.B.`); waits until the cluster has a leader and serves a linearizable read.
    pub fn start(bin: &Path, dir: &Path, prefix: &str) -> Etcd {
        let peer = |i: usize| format!("http://{prefix}{}:2380", i + 1);
        let initial: Vec<String> = (0..3).map(|i| format!("m{i}={}", peer(i))).collect();
        let members = (0..3)
            .map(|i| {
                let client = format!("http://{prefix}{}:2379", i + 1);
                let log = std::fs::File::create(dir.join(format!("etcd-{i}.log"))).expect("log");
                // Ahead of the CI's two `yes` hogs, as a control plane puts etcd ahead of its
                // workloads: a member starved past its 1 s election timeout makes every
                // apiserver's etcd check fail for a moment, which no test here is about.
                // (`nice` execs etcd: the pid stays the member's for SIGSTOP. Unprivileged, it
                // warns and runs etcd at the usual priority.)
                Command::new("nice")
                    .args(["-n", "-10"])
                    .arg(bin)
                    .args(["--name", &format!("m{i}")])
                    .arg("--data-dir")
                    .arg(dir.join(format!("etcd-{i}.data")))
                    .args([
                        "--listen-client-urls",
                        &client,
                        "--advertise-client-urls",
                        &client,
                    ])
                    .args(["--listen-peer-urls", &peer(i)])
                    .args(["--initial-advertise-peer-urls", &peer(i)])
                    .args(["--initial-cluster", &initial.join(",")])
                    .args(["--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", &format!("real-{prefix}")])
                    .args([
                        "--logger",
                        "zap",
                        "--log-level",
                        "info",
                        "--log-outputs",
                        "stderr",
                    ])
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("spawn etcd")
            })
            .collect();
        let etcd = Etcd {
            members,
            prefix: prefix.to_string(),
        };
        etcd.wait_serving(0, patience() * 2);
        etcd
    }

    /// Lines of the members' logs that name a leader change or a slow request: why an
    /// apiserver's etcd check failed, for a failure message.
    pub fn troubles(&self, dir: &Path) -> Vec<String> {
        (0..self.members.len())
            .flat_map(|i| {
                let text =
                    std::fs::read_to_string(dir.join(format!("etcd-{i}.log"))).unwrap_or_default();
                text.lines()
                    .filter(|l| {
                        ["leader", "elect", "took too long", "slow"]
                            .iter()
                            .any(|w| l.contains(w))
                    })
                    .map(|l| format!("etcd-{i}: {l}"))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The client URL of member `i`.
    pub fn url(&self, i: usize) -> String {
        format!("http://{}{}:2379", self.prefix, i + 1)
    }

    /// Stops (`SIGSTOP`) the members `which`.
    pub fn stop(&self, which: &[usize]) {
        for &i in which {
            assert!(
                signal(self.members[i].id(), "STOP"),
                "SIGSTOP etcd member {i}"
            );
        }
    }

    /// Lets (`SIGCONT`) the members `which` run again.
    pub fn resume(&self, which: &[usize]) {
        for &i in which {
            assert!(
                signal(self.members[i].id(), "CONT"),
                "SIGCONT etcd member {i}"
            );
        }
    }

    /// Waits until member `i` serves a linearizable read (its JSON gateway, 1 s per try).
    pub fn wait_serving(&self, i: usize, limit: Duration) {
        let start = Instant::now();
        loop {
            if self.read(i) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "etcd member {i} served no linearizable read within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One linearizable read from member `i` through `POST /v3/kv/range`, within 1 s. On a
    /// thread of its own, so it may be called from inside a runtime too.
    fn read(&self, i: usize) -> bool {
        let url = self.url(i);
        on_own_thread(|| async {
            let read = readyprism::sim::etcd::linearizable_read(&url);
            tokio::time::timeout(Duration::from_secs(1), read)
                .await
                .is_ok_and(|r| r.is_ok())
        })
    }
}

/// A loopback prefix `127.A.B.` of this test process's own (from its pid and `salt`), so runs and
/// tests do not meet on one address.
pub fn loopback_prefix(salt: u8) -> String {
    let pid = std::process::id();
    format!(
        "127.{}.{}.",
        100 + (pid % 100) as u8,
        salt.wrapping_add((pid / 100 % 200) as u8)
    )
}

/// `dir/name` as a string, for command lines.
pub fn path_str(dir: &Path, name: &str) -> String {
    let p: PathBuf = dir.join(name);
    p.display().to_string()
}
