//! What a backend's dials learn from each other: which of its addresses failed lately, so the
//! next dials try the others first (the Happy Eyeballs cache, RFC 8305 section 4: a name whose
//! first address is black-holed then costs one attempt delay once, not on every dial and probe),
//! and its [`Herd`] (the dials waiting on it now; `herd.rs`).
//!
//! Lock-free for the dialing tasks: one `ArcSwap` of a short list, replaced when it changes;
//! concurrent dials that both learn something may overwrite each other, which only costs a
//! re-learn. Does not own the race (`dial`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use super::herd::Herd;

/// How long an address that failed stays at the back of the order. Long enough that a
/// black-holed IPv6 path is not re-tried on every kubelet request, short enough that a path that
/// healed is used again within minutes (RFC 8305 leaves the value to the implementation).
pub const FAILURE_MEMORY: Duration = Duration::from_secs(10 * 60);

/// One backend's recently failing addresses, and its herd.
#[derive(Debug, Default)]
pub struct Memory {
    failed: ArcSwap<Vec<(SocketAddr, Instant)>>,
    /// The backend's dials waiting now, and its latest connect.
    pub herd: Herd,
}

impl Memory {
    /// Moves the addresses that failed within [`FAILURE_MEMORY`] of `now` to the back, keeping
    /// the order within each part.
    pub fn order(&self, addrs: &mut [SocketAddr], now: Instant) {
        let failed = self.failed.load();
        if failed.is_empty() {
            return;
        }
        let recent = |a: &SocketAddr| {
            failed
                .iter()
                .any(|(f, at)| f == a && now.saturating_duration_since(*at) < FAILURE_MEMORY)
        };
        addrs.sort_by_key(recent);
    }

    /// A dial connected to `winner` after attempts to `beaten` had started and not connected:
    /// those are remembered as failing (from `now`), the winner is forgotten, old entries expire.
    pub fn learn(&self, winner: SocketAddr, beaten: &[SocketAddr], now: Instant) {
        let old = self.failed.load();
        if old.is_empty() && beaten.is_empty() {
            return;
        }
        let mut next: Vec<(SocketAddr, Instant)> = old
            .iter()
            .filter(|(a, at)| {
                *a != winner
                    && !beaten.contains(a)
                    && now.saturating_duration_since(*at) < FAILURE_MEMORY
            })
            .copied()
            .collect();
        next.extend(beaten.iter().filter(|a| **a != winner).map(|a| (*a, now)));
        if next != **old {
            self.failed.store(Arc::new(next));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().expect("literal")
    }

    #[test]
    fn a_beaten_address_goes_to_the_back_until_it_wins_or_the_memory_expires() {
        let m = Memory::default();
        let t0 = Instant::now();
        let mut order = [a("[::1]:1"), a("10.0.0.1:1"), a("[::2]:1")];
        m.order(&mut order, t0);
        assert_eq!(
            order,
            [a("[::1]:1"), a("10.0.0.1:1"), a("[::2]:1")],
            "nothing known"
        );
        m.learn(a("10.0.0.1:1"), &[a("[::1]:1")], t0);
        let mut order = [a("[::1]:1"), a("10.0.0.1:1"), a("[::2]:1")];
        m.order(&mut order, t0 + Duration::from_secs(1));
        assert_eq!(order, [a("10.0.0.1:1"), a("[::2]:1"), a("[::1]:1")]);
        let mut order = [a("[::1]:1"), a("10.0.0.1:1")];
        m.order(&mut order, t0 + FAILURE_MEMORY);
        assert_eq!(order, [a("[::1]:1"), a("10.0.0.1:1")], "expired");
        m.learn(a("[::1]:1"), &[], t0 + Duration::from_secs(2));
        let mut order = [a("[::1]:1"), a("10.0.0.1:1")];
        m.order(&mut order, t0 + Duration::from_secs(3));
        assert_eq!(order, [a("[::1]:1"), a("10.0.0.1:1")], "a win clears it");
    }
}
