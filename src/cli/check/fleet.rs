//! The control plane's load from a fleet of nodes running this config (`check --fleet-size N`):
//! per apiserver, in steady state (every apiserver ready, every node's connections home), the
//! `/readyz` probes, the probes' TLS handshakes and the discovery GETs a second, beside what a
//! fixed probe interval costs. Computed from the daemon's own schedule: the probe period from
//! `health::next_probe_due`, which backends wait `remote_interval` from `table::cadence`, the
//! kept probe connection's age from `health::probe`, the request checks at the first probe after
//! `request_check_interval` (`health::request_check`).
//!
//! The fleet's nodes are spread evenly over the zones the backends name, each node in one of
//! them; without zones, every node probes every backend at `interval`. Discovery polls go to a
//! node's first pick: its own zone's apiserver (with several, or none, spread evenly).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, BackendLive, Routing, Snapshot};
use crate::config::{Config, DurationValue};
use crate::health::probe::MAX_CONN_AGE;
use crate::health::{next_probe_due, Due};
use crate::table::cadence;
use crate::verdict::{Health, Reach, State};

/// One apiserver's load from the fleet, a second.
#[derive(Debug, Clone, PartialEq)]
pub struct Load {
    /// Its address, as configured.
    pub address: String,
    /// Its zone, if any.
    pub zone: Option<String>,
    /// `/readyz` probes with this config's cadence.
    pub probes: f64,
    /// `/readyz` probes if every backend were probed every `interval`.
    pub fixed: f64,
    /// TLS handshakes of the kept probe connections (each re-dialled every 5 minutes).
    pub handshakes: f64,
    /// Discovery GETs (0 with discovery off).
    pub discovery: f64,
    /// Request checks (0 with them off): one `GET` on the kept probe connection at the first
    /// probe after each is due.
    pub request_checks: f64,
}

/// The mean steady period of a probe at `interval`: what `next_probe_due` schedules after a
/// probe that changed nothing (the ±10 % jitter averages out).
fn period(config: &Config, interval: Duration) -> f64 {
    let last = tokio::time::Instant::now();
    let due = Due {
        last,
        pending: false,
        interval,
        fast_interval: config.health.fast_interval,
        passive_failure: None,
    };
    (next_probe_due(&due) - last).as_secs_f64()
}

/// For a node in `zone`, which of `config`'s backends it probes at the remote cadence, every
/// backend ready and idle.
fn remote_for(config: &Config, zone: Option<&str>) -> Vec<bool> {
    let ready = Health {
        state: State::Ready,
        reach: Some(Reach::answered(200, Duration::from_millis(1))),
        ..Health::UNKNOWN
    };
    let snap = Snapshot {
        generation: 1,
        routing: zone.map_or_else(Routing::default, Routing::in_zone),
        backends: config
            .backends
            .iter()
            .map(|spec| Backend {
                spec: Arc::new(spec.clone()),
                health: ready.clone(),
                live: Arc::new(BackendLive::default()),
                evict_epoch: 0,
                degraded: None,
            })
            .collect(),
    };
    cadence::remote(&snap)
}

/// The load of `nodes` nodes running `config`, per backend in config order.
pub fn loads(config: &Config, nodes: u64) -> Vec<Load> {
    let n = nodes as f64;
    let mut zones: Vec<&str> = config
        .backends
        .iter()
        .filter_map(|b| b.zone.as_deref())
        .collect();
    zones.sort_unstable();
    zones.dedup();
    // Each node's zone: every zone an equal share of the fleet; with none, one group of all.
    let groups: Vec<Option<&str>> = if zones.is_empty() {
        vec![None]
    } else {
        zones.iter().map(|z| Some(*z)).collect()
    };
    let share = n / groups.len() as f64;
    let near = period(config, config.health.interval);
    let far = period(config, config.health.remote_interval);
    let mut loads: Vec<Load> = config
        .backends
        .iter()
        .map(|b| Load {
            address: b.id.to_string(),
            zone: b.zone.clone(),
            probes: 0.0,
            fixed: n / near,
            handshakes: n / MAX_CONN_AGE.as_secs_f64(),
            discovery: 0.0,
            request_checks: 0.0,
        })
        .collect();
    // A check waits for the first probe after it is due: on average half a probe period more.
    let every = config.health.request_check_interval.as_secs_f64();
    let check_period = |probe_period: f64| every + probe_period / 2.0;
    let polls = config.discovery.interval.as_secs_f64();
    for group in &groups {
        let remote = remote_for(config, *group);
        for (load, far_away) in loads.iter_mut().zip(&remote) {
            let probe_period = if *far_away { far } else { near };
            load.probes += share / probe_period;
            if every > 0.0 {
                load.request_checks += share / check_period(probe_period);
            }
        }
        if config.discovery.endpoints {
            // A node's first pick: its zone's backends (all of them without a zone there).
            let home: Vec<usize> = (0..config.backends.len())
                .filter(|&i| group.is_none() || config.backends[i].zone.as_deref() == *group)
                .collect();
            let home = if home.is_empty() {
                (0..config.backends.len()).collect()
            } else {
                home
            };
            for &i in &home {
                loads[i].discovery += share / polls / home.len() as f64;
            }
        }
    }
    loads
}

/// The report: YAML comments, one line per apiserver, then what the figures assume.
pub fn render(config: &Config, nodes: u64) -> String {
    let mut out = format!(
        "# Control-plane load from {nodes} nodes with this config (steady state: every apiserver ready, connections home), a second:\n"
    );
    for l in loads(config, nodes) {
        let zone = l
            .zone
            .as_deref()
            .map_or(String::new(), |z| format!(" ({z})"));
        out.push_str(&format!(
            "#   {}{zone}: /readyz {:.1} (at a fixed interval {:.1}: {:.2}×), TLS handshakes {:.1}, discovery GETs {:.1}, request checks {:.1}\n",
            l.address,
            l.probes,
            l.fixed,
            l.probes / l.fixed,
            l.handshakes,
            l.discovery,
            l.request_checks,
        ));
    }
    out.push_str(&format!(
        "#   Nodes spread evenly over the backends' zones; an idle ready apiserver of another zone is probed every remote_interval {} while the node's own zone has one ready, the others every interval {}; each node's probe connection is re-dialled every {}; a request check rides the first probe after each request_check_interval {} (0s: off).\n",
        DurationValue(config.health.remote_interval),
        DurationValue(config.health.interval),
        DurationValue(MAX_CONN_AGE),
        DurationValue(config.health.request_check_interval),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        Config::parse(yaml, "node.yaml").expect("valid")
    }

    const THREE_ZONES: &str = "zone: dc-b\nbackends:\n  - { address: \"10.0.1.1:6443\", zone: dc-a }\n  - { address: \"10.0.2.1:6443\", zone: dc-b }\n  - { address: \"10.0.3.1:6443\", zone: witness }\ntls:\n  ca: /ca\ndiscovery:\n  endpoints: true\n";

    #[test]
    fn three_zones_cost_each_apiserver_five_ninths_of_a_fixed_interval() {
        let yaml = THREE_ZONES.replace("discovery:", "health:\n  remote_interval: 15s\ndiscovery:");
        let loads = loads(&config(&yaml), 90_000);
        for l in &loads {
            // 30,000 home nodes every 5 s + 60,000 others every 15 s = 10,000/s, against 18,000.
            assert!((l.probes - 10_000.0).abs() < 1e-6, "{l:?}");
            assert!((l.fixed - 18_000.0).abs() < 1e-6, "{l:?}");
            assert!((l.handshakes - 300.0).abs() < 1e-6, "{l:?}");
            // 30,000 home nodes polling every 30 s.
            assert!((l.discovery - 1_000.0).abs() < 1e-6, "{l:?}");
            // 30,000 home nodes every 30 + 2.5 s, 60,000 others every 30 + 7.5 s.
            let checks = 30_000.0 / 32.5 + 60_000.0 / 37.5;
            assert!((l.request_checks - checks).abs() < 1e-6, "{l:?}");
        }
    }

    #[test]
    fn request_checks_off_cost_nothing() {
        let yaml = THREE_ZONES.replace(
            "discovery:",
            "health:\n  request_check_interval: 0s\ndiscovery:",
        );
        for l in loads(&config(&yaml), 1_000) {
            assert_eq!(l.request_checks, 0.0, "{l:?}");
        }
    }

    #[test]
    fn without_zones_every_backend_is_probed_at_the_interval() {
        let yaml = "backends:\n  - address: \"10.0.1.1:6443\"\n  - address: \"10.0.2.1:6443\"\ntls:\n  ca: /ca\n";
        for l in loads(&config(yaml), 1_000) {
            assert!((l.probes - l.fixed).abs() < 1e-9, "{l:?}");
            assert_eq!(l.discovery, 0.0, "discovery off");
        }
    }

    #[test]
    fn the_default_remote_interval_costs_what_a_fixed_interval_does() {
        for l in loads(&config(THREE_ZONES), 1_000) {
            assert!((l.probes - l.fixed).abs() < 1e-9, "{l:?}");
        }
    }
}
