//! A scenario's cast in the lab: one simulated apiserver per site (`readyprism sim-apiserver`, its
//! own process in the site's namespace), the real balancer on the node (`readyprism run`), the
//! kubelet-like client (`tests/lab/kubelet.py`) and `kubectl`, with the certificates and files
//! they share. Everything runs inside the lab's namespaces and is killed with it.
//!
//! Owns starting them and reading what they report (the balancer's JSON log, its admin
//! endpoints, the client's JSON lines). Does not own the faults (`netlab`), etcd (`etcd`) or the
//! figures (`figures`).
//!
//! This file holds the cast's constants, [`Cast`] and its start (certificates, the balancer's
//! config, waiting until all listen); `cast/apiserver.rs` the simulated apiservers and their
//! Endpoints object, `cast/kubelet.rs` the client and `kubectl`, `cast/observe.rs` reading the
//! balancer (`/status`, `/metrics`, its logged state changes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use readyprism::sim::pki::Ca;
use tokio::time::Instant;

use super::balancers::{spawn_other, Balancer};
use super::netlab::{Host, LabProcess, NetLab};

mod apiserver;
mod kubelet;
mod observe;
mod restart;

use apiserver::{spawn_apiserver, write_endpoints, ApiserverFiles};
pub use observe::lab_metrics;

/// The real binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_readyprism");
/// Every site's apiserver listens on `<site ip>:6443`.
pub const APISERVER_PORT: u16 = 6443;
/// The balancer's listener and admin endpoint, inside the node's namespace.
pub const LISTEN: &str = "127.0.0.1:7445";
pub const ADMIN: &str = "127.0.0.1:7446";
/// The balancer's defaults that the scenarios' figures depend on (docs/config.md).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
pub const FALL: usize = 2;
/// `failback_after` (default): how long dc-b must have been ready before connections relayed
/// to other zones are closed so their clients come home, spread over `FAILBACK_SPREAD`.
pub const FAILBACK_AFTER: f64 = 60.0;
pub const FAILBACK_SPREAD: f64 = 10.0;
/// The client ends a stream connection that delivered nothing for this long (its `--silence`;
/// kubelet's HTTP/2 health check gives up after about 45 s).
pub const CLIENT_SILENCE: Duration = Duration::from_secs(30);

/// The wall clock in seconds: the one clock the test, the balancer's log timestamps and the
/// client's records share (they run in different processes).
pub fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// What decides a site's `/readyz`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readyz {
    /// Always 200.
    Pass,
    /// A linearizable read of the site's own etcd member (`--etcd http://127.0.0.1:2379`).
    Etcd,
    /// Its etcd is down (nothing listens where it looks): 500 `[-]etcd failed` at once. Alive,
    /// answering, not ready, for the whole scenario.
    EtcdDown,
}

/// The site a backend address (`10.77.1.1:6443`) belongs to.
pub fn site_of(address: &str) -> Option<Host> {
    Host::SITES
        .into_iter()
        .find(|s| address == format!("{}:{APISERVER_PORT}", s.ip()))
}

pub use super::client::{ClientEvent, Exchange};

/// More for readyprism's config and command line (the chaos runs).
#[derive(Clone, Debug, Default)]
pub struct Tuning {
    /// YAML appended to the config.
    pub config: String,
    /// `--log-level` (e.g. to log every connection's record).
    pub log_level: Option<String>,
}

/// `readyprism --log-format json [--log-level L] run --config <config>` in the node's namespace.
pub fn readyprism_command(
    lab: &NetLab,
    config: &std::path::Path,
    log_level: Option<&str>,
) -> std::process::Command {
    let mut cmd = lab.command(Host::Node, BIN);
    cmd.args(["--log-format", "json"]);
    if let Some(level) = log_level {
        cmd.args(["--log-level", level]);
    }
    cmd.args(["run", "--config"])
        .arg(config)
        .env_remove("READYPRISM_ZONE")
        .env_remove("RUST_LOG");
    cmd
}

/// How the balancer learns the apiservers in the membership scenario: the seeds it is
/// configured with, and discovery's poll interval.
pub struct Members {
    pub seeds: &'static [Host],
    pub interval: &'static str,
}

/// The apiservers, the balancer and (once started) the client of one scenario.
pub struct Cast<'a> {
    lab: &'a NetLab,
    apiservers: BTreeMap<Host, LabProcess>,
    /// Each site's `/readyz` and more flags, to start its apiserver again
    /// ([`Cast::start_apiserver_again`]), and how many times it was.
    spawned: BTreeMap<Host, (Readyz, Vec<String>, u32)>,
    /// Apiservers stopped by [`Cast::start_apiserver_again`], kept for their logs.
    retired_apiservers: Vec<LabProcess>,
    /// Apiservers started later ([`Cast::start_apiserver`]), by name.
    joined: BTreeMap<String, LabProcess>,
    authority: Ca,
    endpoints: Option<PathBuf>,
    kind: Balancer,
    balancer: LabProcess,
    /// Balancers stopped by [`Cast::restart_balancer`], kept for their logs.
    retired: Vec<LabProcess>,
    /// The balancer's config file and `--log-level` (to start it again).
    config: PathBuf,
    log_level: Option<String>,
    client: Option<LabProcess>,
    ca: PathBuf,
    kubelet_pem: PathBuf,
    kubeconfig: PathBuf,
    client_out: PathBuf,
}

fn write(lab: &NetLab, name: &str, text: &str) -> PathBuf {
    let path = lab.path(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    path
}

/// Polls `done` every 50 ms until it holds or `timeout` passes; false on timeout.
pub fn poll(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl<'a> Cast<'a> {
    /// Issues the certificates, starts one apiserver per site and the balancer on the node, and
    /// waits until they all listen. `readyz` gives each site's `/readyz`. With `members`, the balancer follows the cluster's list instead of
    /// knowing every site: its config names only the seeds, the zones by network (no `zone:`),
    /// and discovery on, and every apiserver serves the Endpoints object of [`Cast::set_endpoints`]
    /// (all three sites until then).
    pub fn start_with(
        lab: &'a NetLab,
        readyz: [(Host, Readyz); 3],
        members: Option<&Members>,
    ) -> Cast<'a> {
        Cast::start_inner(
            lab,
            readyz,
            members,
            Balancer::Readyprism,
            &[],
            &Tuning::default(),
        )
    }

    /// [`Cast::start_with`], readyprism with `tuning` and more flags for some sites' simulated
    /// apiservers (`flags`).
    pub fn start_tuned(
        lab: &'a NetLab,
        readyz: [(Host, Readyz); 3],
        members: Option<&Members>,
        flags: &[(Host, &[&str])],
        tuning: &Tuning,
    ) -> Cast<'a> {
        Cast::start_inner(lab, readyz, members, Balancer::Readyprism, flags, tuning)
    }

    /// [`Cast::start_with`] without members, with `balancer` on the node instead of readyprism
    /// and more flags for some sites' simulated apiservers (`flags`).
    pub fn start_for(
        lab: &'a NetLab,
        readyz: [(Host, Readyz); 3],
        balancer: Balancer,
        flags: &[(Host, &[&str])],
    ) -> Cast<'a> {
        Cast::start_inner(lab, readyz, None, balancer, flags, &Tuning::default())
    }

    fn start_inner(
        lab: &'a NetLab,
        readyz: [(Host, Readyz); 3],
        members: Option<&Members>,
        kind: Balancer,
        flags: &[(Host, &[&str])],
        tuning: &Tuning,
    ) -> Cast<'a> {
        let ca = Ca::new("partition-lab-ca").expect("CA");
        let ca_path = write(lab, "ca.crt", &ca.cert_pem);
        let kubelet = ca.client("node").expect("kubelet cert");
        let kubelet_pem = write(lab, "kubelet-client-current.pem", &kubelet.combined_pem());
        let endpoints = members.map(|_| lab.path("endpoints.json"));
        if let Some(path) = &endpoints {
            write_endpoints(path, &Host::SITES.map(Host::ip));
        }
        let mut apiservers = BTreeMap::new();
        let mut spawned = BTreeMap::new();
        for (site, readyz) in readyz {
            let files = ApiserverFiles {
                ca: &ca,
                ca_path: &ca_path,
                endpoints: endpoints.as_deref(),
                require_client_cert: kind == Balancer::Readyprism,
            };
            let extra = flags
                .iter()
                .find(|(h, _)| *h == site)
                .map_or(&[][..], |f| f.1);
            let (ip, name) = (site.ip(), site.name());
            let proc = spawn_apiserver(lab, &files, site, (ip, name), readyz, extra, name);
            apiservers.insert(site, proc);
            let extra = extra.iter().map(|f| f.to_string()).collect();
            spawned.insert(site, (readyz, extra, 0));
        }
        let (zone, backends, discovery) = match members {
            None => (
                "zone: dc-b\n".to_string(),
                Host::SITES
                    .iter()
                    .map(|s| {
                        format!(
                            "  - {{ address: \"{}:{APISERVER_PORT}\", zone: {} }}\n",
                            s.ip(),
                            s.name()
                        )
                    })
                    .collect::<String>(),
                String::new(),
            ),
            Some(m) => (
                format!(
                    "zones:\n{}",
                    Host::SITES
                        .iter()
                        .map(|s| {
                            let [a, b, c, _] = s.ip().octets();
                            format!("  {}: [\"{a}.{b}.{c}.0/24\"]\n", s.name())
                        })
                        .collect::<String>()
                ),
                m.seeds
                    .iter()
                    .map(|s| format!("  - {{ address: \"{}:{APISERVER_PORT}\" }}\n", s.ip()))
                    .collect::<String>(),
                format!(
                    "discovery:\n  endpoints: true\n  interval: {}\n  cache: {}\n",
                    m.interval,
                    lab.path("backends-cache.json").display()
                ),
            ),
        };
        let config = format!(
            "listen: [\"{LISTEN}\"]\nadmin: \"{ADMIN}\"\n{zone}backends:\n{backends}{discovery}tls:\n  ca: {}\n  client_cert: {}\n{}",
            ca_path.display(),
            kubelet_pem.display(),
            tuning.config,
        );
        let config = write(lab, "readyprism.yaml", &config);
        let cmd = readyprism_command(lab, &config, tuning.log_level.as_deref());
        let balancer = match kind {
            Balancer::Readyprism => lab.spawn("readyprism", cmd).expect("spawn readyprism"),
            other => spawn_other(lab, other),
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: https://{LISTEN}\n    certificate-authority: {ca}\nusers:\n- name: kubelet\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\ncontexts:\n- name: lab\n  context: {{cluster: lab, user: kubelet}}\ncurrent-context: lab\n",
            ca = ca_path.display(),
            pem = kubelet_pem.display()
        );
        let kubeconfig = write(lab, "kubeconfig", &kubeconfig);
        let cast = Cast {
            lab,
            apiservers,
            spawned,
            retired_apiservers: Vec::new(),
            joined: BTreeMap::new(),
            authority: ca,
            endpoints,
            kind,
            balancer,
            retired: Vec::new(),
            config,
            log_level: tuning.log_level.clone(),
            client: None,
            ca: ca_path,
            kubelet_pem,
            kubeconfig,
            client_out: lab.path("kubelet.jsonl"),
        };
        for (site, proc) in &cast.apiservers {
            let up = poll(Duration::from_secs(10), || {
                proc.log_text().contains("simulated apiserver listening")
            });
            assert!(
                up,
                "apiserver of {} did not start: {}",
                site.name(),
                proc.log_text()
            );
        }
        let up = kind != Balancer::Readyprism
            || poll(Duration::from_secs(10), || {
                cast.balancer.log_text().contains("readyprism started")
            });
        assert!(up, "readyprism did not start: {}", cast.balancer.log_text());
        cast
    }

    /// The lab it runs in.
    pub fn lab(&self) -> &NetLab {
        self.lab
    }
}
