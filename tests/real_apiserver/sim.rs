//! `readyprism sim-apiserver` as a process beside the real kube-apiserver: the same loopback
//! address family, the same etcd member, the same certificates, so a fault reaches both alike.
//!
//! Blocking code on OS threads, not driven by tokio's clock.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::etcd::signal;
use super::kube::ApiserverFiles;

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
    /// Starts one on `addr` whose `/readyz` reads `etcd_url`, with `extra` flags
    /// (`--shutdown-delay 5s`); does not wait (the caller probes `/readyz`).
    pub fn start(
        dir: &Path,
        tag: &str,
        files: &ApiserverFiles,
        addr: SocketAddr,
        etcd_url: &str,
        extra: &[&str],
    ) -> SimApiserver {
        let log = std::fs::File::create(dir.join(format!("sim-{tag}.log"))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_readyprism"))
            .args(["--log-format", "json", "sim-apiserver", "--name", tag])
            .args(["--listen", &addr.to_string()])
            .args(["--cert", &files.cert, "--key", &files.key])
            .args(["--client-ca", &files.client_ca, "--require-client-cert"])
            .args(["--etcd", etcd_url])
            .args(extra)
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
