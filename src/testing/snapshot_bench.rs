//! The snapshot benchmark's fixture (`benches/snapshot.rs`, feature `bench-internals`, off by
//! default): a table of ready backends built with the domain fixtures, and the writer's copy,
//! publish and the accept path's load and pick through the crate's own types, which stay
//! `pub(crate)`. Not an API: only what the benchmark needs.

use std::sync::Arc;
use std::time::Duration;

use super::fixtures;
use crate::backend::{Routing, Snapshot};
use crate::table::Table;
use crate::verdict::{Health, Reach, State};

/// A table with `n` ready backends and a spare snapshot to swap in.
#[derive(Debug)]
pub struct SnapshotBench {
    table: Arc<Table>,
    spare: Option<Snapshot>,
}

impl SnapshotBench {
    /// `n` backends, every third in the node's zone, latencies 1–40 ms.
    pub fn new(n: usize) -> SnapshotBench {
        let backends = (0..n)
            .map(|i| {
                let zone = if i % 3 == 0 { "dc-a" } else { "dc-b" };
                let address = format!("10.0.{}.{}:6443", i / 250, i % 250);
                let mut b = fixtures::backend(fixtures::spec(&address, Some(zone)), State::Ready);
                let latency = Duration::from_micros(1000 + (i as u64 * 7919) % 39_000);
                b.health = Health {
                    state: State::Ready,
                    latency: Some(latency),
                    reach: Some(Reach::answered(200, latency)),
                    ..Health::UNKNOWN
                };
                b.evict_epoch = b.live.eviction.epoch();
                b
            })
            .collect();
        let snap = Snapshot {
            generation: 1,
            routing: Routing::in_zone("dc-a"),
            backends,
        };
        let table = Table::new();
        let spare = Some(snap.clone());
        table.publish(Arc::new(snap));
        SnapshotBench { table, spare }
    }

    /// What the table writer does for one health change: copy the current snapshot, change one
    /// backend's latency. Returns the new snapshot's generation.
    pub fn build(&mut self, i: usize) -> u64 {
        let old = self.table.load();
        let mut next = (*old).clone();
        next.generation += 1;
        let n = next.backends.len();
        next.backends[i % n].health.latency = Some(Duration::from_micros(1000 + i as u64 % 977));
        let g = next.generation;
        self.spare = Some(next);
        g
    }

    /// Publishes the snapshot [`SnapshotBench::build`] made (or the first one again).
    pub fn swap(&mut self) {
        let snap = self
            .spare
            .take()
            .unwrap_or_else(|| (*self.table.load()).clone());
        self.table.publish(Arc::new(snap));
    }

    /// The accept path's read: one load and the pick, as `proxy` does per connection; the
    /// first backend's index.
    pub fn load_and_pick(&self, rr: usize) -> Option<usize> {
        let snap = self.table.load();
        snap.pick(rr).order().first().copied()
    }
}
