//! `cargo bench --bench proxy`: readyprism side by side with HAProxy 2.6 (`mode tcp`,
//! `nbthread 1`) and, when installed, nginx `stream` (one process), in one run, against an
//! in-process backend that also answers readyprism's TLS `/readyz` probes.
//!
//! Each round starts fresh proxy processes (so every round measures start-up and sees the same
//! heap history), then runs every scenario against direct / readyprism / HAProxy / nginx in an
//! order rotated by the round. Per scenario it reports the median of the per-round ratios
//! readyprism/HAProxy with min–max, and absolute medians; `target/proxy-bench/results.json` has
//! every value, `latency.svg` the 64 B round-trip distributions. HAProxy is required.
//!
//! Knobs: `PROXY_BENCH_ROUNDS` (default 15), `PROXY_BENCH_QUICK=1` (small sizes, for a smoke
//! run), `PROXY_BENCH_READYPRISM=/path` (use that binary instead of building
//! `target/release/readyprism`), `PROXY_BENCH_SCENARIOS=rtt,connect,bulk,concurrent,idle,churn`
//! (a subset), `PROXY_BENCH_WRAP="valgrind --tool=callgrind"` (a command readyprism runs under,
//! for profiling).

// Wall-clock measurement of other processes: tokio's paused-time `Instant` has no meaning here.
#![allow(clippy::disallowed_types)]

mod backend;
#[path = "../common/build.rs"]
mod build;
#[path = "../common/chart.rs"]
mod chart;
#[path = "../common/host.rs"]
mod host;
mod load;
mod metrics;
#[path = "../common/process.rs"]
mod process;
mod report;
mod rounds;
mod targets;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::Serialize;

use metrics::Metrics;
use rounds::Sizes;
use targets::{Env, Kind, Target};

/// TLS probe cost of a balancer that only probes, over the whole run.
#[derive(Debug, Serialize)]
struct Probing {
    /// Seconds from the first probe to the end of the run.
    window_s: f64,
    /// TLS handshakes the backend completed for it, the first (start-up) one included.
    handshakes: u64,
    /// `/readyz` requests it sent.
    probes: u64,
    /// Handshakes after the first, per hour, measured.
    extra_handshakes_per_hour: f64,
    /// Steady state per backend per hour: the measured extra rate plus the periodic redial
    /// (every `MAX_CONN_AGE` = 300 s, too long to see in one run): 3600 / 300 = 12.
    steady_state_per_hour: f64,
    /// All its CPU after start-up, divided by the probes (includes the 1 s file watchers).
    cpu_per_probe_ms: f64,
}

#[derive(Debug, Serialize)]
struct Results {
    machine: BTreeMap<&'static str, String>,
    command: &'static str,
    rounds: usize,
    sizes: String,
    duration_s: f64,
    scenarios: Vec<report::Summary>,
    probing: Probing,
}

fn main() -> ExitCode {
    let t_run = Instant::now();
    let Some(haproxy) = build::version("haproxy", &["-v"]) else {
        eprintln!(
            "proxy bench: HAProxy is required (`haproxy` not found on PATH); on Debian: apt-get install haproxy"
        );
        return ExitCode::FAILURE;
    };
    let nginx = build::version("nginx", &["-v"]);
    raise_fd_limit();
    let rounds: usize = std::env::var("PROXY_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let quick = std::env::var_os("PROXY_BENCH_QUICK").is_some();
    let sizes = if quick {
        Sizes {
            rtts: 300,
            warm: 50,
            connects: 50,
            bulk: 8 << 20,
            concurrent: (200, 5),
            idle: 500,
            churn: 500,
        }
    } else {
        Sizes {
            rtts: 2000,
            warm: 200,
            connects: 300,
            bulk: 64 << 20,
            concurrent: (1000, 20),
            idle: 5000,
            churn: 5000,
        }
    };
    let only = std::env::var("PROXY_BENCH_SCENARIOS").ok();
    let scenarios = rounds::Scenarios::parse(only.as_deref());

    let (profile_dir, out_dir) = build::dirs("proxy-bench");
    let readyprism = build::readyprism_binary(&profile_dir, "PROXY_BENCH_READYPRISM");
    let run_dir = out_dir.join("run");
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).expect("create target/proxy-bench/run");

    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = readyprism::sim::pki::Ca::new("bench-ca").expect("CA");
    let client = ca.client("bench-node").expect("client certificate");
    let env = Env {
        readyprism,
        wrap: std::env::var("PROXY_BENCH_WRAP")
            .map(|w| w.split_whitespace().map(String::from).collect())
            .unwrap_or_default(),
        ca: run_dir.join("ca.crt"),
        client: run_dir.join("client.pem"),
        nginx_stream_module: nginx.as_ref().and_then(|_| {
            let m = PathBuf::from("/usr/lib/nginx/modules/ngx_stream_module.so");
            m.exists().then_some(m)
        }),
    };
    std::fs::write(&env.ca, &ca.cert_pem).expect("write CA");
    std::fs::write(&env.client, client.combined_pem()).expect("write client cert");

    // One listener per target (their dials never share a 4-tuple space) and one for the
    // balancer that only probes.
    let be = backend::Backend::start(&ca, 5);
    let mut kinds = vec![Kind::Direct, Kind::Readyprism, Kind::Haproxy];
    if nginx.is_some() {
        kinds.push(Kind::Nginx);
    }
    let backends: BTreeMap<Kind, _> = [Kind::Direct, Kind::Readyprism, Kind::Haproxy, Kind::Nginx]
        .into_iter()
        .zip(be.addrs.iter().copied())
        .collect();

    let probe_dir = run_dir.join("probe-only");
    std::fs::create_dir_all(&probe_dir).expect("probe dir");
    let prober = Target::start(Kind::Readyprism, &probe_dir, be.addrs[4], &env);
    let probe_counts = be.probes[4].clone();
    rounds::wait_for("the probe-only balancer's first probe", || {
        probe_counts.requests.load(Ordering::Relaxed) >= 1
    });
    let (probe_t0, probe_cpu0) = (Instant::now(), prober.cpu());
    let probes0 = probe_counts.requests.load(Ordering::Relaxed);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let mut metrics = Metrics::new();
    let setup = rounds::Setup {
        kinds: &kinds,
        backends: &backends,
        env: &env,
        dir: &run_dir,
        sizes,
        only: scenarios,
        rt: &rt,
    };
    for r in 0..rounds {
        let t = Instant::now();
        rounds::run(r, &setup, &mut metrics);
        eprintln!(
            "proxy bench: round {}/{rounds} took {:.1} s",
            r + 1,
            t.elapsed().as_secs_f64()
        );
    }

    let window = probe_t0.elapsed().as_secs_f64();
    let handshakes = probe_counts.handshakes.load(Ordering::Relaxed);
    let probes = probe_counts.requests.load(Ordering::Relaxed) - probes0;
    let extra = handshakes.saturating_sub(1) as f64 * 3600.0 / window;
    let probing = Probing {
        window_s: window,
        handshakes,
        probes,
        extra_handshakes_per_hour: extra,
        steady_state_per_hour: extra + 3600.0 / 300.0,
        cpu_per_probe_ms: prober.cpu().saturating_sub(probe_cpu0).as_secs_f64() * 1e3
            / probes.max(1) as f64,
    };
    drop(prober);

    let svg = out_dir.join("latency.svg");
    let title = format!(
        "64 B round trips, {} rounds, {} per target",
        rounds,
        metrics.rtt64.values().next().map_or(0, Vec::len)
    );
    for v in metrics.rtt64.values_mut() {
        v.sort_unstable();
    }
    if let Err(e) = report::latency_svg(&svg, &title, &metrics.rtt64) {
        eprintln!("proxy bench: cannot draw {}: {e}", svg.display());
    }
    let scenarios: Vec<report::Summary> = metrics
        .all
        .into_iter()
        .map(|(_, m)| report::summarise(m))
        .collect();
    println!("{}", report::markdown(&scenarios));
    println!(
        "health probing (probe-only balancer, default 5 s interval, {window:.0} s): {handshakes} TLS handshake(s), {probes} probes; \
         steady state {:.1} handshakes/backend/hour (target ≤ 12); {:.2} ms CPU per probe",
        probing.steady_state_per_hour, probing.cpu_per_probe_ms
    );
    let results = Results {
        machine: machine(&haproxy, nginx.as_deref()),
        command: "cargo bench --bench proxy",
        rounds,
        sizes: format!("{sizes:?}"),
        duration_s: t_run.elapsed().as_secs_f64(),
        scenarios,
        probing,
    };
    let json = out_dir.join("results.json");
    report::write_json(&json, &results);
    println!(
        "wrote {} and {} in {:.0} s",
        json.display(),
        svg.display(),
        results.duration_s
    );
    ExitCode::SUCCESS
}

/// 5000 idle connections need 10 000 descriptors here (client and backend ends) and as many in
/// each proxy: raise the soft limit to the hard one with util-linux `prlimit` (the proxies
/// inherit it), and say so if that is still too low.
fn raise_fd_limit() {
    let (soft, hard) = host::open_file_limits();
    if soft != hard {
        host::raise_open_file_limit();
    }
    if hard < 12_000 {
        eprintln!("proxy bench: warning: open-file limit {hard} is below the 12 000 the idle scenario needs");
    }
}

fn machine(haproxy: &str, nginx: Option<&str>) -> BTreeMap<&'static str, String> {
    let mem = host::read("/proc/meminfo")
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut m = host::machine();
    m.insert("memory", mem);
    m.insert("haproxy", haproxy.to_string());
    m.insert("nginx", nginx.unwrap_or("not installed").to_string());
    m
}
