//! The routing table: one `ArcSwap<Snapshot>` with a single writer and lock-free readers.
//!
//! Health results and config changes arrive as [`TableCmd`]s; the [`Writer`] ([`writer`], a
//! state machine told the time) folds them into a new snapshot, decides what the change means
//! ([`transitions`], pure), and answers with effects: stamp, publish, then bump the evicted
//! backends (see [`crate::backend::Eviction`]). It also brings connections home: when a
//! same-zone backend has been ready for `failback_after` ([`failback`], pure), the connections
//! relayed to other zones are evicted the same way, and the failback is called off if the zone
//! has no ready backend left before every turn has come; a hand-off under way is called off
//! likewise when its backend passes or none is ready ([`handoff`] keeps which are under way). A
//! backend that turned unready keeps its connections until their escape route is confirmed and
//! it still fails ([`escape`], pure: the writer asks the route's and its own monitor for a
//! confirm probe, and looks again when a wait for its own answer runs out); after a spell with
//! none ready, connections move only off backends still down one probe interval later
//! ([`recovery`], pure). It keeps the log's cause current ([`cause`], pure): an unready backend's
//! changed reason, and a reminder of every reason while none is ready; and the last few state
//! transitions for people ([`recent`]). This file owns the table and the writer's driver
//! ([`run_writer`]: one channel, one sleep, the effects applied in order). Does not own probing
//! (`health/`) or connection handling (`proxy`).

mod bump;
pub mod cadence;
pub mod cause;
mod configure;
pub mod escape;
pub mod failback;
pub mod handoff;
pub mod recent;
pub mod recovery;
pub mod silence;
pub mod transitions;
pub mod writer;

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{BackendId, BackendSpec, News, Routing, Snapshot};
use crate::metrics::Metrics;
use crate::verdict::Health;
pub use writer::{Effect, Effects, Writer};

/// The published snapshot and its generation counter.
#[derive(Debug)]
pub struct Table {
    current: ArcSwap<Snapshot>,
    generation: watch::Sender<u64>,
    /// The last few state transitions (the admin page); written by the writer only.
    recent: recent::Recent,
}

/// A change for the writer.
#[derive(Debug)]
pub enum TableCmd {
    /// A backend's health changed (state, latency or reason).
    Health {
        /// Which backend; ignored if it is no longer configured.
        id: BackendId,
        /// The new health.
        health: Health,
        /// When the result's evidence began: the probe's start, or when failed client dials
        /// were counted (a fall's time; a pass's, for confirming escape routes).
        started: Instant,
    },
    /// A backend's request check changed its verdict ([`crate::overload`]): degraded, and why,
    /// or healthy again (`None`).
    Degraded {
        /// Which backend; ignored if it is no longer configured.
        id: BackendId,
        /// Why it is degraded; `None`: it is not.
        degraded: Option<Arc<str>>,
    },
    /// Replace the backend list and routing settings (start-up and reload).
    Configure {
        /// The new routing settings.
        routing: Routing,
        /// The new backends, in config order.
        backends: Vec<Arc<BackendSpec>>,
        /// Signalled once the new snapshot is published.
        done: oneshot::Sender<()>,
    },
}

impl Table {
    /// An empty table (no backends) at generation 0.
    pub fn new() -> Arc<Table> {
        Arc::new(Table {
            current: ArcSwap::from_pointee(Snapshot::default()),
            generation: watch::Sender::new(0),
            recent: recent::Recent::default(),
        })
    }

    /// The last few backend state transitions, oldest first (at most [`recent::KEPT`]).
    pub fn recent(&self) -> Arc<Vec<recent::Transition>> {
        self.recent.load()
    }

    /// The current snapshot. Cheap; hold it only for the synchronous part of a decision.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Notified with the generation of every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    pub(crate) fn publish(&self, snap: Arc<Snapshot>) {
        let generation = snap.generation;
        self.current.store(snap);
        self.generation.send_replace(generation);
    }
}

/// Runs the single writer until cancelled or every sender is gone: one channel, one sleep, and
/// the [`Writer`]'s effects applied in its order.
pub async fn run_writer(
    table: Arc<Table>,
    metrics: Arc<Metrics>,
    mut rx: mpsc::Receiver<TableCmd>,
    cancel: CancellationToken,
) {
    let mut writer = Writer::new(table.load(), metrics);
    loop {
        let due = writer.poll_timeout();
        let effects = tokio::select! {
            _ = cancel.cancelled() => return,
            () = sleep_until_some(due) => writer.handle_timeout(Instant::now()),
            cmd = rx.recv() => match cmd {
                Some(cmd) => writer.handle(cmd, Instant::now()),
                None => return,
            },
        };
        table.apply(effects);
    }
}

/// Completes at `due`; never when `None`.
async fn sleep_until_some(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Table {
    /// Does the writer's effects, in their order.
    pub(crate) fn apply(&self, effects: Effects) {
        for effect in effects {
            match effect {
                Effect::Publish(snap) => self.publish(snap),
                Effect::Bump(live, epoch, reason) => live.eviction.bump_to(epoch, reason),
                Effect::EvictNow(live) => live.eviction.evict_now(),
                Effect::CallOff {
                    live,
                    id,
                    reason,
                    message,
                    why,
                } => {
                    if live.eviction.call_off(reason) {
                        let active = live.active.load(std::sync::atomic::Ordering::Relaxed);
                        let reason = reason.as_str();
                        match why {
                            Some(why) => {
                                tracing::info!(backend = %id, reason, active, why, "{message}")
                            }
                            None => tracing::info!(backend = %id, reason, active, "{message}"),
                        }
                    }
                }
                Effect::Confirm(live) => live.inbox.tell(News::ConfirmAsked),
                Effect::Cadence(told) => {
                    for (live, remote) in told {
                        live.inbox.set_remote(remote);
                    }
                }
                Effect::Reentry(live, at) => live.reentry.open(at),
                Effect::Recent(turned) => self.recent.push(turned),
                // The reloader may have given up waiting; nothing to undo.
                Effect::Done(done) => drop(done.send(())),
            }
        }
    }
}

#[cfg(test)]
impl Table {
    /// Publishes a hand-made snapshot (unit tests of readers).
    pub(crate) fn test_publish(&self, snap: Snapshot) {
        self.publish(Arc::new(snap));
    }
}

#[cfg(test)]
mod tests;
