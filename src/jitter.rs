//! Jitter: a duration scaled by a factor drawn uniformly around 1, so that what many nodes start
//! together (probes, discovery polls, a dial's re-attempts after a failover) does not stay in
//! lockstep. Only the spread matters, not the draws' statistical quality.
//!
//! A leaf: no I/O, no clock. Does not own the fractions: each caller names its own.

use std::time::Duration;

/// A draw in [0, 1) from the top 53 bits of `bits`.
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// `base` scaled by `1 − fraction + 2 × fraction × unit`: between `base × (1 − fraction)` and
/// `base × (1 + fraction)` for a `unit` in [0, 1) (the top reached only by rounding).
pub fn around(base: Duration, fraction: f64, unit: f64) -> Duration {
    base.mul_f64(1.0 - fraction + 2.0 * fraction * unit)
}

/// One word mixed into another well spread over all 64 bits (SplitMix64's finaliser): a
/// one-shot draw from a counter or a seed.
pub fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stream of jittered durations (xorshift64), seeded afresh per process and name, so two
/// nodes (and two backends on one node) draw differently.
pub struct Jitter {
    state: u64,
    fraction: f64,
}

impl Jitter {
    /// A stream for `name` that varies durations by up to `percent` % either way.
    pub fn seeded(name: &str, percent: u32) -> Self {
        use std::hash::BuildHasher;
        Jitter {
            state: std::collections::hash_map::RandomState::new().hash_one(name) | 1,
            fraction: f64::from(percent) / 100.0,
        }
    }

    /// `base` scaled by the next draw: between `base × (1 − p)` and `base × (1 + p)`.
    pub fn around(&mut self, base: Duration) -> Duration {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        around(base, self.fraction, unit(self.state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 draws around 5 s from a stream at 10 %.
    fn samples() -> (Duration, Vec<Duration>) {
        let mut j = Jitter::seeded("10.0.0.1:6443", 10);
        let base = Duration::from_secs(5);
        (base, (0..1000).map(|_| j.around(base)).collect())
    }

    #[test]
    fn a_stream_stays_within_its_percent() {
        let (base, samples) = samples();
        assert!(samples
            .iter()
            .all(|d| *d >= base.mul_f64(0.9) && *d < base.mul_f64(1.1)));
    }

    #[test]
    fn a_stream_varies() {
        let (_, samples) = samples();
        let distinct: std::collections::HashSet<_> = samples.iter().collect();
        assert!(distinct.len() > 900);
    }

    #[test]
    fn around_spans_the_fraction_from_unit_zero_to_unit_one() {
        let base = Duration::from_millis(300);
        let near =
            |d: Duration, ms: u64| d.abs_diff(Duration::from_millis(ms)) < Duration::from_micros(1);
        assert!(near(around(base, 0.25, 0.0), 225));
        assert!(near(around(base, 0.25, 0.5), 300));
        assert!(near(around(base, 0.25, unit(u64::MAX)), 375));
    }
}
