//! Domain fixtures for the crate's own unit tests: a backend's spec from its address, and a
//! snapshot entry with fresh live state. One way to build them, so a field added to
//! `BackendSpec` is added here once.

use std::sync::Arc;

use crate::backend::{Backend, BackendId, BackendLive, BackendSource, BackendSpec};
use crate::verdict::{Health, State};

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
    }
}
