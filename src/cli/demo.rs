//! `readyprism demo`: three simulated apiservers with mutual TLS, the real balancer in front of them,
//! and its own client traffic, shown live, so a newcomer watches connections leave the local
//! apiserver when it loses quorum and come back when it recovers, and a fourth apiserver join the
//! cluster's Endpoints object and take traffic through discovery.
//!
//! Owns the demo's scenario and client traffic; `view` renders it. Does not own any balancer
//! behaviour (`app`), the simulated apiserver or the certificates (`sim`).

mod files;
mod traffic;
mod view;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{interval, sleep_until, timeout, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{self, App, ApplyError};
use crate::config::{Config, ConfigError};
use crate::health::verdict::State;
use crate::signals::Termination;
use crate::sim::apiserver::FakeApiserver;
use crate::sim::pki::Ca;
use files::DemoDir;
use traffic::Traffic;
use view::Frame;

/// The simulated sites: name (also the zone) and `/readyz` delay in ms. The first is the node's own
/// zone and the fastest, the field report's RTTs make the other two (23 ms and 43 ms).
const SITES: [(&str, u64); 3] = [("dc-a", 0), ("dc-b", 23), ("witness", 43)];
/// dc-a alternates between ready and lost quorum this often: long enough to see the balancer react
/// (fall 2 × fast_interval plus eviction, about 2 s) and settle.
const FLIP_EVERY: Duration = Duration::from_secs(8);
/// dc-a regains quorum this soon after the start: long enough to see it skipped, short enough
/// that a newcomer does not wait.
const FIRST_FLIP: Duration = Duration::from_secs(4);
/// After dc-a regains quorum, the long-lived connection opens this much later (rise takes two
/// probes at the demo's 250 ms fast interval).
const LONG_LIVED_DELAY: Duration = Duration::from_millis(1500);
/// The fourth apiserver: its name, and its `/readyz` delay in ms (nearer than dc-b, so it wins
/// the picks while dc-a has no quorum).
const JOINER: (&str, u64) = ("new-cp", 10);
/// It joins the Endpoints object this long after the start: after dc-a's first recovery, before
/// dc-a loses quorum again, so the next loss sends traffic to it.
const JOIN_AT: Duration = Duration::from_secs(10);
/// The demo's discovery interval: the shortest allowed, so the join shows within a second or two.
const DISCOVERY_INTERVAL: &str = "1s";
/// One short client connection this often, and the screen refreshes as often.
const TICK: Duration = Duration::from_secs(1);
/// Bound on connecting through the balancer and reading the apiserver's name.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How many recent connection landings the screen shows.
const RECENT: usize = 10;

/// What the demo was asked to do.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Run this long, then stop by itself; `None`: until SIGINT/SIGTERM.
    pub duration: Option<Duration>,
    /// The balancer's client listener.
    pub listen: SocketAddr,
    /// The balancer's admin listener.
    pub admin: SocketAddr,
    /// Print the live view on stdout (off in tests, where it would clear the developer's terminal).
    pub show: bool,
}

/// What the demo's own clients saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemoReport {
    /// Connections that reached an apiserver, by apiserver name.
    pub connections: BTreeMap<String, u64>,
    /// Connections that failed before naming an apiserver.
    pub failed: u64,
    /// Times the balancer closed the long-lived connection and it was re-opened.
    pub long_lived_moves: u64,
    /// Times dc-a switched between ready and lost quorum.
    pub flips: u64,
    /// The fourth apiserver joined the Endpoints object.
    pub joined: bool,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Generating the demo CA or certificates failed.
    #[error("generating demo certificates: {0}")]
    Pki(rcgen::Error),
    /// The temporary directory for the CA and client certificate could not be written.
    #[error("demo files in {path}: {cause}")]
    Files {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// A simulated apiserver could not start.
    #[error("starting a simulated apiserver: {0}")]
    Fake(String),
    /// The generated config was rejected (a bug, or an unusable `--listen`/`--admin`).
    #[error("demo config: {0}")]
    Config(ConfigError),
    /// The balancer could not start, e.g. its port is in use.
    #[error("{0}")]
    Start(ApplyError),
    /// SIGINT/SIGTERM handlers could not be installed.
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
}

/// Runs the demo until `duration` passes, SIGINT or SIGTERM, then shuts everything down in order.
pub async fn run_until_signalled(opts: DemoOptions) -> Result<DemoReport, DemoError> {
    let mut signals = Termination::install().map_err(DemoError::Signals)?;
    let quit = CancellationToken::new();
    let demo = run(opts, quit.clone());
    tokio::pin!(demo);
    loop {
        tokio::select! {
            report = &mut demo => return report,
            name = signals.recv() => {
                tracing::info!("{name}: ending the demo");
                quit.cancel();
            }
        }
    }
}

/// Runs the demo until `duration` passes or `quit` is cancelled, then shuts everything down in
/// order and removes its temporary files.
pub async fn run(opts: DemoOptions, quit: CancellationToken) -> Result<DemoReport, DemoError> {
    let mut scenario = Scenario::start(&opts).await?;
    let listen = scenario
        .app
        .listen_addrs()
        .first()
        .copied()
        .unwrap_or(opts.listen);
    let traffic = Arc::new(Mutex::new(Traffic::default()));
    let (stop, clients) = (CancellationToken::new(), TaskTracker::new());
    clients.spawn(traffic::short_clients(
        listen,
        traffic.clone(),
        stop.clone(),
    ));
    // The long-lived (kubelet-like) connection opens once dc-a has quorum, so it lands there and
    // the next loss of quorum shows it being closed and re-dialled elsewhere.
    let mut long_lived_started = false;

    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let until_end = async move {
        match end {
            Some(t) => sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until_end);
    // dc-a starts without quorum: fastest, local, and unready — the field report's trap.
    let (mut next_flip, mut dc_a_ready, mut flips) = (start + FIRST_FLIP, false, 0u64);
    let mut joined = false;
    let mut tick = interval(TICK);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let tty = std::io::stdout().is_terminal();
    loop {
        tokio::select! {
            _ = quit.cancelled() => { tracing::info!("ending the demo"); break }
            _ = &mut until_end => break,
            _ = sleep_until(start + JOIN_AT), if !joined => {
                joined = true;
                scenario.join();
                tracing::info!(apiserver = JOINER.0, "demo: a fourth apiserver joined the cluster's Endpoints object");
            }
            list = scenario.app.next_discovered() => {
                if let Err(e) = scenario.app.set_discovered(list).await {
                    tracing::warn!(error = %e, "discovered backends not applied");
                }
            }
            _ = sleep_until(next_flip) => {
                dc_a_ready = !dc_a_ready;
                scenario.fakes[0].control.set_ready(dc_a_ready);
                (flips, next_flip) = (flips + 1, next_flip + FLIP_EVERY);
                if dc_a_ready && !long_lived_started {
                    long_lived_started = true;
                    let (listen, traffic, stop) = (listen, traffic.clone(), stop.clone());
                    clients.spawn(async move {
                        // Give the balancer its rise (2 probes) before the kubelet-like client dials.
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(LONG_LIVED_DELAY) => {}
                        }
                        traffic::long_lived_client(listen, traffic, stop).await;
                    });
                }
                let what = if dc_a_ready { "quorum restored" } else { "lost etcd quorum" };
                tracing::info!(apiserver = SITES[0].0, "demo: {what}");
            }
            _ = tick.tick(), if opts.show => {
                let (now, t) = (Instant::now(), traffic::record(&traffic, |t| t.clone()));
                let frame = Frame {
                    elapsed: now - start,
                    remaining: end.map(|e| e - now),
                    listen,
                    admin: scenario.app.admin_addr(),
                    status: &scenario.app.status(),
                    traffic: &t,
                    dc_a_ready,
                    next_flip_in: next_flip - now,
                    join_in: (!joined).then(|| (start + JOIN_AT).saturating_duration_since(now)),
                };
                let text = if tty { format!("\x1b[H\x1b[2J{}", frame.screen()) } else { frame.line() + "\n" };
                if let Err(e) = write_stdout(&text) {
                    tracing::info!(error = %e, "stdout closed; ending the demo");
                    break;
                }
            }
        }
    }

    stop.cancel();
    clients.close();
    clients.wait().await;
    scenario.stop().await;
    let t = traffic::record(&traffic, |t| t.clone());
    let report = DemoReport {
        connections: t.per_backend,
        failed: t.failed,
        long_lived_moves: t.long_moves,
        flips,
        joined,
    };
    if opts.show {
        let text = format!(
            "demo over: connections {} (failed {}), long-lived connection moved {} time(s), \
             dc-a flipped {} time(s)\n",
            view::counts(&report.connections),
            report.failed,
            report.long_lived_moves,
            report.flips
        );
        if let Err(e) = write_stdout(&text) {
            tracing::debug!(error = %e, "stdout closed before the final summary");
        }
    }
    Ok(report)
}

/// Writes without `print!`, which panics when stdout is a closed pipe.
fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The demo's world: certificates on disk, three simulated apiservers, a fourth that joins later,
/// and the balancer.
struct Scenario {
    /// Kept for its `Drop`, which removes the certificate files.
    dir: DemoDir,
    /// In [`SITES`] order.
    fakes: Vec<FakeApiserver>,
    /// The fourth apiserver, in no config: only the Endpoints object lists it, from [`JOIN_AT`].
    joiner: FakeApiserver,
    app: App,
}

impl Scenario {
    async fn start(opts: &DemoOptions) -> Result<Scenario, DemoError> {
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
        Ok(Scenario {
            dir,
            fakes,
            joiner,
            app,
        })
    }

    /// The fourth apiserver joins: every Endpoints object now lists it too.
    fn join(&self) {
        let mut addrs: Vec<SocketAddr> = self.fakes.iter().map(|f| f.addr).collect();
        addrs.push(self.joiner.addr);
        for f in self.fakes.iter().chain([&self.joiner]) {
            f.control.set_endpoints(&addrs);
        }
    }

    /// Balancer first (drain, then cut), then the apiservers, then the files.
    async fn stop(self) {
        let bound = app::shutdown_bound(self.app.config());
        if timeout(bound, self.app.shutdown()).await.is_err() {
            tracing::warn!(?bound, "balancer shutdown took longer than its bound");
        }
        for fake in self.fakes.iter().chain([&self.joiner]) {
            fake.stop().await;
        }
        drop(self.dir);
    }
}

fn demo_yaml(
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
        "listen: [\"{listen}\"]\nadmin: \"{admin}\"\nzone: {zone}\nbackends:\n{list}health:\n  interval: 1s\n  timeout: 500ms\n  fast_interval: 250ms\n  rise: 2\n  fall: 2\ntls:\n  ca: {ca}\n  client_cert: {client}\nconnect_timeout: 1s\nwhen_none_ready: fail_open\nshutdown_grace: 1s\ndiscovery:\n  endpoints: true\n  interval: {DISCOVERY_INTERVAL}\n",
        zone = SITES[0].0,
        ca = quote(ca),
        client = quote(client),
    )
}

/// The first probes run at once; waiting for all of them means the first connections (the
/// long-lived one above all, which failback never moves) already go where the picker wants them.
async fn wait_for_first_probes(app: &App) {
    let table = app.table();
    let mut changes = table.subscribe();
    let waited = timeout(Duration::from_secs(3), async {
        while table
            .load()
            .backends
            .iter()
            .any(|b| b.health.state == State::Unknown)
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

    fn opts(duration: Duration) -> DemoOptions {
        let any_port: SocketAddr = "127.0.0.1:0".parse().expect("literal");
        DemoOptions {
            duration: Some(duration),
            listen: any_port,
            admin: any_port,
            show: false,
        }
    }

    #[test]
    fn generated_config_pins_the_demo_timings() {
        let addrs: Vec<SocketAddr> = ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"]
            .iter()
            .map(|a| a.parse().expect("literal"))
            .collect();
        let (o, ca) = (opts(Duration::ZERO), Path::new("/tmp/a dir/ca.crt"));
        let yaml = demo_yaml(o.listen, o.admin, &addrs, ca, Path::new("/tmp/c.pem"));
        let config = Config::parse(&yaml, "demo").expect("the demo config is valid");
        assert_eq!(config.routing.zone.as_deref(), Some("dc-a"));
        let zones: Vec<_> = config.backends.iter().map(|b| b.zone.as_deref()).collect();
        assert_eq!(zones, [Some("dc-a"), Some("dc-b"), Some("witness")]);
        assert_eq!(config.health.interval, Duration::from_secs(1));
        assert_eq!(config.shutdown_grace, Duration::from_secs(1));
        assert_eq!(config.tls.ca, ca);
        assert!(
            config.discovery.endpoints,
            "the fourth apiserver joins through discovery"
        );
        assert_eq!(config.discovery.interval, Duration::from_secs(1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn demo_sends_traffic_to_the_local_zone_and_cleans_up() {
        let report = run(opts(Duration::from_secs(3)), CancellationToken::new())
            .await
            .expect("the demo runs");
        // The local apiserver answers fastest but has no quorum: nothing lands there.
        assert_eq!(report.connections.get("dc-a"), None, "{report:?}");
        assert!(
            report.connections.get("dc-b").copied().unwrap_or(0) >= 2,
            "{report:?}"
        );
        assert_eq!((report.failed, report.flips), (0, 0), "{report:?}");
        assert!(!report.joined, "the fourth apiserver joins later");
        let prefix = format!("readyprism-demo-{}-", std::process::id());
        let leftovers = std::fs::read_dir(std::env::temp_dir())
            .expect("temp dir is readable")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .count();
        assert_eq!(leftovers, 0, "the demo's temp dir was not removed");
    }
}
