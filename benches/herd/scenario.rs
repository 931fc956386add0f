//! The faults, and one run of one fault against one fleet: three fresh apiservers, N fresh
//! balancers, their clients connected and settled, counts zeroed, the fault played on its
//! timeline, then watched.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::testing::Cluster;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use crate::clients::{self, Dialer, Record};
use crate::fleet::{Balancer, Env, Kind};
use crate::measure::Run;

/// Clients per balancer (one node's kubelet, its pods' service accounts, kube-proxy, ...).
pub const CLIENTS_PER_NODE: usize = 20;

/// Apiservers in the control plane.
pub const APISERVERS: usize = 3;

/// The balancers' starts are spread over this (both probe every 5 s), so that a fault meets the
/// fleet's probes at every phase, as it meets a real fleet's.
const PHASES: Duration = Duration::from_secs(5);

/// kube-apiserver's `/readyz` answer while etcd is unreachable.
const ETCD_FAILED: &str = "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n";

/// kube-apiserver's `/readyz` answer during its graceful shutdown's delay: only `shutdown` fails.
const SHUTDOWN_FAILED: &str =
    "[+]ping ok\n[+]etcd ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n";

/// A fault the control plane goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Every apiserver fails `/readyz` with `[-]etcd failed` for 3 s (an etcd leader election).
    Blink3,
    /// The same for 8 s.
    Blink8,
    /// One apiserver shuts down gracefully: `/readyz` fails with only `[-]shutdown failed` while it
    /// serves on for [`DRAIN_DELAY`], then its listener closes and its connections are closed.
    Drain,
    /// One apiserver loses etcd quorum for good: `[-]etcd failed` until the end.
    Quorum,
    /// Every apiserver fails `/readyz` with `[-]etcd failed` for [`RETURN_SPELL`]; then one comes
    /// back and the others fail on: the spell with none ready ends, and the connections that
    /// failed open to the others move to the one that returned (the re-entry herd).
    Return,
}

/// How long nothing is ready in the return scenario.
pub const RETURN_SPELL: Duration = Duration::from_secs(10);

/// kube-apiserver's `--shutdown-delay-duration` in the drain scenario.
pub const DRAIN_DELAY: Duration = Duration::from_secs(15);

impl Scenario {
    /// Every scenario, in run order.
    pub const ALL: [Scenario; 5] = [
        Scenario::Blink3,
        Scenario::Blink8,
        Scenario::Drain,
        Scenario::Quorum,
        Scenario::Return,
    ];

    /// Name in `HERD_SCENARIOS`, the output and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Blink3 => "blink3",
            Scenario::Blink8 => "blink8",
            Scenario::Drain => "drain",
            Scenario::Quorum => "quorum",
            Scenario::Return => "return",
        }
    }

    /// One line for the table and the picture.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::Blink3 => "(a) every apiserver fails /readyz [-]etcd for 3 s",
            Scenario::Blink8 => "(a) every apiserver fails /readyz [-]etcd for 8 s",
            Scenario::Drain => "(b) one apiserver's graceful shutdown, 15 s delay",
            Scenario::Quorum => "(c) one apiserver loses etcd quorum for good",
            Scenario::Return => "(d) none ready for 10 s, then one apiserver comes back first",
        }
    }

    /// How long the fault itself lasts (the watch goes on `observe` past its end).
    pub fn fault_len(self) -> Duration {
        match self {
            Scenario::Blink3 => Duration::from_secs(3),
            Scenario::Blink8 => Duration::from_secs(8),
            Scenario::Drain => DRAIN_DELAY,
            Scenario::Quorum => Duration::ZERO,
            Scenario::Return => RETURN_SPELL,
        }
    }

    /// Whether one apiserver (the busiest) is the victim, rather than all of them.
    pub fn has_victim(self) -> bool {
        matches!(self, Scenario::Drain | Scenario::Quorum)
    }

    /// The scenarios `only` names (comma-separated), or all of them; an unknown name is an error.
    pub fn parse(only: Option<&str>) -> Result<Vec<Scenario>, String> {
        let Some(only) = only else {
            return Ok(Scenario::ALL.to_vec());
        };
        only.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                Scenario::ALL
                    .into_iter()
                    .find(|c| c.name() == s)
                    .ok_or_else(|| {
                        format!("unknown scenario {s:?} (blink3, blink8, drain, quorum, return)")
                    })
            })
            .collect()
    }
}

/// What a run needs from the harness.
pub struct Setup<'a> {
    /// Balancers (nodes).
    pub nodes: usize,
    /// How long to watch after the fault's end.
    pub observe: Duration,
    /// Certificates, binaries.
    pub env: &'a Env,
    /// The cluster's PKI, which the fake apiservers serve.
    pub cluster: &'a Cluster,
    /// The kubelet's TLS for the clients.
    pub tls: TlsConnector,
    /// The runtime the apiservers run on.
    pub servers: &'a tokio::runtime::Runtime,
    /// The runtime the clients run on.
    pub clients: &'a tokio::runtime::Runtime,
    /// Scratch directory for this run's configs and logs.
    pub dir: &'a Path,
}

/// One sample of the watch, every 100 ms.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the fault began (negative: before).
    pub t: f64,
    /// Clients connected to each apiserver.
    pub on: Vec<usize>,
    /// TLS handshakes each apiserver has completed (clients and probes), since it started.
    pub handshakes: Vec<u64>,
}

/// Runs `scenario` against a fleet of `kind`; what was seen, for [`crate::measure`].
pub fn run(scenario: Scenario, kind: Kind, s: &Setup) -> Run {
    let fakes: Vec<FakeApiserver> = {
        let _guard = s.servers.enter();
        (0..APISERVERS)
            .map(|i| s.cluster.fake(&format!("apiserver-{i}")))
            .collect()
    };
    let addrs: Vec<_> = fakes.iter().map(|f| f.addr).collect();
    let names = Arc::new(fakes.iter().map(|f| f.control.name.clone()).collect());
    let dir = s.dir.join(format!("{}-{}", scenario.name(), kind.name()));
    let _ = std::fs::remove_dir_all(&dir);
    // Nodes probe at independent phases: starts spread over one probe interval.
    let t_start = Instant::now();
    let mut fleet: Vec<Balancer> = (0..s.nodes)
        .map(|n| {
            sleep_until(t_start + PHASES.mul_f64(n as f64 / s.nodes as f64));
            Balancer::start(kind, &dir.join(format!("node-{n}")), &addrs, s.env)
        })
        .collect();
    wait_for("every balancer ready", Duration::from_secs(60), || {
        fleet.iter().all(Balancer::ready)
    });

    let clients = s.nodes * CLIENTS_PER_NODE;
    let rec = Arc::new(Record::new(clients));
    let stop = CancellationToken::new();
    let tracker = tokio_util::task::TaskTracker::new();
    for id in 0..clients {
        let dialer = Dialer {
            balancer: fleet[id / CLIENTS_PER_NODE].addr,
            tls: s.tls.clone(),
            names: Arc::clone(&names),
        };
        let _guard = s.clients.enter();
        tracker.spawn(clients::run(id, dialer, rec.clone(), stop.clone()));
    }
    tracker.close();
    settle(&rec, clients);

    // Counts zeroed: everything from here on is measured from the fault.
    let t_fault = rec.epoch.elapsed().as_secs_f64();
    let on_at_fault = rec.on_each(APISERVERS);
    let victim = scenario.has_victim().then(|| busiest(&on_at_fault));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampling = CancellationToken::new();
    let sampler = {
        let (rec, samples, sampling) = (rec.clone(), samples.clone(), sampling.clone());
        let controls: Vec<_> = fakes.iter().map(|f| f.control.clone()).collect();
        std::thread::spawn(move || {
            while !sampling.is_cancelled() {
                let sample = Sample {
                    t: rec.epoch.elapsed().as_secs_f64() - t_fault,
                    on: rec.on_each(APISERVERS),
                    handshakes: controls
                        .iter()
                        .map(|c| c.handshakes.load(Ordering::SeqCst))
                        .collect(),
                };
                samples.lock().expect("samples").push(sample);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let fault_start = Instant::now();
    let mut on_victim_at_close = None;
    let mut apiserver_closed_at = None;
    match scenario {
        Scenario::Blink3 | Scenario::Blink8 => {
            for f in &fakes {
                set_readyz(f, ETCD_FAILED);
            }
            sleep_until(fault_start + scenario.fault_len());
            for f in &fakes {
                f.control.readyz_answer.store(None);
            }
        }
        Scenario::Drain => {
            let v = &fakes[victim.unwrap_or(0)];
            set_readyz(v, SHUTDOWN_FAILED);
            sleep_until(fault_start + DRAIN_DELAY);
            // The delay is over: the listener closes, then the connections left.
            on_victim_at_close = Some(rec.on_each(APISERVERS)[victim.unwrap_or(0)]);
            apiserver_closed_at = Some(fault_start.elapsed().as_secs_f64());
            v.close_listener();
            s.servers.block_on(v.stop());
        }
        Scenario::Quorum => set_readyz(&fakes[victim.unwrap_or(0)], ETCD_FAILED),
        Scenario::Return => {
            for f in &fakes {
                set_readyz(f, ETCD_FAILED);
            }
            sleep_until(fault_start + RETURN_SPELL);
            fakes[0].control.readyz_answer.store(None);
        }
    }
    sleep_until(fault_start + scenario.fault_len() + s.observe);

    sampling.cancel();
    let _ = sampler.join();
    let end_on = rec.on_each(APISERVERS);
    let alive = fleet.iter_mut().all(Balancer::alive);
    stop.cancel();
    s.clients.block_on(tracker.wait());
    drop(fleet);
    {
        let _guard = s.servers.enter();
        drop(fakes);
    }
    // The watch: from the fault to its end (not the clients' stop after it).
    let window = (scenario.fault_len() + s.observe).as_secs_f64();
    let events = rec
        .events()
        .into_iter()
        .map(|mut e| {
            e.t -= t_fault;
            e
        })
        .filter(|e| (0.0..=window).contains(&e.t))
        .collect();
    let samples = samples.lock().expect("samples").clone();
    Run {
        scenario,
        kind,
        clients,
        victim,
        on_at_fault,
        on_at_end: end_on,
        on_victim_at_close,
        apiserver_closed_at,
        events,
        samples,
        balancers_alive: alive,
        window,
    }
}

/// kube-apiserver's failing `/readyz`: 500 with `body`.
fn set_readyz(f: &FakeApiserver, body: &str) {
    f.control
        .readyz_answer
        .store(Some(Arc::new((500, body.to_string()))));
}

/// The apiserver carrying the most clients (the first of equals).
fn busiest(on: &[usize]) -> usize {
    let most = on.iter().copied().max().unwrap_or(0);
    on.iter().position(|&n| n == most).unwrap_or(0)
}

/// Waits until every client is connected and no client has (re)connected for 2 s: a settled start.
fn settle(rec: &Record, clients: usize) {
    wait_for("every client connected", Duration::from_secs(120), || {
        rec.connected.load(Ordering::SeqCst) == clients
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = rec.events().len();
        std::thread::sleep(Duration::from_secs(2));
        let quiet = rec.events().len() == before;
        if quiet && rec.connected.load(Ordering::SeqCst) == clients {
            return;
        }
        assert!(Instant::now() < deadline, "the clients never settled");
    }
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sleep_until(t: Instant) {
    std::thread::sleep(t.saturating_duration_since(Instant::now()));
}
