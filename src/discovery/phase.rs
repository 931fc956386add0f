//! When a node polls discovery: at its own phase of the interval on the wall clock, drawn from a
//! hash of its identity (its host name), so that a fleet's nodes poll spread evenly over the
//! interval even when they started together (a fleet rebooted at once, a config rolled out to
//! every node), instead of in one phase that a per-process jitter only slowly dissolves. Pure:
//! the caller passes the identity and the wall clock.
//!
//! Does not own the poll (`discovery`) or the interval (`config::discovery`).

use std::time::Duration;

use crate::jitter::{mix, unit};

/// This node's phase, a fraction of the interval in [0, 1): the same on every start of the same
/// node, spread over [0, 1) across names.
pub fn of(identity: &str) -> f64 {
    // FNV-1a: stable across processes and builds (std's hashers are not promised to be).
    let hash = identity.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    unit(mix(hash))
}

/// How long after `now` (the wall clock, since the Unix epoch) the next poll at `phase` of
/// `interval` is: the first instant `t` with `t mod interval = phase × interval` that is at least
/// half an interval away, so two polls are never closer than that.
pub fn delay(now: Duration, interval: Duration, phase: f64) -> Duration {
    let every = interval.as_nanos().max(1);
    let at = (phase.clamp(0.0, 1.0) * every as f64) as u128 % every;
    let into = now.as_nanos() % every;
    let mut wait = (at + every - into) % every;
    if wait < every / 2 {
        wait += every;
    }
    Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// This node's identity for [`of`]: its host name (`/proc/sys/kernel/hostname`), empty if it
/// cannot be read (every such node then shares one phase, as before).
pub fn identity() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_poll_lands_on_the_nodes_phase_at_least_half_an_interval_away() {
        let interval = 30 * S;
        // Phase 0.5: 15 s into every 30 s of the wall clock.
        assert_eq!(
            delay(100 * S, interval, 0.5),
            35 * S,
            "105 s is 5 s away: the next one"
        );
        assert_eq!(delay(80 * S, interval, 0.5), 25 * S, "at 105 s");
        assert_eq!(
            delay(105 * S, interval, 0.5),
            30 * S,
            "just polled: one interval"
        );
        for now in (0..120).map(|s| s * S + Duration::from_millis(137)) {
            let d = delay(now, interval, 0.25);
            assert!(d >= interval / 2 && d < interval * 3 / 2, "{now:?}: {d:?}");
            assert_eq!((now + d).as_millis() % 30_000, 7_500, "{now:?}");
        }
    }

    #[test]
    fn nodes_phases_spread_over_the_interval() {
        let phases: Vec<f64> = (0..1000).map(|i| of(&format!("worker-{i}"))).collect();
        let mut tenths = [0u32; 10];
        for p in &phases {
            assert!((0.0..1.0).contains(p), "{p}");
            tenths[(p * 10.0) as usize] += 1;
        }
        assert!(
            tenths.iter().all(|&n| (60..=140).contains(&n)),
            "1000 names over tenths of the interval: {tenths:?}"
        );
        assert_eq!(
            of("worker-7"),
            of("worker-7"),
            "the same node, the same phase"
        );
    }
}
