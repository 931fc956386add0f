//! The demo's world: its certificates on disk, the three simulated sites, the fourth apiserver
//! that joins the Endpoints object later, and the balancer in front of them, with the config it
//! runs.
//!
//! Owns starting and stopping that world and the demo's config. Does not own the scenario's
//! timeline or the client traffic (`demo`), nor the view.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::time::timeout;

use super::files::DemoDir;
use super::{DemoError, DemoOptions, DISCOVERY_INTERVAL, FAILBACK_AFTER, JOINER, SITES};
use crate::app::App;
use crate::config::Config;
use crate::sim::apiserver::FakeApiserver;
use crate::sim::pki::Ca;
use crate::verdict::State;

/// The demo's world: certificates on disk, three simulated apiservers and a fourth that joins
/// later. The balancer in front of them is started with it and run by the caller.
pub(super) struct Scenario {
    /// Kept for its `Drop`, which removes the certificate files.
    dir: DemoDir,
    /// In [`SITES`] order.
    pub(super) fakes: Vec<FakeApiserver>,
    /// The fourth apiserver, in no config: only the Endpoints object lists it, from [`JOIN_AT`].
    joiner: FakeApiserver,
}

impl Scenario {
    /// Starts the world and the balancer, once every apiserver had its first probe.
    pub(super) async fn start(opts: &DemoOptions) -> Result<(Scenario, App), DemoError> {
        let dir = DemoDir::create()?;
        let ca = Ca::new("readyprism-demo-ca").map_err(DemoError::Pki)?;
        let ca_path = dir.write("ca.crt", &ca.cert_pem)?;
        let client = ca
            .client("demo-node")
            .map_err(DemoError::Pki)?
            .combined_pem();
        let client_path = dir.write("kubelet-client-current.pem", &client)?;
        let tls = crate::sim::apiserver::server_tls(
            &ca,
            &ca.server(&["127.0.0.1"]).map_err(DemoError::Pki)?,
        )
        .map_err(|e| DemoError::Fake(e.to_string()))?;
        let mut fakes = Vec::new();
        for (name, delay_ms) in SITES {
            let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
            let fake = FakeApiserver::bind(name, any_port, tls.clone());
            let fake = fake.map_err(|e| DemoError::Fake(format!("{name}: {e}")))?;
            fake.control
                .set_readyz_delay(Duration::from_millis(delay_ms));
            fakes.push(fake);
        }
        if let Some(local) = fakes.first() {
            local.control.set_ready(false); // the demo opens with the local apiserver lost quorum
        }
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        let joiner = FakeApiserver::bind(JOINER.0, any_port, tls.clone())
            .map_err(|e| DemoError::Fake(format!("{}: {e}", JOINER.0)))?;
        joiner
            .control
            .set_readyz_delay(Duration::from_millis(JOINER.1));
        let addrs: Vec<SocketAddr> = fakes.iter().map(|f| f.addr).collect();
        // Every apiserver serves the cluster's Endpoints object: the three sites, for now.
        for f in fakes.iter().chain([&joiner]) {
            f.control.set_endpoints(&addrs);
        }
        let yaml = demo_yaml(opts.listen, opts.admin, &addrs, &ca_path, &client_path);
        let config = Config::parse(&yaml, "demo").map_err(DemoError::Config)?;
        let app = App::start(config).await.map_err(DemoError::Start)?;
        wait_for_first_probes(&app).await;
        Ok((Scenario { dir, fakes, joiner }, app))
    }

    /// The fourth apiserver joins: every Endpoints object now lists it too.
    pub(super) fn join(&self) {
        let mut addrs: Vec<SocketAddr> = self.fakes.iter().map(|f| f.addr).collect();
        addrs.push(self.joiner.addr);
        for f in self.fakes.iter().chain([&self.joiner]) {
            f.control.set_endpoints(&addrs);
        }
    }

    /// Every simulated apiserver's address (as `/status` names it) and its name, the fourth too.
    pub(super) fn names(&self) -> Vec<(String, String)> {
        self.fakes
            .iter()
            .zip(SITES)
            .map(|(f, (name, _))| (f.addr.to_string(), name.to_string()))
            .chain([(self.joiner.addr.to_string(), JOINER.0.to_string())])
            .collect()
    }

    /// The apiservers, then the files (after the balancer's run has ended).
    pub(super) async fn stop(self) {
        for fake in self.fakes.iter().chain([&self.joiner]) {
            fake.stop().await;
        }
        drop(self.dir);
    }
}

/// The config the demo's balancer runs: the three sites at `backends`, the demo's fast probes.
pub(super) fn demo_yaml(
    listen: SocketAddr,
    admin: SocketAddr,
    backends: &[SocketAddr],
    ca: &Path,
    client: &Path,
) -> String {
    let quote = |p: &Path| serde_json::Value::from(p.to_string_lossy()).to_string();
    let list: String = backends
        .iter()
        .zip(SITES)
        .map(|(a, (zone, _))| format!("  - {{ address: \"{a}\", zone: {zone} }}\n"))
        .collect();
    format!(
        "listen: [\"{listen}\"]\nadmin: \"{admin}\"\nzone: {zone}\nbackends:\n{list}health:\n  interval: 1s\n  timeout: 500ms\n  fast_interval: 250ms\n  rise: 2\n  fall: 2\ntls:\n  ca: {ca}\n  client_cert: {client}\nconnect_timeout: 1s\nwhen_none_ready: fail_open\nfailback_after: {failback}s\nshutdown_grace: 1s\ndiscovery:\n  endpoints: true\n  interval: {DISCOVERY_INTERVAL}\nstatus_file: \"\"\n",
        zone = SITES[0].0,
        failback = FAILBACK_AFTER.as_secs(),
        ca = quote(ca),
        client = quote(client),
    )
}

/// The first probes run at once; waiting for all of them means the first connections (the
/// long-lived one above all, which failback never moves) already go where the picker wants them.
async fn wait_for_first_probes(app: &App) {
    let mut changes = app.subscribe();
    let waited = timeout(Duration::from_secs(3), async {
        while app
            .status()
            .backends
            .iter()
            .any(|b| b.state == State::Unknown)
        {
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    if waited.await.is_err() {
        tracing::warn!("not every simulated apiserver answered its first probe within 3s");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_config_pins_the_demo_timings() {
        let addrs: Vec<SocketAddr> = ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"]
            .iter()
            .map(|a| a.parse().expect("literal"))
            .collect();
        let any_port: SocketAddr = "127.0.0.1:0".parse().expect("literal");
        let ca = Path::new("/tmp/a dir/ca.crt");
        let yaml = demo_yaml(any_port, any_port, &addrs, ca, Path::new("/tmp/c.pem"));
        let config = Config::parse(&yaml, "demo").expect("the demo config is valid");
        assert_eq!(config.routing.zone_name(), Some("dc-a"));
        let zones: Vec<_> = config.backends.iter().map(|b| b.zone.as_deref()).collect();
        assert_eq!(zones, [Some("dc-a"), Some("dc-b"), Some("witness")]);
        assert_eq!(config.health.interval, Duration::from_secs(1));
        assert_eq!(config.shutdown_grace, Duration::from_secs(1));
        assert_eq!(config.routing.failback_after, Some(FAILBACK_AFTER));
        assert_eq!(config.tls.ca, ca);
        assert!(
            config.discovery.endpoints,
            "the fourth apiserver joins through discovery"
        );
        assert_eq!(config.discovery.interval, Duration::from_secs(1));
    }
}
