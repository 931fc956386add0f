//! Which backends may be probed at `health.remote_interval` rather than `interval`: a pure rule
//! over the snapshot, which the writer tells each backend's monitor through its inbox
//! (`backend::Inbox::set_remote`). At fleet scale most probes check apiservers of other zones
//! that carry none of the node's connections; those can wait longer, as long as anything that
//! could send a connection to one brings it back to `interval` at once.
//!
//! Owns the rule only. Does not own the schedule (`health`), nor the snap back when a connection
//! arrives between snapshots (the proxy tells the inbox: `BackendLive::count_active`).

use std::sync::atomic::Ordering;

use crate::backend::Snapshot;
use crate::verdict::State;

/// For each backend of `snap`, whether it may be probed at the remote cadence: this node knows
/// its zone and a backend of that zone is ready (so every pick goes there first, and the escape
/// route of a fall is there), and the backend is ready, in another zone, and relays none of this
/// node's connections now. Anything else (no zone, none of the node's zone ready, unready or
/// unchecked, a change pending, carrying a connection) is probed at `interval`.
pub fn remote(snap: &Snapshot) -> Vec<bool> {
    let Some(zone) = snap.routing.zone_name() else {
        return vec![false; snap.backends.len()];
    };
    let home = |b: &crate::backend::Backend| b.spec.zone.as_deref() == Some(zone);
    let home_ready = snap
        .backends
        .iter()
        .any(|b| home(b) && b.health.state == State::Ready);
    snap.backends
        .iter()
        .map(|b| {
            home_ready
                && !home(b)
                && b.health.state == State::Ready
                && b.health.pending.is_none()
                && b.live.active.load(Ordering::Relaxed) == 0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Routing;
    use crate::testing::fixtures;

    /// Backends in zones `a` (this node's, with `home`) and `b`, by letter ([`fixtures::health`]),
    /// `zones` naming each one's zone.
    fn snap(letters: &str, zones: &str, home: Option<&str>) -> Snapshot {
        let mut snap = fixtures::snapshot(letters);
        for (b, z) in snap.backends.iter_mut().zip(zones.chars()) {
            let address = b.spec.id.to_string();
            b.spec = fixtures::spec(&address, Some(&z.to_string()));
        }
        snap.routing = home.map_or_else(Routing::default, Routing::in_zone);
        snap
    }

    #[test]
    fn only_an_idle_ready_backend_of_another_zone_waits_while_home_is_ready() {
        let cases = [
            (
                "RRR",
                "abb",
                Some("a"),
                vec![false, true, true],
                "home ready: the others wait",
            ),
            (
                "ARR",
                "abb",
                Some("a"),
                vec![false; 3],
                "home unready: a pick goes out",
            ),
            (
                "RRR",
                "abb",
                None,
                vec![false; 3],
                "no zone: every backend is home",
            ),
            (
                "RAR",
                "abb",
                Some("a"),
                vec![false, false, true],
                "an unready one is watched",
            ),
            (
                "R?R",
                "abb",
                Some("a"),
                vec![false, false, true],
                "an unchecked one too",
            ),
            (
                "RRR",
                "aab",
                Some("a"),
                vec![false, false, true],
                "two at home",
            ),
            (
                "ARR",
                "aab",
                Some("a"),
                vec![false, false, true],
                "one of two at home ready",
            ),
        ];
        for (letters, zones, home, want, why) in cases {
            assert_eq!(remote(&snap(letters, zones, home)), want, "{why}");
        }
    }

    #[test]
    fn a_connection_or_a_pending_change_keeps_the_interval() {
        let mut s = snap("RRR", "abb", Some("a"));
        s.backends[1].live.active.store(1, Ordering::Relaxed);
        s.backends[2].health.pending = Some(crate::verdict::Pending {
            toward: State::Unready,
            count: 1,
            needed: 2,
        });
        assert_eq!(remote(&s), vec![false, false, false]);
    }
}
