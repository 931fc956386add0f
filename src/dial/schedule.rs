//! When a dial's connection attempts start, as a pure function of the number of addresses, the
//! budget and a jitter seed: the bound on the SYNs one dial sends. No clock, no I/O; the race in
//! `mod.rs` follows the plan and only ever starts an attempt early when an earlier one failed.
//!
//! Per address: the first attempt, a re-attempt [`ATTEMPT_DELAY`] later (a lost SYN or SYN-ACK
//! then costs 150 ms, not Linux's 1 s initial retransmission), then one more after a doubled,
//! jittered gap; never more than [`PER_ADDRESS`]. Each attempt is given up after
//! [`ATTEMPT_LIFETIME`], before the kernel's own first SYN retransmission, so the SYNs on the
//! wire are exactly the attempts counted. Does not own the race or errors.

use std::time::Duration;

use super::bounded::Bounded;
use crate::jitter;

/// The first re-attempt to an address starts this long after its first attempt, and the next
/// address's first attempt this long after the previous address's (if nothing has connected or
/// failed by then). RFC 8305 allows 100 ms to 2 s between addresses; 150 ms is several LAN and
/// metro round trips, so a backend that answers never sees a second SYN unless a packet was lost.
pub const ATTEMPT_DELAY: Duration = Duration::from_millis(150);

/// At most this many attempts (SYNs) per address and dial. Three give a dial on a link losing
/// 20 % each way (an attempt fails when its SYN or SYN-ACK is lost: 36 %) a 0.36³ ≈ 4.7 % chance
/// of failing, against 36 % for one; seven would give 0.08 % but send 7 SYNs per dial at a
/// black-holed or overloaded apiserver.
pub const PER_ADDRESS: usize = 3;

/// At most this many attempts per dial over all addresses (a name with many addresses).
pub const MAX_ATTEMPTS: usize = 8;

/// An attempt that has not connected after this long is dropped. Below Linux's initial
/// retransmission timeout (`TCP_TIMEOUT_INIT`, 1 s), so the kernel never retransmits a SYN of
/// ours: every SYN is an attempt this module planned, with 200 ms to spare for a busy runtime.
/// 800 ms is far beyond any round trip to an
/// apiserver a node should use.
pub const ATTEMPT_LIFETIME: Duration = Duration::from_millis(800);

/// The second gap (between the first re-attempt and the last) is `2 × ATTEMPT_DELAY` scaled by a
/// factor in `[1 − JITTER, 1 + JITTER)`: dials that started together (a site's kubelets after a
/// failover) do not re-attempt in lockstep.
pub const JITTER: f64 = 0.25;

/// Offsets from an address's first attempt at which its attempts start: 0, [`ATTEMPT_DELAY`],
/// then `ATTEMPT_DELAY + 2 × ATTEMPT_DELAY × jitter` (375–525 ms): all three inside any 1 s.
pub fn offsets(seed: u64) -> [Duration; PER_ADDRESS] {
    let second_gap = jitter::around(ATTEMPT_DELAY * 2, JITTER, jitter::unit(jitter::mix(seed)));
    [Duration::ZERO, ATTEMPT_DELAY, ATTEMPT_DELAY + second_gap]
}

/// A dial's plan: `(address index, start offset)` in start order, inline (a dial allocates none).
pub type Attempts = Bounded<(usize, Duration), MAX_ATTEMPTS>;

/// The whole plan of a dial in which nothing fails: `(address index, start offset)` in start
/// order, the first attempts [`ATTEMPT_DELAY`] apart, each address's re-attempts at its
/// [`offsets`], only those before `budget`, at most [`MAX_ATTEMPTS`].
pub fn plan(addresses: usize, budget: Duration, seed: u64) -> Attempts {
    // Address `a`'s first attempt starts at `a × ATTEMPT_DELAY` and its others later, so the
    // first attempts of the first MAX_ATTEMPTS addresses all start before any attempt of a later
    // address: only those addresses can be in the plan.
    let mut all = Bounded::<(Duration, usize, usize), { MAX_ATTEMPTS * PER_ADDRESS }>::new();
    for a in 0..addresses.min(MAX_ATTEMPTS) {
        let first = ATTEMPT_DELAY * a as u32;
        for (k, o) in offsets(seed.wrapping_add(a as u64)).into_iter().enumerate() {
            let at = first.saturating_add(o);
            if at < budget {
                all.try_push((at, k, a));
            }
        }
    }
    // At equal times a new address goes before a re-attempt (Happy Eyeballs), then the earlier
    // address: `(at, k, a)` orders every attempt, so an unstable sort is exact (and in place).
    all.sort_unstable();
    let mut plan = Attempts::new();
    for &(at, _, a) in all.iter() {
        if !plan.try_push((a, at)) {
            break;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn one_address_in_a_one_second_budget_gets_three_attempts_the_first_re_attempt_at_150_ms() {
        for seed in 0..1000 {
            let p = plan(1, Duration::from_secs(1), seed);
            assert_eq!(p.len(), 3, "{p:?}");
            assert_eq!((p[0], p[1]), ((0, MS(0)), (0, MS(150))), "{p:?}");
            assert!(p[2].1 >= MS(375) && p[2].1 < MS(525), "{p:?}");
        }
        let thirds: std::collections::HashSet<_> = (0..100)
            .map(|s| plan(1, Duration::from_secs(1), s)[2].1)
            .collect();
        assert!(thirds.len() > 50, "the last re-attempt is jittered");
    }

    #[test]
    fn a_plan_is_cut_by_its_budget_or_its_attempt_cap() {
        assert_eq!(plan(1, MS(100), 7), [(0, MS(0))]);
        assert_eq!(plan(0, MS(1000), 7), []);
        assert_eq!(plan(5, Duration::from_secs(10), 7).len(), MAX_ATTEMPTS);
    }

    #[test]
    fn addresses_start_150_ms_apart() {
        let p = plan(2, Duration::from_secs(1), 7);
        assert_eq!(&p[..3], [(0, MS(0)), (1, MS(150)), (0, MS(150))]);
        assert_eq!(p.iter().filter(|(a, _)| *a == 1).count(), 3);
    }

    /// The plan as first written: every attempt of every address, sorted (stably) by time and
    /// attempt number, cut to MAX_ATTEMPTS. What [`plan`] must equal without allocating.
    fn reference(addresses: usize, budget: Duration, seed: u64) -> Vec<(usize, Duration)> {
        let mut all: Vec<(usize, Duration, usize)> = (0..addresses)
            .flat_map(|a| {
                let first = ATTEMPT_DELAY * u32::try_from(a).unwrap_or(u32::MAX);
                offsets(seed.wrapping_add(a as u64))
                    .into_iter()
                    .enumerate()
                    .map(move |(k, o)| (a, first.saturating_add(o), k))
            })
            .filter(|(_, at, _)| *at < budget)
            .collect();
        all.sort_by_key(|(_, at, k)| (*at, *k));
        all.truncate(MAX_ATTEMPTS);
        all.into_iter().map(|(a, at, _)| (a, at)).collect()
    }

    proptest! {
        /// The inline plan is the sorted list of every attempt, also for names with more
        /// addresses than a plan holds attempts.
        #[test]
        fn the_plan_is_every_attempt_in_start_order_cut_to_eight(
            addresses in 0usize..40,
            budget_ms in 0u64..10_000,
            seed in any::<u64>(),
        ) {
            let budget = MS(budget_ms);
            prop_assert_eq!(&plan(addresses, budget, seed)[..], &reference(addresses, budget, seed)[..]);
        }

        /// However many addresses and whatever the budget: no address gets more than
        /// PER_ADDRESS attempts in any 1 s (nor at all), attempts of one address are at least
        /// ATTEMPT_DELAY apart, and every attempt starts inside the budget.
        #[test]
        fn no_address_gets_more_than_three_attempts_in_a_second(
            addresses in 1usize..8,
            budget_ms in 0u64..10_000,
            seed in any::<u64>(),
        ) {
            let budget = MS(budget_ms);
            let p = plan(addresses, budget, seed);
            prop_assert!(p.len() <= MAX_ATTEMPTS);
            prop_assert!(p.windows(2).all(|w| w[0].1 <= w[1].1), "in start order");
            for a in 0..addresses {
                let times: Vec<Duration> =
                    p.iter().filter(|(x, _)| *x == a).map(|(_, t)| *t).collect();
                prop_assert!(times.len() <= PER_ADDRESS);
                for (i, t) in times.iter().enumerate() {
                    prop_assert!(*t < budget);
                    let in_second = times[i..].iter().filter(|u| **u < *t + MS(1000)).count();
                    prop_assert!(in_second <= 3, "{times:?}");
                }
                prop_assert!(times.windows(2).all(|w| w[1] - w[0] >= ATTEMPT_DELAY));
            }
        }
    }
}
