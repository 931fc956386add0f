//! The real lab's cast: a real kube-apiserver per site on its own etcd 3.7 member, a real
//! kube-controller-manager (only its node lifecycle controller), the node's balancer (readyprism
//! or Talos's real KubePrism) and the kubelet's lease client through it. Everything runs in the
//! lab's namespaces and is killed with it.
//!
//! Owns starting them and the files they share; not the faults (`netlab`), etcd (`etcd`) or what
//! the records mean (`outcome.rs`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use readyprism::sim::pki::Ca;

use crate::partition::cast::{poll, readyprism_command, wall, ADMIN, APISERVER_PORT, LISTEN};
use crate::partition::etcd::CLIENT_PORT;
use crate::partition::netlab::{lab_print, Host, LabProcess, NetLab};
use crate::real_apiserver::kube::{self, ApiserverFiles};
use crate::support::real::real_bin;

/// The node's name: the lease client's certificate is `system:node:lab-node`.
pub const NODE: &str = "lab-node";
/// `--shutdown-delay-duration`, as the project's Talos control-plane patches set it.
pub const SHUTDOWN_DELAY: &str = "15s";
/// kube-controller-manager's `--node-monitor-grace-period` (its default since 1.32, said).
pub const GRACE: Duration = Duration::from_secs(50);
/// readyprism's `failback_after` here: the stream is home within seconds of a heal, so the next
/// fault meets it there.
pub const FAILBACK_AFTER: &str = "10s";
/// How long every apiserver's `/readyz` must have answered `ok` before a fault's baseline.
pub const SETTLE: Duration = Duration::from_secs(10);

/// Which balancer is on the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Readyprism,
    /// go-loadbalancer v0.5.0 with Talos's options (`tests/real/kubeprism`).
    Kubeprism,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Readyprism => "readyprism",
            Kind::Kubeprism => "KubePrism (real)",
        }
    }
}

/// The real binaries, from `tests/real/build`.
pub struct Bins {
    apiserver: PathBuf,
    pub etcd: PathBuf,
    kcm: PathBuf,
    lease: PathBuf,
    kubeprism: Option<PathBuf>,
}

impl Bins {
    /// The binaries `kind` needs; `None` after saying why (a failure under
    /// `READYPRISM_REQUIRE_REAL=1`).
    pub fn find(kind: Kind, what: &str) -> Option<Bins> {
        let kubeprism = match kind {
            Kind::Kubeprism => Some(real_bin("kubeprism", "kubeprism", what)?),
            Kind::Readyprism => None,
        };
        Some(Bins {
            apiserver: real_bin("kube-apiserver", "kube-apiserver", what)?,
            etcd: real_bin("etcd", "etcd", what)?,
            kcm: real_bin("kube-controller-manager", "kube-controller-manager", what)?,
            lease: real_bin("lease-client", "lease-client", what)?,
            kubeprism,
        })
    }
}

/// The running cast.
pub struct RealCast<'a> {
    lab: &'a NetLab,
    bins: &'a Bins,
    files: ApiserverFiles,
    pub kind: Kind,
    apiservers: BTreeMap<Host, LabProcess>,
    /// Apiservers stopped and started again, kept for their logs.
    retired: Vec<LabProcess>,
    /// One per site on its own apiserver, leader-elected, as on control-plane nodes; started once
    /// the apiservers have settled (it gives up on an apiserver not yet healthy).
    kcm: Vec<LabProcess>,
    /// kube-controller-managers that exited and were started again (the site's index), for their
    /// logs.
    kcm_retired: Vec<(usize, LabProcess)>,
    /// Each site's kubeconfig for its kube-controller-manager (the admin's, on that apiserver).
    kcm_kubeconfigs: Vec<(Host, PathBuf)>,
    pub balancer: LabProcess,
    client: Option<LabProcess>,
    admin: PathBuf,
    ca: PathBuf,
    node_cert: (PathBuf, PathBuf),
}

fn write(lab: &NetLab, name: &str, text: &str) -> PathBuf {
    let path = lab.path(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    path
}

fn addr(site: Host) -> SocketAddr {
    SocketAddr::new(site.ip().into(), APISERVER_PORT)
}

/// A kubeconfig for `server` with the client certificate `(cert, key)`.
fn kubeconfig(ca: &Path, server: &str, (cert, key): (&Path, &Path)) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: lab\n  context: {{cluster: lab, user: u}}\ncurrent-context: lab\n",
        ca.display(),
        cert.display(),
        key.display()
    )
}

impl<'a> RealCast<'a> {
    /// Starts the apiservers and waits until every `/readyz` has said `ok` for [`SETTLE`]; then
    /// kube-controller-manager, the balancer, and the lease client, and waits for its Node and
    /// two renewals.
    pub fn start(lab: &'a NetLab, bins: &'a Bins, kind: Kind) -> RealCast<'a> {
        let ca = Ca::new("real-lab-ca").expect("ca");
        let mut sans: Vec<String> = Host::SITES.iter().map(|s| s.ip().to_string()).collect();
        sans.push("127.0.0.1".into());
        let sans: Vec<&str> = sans.iter().map(String::as_str).collect();
        let files = ApiserverFiles::write(lab.dir(), &ca, &sans);
        let ca_path = PathBuf::from(&files.client_ca);
        let put_pair = |name: &str, issued: &readyprism::sim::pki::Issued| {
            (
                write(lab, &format!("{name}.crt"), &issued.cert_pem),
                write(lab, &format!("{name}.key"), &issued.key_pem),
            )
        };
        let admin_pair = put_pair(
            "admin",
            &ca.user("lab-admin", "system:masters").expect("admin"),
        );
        let node = ca.client(NODE).expect("node cert");
        let node_cert = put_pair("node", &node);
        let node_pem = write(
            lab,
            "node.pem",
            &format!("{}{}", node.cert_pem, node.key_pem),
        );
        let admin = write(
            lab,
            "admin.kubeconfig",
            &kubeconfig(
                &ca_path,
                &format!("https://{}", addr(Host::DcA)),
                (&admin_pair.0, &admin_pair.1),
            ),
        );
        let kcm_kubeconfigs = Host::SITES
            .iter()
            .map(|&s| {
                let name = format!("kcm-{}.kubeconfig", s.name());
                let text = kubeconfig(
                    &ca_path,
                    &format!("https://{}", addr(s)),
                    (&admin_pair.0, &admin_pair.1),
                );
                (s, write(lab, &name, &text))
            })
            .collect();
        let mut cast_apiservers = BTreeMap::new();
        for site in Host::SITES {
            cast_apiservers.insert(site, spawn_apiserver(lab, bins, &files, site, 0));
        }
        let balancer = match kind {
            Kind::Readyprism => {
                let backends: String = Host::SITES
                    .iter()
                    .map(|s| format!("  - {{ address: \"{}\", zone: {} }}\n", addr(*s), s.name()))
                    .collect();
                let config = format!(
                    "listen: [\"{LISTEN}\"]\nadmin: \"{ADMIN}\"\nzone: dc-b\nfailback_after: {FAILBACK_AFTER}\nbackends:\n{backends}tls:\n  ca: {}\n  client_cert: {}\n",
                    ca_path.display(),
                    node_pem.display()
                );
                let config = write(lab, "readyprism.yaml", &config);
                let cmd =
                    readyprism_command(lab, &config, Some("info,readyprism::proxy::record=debug"));
                lab.spawn("readyprism", cmd).expect("spawn readyprism")
            }
            Kind::Kubeprism => {
                // Talos's order: the cluster endpoint (dc-a standing for it), then the members
                // (a worker has no local apiserver).
                let endpoints = [Host::DcA, Host::DcB, Host::Witness]
                    .map(|s| addr(s).to_string())
                    .join(",");
                let bin = bins.kubeprism.as_ref().expect("kubeprism built");
                let mut cmd = lab.command(Host::Node, bin);
                cmd.args(["--endpoints", &endpoints]);
                lab.spawn("kubeprism", cmd).expect("spawn kubeprism")
            }
        };
        let mut cast = RealCast {
            lab,
            bins,
            files,
            kind,
            apiservers: cast_apiservers,
            retired: Vec::new(),
            kcm: Vec::new(),
            kcm_kubeconfigs,
            kcm_retired: Vec::new(),
            balancer,
            client: None,
            admin,
            ca: ca_path,
            node_cert,
        };
        cast.wait_settled(&Host::SITES, Duration::from_secs(240));
        cast.start_kcm();
        cast.start_client();
        cast
    }

    /// Starts a kube-controller-manager with only its node lifecycle controller in each site, on
    /// that site's apiserver, leader-elected (its defaults: 15 s lease, 10 s renew deadline), so
    /// that one whose apiserver loses quorum loses the lead to another, and waits until one
    /// runs the controller.
    fn start_kcm(&mut self) {
        for i in 0..self.kcm_kubeconfigs.len() {
            let kcm = self.spawn_kcm(i);
            self.kcm.push(kcm);
        }
        let watching = poll(Duration::from_secs(120), || {
            self.kcm_log().contains("Starting node controller")
        });
        assert!(
            watching,
            "kube-controller-manager did not start its node lifecycle controller:\n{}",
            self.kcm_tail(30)
        );
    }

    /// Spawns the kube-controller-manager of the `i`th site (its `n`th start: the log's suffix).
    fn spawn_kcm(&self, i: usize) -> LabProcess {
        let (site, kubeconfig) = &self.kcm_kubeconfigs[i];
        let mut cmd = self.lab.command(*site, &self.bins.kcm);
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--controllers=node-lifecycle-controller",
                "--leader-elect=true",
                "--secure-port=0",
                "--node-monitor-period=5s",
                "--v=2",
            ])
            .arg(format!("--node-monitor-grace-period={}s", GRACE.as_secs()));
        let starts = self.kcm_retired.iter().filter(|(j, _)| *j == i).count();
        let name = match starts {
            0 => format!("kube-controller-manager-{}", site.name()),
            n => format!("kube-controller-manager-{}-{n}", site.name()),
        };
        self.lab
            .spawn(&name, cmd)
            .expect("spawn kube-controller-manager")
    }

    /// The kube-controller-managers' logs, one after another (those started again first).
    fn kcm_log(&self) -> String {
        let retired = self.kcm_retired.iter().map(|(_, p)| p);
        retired.chain(&self.kcm).map(LabProcess::log_text).collect()
    }

    /// Starts again, as the kubelet restarts a static pod, every kube-controller-manager that
    /// exited because it lost its leader lease: a real one exits then (`leaderelection lost`), as
    /// the leader does when its own apiserver restarts, and another takes the lease. Panics, with
    /// its log, if one exited for any other reason: their verdict on the node would mean nothing.
    /// Returns how many it started again.
    pub fn tend_kcm(&mut self) -> usize {
        let mut restarted = 0;
        for i in 0..self.kcm.len() {
            let Some(status) = self.kcm[i].exited() else {
                continue;
            };
            let log = self.kcm[i].log_text();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            assert!(
                log.contains("leaderelection lost"),
                "kube-controller-manager of {} exited ({status}) without losing its lease:\n{}",
                self.kcm_kubeconfigs[i].0.name(),
                tail.join("\n")
            );
            let fresh = self.spawn_kcm(i);
            let old = std::mem::replace(&mut self.kcm[i], fresh);
            self.kcm_retired.push((i, old));
            restarted += 1;
        }
        restarted
    }

    /// `/readyz` of `site`'s apiserver, asked directly from the node with `kubectl`: `ok` or why not.
    pub fn readyz(&self, site: Host) -> Result<String, String> {
        let server = format!("https://{}", addr(site));
        let admin = self.admin.display().to_string();
        let out = self.lab.output(
            Host::Node,
            "kubectl",
            &[
                "--kubeconfig",
                &admin,
                "--server",
                &server,
                "--request-timeout=3s",
                "get",
                "--raw",
                "/readyz",
            ],
            &[],
            Duration::from_secs(10),
        )?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// Waits until every apiserver of `sites` has answered `/readyz` `ok` for [`SETTLE`] in a row.
    pub fn wait_settled(&self, sites: &[Host], limit: Duration) {
        let start = wall();
        let mut since: Option<f64> = None;
        let settled = poll(limit, || {
            if sites.iter().all(|&s| self.readyz(s).as_deref() == Ok("ok")) {
                let first = *since.get_or_insert_with(wall);
                wall() - first >= SETTLE.as_secs_f64()
            } else {
                since = None;
                std::thread::sleep(Duration::from_millis(500));
                false
            }
        });
        let why: Vec<String> = sites
            .iter()
            .map(|&s| format!("{}: {:?}", s.name(), self.readyz(s)))
            .collect();
        assert!(
            settled,
            "the apiservers did not settle (/readyz ok for {SETTLE:?}) within {limit:?}: {why:?}\n{}",
            self.apiserver_tails()
        );
        lab_print(&format!(
            "real lab: {} settled after {:.1} s",
            sites
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", "),
            wall() - start
        ));
    }

    /// kube-controller-manager's last `n` log lines.
    pub fn kcm_tail(&self, n: usize) -> String {
        let text = self.kcm_log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// kube-controller-manager's log lines that name the node or a disruption mode: what it
    /// decided about the node.
    pub fn kcm_about_node(&self) -> Vec<String> {
        self.kcm_log()
            .lines()
            .filter(|l| {
                l.contains(NODE) || l.contains("disruption mode") || l.contains("leaderelection")
            })
            .map(str::to_string)
            .collect()
    }

    fn apiserver_tails(&self) -> String {
        self.apiservers
            .iter()
            .map(|(s, p)| {
                let text = p.log_text();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "--- kube-apiserver {}:\n{}",
                    s.name(),
                    lines[lines.len().saturating_sub(15)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Starts the lease client through the balancer and waits for its Node and two renewals.
    fn start_client(&mut self) {
        let mut cmd = self.lab.command(Host::Node, &self.bins.lease);
        cmd.args(["--server", &format!("https://{LISTEN}"), "--node", NODE])
            .arg("--ca")
            .arg(&self.ca)
            .arg("--cert")
            .arg(&self.node_cert.0)
            .arg("--key")
            .arg(&self.node_cert.1)
            .args(["--get-interval", "1s"]);
        self.client = Some(
            self.lab
                .spawn("lease-client", cmd)
                .expect("spawn lease-client"),
        );
        let renewed = poll(Duration::from_secs(90), || {
            super::outcome::lease_oks(&self.client_lines()).len() >= 2
        });
        assert!(
            renewed,
            "the lease client did not register and renew twice within 90 s:\n{}\n--- balancer:\n{}",
            self.client_log(),
            self.balancer.log_text()
        );
    }

    /// The lease client's JSON lines so far.
    pub fn client_lines(&self) -> Vec<serde_json::Value> {
        self.client_log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn client_log(&self) -> String {
        self.client
            .as_ref()
            .map(LabProcess::log_text)
            .unwrap_or_default()
    }

    /// Sends `SIGTERM` to `site`'s apiserver (its graceful shutdown) and waits for its exit;
    /// how long that took.
    pub fn term_apiserver(&mut self, site: Host, limit: Duration) -> f64 {
        let proc = self.apiservers.get_mut(&site).expect("apiserver");
        let start = wall();
        proc.signal("TERM").expect("SIGTERM kube-apiserver");
        assert!(
            proc.wait_timeout(limit).is_some(),
            "kube-apiserver of {} did not exit within {limit:?} of SIGTERM",
            site.name()
        );
        wall() - start
    }

    /// Starts `site`'s apiserver again (after [`RealCast::term_apiserver`]).
    pub fn start_apiserver_again(&mut self, site: Host) {
        let n = self.retired.len() + 1;
        let new = spawn_apiserver(self.lab, self.bins, &self.files, site, n);
        if let Some(old) = self.apiservers.insert(site, new) {
            self.retired.push(old);
        }
    }

    /// The Node as an apiserver has it (`kubectl get node -o json`): asked of each site in turn
    /// until one answers, within a minute (a site that just lost or regained quorum may not).
    pub fn node(&self) -> Result<serde_json::Value, String> {
        let admin = self.admin.display().to_string();
        let mut last = String::new();
        let mut node = None;
        poll(Duration::from_secs(60), || {
            for site in [Host::DcA, Host::Witness, Host::DcB] {
                let server = format!("https://{}", addr(site));
                let args = [
                    "--kubeconfig",
                    &admin,
                    "--server",
                    &server,
                    "--request-timeout=5s",
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "json",
                ];
                match self
                    .lab
                    .output(site, "kubectl", &args, &[], Duration::from_secs(15))
                {
                    Ok(out) if out.status.success() => {
                        node = serde_json::from_slice(&out.stdout).ok();
                        if node.is_some() {
                            return true;
                        }
                    }
                    Ok(out) => last = String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    Err(e) => last = e,
                }
            }
            false
        });
        node.ok_or(last)
    }

    /// The balancer's log (readyprism's JSON lines; KubePrism's errors).
    pub fn balancer_log(&self) -> String {
        self.balancer.log_text()
    }

    /// The site the client's connection is relayed to now: readyprism's
    /// `readyprism_connections_active`, or for KubePrism (no metrics; its health checks connect
    /// and close at once) the node's established connections to an apiserver port.
    pub fn client_site(&self) -> Option<Host> {
        if self.kind == Kind::Readyprism {
            return Host::SITES
                .into_iter()
                .find(|&s| self.active_on(s).unwrap_or(0.0) >= 1.0);
        }
        let filter = format!("( dport = :{APISERVER_PORT} )");
        let out = self
            .lab
            .output(
                Host::Node,
                "ss",
                &["-Htn", "state", "established", &filter],
                &[],
                Duration::from_secs(10),
            )
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        Host::SITES
            .into_iter()
            .find(|s| text.contains(&format!(" {}:{APISERVER_PORT}", s.ip())))
    }

    /// Connections readyprism has on `site` now (`None` for KubePrism, which has no metrics).
    pub fn active_on(&self, site: Host) -> Option<f64> {
        if self.kind != Kind::Readyprism {
            return None;
        }
        let needle = format!(
            "readyprism_connections_active{{backend=\"{}\"}}",
            addr(site)
        );
        crate::partition::cast::lab_metrics(self.lab, &needle)
            .iter()
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

/// One kube-apiserver in `site`'s namespace on `<site ip>:6443`, on the member there, advertising
/// the site's address, with the Talos patches' shutdown delay. Its log is
/// `kube-apiserver-<site>[-n].log`.
fn spawn_apiserver(
    lab: &NetLab,
    bins: &Bins,
    files: &ApiserverFiles,
    site: Host,
    n: usize,
) -> LabProcess {
    let dir = lab.path(&format!("apiserver-{}", site.name()));
    std::fs::create_dir_all(&dir).expect("cert dir");
    let etcd = format!("http://127.0.0.1:{CLIENT_PORT}");
    let mut cmd = lab.command(site, &bins.apiserver);
    cmd.args(kube::flags(
        files,
        addr(site),
        &etcd,
        &site.ip().to_string(),
        &dir,
    ))
    .arg(format!("--shutdown-delay-duration={SHUTDOWN_DELAY}"));
    let name = match n {
        0 => format!("kube-apiserver-{}", site.name()),
        n => format!("kube-apiserver-{}-{n}", site.name()),
    };
    lab.spawn(&name, cmd).expect("spawn kube-apiserver")
}
