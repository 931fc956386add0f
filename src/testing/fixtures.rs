//! Domain fixtures for the crate's own unit tests: a backend's spec from its address, a snapshot
//! entry with fresh live state, a health and a snapshot from a short notation. One way to build
//! them, so a field added to `BackendSpec` or `Health` is added here once.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{
    Backend, BackendId, BackendLive, BackendSource, BackendSpec, Routing, Snapshot,
};
use crate::config::HealthConfig;
use crate::verdict::{CheckFailure, FailingChecks, Health, Reach, State};

/// The spec of the backend at `address` (`host:port`, an IPv6 host in brackets) in `zone`: from
/// the config, checked against the name `apiserver`.
pub fn spec(address: &str, zone: Option<&str>) -> Arc<BackendSpec> {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    Arc::new(BackendSpec {
        id: BackendId::new(address),
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: port.parse().expect("a port"),
        zone: zone.map(str::to_string),
        server_name: rustls_pki_types::ServerName::try_from("apiserver")
            .expect("a name")
            .to_owned(),
        source: BackendSource::Config,
    })
}

/// A snapshot entry for `spec` in `state` (otherwise unknown health), with fresh live state.
pub fn backend(spec: Arc<BackendSpec>, state: State) -> Backend {
    Backend {
        spec,
        health: Health {
            state,
            ..Health::UNKNOWN
        },
        live: Arc::new(BackendLive::default()),
        evict_epoch: 0,
        degraded: None,
    }
}

/// A backend's health from one letter: `R` ready (its check passed), `A` unready with an HTTP
/// answer (`etcd` failing), `D` unready draining (only `shutdown` failing), `S` unready silent
/// (connected, no answer within the timeout), `X` unready unreached (no connection), `?` unknown
/// (no check yet).
pub fn health(letter: char) -> Health {
    let ms = Duration::from_millis(2);
    let (reach, reason, checks): (Reach, &str, &[&str]) = match letter {
        '?' => return Health::UNKNOWN,
        'R' => {
            return Health {
                state: State::Ready,
                latency: Some(ms),
                reach: Some(Reach::answered(200, ms)),
                ..Health::UNKNOWN
            }
        }
        'A' => (
            Reach::answered(500, ms),
            "readyz 500: etcd failed",
            &["etcd"],
        ),
        'D' => (
            Reach::draining(500, ms),
            "readyz 500: shutdown failed",
            &["shutdown"],
        ),
        'S' => (Reach::Connected, "timeout after 3s", &[]),
        'X' => (Reach::Unreached, "dial: connection refused", &[]),
        other => panic!("no health is written {other:?}: R A D S X ?"),
    };
    Health {
        state: State::Unready,
        latency: reach.latency(),
        reach: Some(reach),
        last_failure: Some(CheckFailure {
            reason: reason.into(),
            checks: FailingChecks::of(checks),
        }),
        pending: None,
    }
}

/// A snapshot of backends `10.0.0.<i>:6443`, no zone, one per letter of `letters` ([`health`]),
/// with the default routing and fresh live state.
pub fn snapshot(letters: &str) -> Snapshot {
    let backends = letters
        .chars()
        .enumerate()
        .map(|(i, letter)| {
            let mut b = backend(spec(&format!("10.0.0.{i}:6443"), None), State::Unknown);
            b.health = health(letter);
            b
        })
        .collect();
    Snapshot {
        generation: 1,
        routing: Routing::default(),
        backends,
    }
}

/// The `health:` block with every setting at its default (`docs/config.md`).
pub fn health_config() -> HealthConfig {
    HealthConfig {
        path: "/readyz".into(),
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(3),
        fast_interval: Duration::from_secs(1),
        remote_interval: Duration::from_secs(5),
        request_check_interval: Duration::from_secs(30),
        request_check_path: "/version".into(),
        rise: 2,
        fall: 2,
    }
}
