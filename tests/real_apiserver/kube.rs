//! A real kube-apiserver (k8s.io/kubernetes v1.37.2, built by `tests/real/build k8s`) on one member
//! of the test's etcd, with the flags Talos gives it where they matter here: TLS 1.3 only, the
//! cluster's CA as client CA (so the kubelet certificate the balancer presents is accepted),
//! `Node,RBAC` with `NodeRestriction`, no profiling (siderolabs/talos v1.14.0-rc.1
//! `internal/app/machined/pkg/controllers/k8s/control_plane_final.go`). Talos passes no
//! `--shutdown-delay-duration`; a test adds it, or `--shutdown-send-retry-after`, as `extra`.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::etcd::{path_str, signal};

/// A running kube-apiserver; killed on drop. Its log is `dir/kube-apiserver-<tag>.log`.
pub struct KubeApiserver {
    child: Child,
    pub log: PathBuf,
}

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The files every apiserver of a test shares: serving certificate and key (for the test's
/// loopback addresses), client CA, service-account key pair.
/// Where and how an apiserver, real or simulated, runs: the directory of its files and log, the
/// tag in its log's name, its certificates, its address, its etcd member and `extra` flags.
#[derive(Clone, Copy)]
pub struct Launch<'a> {
    pub dir: &'a Path,
    pub tag: &'a str,
    pub files: &'a ApiserverFiles,
    pub addr: SocketAddr,
    pub etcd_url: &'a str,
    pub extra: &'a [&'a str],
}

pub struct ApiserverFiles {
    pub cert: String,
    pub key: String,
    pub client_ca: String,
    pub sa_key: String,
    pub sa_pub: String,
}

impl ApiserverFiles {
    /// Writes them into `dir`: a serving certificate of `ca` for `ips`, and a fresh ECDSA
    /// service-account key pair.
    pub fn write(dir: &Path, ca: &readyprism::sim::pki::Ca, ips: &[&str]) -> ApiserverFiles {
        let server = ca.server(ips).expect("serving certificate");
        let sa = rcgen::KeyPair::generate().expect("service-account key");
        let put = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).expect("write");
            path_str(dir, name)
        };
        ApiserverFiles {
            cert: put("apiserver.crt", &server.cert_pem),
            key: put("apiserver.key", &server.key_pem),
            client_ca: put("ca.crt", &ca.cert_pem),
            sa_key: put("sa.key", &sa.serialize_pem()),
            sa_pub: put("sa.pub", &sa.public_key_pem()),
        }
    }
}

/// The flags of a kube-apiserver serving on `addr` (advertising `advertise` in the `kubernetes`
/// Endpoints) with `files`, on the etcd at `etcd_url`: Talos's where they matter (this file's head).
pub fn flags(
    files: &ApiserverFiles,
    addr: SocketAddr,
    etcd_url: &str,
    advertise: &str,
    cert_dir: &Path,
) -> Vec<String> {
    vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--advertise-address={advertise}"),
        format!("--bind-address={}", addr.ip()),
        format!("--secure-port={}", addr.port()),
        format!("--tls-cert-file={}", files.cert),
        format!("--tls-private-key-file={}", files.key),
        format!("--client-ca-file={}", files.client_ca),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        format!("--service-account-signing-key-file={}", files.sa_key),
        format!("--service-account-key-file={}", files.sa_pub),
        "--service-cluster-ip-range=10.96.0.0/12".to_string(),
        "--authorization-mode=Node,RBAC".to_string(),
        "--enable-admission-plugins=NodeRestriction".to_string(),
        "--tls-min-version=VersionTLS13".to_string(),
        "--profiling=false".to_string(),
        format!("--cert-dir={}", cert_dir.display()),
    ]
}

impl KubeApiserver {
    /// Starts `bin` as `launch` says (the address's IP must be one of the certificate's); does
    /// not wait for it to be ready (the caller probes `/readyz`).
    pub fn start(bin: &Path, launch: &Launch) -> KubeApiserver {
        let log = launch
            .dir
            .join(format!("kube-apiserver-{}.log", launch.tag));
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(bin)
            // The endpoint reconciler refuses a loopback address to advertise: one from TEST-NET-1
            // (RFC 5737, never routed) goes into the `kubernetes` Endpoints, while it listens on
            // the test's loopback address.
            .args(flags(
                launch.files,
                launch.addr,
                launch.etcd_url,
                "192.0.2.10",
                launch.dir,
            ))
            .args(launch.extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("spawn kube-apiserver");
        KubeApiserver { child, log }
    }

    /// `SIGTERM`: a graceful shutdown.
    pub fn term(&self) {
        assert!(signal(self.child.id(), "TERM"), "SIGTERM kube-apiserver");
    }

    /// Its exit, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// The last `n` lines of its log, for a failure message.
    pub fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Waits (at most `limit`) for the exit.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "kube-apiserver did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
