//! `readyprism demo`: three simulated apiservers with mutual TLS, the real balancer in front of them,
//! and its own client traffic, shown live, so a newcomer watches connections leave the local
//! apiserver when it loses quorum and come back when it recovers, and a fourth apiserver join the
//! cluster's Endpoints object and take traffic through discovery.
//!
//! Owns the demo's timeline (flips, the join) and client traffic; `scenario` starts and stops its
//! world, `view` renders it, `logs` keeps the log lines the view shows. Does not own any
//! balancer behaviour (`app`), the simulated apiserver or the certificates (`sim`).

mod files;
pub mod logs;
mod scenario;
mod traffic;
mod view;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{interval, sleep_until, Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{ApplyError, Control};
use crate::config::ConfigError;
use crate::signals::Termination;
use scenario::Scenario;
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
/// The demo's `failback_after`: the default. dc-a flips every [`FLIP_EVERY`], so a connection
/// that left it stays away; the screen says when it would come home.
const FAILBACK_AFTER: Duration = Duration::from_secs(60);

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
    /// The balancer could not start, e.g. its port is in use (then the message suggests
    /// `--listen`/`--admin` on a free port).
    #[error("{}", start_error(.0))]
    Start(ApplyError),
    /// SIGINT/SIGTERM handlers could not be installed.
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
}

/// The balancer's start-up error, with a taken port saying how to run the demo beside whatever
/// holds it (the run command's KubePrism hint is left out: the demo is not a node's balancer).
fn start_error(e: &ApplyError) -> String {
    match e {
        ApplyError::Bind { field, addr, cause }
            if cause.kind() == std::io::ErrorKind::AddrInUse =>
        {
            let (flag, example) = match field {
                crate::config::ListenField::Admin => ("--admin", 17446),
                _ => ("--listen", 17445),
            };
            format!(
                "cannot listen on {addr}: {cause}; try another port: `readyprism demo {flag} \
                 127.0.0.1:0` (a free one; the screen shows which) or e.g. `{flag} 127.0.0.1:{example}`"
            )
        }
        e => e.to_string(),
    }
}

/// The config the demo's balancer runs, for `demo --print-config`: a starting point for
/// `readyprism run`. The demo's apiservers are simulated on free ports chosen when it starts, and
/// its CA and client certificate are generated into a temporary directory, so the addresses and
/// paths printed are placeholders, and the text says so.
pub fn print_config(listen: SocketAddr, admin: SocketAddr) -> String {
    let addrs: Vec<SocketAddr> = (0..SITES.len())
        .map(|i| SocketAddr::from(([127, 0, 0, 1], 6443 + i as u16)))
        .collect();
    let yaml = scenario::demo_yaml(
        listen,
        admin,
        &addrs,
        std::path::Path::new("/etc/kubernetes/pki/ca.crt"),
        std::path::Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem"),
    );
    format!(
        "# The config `readyprism demo` runs its balancer with.\n\
         # The backends are the demo's simulated apiservers (dc-a, dc-b, witness): the demo binds\n\
         # them on free loopback ports each time, so the addresses below are placeholders, as are\n\
         # the tls paths (the demo generates its CA and client certificate in a temporary\n\
         # directory). Put your apiservers and your node's files there to use it with\n\
         # `readyprism run --config FILE`; the demo's probe timings are faster than the defaults.\n\
         {yaml}"
    )
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
    let (scenario, app) = Scenario::start(&opts).await?;
    let names = scenario.names();
    let listen = app.listen_addrs().first().copied().unwrap_or(opts.listen);
    let (admin, balancer) = (app.admin_addr(), app.handle());
    // The balancer runs itself (discovery included) until the demo ends it.
    let end_balancer = CancellationToken::new();
    let running = app.run(Control::until(end_balancer.clone()));
    tokio::pin!(running);
    let mut balancer_ended = false;
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
    // When dc-a last regained quorum, while it has it.
    let mut dc_a_ready_since: Option<Instant> = None;
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
            () = &mut running => {
                balancer_ended = true;
                tracing::error!("the balancer stopped before the demo ended");
                break;
            }
            _ = sleep_until(next_flip) => {
                dc_a_ready = !dc_a_ready;
                scenario.fakes[0].control.set_ready(dc_a_ready);
                dc_a_ready_since = dc_a_ready.then(Instant::now);
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
                let logs = if tty { logs::lines() } else { Vec::new() };
                let frame = Frame {
                    elapsed: now - start,
                    remaining: end.map(|e| e.saturating_duration_since(now)),
                    listen,
                    admin,
                    status: &balancer.status(),
                    names: &names,
                    traffic: &t,
                    dc_a_ready,
                    dc_a_ready_for: dc_a_ready_since.map(|s| now - s),
                    next_flip_in: next_flip.saturating_duration_since(now),
                    join_in: (!joined).then(|| (start + JOIN_AT).saturating_duration_since(now)),
                    logs: &logs,
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
    // The balancer first (drain, then cut), then the apiservers, then the files.
    end_balancer.cancel();
    if !balancer_ended {
        running.await;
    }
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
            "{}demo over: connections {} (failed {}), long-lived connection moved {} time(s), \
             dc-a flipped {} time(s)\n",
            if tty { "\n" } else { "" },
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
