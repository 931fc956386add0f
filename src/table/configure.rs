//! A new config's snapshot: backends matched by id (a kept one keeps its health and its
//! connections), removed ones returned to be evicted once the snapshot is published.
//!
//! Does not own publishing or evicting (the writer in `table`).

use std::sync::Arc;

use crate::backend::{Backend, BackendLive, BackendSpec, Routing, Snapshot};
use crate::eviction::CloseReason;
use crate::verdict::Health;

/// The snapshot for a new config, and the live state of removed backends (to evict once the
/// snapshot is published). Backends are matched by id: a new zone or server name keeps the
/// health and the connections (the probe restarts with the new name). An id listed twice is
/// one backend (the first listing): the table never holds two backends with one identity.
pub fn configure(
    old: &Snapshot,
    routing: Routing,
    listed: Vec<Arc<BackendSpec>>,
) -> (Snapshot, Vec<Arc<BackendLive>>) {
    let mut specs: Vec<Arc<BackendSpec>> = Vec::with_capacity(listed.len());
    for spec in listed {
        if specs.iter().any(|s| s.id == spec.id) {
            tracing::warn!(backend = %spec.id, source = spec.source.as_str(), "backend listed twice; the first listing is kept");
        } else {
            specs.push(spec);
        }
    }
    let mut removed = Vec::new();
    for gone in old
        .backends
        .iter()
        .filter(|o| !specs.iter().any(|s| s.id == o.spec.id))
    {
        let active = gone.live.active.load(std::sync::atomic::Ordering::Relaxed);
        tracing::info!(backend = %gone.spec.id, source = gone.spec.source.as_str(), reason = CloseReason::Removed.as_str(), active, "backend removed; closing its connections");
        removed.push(gone.live.clone());
    }
    let backends = specs
        .into_iter()
        .map(|spec| match old.position(&spec.id) {
            Some(i) => {
                let kept = &old.backends[i];
                Backend {
                    spec,
                    ..kept.clone()
                }
            }
            None => {
                let live = Arc::new(BackendLive::default());
                let evict_epoch = live.eviction.epoch();
                Backend {
                    live,
                    spec,
                    health: Health::UNKNOWN,
                    degraded: None,
                    evict_epoch,
                }
            }
        })
        .collect();
    let next = Snapshot {
        generation: old.generation,
        routing,
        backends,
    };
    (next, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendId, BackendSource};

    fn spec(address: &str, source: BackendSource) -> Arc<BackendSpec> {
        let (host, port) = address.rsplit_once(':').expect("host:port");
        Arc::new(BackendSpec {
            id: BackendId::new(address),
            host: host.to_string(),
            port: port.parse().expect("port"),
            zone: None,
            server_name: rustls::pki_types::ServerName::try_from("apiserver")
                .expect("name")
                .to_owned(),
            source,
        })
    }

    #[test]
    fn an_id_listed_twice_is_one_backend_the_first_listing() {
        let listed = vec![
            spec("10.0.1.10:6443", BackendSource::Config),
            spec("10.0.1.10:6443", BackendSource::Cache),
            spec("10.0.2.10:6443", BackendSource::Cache),
            spec("10.0.2.10:6443", BackendSource::Cache),
        ];
        let (next, removed) = configure(&Snapshot::default(), Routing::default(), listed);
        let ids: Vec<(&str, BackendSource)> = next
            .backends
            .iter()
            .map(|b| (b.spec.id.as_str(), b.spec.source))
            .collect();
        assert_eq!(
            ids,
            [
                ("10.0.1.10:6443", BackendSource::Config),
                ("10.0.2.10:6443", BackendSource::Cache)
            ]
        );
        assert!(removed.is_empty());
    }
}
