//! Applying an eviction, in the protocol's order: stamp the backends with their next epoch in
//! the snapshot to publish, publish it, and only then bump (see [`crate::backend::Eviction`]).
//!
//! Does not own deciding what to evict (the rules and the writer in `table`).

use std::sync::Arc;

use super::Table;
use crate::backend::{BackendLive, Snapshot};
use crate::eviction::CloseReason;

/// Closes the connections of `evict`'s backends in the current snapshot: stamp, publish, bump.
pub(super) fn evict_now(table: &Table, evict: &[(usize, CloseReason)]) {
    if evict.is_empty() {
        return;
    }
    let old = table.load();
    let mut next = (*old).clone();
    next.generation = old.generation + 1;
    let bumps = stamp(&mut next, evict);
    publish_then_bump(table, next, bumps);
}

/// An eviction to announce once its snapshot is published: the backend, its new epoch, why.
pub(super) type Bump = (Arc<BackendLive>, u64, CloseReason);

/// Stamps each `(index, reason)` of `evict` in `next` with a new eviction epoch (logging the
/// backends that have connections to close): new connections that read `next` see it.
pub(super) fn stamp(next: &mut Snapshot, evict: &[(usize, CloseReason)]) -> Vec<Bump> {
    evict
        .iter()
        .map(|&(i, reason)| {
            let b = &mut next.backends[i];
            b.evict_epoch = b.live.eviction.next();
            let active = b.live.active.load(std::sync::atomic::Ordering::Relaxed);
            if active > 0 {
                tracing::info!(backend = %b.spec.id, reason = reason.as_str(), active, "closing the backend's connections");
            }
            (b.live.clone(), b.evict_epoch, reason)
        })
        .collect()
}

/// The eviction protocol's order: publish the stamped snapshot, then bump, so that no connection
/// dialed from the old snapshot outlives the eviction.
pub(super) fn publish_then_bump(table: &Table, next: Snapshot, bumps: Vec<Bump>) {
    table.publish(next);
    for (live, epoch, reason) in bumps {
        live.eviction.bump_to(epoch, reason);
    }
}
