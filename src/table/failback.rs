//! When connections on other zones go home: once a backend in this node's zone has been ready for
//! `failback_after`, the connections relayed to backends outside the zone are closed, so their
//! clients (kubelet's long-lived connection above all) re-dial into the zone instead of crossing
//! the WAN until something breaks them. Latency alone never moves a connection. A failback
//! whose closes are still spread out is called off once the zone has no ready backend left: the
//! connections not yet closed would only re-dial away again.
//!
//! Owns the clocks and the decisions (pure: the caller passes `now`). Does not own closing or
//! calling off (the table writer stamps, publishes and bumps, as for any eviction, and calls the
//! bump off through `eviction`).

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, Snapshot};
use crate::eviction::CloseReason;
use crate::verdict::State;

/// The ready clocks of this node's zone's backends, and the failback under way.
#[derive(Debug, Default)]
pub struct Failback {
    /// Same-zone backends ready now: since when, and whether their failback has been done.
    ready: Vec<Clock>,
    /// When the latest failback began, while its closes may still be spread out (for the
    /// failback spread after it); cleared once that is over or it is called off.
    under_way: Option<Instant>,
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
    /// ready spell brings connections home once) and under way from `now`.
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
        if due {
            self.under_way = Some(now);
        }
        due
    }

    /// Whether the failback under way must be called off at `now` (after [`Failback::observe`]):
    /// its closes are still spread out and no backend in this node's zone is ready any more, so
    /// the connections not yet closed stay where they are. Once per failback.
    pub fn take_call_off(&mut self, now: Instant) -> bool {
        let Some(began) = self.under_way else {
            return false;
        };
        if now >= began + CloseReason::Failback.spread() {
            self.under_way = None; // every turn has come: nothing left to call off
            return false;
        }
        if !self.ready.is_empty() {
            return false;
        }
        self.under_way = None;
        true
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
    fn a_failback_under_way_is_called_off_once_the_zone_has_no_ready_backend() {
        let t0 = Instant::now();
        let s = |ms| t0 + Duration::from_millis(ms);
        let spread = CloseReason::Failback.spread().as_millis() as u64;
        let one_up = snap(&[("dc-a", State::Ready), ("dc-b", State::Ready)]);
        let two_up = snap(&[
            ("dc-a", State::Ready),
            ("dc-a", State::Ready),
            ("dc-b", State::Ready),
        ]);
        let one_of_two = snap(&[
            ("dc-a", State::Unready),
            ("dc-a", State::Ready),
            ("dc-b", State::Ready),
        ]);
        let none_up = snap(&[("dc-a", State::Unready), ("dc-b", State::Ready)]);
        let gone = snap(&[("dc-b", State::Ready)]);
        // (what, the zone's state at the failback, then what it becomes how long after it
        // began, whether the failback is called off)
        let cases: [(&str, &Snapshot, &Snapshot, u64, bool); 6] = [
            (
                "home turned unready mid-spread",
                &one_up,
                &none_up,
                1_000,
                true,
            ),
            ("home removed mid-spread", &one_up, &gone, 1_000, true),
            ("home unready at once", &one_up, &none_up, 0, true),
            (
                "home unready after the spread",
                &one_up,
                &none_up,
                spread,
                false,
            ),
            ("home still ready", &one_up, &one_up, 1_000, false),
            (
                "another home backend still ready",
                &two_up,
                &one_of_two,
                1_000,
                false,
            ),
        ];
        for (what, at_failback, then, after, want) in cases {
            let mut f = Failback::default();
            f.observe(at_failback, t0);
            assert!(!f.take_call_off(t0), "{what}: nothing under way yet");
            assert!(f.take_due(AFTER, s(60_000)), "{what}: due");
            let now = s(60_000 + after);
            f.observe(then, now);
            assert_eq!(f.take_call_off(now), want, "{what}");
            assert!(!f.take_call_off(now), "{what}: once");
        }
    }

    #[test]
    fn after_a_call_off_the_next_ready_spell_brings_connections_home_again() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let up = snap(&[("dc-a", State::Ready), ("dc-b", State::Ready)]);
        let down = snap(&[("dc-a", State::Unready), ("dc-b", State::Ready)]);
        let mut f = Failback::default();
        f.observe(&up, t0);
        assert!(f.take_due(AFTER, s(60)));
        f.observe(&down, s(61));
        assert!(f.take_call_off(s(61)));
        f.observe(&up, s(62));
        assert!(!f.take_call_off(s(62)));
        assert_eq!(f.next_due(AFTER), Some(s(122)), "a new spell, a new clock");
        assert!(f.take_due(AFTER, s(122)));
        f.observe(&down, s(123));
        assert!(
            f.take_call_off(s(123)),
            "and its failback is called off too"
        );
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
