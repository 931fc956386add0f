//! Stamping an eviction, the protocol's first step: the backends to evict get their next epoch
//! in the snapshot to publish; the writer then publishes it and only then bumps (see
//! [`crate::backend::Eviction`]).
//!
//! Does not own deciding what to evict (the rules and the writer in `table`), nor publishing.

use std::sync::Arc;

use crate::backend::{BackendLive, Snapshot};
use crate::eviction::{self, CloseReason};

/// An eviction to announce once its snapshot is published: the backend, its new epoch, why.
pub(super) type Bump = (Arc<BackendLive>, u64, CloseReason);

/// Stamps each `(index, reason)` of `evict` in `next` with a new eviction epoch (logging the
/// backends that have connections to close): new connections that read `next` see it. The
/// epoch follows the one `next` carries, which is the backend's current one: every bump of a
/// backend in the table is stamped here first, so two in one step get two epochs.
pub(super) fn stamp(next: &mut Snapshot, evict: &[(usize, CloseReason)]) -> Vec<Bump> {
    evict
        .iter()
        .map(|&(i, reason)| {
            let b = &mut next.backends[i];
            b.evict_epoch = eviction::after(b.evict_epoch);
            let active = b.live.active.load(std::sync::atomic::Ordering::Relaxed);
            if active > 0 {
                tracing::info!(backend = %b.spec.id, reason = reason.as_str(), active, "closing the backend's connections");
            }
            (b.live.clone(), b.evict_epoch, reason)
        })
        .collect()
}
