//! A scenario's cast in the lab: one simulated apiserver per site (`readyprism sim-apiserver`, its
//! own process in the site's namespace), the real balancer on the node (`readyprism run`), the
//! kubelet-like client (`tests/lab/kubelet.py`) and `kubectl`, with the certificates and files
//! they share. Everything runs inside the lab's namespaces and is killed with it.
//!
//! Owns starting them and reading what they report (the balancer's JSON log, its admin
//! endpoints, the client's JSON lines). Does not own the faults (`netlab`), etcd (`etcd`) or the
//! figures (`figures`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use readyprism::sim::pki::Ca;
use tokio::time::Instant;

use super::balancer_log::Change;
use super::balancers::{spawn_other, Balancer};
use super::netlab::{lab_dir, Host, LabProcess, NetLab};

/// The real binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_readyprism");
/// Every site's apiserver listens on `<site ip>:6443`.
pub const APISERVER_PORT: u16 = 6443;
/// The balancer's listener and admin endpoint, inside the node's namespace.
pub const LISTEN: &str = "127.0.0.1:7445";
pub const ADMIN: &str = "127.0.0.1:7446";
/// The balancer's defaults that the scenarios' figures depend on (README: config reference).
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

pub use super::client::ClientEvent;

/// How the balancer learns the apiservers in the membership scenario: the seeds it is
/// configured with, and discovery's poll interval.
pub struct Members {
    pub seeds: &'static [Host],
    pub interval: &'static str,
}

/// What every simulated apiserver of a cast shares.
struct ApiserverFiles<'f> {
    ca: &'f Ca,
    ca_path: &'f Path,
    /// The Endpoints object it serves (membership scenario), re-read on every request.
    endpoints: Option<&'f Path>,
    /// A client certificate is required (readyprism's probes present one); otherwise it is
    /// verified when presented, as kube-apiserver does (the others' checks present none).
    require_client_cert: bool,
}

/// The `kubernetes` Endpoints object with `ips` × the `https` port, written whole (rename) so
/// that an apiserver never serves half of it.
fn write_endpoints(path: &Path, ips: &[Ipv4Addr]) {
    let addresses: Vec<_> = ips
        .iter()
        .map(|ip| serde_json::json!({ "ip": ip.to_string() }))
        .collect();
    let object = serde_json::json!({
        "kind": "Endpoints",
        "apiVersion": "v1",
        "metadata": { "name": "kubernetes", "namespace": "default" },
        "subsets": [{
            "addresses": addresses,
            "ports": [{ "name": "https", "port": APISERVER_PORT, "protocol": "TCP" }],
        }],
    });
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, object.to_string()).unwrap_or_else(|e| panic!("{tmp:?}: {e}"));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
}

/// Starts one simulated apiserver named `name` on `ip:6443` in `host`'s namespace, with a
/// certificate for `ip`, requiring the kubelet's client certificate.
fn spawn_apiserver(
    lab: &NetLab,
    files: &ApiserverFiles,
    host: Host,
    ip: Ipv4Addr,
    name: &str,
    readyz: Readyz,
) -> LabProcess {
    let ip = ip.to_string();
    let cert = files.ca.server(&[&ip, "127.0.0.1"]).expect("server cert");
    let cert_path = write(lab, &format!("{name}.crt"), &cert.cert_pem);
    let key_path = write(lab, &format!("{name}.key"), &cert.key_pem);
    let mut cmd = lab.command(host, BIN);
    cmd.args(["--log-format", "json", "sim-apiserver", "--name", name])
        .args(["--listen", &format!("{ip}:{APISERVER_PORT}")])
        .arg("--cert")
        .arg(&cert_path)
        .arg("--key")
        .arg(&key_path)
        .arg("--client-ca")
        .arg(files.ca_path);
    if files.require_client_cert {
        cmd.arg("--require-client-cert");
    }
    if let Some(endpoints) = files.endpoints {
        cmd.arg("--endpoints-file").arg(endpoints);
    }
    match readyz {
        Readyz::Pass => {}
        Readyz::Etcd => {
            cmd.args(["--etcd", "http://127.0.0.1:2379"]);
        }
        Readyz::EtcdDown => {
            cmd.args(["--etcd", "http://127.0.0.1:9"]);
        }
    }
    lab.spawn(&format!("apiserver-{name}"), cmd)
        .expect("spawn sim-apiserver")
}

/// The apiservers, the balancer and (once started) the client of one scenario.
pub struct Cast<'a> {
    lab: &'a NetLab,
    apiservers: BTreeMap<Host, LabProcess>,
    /// Apiservers started later ([`Cast::start_apiserver`]), by name.
    joined: BTreeMap<String, LabProcess>,
    authority: Ca,
    endpoints: Option<PathBuf>,
    kind: Balancer,
    balancer: LabProcess,
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
    /// waits until they all listen. `readyz` gives each site's `/readyz`.
    pub fn start(lab: &'a NetLab, readyz: [(Host, Readyz); 3]) -> Cast<'a> {
        Cast::start_with(lab, readyz, None)
    }

    /// [`Cast::start`]; with `members`, the balancer follows the cluster's list instead of
    /// knowing every site: its config names only the seeds, the zones by network (no `zone:`),
    /// and discovery on, and every apiserver serves the Endpoints object of [`Cast::set_endpoints`]
    /// (all three sites until then).
    pub fn start_with(
        lab: &'a NetLab,
        readyz: [(Host, Readyz); 3],
        members: Option<&Members>,
    ) -> Cast<'a> {
        Cast::start_inner(lab, readyz, members, Balancer::Readyprism)
    }

    /// [`Cast::start`] with `balancer` on the node instead of readyprism.
    pub fn start_for(lab: &'a NetLab, readyz: [(Host, Readyz); 3], balancer: Balancer) -> Cast<'a> {
        Cast::start_inner(lab, readyz, None, balancer)
    }

    fn start_inner(
        lab: &'a NetLab,
        readyz: [(Host, Readyz); 3],
        members: Option<&Members>,
        kind: Balancer,
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
        for (site, readyz) in readyz {
            let files = ApiserverFiles {
                ca: &ca,
                ca_path: &ca_path,
                endpoints: endpoints.as_deref(),
                require_client_cert: kind == Balancer::Readyprism,
            };
            let proc = spawn_apiserver(lab, &files, site, site.ip(), site.name(), readyz);
            apiservers.insert(site, proc);
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
            "listen: [\"{LISTEN}\"]\nadmin: \"{ADMIN}\"\n{zone}backends:\n{backends}{discovery}tls:\n  ca: {}\n  client_cert: {}\n",
            ca_path.display(),
            kubelet_pem.display(),
        );
        let config = write(lab, "readyprism.yaml", &config);
        let mut cmd = lab.command(Host::Node, BIN);
        cmd.args(["--log-format", "json", "run", "--config"])
            .arg(&config)
            .env_remove("READYPRISM_ZONE")
            .env_remove("RUST_LOG");
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
            joined: BTreeMap::new(),
            authority: ca,
            endpoints,
            kind,
            balancer,
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

    /// Starts another apiserver named `name` on `ip` in `host`'s namespace (a control-plane node
    /// joining; the address must exist there: [`NetLab::add_address`]) and waits until it listens.
    pub fn start_apiserver(&mut self, host: Host, ip: Ipv4Addr, name: &str) {
        let files = ApiserverFiles {
            ca: &self.authority,
            ca_path: &self.ca,
            endpoints: self.endpoints.as_deref(),
            require_client_cert: self.kind == Balancer::Readyprism,
        };
        let proc = spawn_apiserver(self.lab, &files, host, ip, name, Readyz::Pass);
        let up = poll(Duration::from_secs(10), || {
            proc.log_text().contains("simulated apiserver listening")
        });
        assert!(up, "apiserver {name} did not start: {}", proc.log_text());
        self.joined.insert(name.to_string(), proc);
    }

    /// What every apiserver's Endpoints object says from now on: `ips` × the `https` port.
    pub fn set_endpoints(&self, ips: &[Ipv4Addr]) {
        let path = self
            .endpoints
            .as_ref()
            .expect("a cast started with members serves an Endpoints object");
        write_endpoints(path, ips);
    }

    /// The balancer's `/status` document.
    pub fn status(&self) -> Result<serde_json::Value, String> {
        let script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
        let url = format!("http://{ADMIN}/status");
        let out = self.lab.output(
            Host::Node,
            "python3",
            &["-c", script, &url],
            &[],
            Duration::from_secs(10),
        )?;
        serde_json::from_slice(&out.stdout).map_err(|e| format!("/status: {e}"))
    }

    /// Every backend state change the balancer has logged so far, in order.
    pub fn changes(&self) -> Vec<Change> {
        super::balancer_log::changes(&self.balancer.log_text())
    }

    /// Each site's state after the latest logged change (`ready`, `unready`; absent: unknown).
    pub fn states(&self) -> BTreeMap<Host, String> {
        self.changes().into_iter().map(|c| (c.site, c.to)).collect()
    }

    /// Which balancer runs on the node.
    pub fn balancer_kind(&self) -> Balancer {
        self.kind
    }

    /// Whether every `(site, state)` in `want` holds now; always for the other balancers, which
    /// log no states.
    pub fn states_are(&self, want: &[(Host, &str)]) -> bool {
        if self.kind != Balancer::Readyprism {
            return true;
        }
        let now = self.states();
        want.iter()
            .all(|(s, st)| now.get(s).map(String::as_str) == Some(*st))
    }

    /// Waits until every `(site, state)` in `want` holds; panics with the log after `timeout`.
    pub fn wait_states(&self, want: &[(Host, &str)], timeout: Duration) {
        if !poll(timeout, || self.states_are(want)) {
            panic!(
                "balancer states {:?} never became {want:?} within {timeout:?}:\n{}",
                self.states(),
                self.balancer.log_text()
            );
        }
    }

    /// Starts the kubelet-like client and waits until its stream delivers and requests succeed.
    pub fn start_client(&mut self) {
        self.start_client_with(&[]);
    }

    /// [`Cast::start_client`] with more of `kubelet.py`'s flags (`--slow`).
    pub fn start_client_with(&mut self, flags: &[&str]) {
        let mut cmd = self.lab.command(Host::Node, "python3");
        cmd.arg("-u")
            .arg(lab_dir().join("kubelet.py"))
            .args(["--server", LISTEN])
            .arg("--ca")
            .arg(&self.ca)
            .arg("--cert")
            .arg(&self.kubelet_pem)
            .arg("--out")
            .arg(&self.client_out)
            .arg("--silence")
            .arg(CLIENT_SILENCE.as_secs().to_string())
            .args(flags);
        self.client = Some(self.lab.spawn("kubelet", cmd).expect("spawn kubelet.py"));
        let flowing = poll(Duration::from_secs(10), || {
            let events = self.client_events();
            let lines = events
                .iter()
                .filter(|e| matches!(e, ClientEvent::Line { .. }))
                .count();
            let ok = events
                .iter()
                .filter(|e| matches!(e, ClientEvent::Req { ok: true, .. }))
                .count();
            lines >= 2 && ok >= 3
        });
        assert!(
            flowing,
            "the client's stream and requests did not start: {:?}\n{}",
            self.client_events(),
            self.client
                .as_ref()
                .map(|c| c.log_text())
                .unwrap_or_default()
        );
    }

    /// Stops the client (its records stay).
    pub fn stop_client(&mut self) {
        self.client.take();
    }

    /// Everything the client recorded so far.
    pub fn client_events(&self) -> Vec<ClientEvent> {
        std::fs::read_to_string(&self.client_out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// `kubectl --kubeconfig <lab kubeconfig> get --raw /readyz` in the node's namespace: the
    /// answer, or why it failed.
    pub fn kubectl_readyz(&self) -> Result<String, String> {
        let kubeconfig = self.kubeconfig.display().to_string();
        let out = self.lab.output(
            Host::Node,
            "kubectl",
            &[
                "--kubeconfig",
                &kubeconfig,
                "get",
                "--raw",
                "/readyz",
                "--request-timeout=10s",
            ],
            &[],
            Duration::from_secs(20),
        )?;
        let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
        if out.status.success() {
            Ok(text(&out.stdout))
        } else {
            Err(format!("{}: {}", out.status, text(&out.stderr)))
        }
    }

    /// The balancer's `/metrics` lines that mention `needle`.
    pub fn metrics(&self, needle: &str) -> Vec<String> {
        lab_metrics(self.lab, needle)
    }

    /// The lab it runs in.
    pub fn lab(&self) -> &NetLab {
        self.lab
    }

    /// The balancer's log (for failure messages).
    pub fn balancer_log(&self) -> String {
        self.balancer.log_text()
    }
}

/// A balancer's `/metrics` lines that mention `needle`, fetched from inside the node's namespace.
pub fn lab_metrics(lab: &NetLab, needle: &str) -> Vec<String> {
    let script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
    let url = format!("http://{ADMIN}/metrics");
    match lab.output(
        Host::Node,
        "python3",
        &["-c", script, &url],
        &[],
        Duration::from_secs(10),
    ) {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(needle) && !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
        Err(e) => vec![format!("metrics: {e}")],
    }
}
