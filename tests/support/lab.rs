//! The [`Lab`] fixture: a [`Cluster`] (the crate's test toolkit: CA, client certificate, fake
//! apiservers with its TLS) with the CA and client certificate on disk, config YAML for its fakes
//! and a balancer started from it. It does not wait for states (`wait.rs`) or talk to the balancer (`client.rs`).

use std::path::PathBuf;

use readyprism::app::App;
use readyprism::config::Config;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::testing::Cluster;
use readyprism::verdict::State;

use super::{addr, wait_states};

/// Probes at start-up only, in practice: backends stay as first seen while a test breaks them.
pub const SLOW_PROBES: &str = "health: { interval: 30s, timeout: 2s, fast_interval: 1s }\n";

/// A [`Cluster`] (CA, kubelet-style client cert, fake apiservers with its TLS) and a temp dir with
/// the CA and client files.
pub struct Lab {
    pub cluster: Cluster,
    pub dir: tempfile::TempDir,
}

impl Lab {
    pub fn new() -> Lab {
        let cluster = Cluster::new("test-cluster-ca");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.crt"), &cluster.ca.cert_pem).expect("write ca");
        std::fs::write(
            dir.path().join("kubelet-client-current.pem"),
            cluster.client.combined_pem(),
        )
        .expect("write client");
        Lab { cluster, dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A fake apiserver on 127.0.0.1:0 ([`Cluster::fake`]).
    pub async fn fake(&self, name: &str) -> FakeApiserver {
        self.cluster.fake(name)
    }

    /// Config YAML: ports 0, fast probes, the lab's CA and client cert, `backends` as
    /// `(address, zone)`, no status file, then `extra` appended (top-level keys; may override
    /// `health` and `status_file`).
    pub fn yaml(&self, zone: &str, backends: &[(String, &str)], extra: &str) -> String {
        let mut y = format!(
            "listen: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\nzone: {zone}\ntls:\n  ca: {}\n  client_cert: {}\nbackends:\n",
            self.path("ca.crt").display(),
            self.path("kubelet-client-current.pem").display()
        );
        for (addr, z) in backends {
            y.push_str(&format!("  - {{ address: \"{addr}\", zone: {z} }}\n"));
        }
        if !extra.contains("health:") {
            // Fast enough for short tests, with a timeout that a loaded machine still meets.
            y.push_str("health: { interval: 1s, timeout: 800ms, fast_interval: 150ms }\n");
        }
        if !extra.contains("status_file:") {
            // Tests never write the node's status file; those about it name their own.
            y.push_str("status_file: \"\"\n");
        }
        y.push_str(extra);
        y
    }

    /// Two fake apiservers, `local` in the node's zone `dc-a` and `remote` in `dc-b`, behind a
    /// balancer started with `extra` config, both ready.
    pub async fn local_and_remote(&self, extra: &str) -> (FakeApiserver, FakeApiserver, App) {
        let (local, remote) = (self.fake("local").await, self.fake("remote").await);
        let app = self
            .start(&self.yaml(
                "dc-a",
                &[(addr(&local), "dc-a"), (addr(&remote), "dc-b")],
                extra,
            ))
            .await;
        wait_states(&app, &[State::Ready, State::Ready]).await;
        (local, remote, app)
    }

    /// One fake apiserver `a` in the node's zone `dc-a` behind a balancer started with `extra`
    /// config, ready.
    pub async fn one_ready(&self, extra: &str) -> (FakeApiserver, App) {
        let a = self.fake("a").await;
        let app = self.alone_behind_balancer(&a, extra).await;
        wait_states(&app, &[State::Ready]).await;
        (a, app)
    }

    /// A balancer (zone dc-a, `extra` config) in front of `a` alone, started, its state not
    /// waited for.
    pub async fn alone_behind_balancer(&self, a: &FakeApiserver, extra: &str) -> App {
        self.start(&self.yaml("dc-a", &[(addr(a), "dc-a")], extra))
            .await
    }

    /// For a balancer run from its config file (`Running`, `Proc`): a fake `a` started on `rt`,
    /// and a config file `name` in the lab's directory that routes to it (zone dc-a, the lab's
    /// fast probes, then `extra`).
    pub fn fake_and_config(
        &self,
        rt: &tokio::runtime::Runtime,
        name: &str,
        extra: &str,
    ) -> (FakeApiserver, PathBuf) {
        let a = rt.block_on(self.fake("a"));
        let file = self.path(name);
        std::fs::write(&file, self.yaml("dc-a", &[(addr(&a), "dc-a")], extra)).expect("write");
        (a, file)
    }

    /// For a balancer run from its config file (`Running`, `Proc`): a config file `name` in the
    /// lab's directory that routes to `local` in the node's zone dc-a and `remote` in dc-b (the
    /// lab's fast probes, then `extra`).
    pub fn two_zone_config(
        &self,
        name: &str,
        (local, remote): (&FakeApiserver, &FakeApiserver),
        extra: &str,
    ) -> PathBuf {
        let file = self.path(name);
        let yaml = self.yaml(
            "dc-a",
            &[(addr(local), "dc-a"), (addr(remote), "dc-b")],
            extra,
        );
        std::fs::write(&file, yaml).expect("write config");
        file
    }

    /// Writes `text` to the file `name` in the lab's directory; returns its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    }

    pub async fn start(&self, yaml: &str) -> App {
        let config = Config::parse(yaml, "test.yaml").expect("valid test config");
        App::start(config).await.expect("start balancer")
    }
}
