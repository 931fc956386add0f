//! The balancers of the fleet: one process per node, each with its own loopback listener and its
//! config in the run directory. readyprism runs with the default health settings; HAProxy as
//! OpenShift's machine-config-operator runs its API load balancer (`mode tcp`, `/readyz` checks
//! over mTLS, `inter 5s fastinter 2s fall 2 rise 3`, `on-marked-down shutdown-sessions`,
//! `balance roundrobin`); KubePrism as Talos runs it (`tests/real/kubeprism`: TCP dial checks
//! every 20 s, round robin). Which kinds a run has and where their binaries are: `lineup.rs`.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::process::{self, free_port, http_status};

/// Which balancer the fleet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The `readyprism` binary.
    Readyprism,
    /// The same with paced re-entry on (`reentry_window: 5s`; off by default). Runs only when
    /// `HERD_KINDS` names it.
    Paced,
    /// HAProxy, configured as OpenShift runs it.
    Haproxy,
    /// Talos's KubePrism (go-loadbalancer with Talos's options), built by `tests/real/build`.
    Kubeprism,
}

impl Kind {
    /// Every kind, in the order of the run and of the table's columns.
    pub const ALL: [Kind; 4] = [
        Kind::Readyprism,
        Kind::Paced,
        Kind::Haproxy,
        Kind::Kubeprism,
    ];

    /// Name in `HERD_KINDS`, the output and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Readyprism => "readyprism",
            Kind::Paced => "readyprism-paced",
            Kind::Haproxy => "haproxy",
            Kind::Kubeprism => "kubeprism",
        }
    }

    /// Name in the table's header and the picture's title.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Readyprism => "readyprism",
            Kind::Paced => "readyprism, reentry_window 5s",
            Kind::Haproxy => "HAProxy",
            Kind::Kubeprism => "KubePrism",
        }
    }
}

/// What every balancer needs: binaries and the kubelet's certificate files.
pub struct Env {
    /// The `readyprism` binary.
    pub readyprism: PathBuf,
    /// The `kubeprism` binary; `None` when the run has no KubePrism fleet.
    pub kubeprism: Option<PathBuf>,
    /// Cluster CA.
    pub ca: PathBuf,
    /// The kubelet's client certificate and key, one PEM.
    pub client: PathBuf,
}

/// One node's balancer process. Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Balancer {
    /// Where its clients dial.
    pub addr: SocketAddr,
    /// How it tells that it can route.
    readiness: Readiness,
    child: Child,
}

/// How a balancer says it can route, by kind.
enum Readiness {
    /// readyprism: its admin `/readyz` at this address answers 200 (a backend ready).
    AdminReadyz(SocketAddr),
    /// HAProxy starts with its servers up: accepting is ready.
    Accepting,
    /// KubePrism listens from `Start`, before it is handed its endpoints: its
    /// `{"event":"started"}` line in this log comes after.
    StartedLine(PathBuf),
}

impl Balancer {
    /// Starts a `kind` balancer in `dir` in front of `apiservers`, and waits until it accepts.
    pub fn start(kind: Kind, dir: &Path, apiservers: &[SocketAddr], env: &Env) -> Balancer {
        std::fs::create_dir_all(dir).expect("balancer directory");
        let listen = free_port();
        let log_path = dir.join(format!("{}.log", kind.name()));
        let (mut cmd, readiness) = match kind {
            Kind::Readyprism | Kind::Paced => {
                let admin = free_port();
                let cfg = dir.join("readyprism.yaml");
                let mut text = readyprism_config(listen, admin, apiservers, env);
                if kind == Kind::Paced {
                    text.push_str("reentry_window: 5s\n");
                }
                std::fs::write(&cfg, text).expect("write readyprism config");
                let mut c = Command::new(&env.readyprism);
                c.args(["--log-level", "info", "run", "--config"]).arg(&cfg);
                (c, Readiness::AdminReadyz(admin))
            }
            Kind::Haproxy => {
                let cfg = dir.join("haproxy.cfg");
                std::fs::write(&cfg, haproxy_config(listen, apiservers, env))
                    .expect("write haproxy config");
                let mut c = Command::new("haproxy");
                c.args(["-db", "-f"]).arg(&cfg);
                (c, Readiness::Accepting)
            }
            Kind::Kubeprism => {
                let bin = env
                    .kubeprism
                    .as_ref()
                    .expect("a KubePrism fleet only when lineup.rs found its binary");
                let mut c = Command::new(bin);
                c.args(kubeprism_args(listen, apiservers));
                (c, Readiness::StartedLine(log_path.clone()))
            }
        };
        let log = std::fs::File::create(&log_path).expect("log");
        let child = process::spawn_logged(&mut cmd, log, kind.name());
        let mut b = Balancer {
            addr: listen,
            readiness,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(listen).is_err() {
            assert!(
                b.alive(),
                "{} exited at start (log in {})",
                kind.name(),
                dir.display()
            );
            assert!(Instant::now() < deadline, "{} never listened", kind.name());
            std::thread::sleep(Duration::from_millis(5));
        }
        b
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether it says it can route (see [`Readiness`]).
    pub fn ready(&self) -> bool {
        match &self.readiness {
            Readiness::AdminReadyz(admin) => http_status(*admin, "/readyz") == Some(200),
            Readiness::Accepting => true,
            Readiness::StartedLine(log) => std::fs::read_to_string(log)
                .is_ok_and(|text| text.contains("\"event\":\"started\"")),
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        process::stop(&mut self.child);
    }
}

/// readyprism with every health setting at its default; no status file (fifty would share one).
fn readyprism_config(
    listen: SocketAddr,
    admin: SocketAddr,
    apiservers: &[SocketAddr],
    env: &Env,
) -> String {
    let backends: String = apiservers
        .iter()
        .map(|a| format!("  - address: \"{a}\"\n"))
        .collect();
    format!(
        "listen: [\"{listen}\"]\nadmin: \"{admin}\"\nstatus_file: \"\"\n\
         tls:\n  ca: {}\n  client_cert: {}\nbackends:\n{backends}",
        env.ca.display(),
        env.client.display()
    )
}

/// HAProxy as OpenShift's machine-config-operator configures its API load balancer, with the
/// health settings of its `/readyz` check: every 5 s, every 2 s while changing, down after 2
/// failures, up after 3 passes, sessions shut when a server goes down. `nbthread 1`: fifty
/// processes share the bench machine's two cores (threads change nothing of what is measured).
fn haproxy_config(listen: SocketAddr, apiservers: &[SocketAddr], env: &Env) -> String {
    let servers: String = apiservers
        .iter()
        .enumerate()
        .map(|(i, a)| {
            format!(
                "  server apiserver-{i} {a} weight 1 check check-ssl verify required ca-file {} crt {} \
                 inter 5s fastinter 2s fall 2 rise 3 on-marked-down shutdown-sessions\n",
                env.ca.display(),
                env.client.display()
            )
        })
        .collect();
    format!(
        "global\n  nbthread 1\n  maxconn 2000\n\
         defaults\n  mode tcp\n  retries 3\n  timeout connect 10s\n  timeout client 86400s\n  \
         timeout server 86400s\n  timeout tunnel 86400s\n\
         frontend main\n  bind {listen}\n  default_backend masters\n\
         backend masters\n  option httpchk GET /readyz HTTP/1.0\n  balance roundrobin\n{servers}"
    )
}

/// KubePrism's command line (`tests/real/kubeprism/main.go`, every option Talos's): the
/// apiservers in Talos's order of members, errors-only logging as Talos runs it.
fn kubeprism_args(listen: SocketAddr, apiservers: &[SocketAddr]) -> Vec<String> {
    let endpoints: Vec<String> = apiservers.iter().map(SocketAddr::to_string).collect();
    vec![
        "--listen".to_string(),
        listen.ip().to_string(),
        "--port".to_string(),
        listen.port().to_string(),
        "--endpoints".to_string(),
        endpoints.join(","),
        "--log-level".to_string(),
        "error".to_string(),
    ]
}
