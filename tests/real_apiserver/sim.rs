//! `readyprism sim-apiserver` as a process beside the real kube-apiserver: the same loopback
//! address family, the same etcd member, the same certificates, so a fault reaches both alike.
//!
//! Blocking code on OS threads, not driven by tokio's clock.

use std::process::{Child, Command, Stdio};

use super::etcd::signal;
use super::kube::Launch;

/// A running simulated apiserver; killed on drop. Its log is `dir/sim-<tag>.log`.
pub struct SimApiserver {
    child: Child,
}

impl Drop for SimApiserver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SimApiserver {
    /// Starts one as `launch` says, its `/readyz` reading the etcd member (extra flags such as
    /// `--shutdown-delay 5s`); does not wait (the caller probes `/readyz`).
    pub fn start(launch: &Launch) -> SimApiserver {
        let log =
            std::fs::File::create(launch.dir.join(format!("sim-{}.log", launch.tag))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_readyprism"))
            .args([
                "--log-format",
                "json",
                "sim-apiserver",
                "--name",
                launch.tag,
            ])
            .args(["--listen", &launch.addr.to_string()])
            .args(["--cert", &launch.files.cert, "--key", &launch.files.key])
            .args([
                "--client-ca",
                &launch.files.client_ca,
                "--require-client-cert",
            ])
            .args(["--etcd", launch.etcd_url])
            .args(launch.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn sim-apiserver");
        SimApiserver { child }
    }

    /// `SIGTERM`: a graceful shutdown.
    pub fn term(&self) {
        assert!(signal(self.child.id(), "TERM"), "SIGTERM sim-apiserver");
    }
}
