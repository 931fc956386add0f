//! The node-lease figures of a phase: the longest time between two successful renewals, and the
//! way of the `/slow` request in flight at the phase's start to a good backend (scenario 7). Pure: from the client's records
//! (`tests/lab/kubelet.py`), no processes, no clock.
//!
//! Does not own the other figures (`figures`) or the records' types (`timeline`).

use super::timeline::{LeaseAttempt, Request};

/// How long `/slow` is held by the simulated apiserver (`src/sim/routes.rs`, `SLOW_HOLD`).
pub const SLOW_HOLD: f64 = 2.0;

/// The longest gap between successful renewals that overlaps the window `(from, to]`, cut at
/// `to`: from a renewal at or before the window's end to the next one (or to `to` if none came
/// by then). The gap open when the window starts counts from the last renewal before it; the
/// client's first attempt counts as a renewal (a lease never renewed since is one long gap).
/// 0 without attempts.
pub fn longest_gap(attempts: &[LeaseAttempt], (from, to): (f64, f64)) -> f64 {
    let first = attempts.iter().map(|a| a.start).reduce(f64::min);
    let mut ok: Vec<f64> = attempts.iter().filter(|a| a.ok).map(|a| a.end).collect();
    ok.extend(first);
    ok.sort_by(f64::total_cmp);
    let mut longest: f64 = 0.0;
    for (i, &a) in ok.iter().enumerate() {
        if a > to {
            break;
        }
        let b = ok.get(i + 1).copied().unwrap_or(to).min(to);
        if b > from {
            longest = longest.max(b - a);
        }
    }
    longest
}

/// Lease attempts that failed in the window (each a client-go attempt, retried at once).
pub fn failures(attempts: &[LeaseAttempt], (from, to): (f64, f64)) -> usize {
    attempts
        .iter()
        .filter(|a| !a.ok && a.end > from && a.end <= to)
        .count()
}

/// From the window's start until the request held in flight at that moment was answered on a
/// good backend (with client-go's retries), less the hold. `None`: it failed or was answered
/// elsewhere (or no `/slow` request was in flight then).
pub fn inflight_good(slow: &[Request], good: &[String], (from, _to): (f64, f64)) -> Option<f64> {
    slow.iter()
        .find(|r| r.start <= from && r.end > from)
        .filter(|r| r.ok && r.site.as_ref().is_some_and(|s| good.contains(s)))
        .map(|r| (r.end - SLOW_HOLD - from).max(0.0))
}

mod tests {
    use super::*;

    fn at(end: f64, ok: bool) -> LeaseAttempt {
        LeaseAttempt {
            start: end - 0.01,
            end,
            ok,
            site: ok.then(|| "dc-b".to_string()),
            attempt: 1,
            conn: "reused".to_string(),
            error: (!ok).then(|| "TimeoutError: timed out".to_string()),
        }
    }

    #[test]
    fn the_gap_open_at_the_fault_counts_from_the_renewal_before_it() {
        let a = [
            at(-8.0, true),
            at(12.0, false),
            at(22.0, false),
            at(25.0, true),
        ];
        assert_eq!(longest_gap(&a, (0.0, 40.0)), 33.0);
        assert_eq!(failures(&a, (0.0, 40.0)), 2);
    }

    #[test]
    fn a_lease_never_renewed_is_one_gap_from_the_first_attempt() {
        let a = [at(-20.0, false), at(-10.0, false), at(5.0, false)];
        assert!((longest_gap(&a, (0.0, 30.0)) - 50.01).abs() < 1e-9);
    }

    #[test]
    fn a_gap_still_open_at_the_window_end_is_cut_there() {
        let a = [at(-2.0, true), at(8.0, true), at(50.0, true)];
        assert_eq!(longest_gap(&a, (0.0, 30.0)), 22.0);
        assert_eq!(longest_gap(&a, (30.0, 60.0)), 42.0);
    }
}
