//! `cargo bench --bench herd`: how many connections a fleet of node-local balancers moves when the
//! control plane blinks, readyprism beside HAProxy configured as OpenShift runs it and Talos's
//! KubePrism.
//!
//! Three in-process fake apiservers (real TLS, client certificates, each on its own loopback
//! port), N balancer processes (one per node, `HERD_N`, default 50), 20 kept-alive kubelet-like
//! clients per balancer. Per scenario and balancer: fresh apiservers and balancers, clients
//! connected and settled, counts zeroed, the fault played, then watched. `target/herd/results.json`
//! has every number, `target/herd/herd.svg` the new connections per 100 ms; the table is printed.
//!
//! Knobs: `HERD_N` (balancers, default 50), `HERD_SCENARIOS=blink3,blink8,drain,quorum,return`
//! (a subset), `HERD_OBSERVE` (seconds watched after each fault's end, default 30),
//! `HERD_READYPRISM=/path` (that binary instead of building `target/release/readyprism`),
//! `HERD_ASSERT_GOALS=1` (fail unless readyprism meets its goals on every fault),
//! `HERD_KINDS=readyprism,haproxy,kubeprism` (a subset, each one required; `readyprism-paced`,
//! readyprism with `reentry_window: 5s`, runs only when named),
//! `HERD_REQUIRE_KUBEPRISM=1` (fail when KubePrism is not built, rather than run without it),
//! `HERD_KUBEPRISM=/path` (that binary instead of `tests/real/build`'s).
//!
//! Exits non-zero when a result is missing, a balancer died, or readyprism's clients saw what it
//! could have avoided whatever its closing rules (`checks.rs`).

// Wall-clock timelines of other processes: tokio's paused-time `Instant` has no meaning here.
#![allow(clippy::disallowed_types)]

#[path = "../common/build.rs"]
mod build;
#[path = "../common/chart.rs"]
mod chart;
mod checks;
mod clients;
mod fleet;
#[path = "../common/host.rs"]
mod host;
mod lineup;
mod measure;
#[path = "../common/process.rs"]
mod process;
mod report;
mod scenario;

use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::testing::Cluster;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Serialize;
use tokio_rustls::TlsConnector;

use fleet::Env;
use measure::Outcome;
use scenario::{Scenario, Setup, CLIENTS_PER_NODE};

#[derive(Serialize)]
struct Results {
    command: &'static str,
    commit: String,
    machine: BTreeMap<&'static str, String>,
    /// The balancer kinds side by side, in the table's order.
    kinds: Vec<&'static str>,
    nodes: usize,
    clients_per_node: usize,
    observe_s: u64,
    duration_s: f64,
    outcomes: Vec<Outcome>,
    problems: Vec<String>,
    goals_asserted: bool,
    goals_missed: Vec<String>,
}

fn main() -> ExitCode {
    let t_run = Instant::now();
    let lineup = match lineup::choose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("herd bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let knob = |k: &str, default: u64| -> u64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let nodes = knob("HERD_N", 50).max(1) as usize;
    let observe = Duration::from_secs(knob("HERD_OBSERVE", 30));
    let assert_goals = std::env::var("HERD_ASSERT_GOALS").is_ok_and(|v| v == "1");
    let scenarios = match Scenario::parse(std::env::var("HERD_SCENARIOS").ok().as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("herd bench: HERD_SCENARIOS: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kinds = lineup.kinds.clone();
    eprintln!(
        "herd bench: side by side: {}",
        kinds
            .iter()
            .map(|k| k.label())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let commit = commit();
    raise_fd_limit(nodes * CLIENTS_PER_NODE * 2 + nodes * 8 + 256);

    let (profile_dir, out_dir) = build::dirs("herd");
    let readyprism = build::readyprism_binary(&profile_dir, "HERD_READYPRISM");
    // A run that stops half-way leaves no results of an earlier one behind.
    let _ = std::fs::remove_file(out_dir.join("results.json"));
    let _ = std::fs::remove_file(out_dir.join("herd.svg"));
    let run_dir = out_dir.join("run");
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir).expect("create target/herd/run");

    let cluster = Cluster::new("herd-ca");
    let env = Env {
        readyprism,
        kubeprism: lineup.kubeprism.as_ref().map(|k| k.bin.clone()),
        ca: run_dir.join("ca.crt"),
        client: run_dir.join("kubelet-client.pem"),
    };
    std::fs::write(&env.ca, &cluster.ca.cert_pem).expect("write CA");
    std::fs::write(&env.client, cluster.client.combined_pem()).expect("write client cert");
    // A key readable by others is warned about at start: the kubelet's is 0600.
    std::fs::set_permissions(
        &env.client,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod client key");

    let runtime = |name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()
            .expect("runtime")
    };
    let (servers, client_rt) = (runtime("apiservers"), runtime("clients"));
    let setup = Setup {
        nodes,
        observe,
        env: &env,
        cluster: &cluster,
        tls: kubelet_tls(&cluster),
        servers: &servers,
        clients: &client_rt,
        dir: &run_dir,
    };
    let mut outcomes = Vec::new();
    for s in &scenarios {
        for &k in &kinds {
            let t = Instant::now();
            eprintln!("herd bench: {} against {} × {}", s.name(), nodes, k.name());
            let run = scenario::run(*s, k, &setup);
            let o = measure::outcome(&run);
            eprintln!(
                "herd bench: {} / {}: {} closed by the balancer, {} new connections (peak {}/100 ms), {} client errors ({:.0} s)",
                o.scenario,
                o.balancer,
                o.closed_by_balancer,
                o.new_connections,
                o.peak_per_100ms,
                o.client_errors,
                t.elapsed().as_secs_f64()
            );
            outcomes.push(o);
        }
    }

    println!("{}", report::table(&scenarios, &kinds, &outcomes));
    let svg = out_dir.join("herd.svg");
    if let Err(e) = report::svg(&svg, &scenarios, &outcomes) {
        eprintln!("herd bench: cannot draw {}: {e}", svg.display());
    }
    let problems = checks::always(&scenarios, &kinds, &outcomes);
    let goals_missed = if assert_goals {
        checks::goals(&outcomes)
    } else {
        Vec::new()
    };
    let results = Results {
        command: "cargo bench --bench herd",
        commit,
        machine: machine(&lineup),
        kinds: kinds.iter().map(|k| k.name()).collect(),
        nodes,
        clients_per_node: CLIENTS_PER_NODE,
        observe_s: observe.as_secs(),
        duration_s: t_run.elapsed().as_secs_f64(),
        outcomes,
        problems: problems.clone(),
        goals_asserted: assert_goals,
        goals_missed: goals_missed.clone(),
    };
    let json = out_dir.join("results.json");
    if let Err(e) = report::write_json(&json, &results) {
        eprintln!("herd bench: cannot write {}: {e}", json.display());
        return ExitCode::FAILURE;
    }
    println!(
        "wrote {} and {} in {:.0} s",
        json.display(),
        svg.display(),
        results.duration_s
    );
    for p in &problems {
        eprintln!("herd bench: FAIL: {p}");
    }
    for g in &goals_missed {
        eprintln!("herd bench: GOAL MISSED: {g}");
    }
    if problems.is_empty() && goals_missed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The kubelet's TLS: trusts the cluster CA, presents its client certificate.
fn kubelet_tls(cluster: &Cluster) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cluster.ca.cert_pem.as_bytes()) {
        roots.add(c.expect("CA PEM")).expect("CA certificate");
    }
    let chain = CertificateDer::pem_slice_iter(cluster.client.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("client certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(cluster.client.key_pem.as_bytes()).expect("client key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    TlsConnector::from(Arc::new(config))
}

/// The tree's commit, `-dirty` when it has changes.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let head = git(&["rev-parse", "--short", "HEAD"]);
    let dirty = !git(&["status", "--porcelain"]).is_empty();
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

/// Every client holds two descriptors in this process (its socket and the apiserver's end): raise
/// the soft limit to the hard one with util-linux `prlimit` when it is below `need`, and say so
/// if that is still too low (then `ulimit -n` before the run).
fn raise_fd_limit(need: usize) {
    if host::open_file_limits().0 < need {
        host::raise_open_file_limit();
    }
    let (soft, _) = host::open_file_limits();
    if soft < need {
        eprintln!("herd bench: warning: open-file limit {soft} is below the {need} this run needs (ulimit -n {need})");
    }
}

fn machine(lineup: &lineup::Lineup) -> BTreeMap<&'static str, String> {
    let mut m = host::machine();
    if let Some(v) = &lineup.haproxy {
        m.insert("haproxy", v.clone());
    }
    if let Some(k) = &lineup.kubeprism {
        m.insert("kubeprism", k.version.clone());
    }
    m
}
