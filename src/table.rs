//! The routing table: one `ArcSwap<Snapshot>` with a single writer task and lock-free readers.
//!
//! Health results and config changes arrive as [`TableCmd`]s; the writer folds them into a new
//! snapshot, publishes it, and signals the connections of backends that stopped being ready.
//! Does not own probing (`health/`) or connection handling (`proxy`).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, BackendLive, BackendSpec, Health, Snapshot, State};
use crate::config::WhenNoneReady;
use crate::metrics::Metrics;

/// The published snapshot and its generation counter.
#[derive(Debug)]
pub struct Table {
    current: ArcSwap<Snapshot>,
    generation: watch::Sender<u64>,
}

/// A change for the writer.
#[derive(Debug)]
pub enum TableCmd {
    /// A backend's health changed (state, latency or reason).
    Health {
        /// Which backend; ignored if it is no longer configured.
        spec: Arc<BackendSpec>,
        /// The new health.
        health: Health,
    },
    /// Replace the backend list and routing settings (start-up and reload).
    Configure {
        /// The new settings.
        routing: Routing,
        /// Signalled once the new snapshot is published.
        done: oneshot::Sender<()>,
    },
}

/// The config-derived part of a snapshot.
#[derive(Debug, Clone)]
pub struct Routing {
    /// This node's zone.
    pub zone: Option<String>,
    /// Backends in config order.
    pub backends: Vec<Arc<BackendSpec>>,
    /// Behaviour with no ready backend.
    pub when_none_ready: WhenNoneReady,
    /// Per-attempt dial timeout.
    pub connect_timeout: Duration,
}

impl Table {
    /// An empty table (no backends) at generation 0.
    pub fn new() -> Arc<Table> {
        Arc::new(Table {
            current: ArcSwap::from_pointee(Snapshot {
                generation: 0,
                zone: None,
                backends: Vec::new(),
                when_none_ready: WhenNoneReady::FailOpen,
                connect_timeout: Duration::from_secs(1),
            }),
            generation: watch::Sender::new(0),
        })
    }

    /// The current snapshot. Cheap; hold it only for the synchronous part of a decision.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Notified with the generation of every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn publish(&self, snap: Snapshot) {
        let generation = snap.generation;
        self.current.store(Arc::new(snap));
        self.generation.send_replace(generation);
    }
}

/// Runs the single writer until cancelled or every sender is gone.
pub async fn run_writer(
    table: Arc<Table>,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<TableCmd>,
    cancel: CancellationToken,
) {
    // Whether "no backend is ready" has been announced (WARN) and not yet taken back.
    let mut announced = false;
    loop {
        let cmd = tokio::select! {
            _ = cancel.cancelled() => return,
            cmd = rx.recv() => match cmd { Some(c) => c, None => return },
        };
        let old = table.load();
        match cmd {
            TableCmd::Health { spec, health } => {
                let Some(i) = old.backends.iter().position(|b| b.spec == spec) else {
                    continue; // a probe of a backend removed by a reload
                };
                if old.backends[i].health == health {
                    continue;
                }
                let mut backends = old.backends.clone();
                backends[i].health = health;
                let next = Snapshot {
                    backends,
                    ..(*old).clone()
                };
                finish(&table, &metrics, &old, next, &mut announced);
            }
            TableCmd::Configure { routing, done } => {
                let (next, removed) = configure(&old, routing, &metrics);
                finish(&table, &metrics, &old, next, &mut announced);
                // After publishing: a connection that still read the old snapshot sees the new
                // epoch, skips the removed backend and re-plans on the snapshot just published.
                for live in removed {
                    live.evict_all();
                }
                let _ = done.send(()); // the reloader may have given up waiting; nothing to undo
            }
        }
    }
}

/// The snapshot for a new config, and the live state of removed backends (to evict once the
/// snapshot is published). Backends are matched by address: a new zone or server name keeps the
/// health and the connections (the probe restarts with the new name).
fn configure(
    old: &Snapshot,
    routing: Routing,
    metrics: &Metrics,
) -> (Snapshot, Vec<Arc<BackendLive>>) {
    let same = |a: &BackendSpec, b: &BackendSpec| a.address == b.address;
    let mut removed = Vec::new();
    for gone in old
        .backends
        .iter()
        .filter(|o| !routing.backends.iter().any(|s| same(s, &o.spec)))
    {
        tracing::info!(backend = %gone.spec.address, "backend removed from config; closing its connections");
        metrics.forget_backend(&gone.spec.address, gone.spec.zone.as_deref());
        removed.push(gone.live.clone());
    }
    let backends: Vec<Backend> = routing
        .backends
        .into_iter()
        .map(
            |spec| match old.backends.iter().find(|b| same(&b.spec, &spec)) {
                Some(kept) => {
                    if kept.spec.zone != spec.zone {
                        metrics.forget_ready_series(&spec.address, kept.spec.zone.as_deref());
                    }
                    Backend {
                        spec,
                        ..kept.clone()
                    }
                }
                None => {
                    let live = Arc::new(BackendLive::new(metrics.backend(&spec.address)));
                    let evict_epoch = *live.evict.borrow();
                    Backend {
                        live,
                        spec,
                        health: Health::UNKNOWN,
                        evict_epoch,
                    }
                }
            },
        )
        .collect();
    let next = Snapshot {
        generation: old.generation,
        zone: routing.zone,
        backends,
        when_none_ready: routing.when_none_ready,
        connect_timeout: routing.connect_timeout,
    };
    (next, removed)
}

/// Publishes `next`, then acts on what changed since `old`: evictions, gauges, warnings.
fn finish(
    table: &Table,
    metrics: &Metrics,
    old: &Snapshot,
    mut next: Snapshot,
    announced: &mut bool,
) {
    next.generation = old.generation + 1;
    let was_none_ready = !old.any_ready();
    let none_ready = !next.any_ready();
    let left_no_ready = was_none_ready && !none_ready;
    let refusing = next.when_none_ready == WhenNoneReady::Refuse;
    let mut evictions = Vec::new();
    for b in &mut next.backends {
        let before = old
            .backends
            .iter()
            .find(|o| o.spec.address == b.spec.address)
            .map(|o| o.health.state);
        let state = b.health.state;
        metrics.set_backend_ready(
            &b.spec.address,
            b.spec.zone.as_deref(),
            state == State::Ready,
        );
        // Close the connections of a backend known to fail when it turns unready, or when we leave
        // the no-ready state (connections that failed open to it). While nothing is ready and we
        // fail open they stay: re-dialling would only land on the same backends.
        let just_failed = before != Some(State::Unready);
        let close =
            state == State::Unready && (!none_ready || refusing) && (just_failed || left_no_ready);
        if close {
            b.evict_epoch = b.live.evict.borrow().wrapping_add(1);
            evictions.push((b.live.clone(), b.evict_epoch));
        }
    }
    // "No backend is ready" is only news once every backend has answered: at start-up the local
    // apiserver without quorum answers its 500 before the remote ones answer their 200.
    let settled = next
        .backends
        .iter()
        .all(|b| b.health.state != State::Unknown);
    if none_ready && settled && !next.backends.is_empty() && !*announced {
        let action = match next.when_none_ready {
            WhenNoneReady::FailOpen => "failing open: routing to all backends",
            WhenNoneReady::Refuse => "refusing client connections",
        };
        tracing::warn!("no backend is ready; {action}");
        *announced = true;
    } else if *announced && !none_ready {
        tracing::warn!("a backend is ready again; leaving the no-ready-backend state");
        *announced = false;
    }
    // A backend added while nothing is ready does not end the alert until it is ready.
    metrics
        .no_ready_backends
        .set(i64::from(none_ready && *announced));
    table.publish(next);
    // After publishing: connections picked from the old snapshot compare epochs and re-plan on
    // the new one, which no longer offers these backends.
    for (live, epoch) in evictions {
        live.evict.send_replace(epoch);
    }
}
