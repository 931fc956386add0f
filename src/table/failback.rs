//! When connections on other zones go home: once a backend in this node's zone has been ready for
//! `failback_after`, the connections relayed to backends outside the zone are closed, so their
//! clients (kubelet's long-lived connection above all) re-dial into the zone instead of crossing
//! the WAN until something breaks them. Latency alone never moves a connection.
//!
//! Owns the clocks and the decision (pure: the caller passes `now`). Does not own closing (the
//! table writer stamps, publishes and bumps, as for any eviction).

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::verdict::State;

/// The ready clocks of this node's zone's backends.
#[derive(Debug, Default)]
pub struct Failback {
    /// Same-zone backends ready now: since when, and whether their failback has been done.
    ready: Vec<Clock>,
}

#[derive(Debug, Clone, PartialEq)]
struct Clock {
    id: BackendId,
    since: Instant,
    done: bool,
}

impl Failback {
    /// Folds in a snapshot seen at `now`: a same-zone backend that turned ready starts its clock,
    /// one that is not ready drops out (so a backend that flaps starts again from zero).
    pub fn observe(&mut self, snap: &Snapshot, now: Instant) {
        let zone = snap.routing.zone_name();
        let ready_here: Vec<&BackendId> = snap
            .backends
            .iter()
            .filter(|b| zone.is_some() && b.spec.zone.as_deref() == zone)
            .filter(|b| b.health.state == State::Ready)
            .map(|b| &b.spec.id)
            .collect();
        self.ready.retain(|c| ready_here.contains(&&c.id));
        for id in ready_here {
            if !self.ready.iter().any(|c| c.id == *id) {
                self.ready.push(Clock {
                    id: id.clone(),
                    since: now,
                    done: false,
                });
            }
        }
    }

    /// When the next failback is due, with `after` as `failback_after` (`None`: never).
    pub fn next_due(&self, after: Option<Duration>) -> Option<Instant> {
        let after = after?;
        self.ready
            .iter()
            .filter(|c| !c.done)
            .map(|c| c.since + after)
            .min()
    }

    /// Whether a failback is due at `now`; a due one is then done (each same-zone backend's
    /// ready spell brings connections home once).
    pub fn take_due(&mut self, after: Option<Duration>, now: Instant) -> bool {
        let Some(after) = after else {
            return false;
        };
        let mut due = false;
        for c in self.ready.iter_mut().filter(|c| !c.done) {
            if now >= c.since + after {
                c.done = true;
                due = true;
            }
        }
        due
    }
}

/// The backends whose connections a failback closes: outside this node's zone (or without one)
/// and relaying something now. Empty when the node has no zone.
pub fn away(snap: &Snapshot) -> Vec<usize> {
    let Some(zone) = snap.routing.zone_name() else {
        return Vec::new();
    };
    snap.backends
        .iter()
        .enumerate()
        .filter(|(_, b)| b.spec.zone.as_deref() != Some(zone))
        .filter(|(_, b)| b.live.active.load(std::sync::atomic::Ordering::Relaxed) > 0)
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendLive, BackendSpec, Routing};
    use crate::verdict::Health;
    use std::sync::Arc;

    fn snap(states: &[(&str, State)]) -> Snapshot {
        Snapshot {
            generation: 1,
            routing: Routing::in_zone("dc-a"),
            backends: states
                .iter()
                .enumerate()
                .map(|(i, &(zone, state))| Backend {
                    spec: Arc::new(BackendSpec {
                        id: BackendId::new(&format!("10.0.0.{i}:6443")),
                        host: format!("10.0.0.{i}"),
                        port: 6443,
                        zone: Some(zone.into()),
                        server_name: rustls_pki_types::ServerName::try_from("x").expect("name"),
                        source: crate::backend::BackendSource::Config,
                    }),
                    health: Health {
                        state,
                        ..Health::UNKNOWN
                    },
                    live: Arc::new(BackendLive::default()),
                    evict_epoch: 0,
                })
                .collect(),
        }
    }

    const AFTER: Option<Duration> = Some(Duration::from_secs(60));

    #[test]
    fn due_only_once_after_a_same_zone_backend_has_been_ready_for_failback_after() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut f = Failback::default();
        f.observe(
            &snap(&[("dc-a", State::Unready), ("dc-b", State::Ready)]),
            t0,
        );
        assert_eq!(f.next_due(AFTER), None, "nothing ready in the zone: never");
        f.observe(
            &snap(&[("dc-a", State::Ready), ("dc-b", State::Ready)]),
            s(10),
        );
        assert_eq!(f.next_due(AFTER), Some(s(70)));
        assert!(!f.take_due(AFTER, s(69)));
        assert!(f.take_due(AFTER, s(70)));
        assert!(!f.take_due(AFTER, s(200)), "once per ready spell");
        assert_eq!(f.next_due(AFTER), None);
        assert!(!Failback::default().take_due(None, s(1000)), "0s: never");
    }

    #[test]
    fn a_flapping_same_zone_backend_restarts_its_clock() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut f = Failback::default();
        let up = snap(&[("dc-a", State::Ready), ("dc-b", State::Ready)]);
        let down = snap(&[("dc-a", State::Unready), ("dc-b", State::Ready)]);
        for (at, snapshot) in [(0, &up), (50, &down), (55, &up), (100, &down), (110, &up)] {
            f.observe(snapshot, s(at));
            assert!(!f.take_due(AFTER, s(at)), "at {at}s");
        }
        assert_eq!(
            f.next_due(AFTER),
            Some(s(170)),
            "from the last time it turned ready"
        );
        // Ready, then a refresh of the same state: the clock keeps running.
        f.observe(&up, s(150));
        assert!(f.take_due(AFTER, s(170)));
    }

    #[test]
    fn a_failback_closes_only_busy_backends_outside_the_zone() {
        let s = snap(&[
            ("dc-a", State::Ready),
            ("dc-b", State::Ready),
            ("dc-c", State::Unready),
        ]);
        assert!(away(&s).is_empty(), "nothing relayed anywhere");
        let _a = s.backends[0].live.count_active();
        let _b = s.backends[1].live.count_active();
        assert_eq!(away(&s), vec![1], "the same zone's connections stay");
        let mut zoneless = s.clone();
        zoneless.routing.zone = None;
        assert!(
            away(&zoneless).is_empty(),
            "a node without a zone has no home"
        );
    }
}
