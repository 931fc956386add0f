//! Chaos in the partition lab: seeded random schedules of faults and balancer events, played on
//! the lab with a real etcd cluster, every site's `/readyz` following its own member, with
//! invariants judged over the records ("the lab finds the failures nobody wrote down").
//!
//! `READYPRISM_CHAOS_SEEDS` (comma-separated; default [`CI_SEEDS`]) and `READYPRISM_CHAOS_SECS`
//! (each schedule's length; default [`CI_SECS`]). Each run prints its schedule and violations and
//! writes `target/partition-lab/chaos-<seed>.json`. Files: `schedule.rs` (the draw), `model.rs`
//! (what the faults mean per site), `nemesis.rs` (playing it), `sampler.rs` (the balancer sampled),
//! `invariants.rs` (1-3), `liveness.rs` (4-5), `moves.rs` (6: no needless move), `run.rs` (one run end to end), `fixed.rs`
//! (fixed event lists: a violation's shrunk schedule, a long local outage). Without root or
//! `ip netns` (or etcd) the runs skip like the lab's other tests, unless
//! `READYPRISM_REQUIRE_NETNS=1`.

mod fixed;
mod invariants;
mod liveness;
mod model;
mod moves;
mod nemesis;
mod run;
mod sampler;
mod schedule;

use crate::partition::netlab::lab_print;

/// The CI's seeds, and the length of each of their schedules in seconds (three schedules of two
/// minutes; each run about three with the lab's start and the return after the last heal).
/// Together they draw every kind of event, with discovery on and off (`schedule.rs`'s test).
pub const CI_SEEDS: [u64; 3] = [1, 2, 3];
pub const CI_SECS: f64 = 120.0;

fn seeds() -> Vec<u64> {
    match std::env::var("READYPRISM_CHAOS_SEEDS") {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("READYPRISM_CHAOS_SEEDS {p:?}: {e}"))
            })
            .collect(),
        _ => CI_SEEDS.to_vec(),
    }
}

fn secs() -> f64 {
    match std::env::var("READYPRISM_CHAOS_SECS") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("READYPRISM_CHAOS_SECS {s:?}: {e}")),
        _ => CI_SECS,
    }
}

#[test]
fn partition_chaos_seeded_schedules_keep_the_invariants() {
    let secs = secs();
    let mut failed = Vec::new();
    for seed in seeds() {
        let schedule = schedule::draw(seed, secs);
        let name = format!("chaos-{seed}");
        let Some(violations) = run::run(&name, seed, &schedule) else {
            return;
        };
        if !violations.is_empty() {
            failed.push(format!("seed {seed}: {} violation(s)", violations.len()));
        }
    }
    lab_print(&format!("chaos: {} seed(s) with violations", failed.len()));
    assert!(
        failed.is_empty(),
        "chaos violations: {failed:?} (see above)"
    );
}
