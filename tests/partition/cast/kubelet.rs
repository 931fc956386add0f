//! A cast's clients on the node: the kubelet-like `tests/lab/kubelet.py` (start, stop, its JSON
//! records) and `kubectl get --raw /readyz`. The record type, `ClientEvent`, is
//! `partition/client.rs`'s; reading the balancer is `observe.rs`'s.

use std::time::Duration;

use super::{poll, Cast, ClientEvent, Exchange, CLIENT_SILENCE, LISTEN};
use crate::partition::netlab::{lab_dir, Host};

impl<'a> Cast<'a> {
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
                .filter(|e| matches!(e, ClientEvent::Req(Exchange { ok: true, .. })))
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

    /// Rotates the kubelet's client certificate as kubelet does: a new certificate and key from
    /// the same CA in `kubelet-client-<time>.pem`, then `kubelet-client-current.pem` replaced by
    /// a symlink to it (made beside it and renamed over it, so a reader never sees it missing).
    /// The balancer, `kubelet.py` and the herd read the same path.
    pub fn rotate_client_cert(&self) -> Result<(), String> {
        let issued = self
            .authority
            .client("node")
            .map_err(|e| format!("kubelet cert: {e}"))?;
        let stamp = super::wall();
        let name = format!("kubelet-client-{stamp:.6}.pem");
        let dated = self.lab.path(&name);
        std::fs::write(&dated, issued.combined_pem()).map_err(|e| format!("{dated:?}: {e}"))?;
        let link = self.kubelet_pem.with_extension("pem.new");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&name, &link).map_err(|e| format!("{link:?}: {e}"))?;
        std::fs::rename(&link, &self.kubelet_pem)
            .map_err(|e| format!("{:?}: {e}", self.kubelet_pem))
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
}
