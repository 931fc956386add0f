//! A cast's simulated apiservers: the files they share, the `kubernetes` Endpoints object they
//! serve, starting one (`readyprism sim-apiserver`) per site or later as a joining control-plane
//! node. It does not start the balancer or the client (`cast.rs`, `kubelet.rs`).

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use readyprism::sim::pki::Ca;

use super::{poll, write, Cast, Readyz, APISERVER_PORT, BIN};
use crate::partition::balancers::Balancer;
use crate::partition::netlab::{Host, LabProcess, NetLab};

/// What every simulated apiserver of a cast shares.
pub(super) struct ApiserverFiles<'f> {
    pub(super) ca: &'f Ca,
    pub(super) ca_path: &'f Path,
    /// The Endpoints object it serves (membership scenario), re-read on every request.
    pub(super) endpoints: Option<&'f Path>,
    /// A client certificate is required (readyprism's probes present one); otherwise it is
    /// verified when presented, as kube-apiserver does (the others' checks present none).
    pub(super) require_client_cert: bool,
}

/// The `kubernetes` Endpoints object with `ips` × the `https` port, written whole (rename) so
/// that an apiserver never serves half of it.
pub(super) fn write_endpoints(path: &Path, ips: &[Ipv4Addr]) {
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
/// certificate for `ip`, requiring the kubelet's client certificate; `extra` flags last. Its log
/// is `apiserver-<label>.log`: the first of an apiserver is labelled with its name, a restart
/// with a label of its own (the first's log is kept).
pub(super) fn spawn_apiserver(
    lab: &NetLab,
    files: &ApiserverFiles,
    host: Host,
    (ip, name): (Ipv4Addr, &str),
    readyz: Readyz,
    extra: &[&str],
    label: &str,
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
    cmd.args(extra);
    lab.spawn(&format!("apiserver-{label}"), cmd)
        .expect("spawn sim-apiserver")
}

/// Waits until an apiserver logs that it listens.
fn wait_listening(proc: &LabProcess, name: &str) -> Result<(), String> {
    if poll(Duration::from_secs(10), || {
        proc.log_text().contains("simulated apiserver listening")
    }) {
        Ok(())
    } else {
        Err(format!(
            "apiserver {name} did not start: {}",
            proc.log_text()
        ))
    }
}

impl<'a> Cast<'a> {
    /// Starts another apiserver named `name` on `ip` in `host`'s namespace (a control-plane node
    /// joining; the address must exist there: [`NetLab::add_address`]) and waits until it listens.
    pub fn start_apiserver(&mut self, host: Host, ip: Ipv4Addr, name: &str) {
        let files = ApiserverFiles {
            ca: &self.authority,
            ca_path: &self.ca,
            endpoints: self.endpoints.as_deref(),
            require_client_cert: self.kind == Balancer::Readyprism,
        };
        let proc = spawn_apiserver(self.lab, &files, host, (ip, name), Readyz::Pass, &[], name);
        wait_listening(&proc, name).unwrap_or_else(|e| panic!("{e}"));
        self.joined.insert(name.to_string(), proc);
    }

    /// Sends `signal` to `site`'s apiserver (`TERM`: its graceful shutdown, with the flags it
    /// was started with).
    pub fn signal_apiserver(&self, site: Host, signal: &str) -> Result<(), String> {
        self.apiservers
            .get(&site)
            .ok_or_else(|| format!("no apiserver at {}", site.name()))?
            .signal(signal)
    }

    /// Starts `site`'s apiserver again, with the same `/readyz` and flags, once the running one
    /// has exited (killed after `wait`), as kubelet restarts a static pod; waits until it
    /// listens. The old one's log is kept.
    pub fn start_apiserver_again(&mut self, site: Host, wait: Duration) -> Result<(), String> {
        let old = self
            .apiservers
            .get_mut(&site)
            .ok_or_else(|| format!("no apiserver at {}", site.name()))?;
        if old.wait_timeout(wait).is_none() {
            old.kill();
        }
        let (readyz, extra, n) = self
            .spawned
            .get_mut(&site)
            .ok_or_else(|| format!("no apiserver at {}", site.name()))?;
        *n += 1;
        let (readyz, label) = (*readyz, format!("{}-{n}", site.name()));
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let files = ApiserverFiles {
            ca: &self.authority,
            ca_path: &self.ca,
            endpoints: self.endpoints.as_deref(),
            require_client_cert: self.kind == Balancer::Readyprism,
        };
        let (ip, name) = (site.ip(), site.name());
        let proc = spawn_apiserver(self.lab, &files, site, (ip, name), readyz, &extra, &label);
        wait_listening(&proc, &label)?;
        if let Some(old) = self.apiservers.insert(site, proc) {
            self.retired_apiservers.push(old);
        }
        Ok(())
    }

    /// What every apiserver's Endpoints object says from now on: `ips` × the `https` port.
    pub fn set_endpoints(&self, ips: &[Ipv4Addr]) {
        let path = self
            .endpoints
            .as_ref()
            .expect("a cast started with members serves an Endpoints object");
        write_endpoints(path, ips);
    }
}
