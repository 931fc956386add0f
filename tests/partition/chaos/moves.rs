//! Invariant 6, no needless move: every connection the balancer closed to move it was closed
//! while its reason held and another backend was ready to take it. Invariants 1-5 check that
//! clients are served; this one limits what it costs them. Pure: the balancer's logged closes,
//! state changes and probe results in, the needless closes out, times in seconds from the
//! schedule's start.
//!
//! Judged per reason (`src/eviction.rs`), at the close:
//! - `handoff`: the backend's last probe failed (it was still draining; a pass calls the hand-off
//!   off), and another backend was ready.
//! - `turned_unready`: since the backend was last ready, one of its probes (or failed client
//!   dials) failed with something other than `shutdown` alone (a backend that only drained is
//!   handed off, never cut), and another backend was ready.
//! - `left_none_ready`: the backend was not ready and another was.
//! - `failback`: the backend is away from the node's zone and one in it was ready.
//!
//! Other closes are not moves chosen by a rule (`removed`: the backend is gone; `refusing`: the
//! operator's policy; `dead_path`, `stalled_reader`: TCP gave up) or are judged by what only the
//! balancer sees (`silent`: failing open, another answers HTTP), and are not judged here.
//! A decision and its close are apart by the time the close takes to happen: what changed within
//! [`SLACK`] before a close does not make it needless.

use crate::partition::balancer_log::{Change, Ended, Probe};
use crate::partition::cast::site_of;
use crate::partition::netlab::Host;

use super::invariants::Violation;

/// What happened within this long before a close may have come after its decision.
pub const SLACK: f64 = 0.25;

/// What the invariant reads, in the schedule's time once `t0` is subtracted.
pub struct Moves<'r> {
    pub ended: &'r [Ended],
    pub changes: &'r [Change],
    pub probes: &'r [Probe],
    /// The node's zone's site.
    pub home: Host,
    pub t0: f64,
}

impl Moves<'_> {
    /// The logged state of `site` at `t` (`ready`, `unready`, `removed`), if any yet.
    fn state(&self, site: Host, t: f64) -> Option<&str> {
        self.changes
            .iter()
            .rfind(|c| c.site == site && c.t - self.t0 <= t)
            .map(|c| c.to.as_str())
    }

    /// Whether `site` was logged ready at some moment of `[t - SLACK, t]`.
    fn ready_around(&self, site: Host, t: f64) -> bool {
        self.state(site, t - SLACK) == Some("ready")
            || self.changes.iter().any(|c| {
                let ct = c.t - self.t0;
                c.site == site && c.to == "ready" && ct >= t - SLACK && ct <= t
            })
    }

    /// A site other than `site` ready around `t`.
    fn other_ready(&self, site: Host, t: f64) -> Option<Host> {
        Host::SITES
            .into_iter()
            .find(|&o| o != site && self.ready_around(o, t))
    }

    /// When `site` was last logged turning ready before `t` (the run's start if never).
    fn last_ready(&self, site: Host, t: f64) -> f64 {
        self.changes
            .iter()
            .rfind(|c| c.site == site && c.to == "ready" && c.t - self.t0 <= t)
            .map(|c| c.t - self.t0)
            .unwrap_or(f64::NEG_INFINITY)
    }

    /// `site`'s probe results in `(from, to]`.
    fn probes_in(&self, site: Host, (from, to): (f64, f64)) -> impl Iterator<Item = &Probe> {
        self.probes
            .iter()
            .filter(move |p| p.site == site && p.t - self.t0 > from && p.t - self.t0 <= to)
    }

    /// Why the close of a connection to `site` for `reason` at `t` was needless, if it was.
    fn needless(&self, site: Host, reason: &str, t: f64) -> Option<String> {
        let nowhere = |what: &str| format!("{what}, and no other backend was ready");
        match reason {
            "handoff" => {
                // The probe that began the hand-off may be within the slack before the close; a
                // pass counts only from before it (one after may have followed the decision).
                let last = self
                    .probes
                    .iter()
                    .rfind(|p| p.site == site && p.t - self.t0 <= t);
                if last.is_some_and(|p| p.passed && p.t - self.t0 <= t - SLACK) {
                    return Some(
                        "its last probe had passed: the hand-off's reason had ended".into(),
                    );
                }
                self.other_ready(site, t)
                    .is_none()
                    .then(|| nowhere("a hand-off"))
            }
            "turned_unready" => {
                let since = self.last_ready(site, t);
                let really = self
                    .probes_in(site, (since, t))
                    .any(|p| !p.passed && p.checks != "shutdown");
                if !really {
                    return Some(
                        "no probe since it was last ready failed with more than `shutdown`: it only drained".into(),
                    );
                }
                self.other_ready(site, t)
                    .is_none()
                    .then(|| nowhere("cut as unready"))
            }
            "left_none_ready" => {
                if self.state(site, t - SLACK) == Some("ready")
                    && self.state(site, t) == Some("ready")
                {
                    return Some("it was ready".into());
                }
                self.other_ready(site, t)
                    .is_none()
                    .then(|| nowhere("sent home after a spell with none ready"))
            }
            "failback" => {
                if site == self.home {
                    return Some(format!("it is in the node's zone ({})", site.name()));
                }
                (!self.ready_around(self.home, t)).then(|| {
                    format!(
                        "no backend in the node's zone ({}) was ready",
                        self.home.name()
                    )
                })
            }
            _ => None,
        }
    }
}

/// Invariant 6: the needless closes, as violations (their number is the count per seed).
pub fn no_needless_move(m: &Moves) -> Vec<Violation> {
    m.ended
        .iter()
        .filter(|e| e.ended_by == "balancer")
        .filter_map(|e| {
            let site = site_of(&e.backend)?;
            let t = e.t - m.t0;
            let why = m.needless(site, &e.reason, t)?;
            Some(Violation {
                invariant: 6,
                t,
                what: format!(
                    "a connection to {} closed as {}: {why}",
                    site.name(),
                    e.reason
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::netlab::Host::{DcA, DcB, Witness};

    fn probe(t: f64, site: Host, passed: bool, checks: &str) -> Probe {
        Probe {
            t,
            site,
            passed,
            checks: checks.to_string(),
        }
    }

    fn closed(t: f64, site: Host, reason: &str) -> Ended {
        Ended {
            t,
            backend: format!("{}:{}", site.ip(), crate::partition::cast::APISERVER_PORT),
            ended_by: "balancer".to_string(),
            reason: reason.to_string(),
        }
    }

    fn judge(ended: &[Ended], changes: &[Change], probes: &[Probe]) -> Vec<Violation> {
        no_needless_move(&Moves {
            ended,
            changes,
            probes,
            home: DcB,
            t0: 0.0,
        })
    }

    /// Every site ready at 1 s; dc-a drains from 10 s (`[-]shutdown`, fall 1).
    fn draining_a() -> (Vec<Change>, Vec<Probe>) {
        let mut changes: Vec<Change> = Host::SITES.map(|s| Change::to(1.0, s, "ready")).to_vec();
        changes.push(Change::to(10.0, DcA, "unready"));
        (changes, vec![probe(10.0, DcA, false, "shutdown")])
    }

    #[test]
    fn chaos_invariant_6_passes_the_moves_that_help() {
        let (changes, mut probes) = draining_a();
        // Handed off while draining; cut once it failed etcd too; a failback home to dc-b.
        probes.push(probe(15.0, DcA, false, "etcd, shutdown"));
        let ended = [
            closed(11.0, DcA, "handoff"),
            closed(14.0, DcA, "handoff"),
            closed(16.0, DcA, "turned_unready"),
            closed(20.0, Witness, "failback"),
            closed(21.0, DcA, "removed"),
        ];
        let v = judge(&ended, &changes, &probes);
        assert!(v.is_empty(), "{v:?}");
        // A connection the client or the backend ended is nobody's move.
        let mut by_client = closed(30.0, DcB, "failback");
        by_client.ended_by = "client".into();
        assert!(judge(&[by_client], &changes, &probes).is_empty());
    }

    /// A hand-off that outlives its reason: it goes on after the backend passed a probe (`rise:
    /// 1`: it is ready again; `rise: 2`: still unready, cut at once as `turned_unready`).
    #[test]
    fn chaos_invariant_6_fires_on_a_hand_off_that_outlives_its_reason() {
        let (mut changes, mut probes) = draining_a();
        probes.push(probe(15.0, DcA, true, ""));
        let v = judge(&[closed(16.0, DcA, "handoff")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].what.contains("its last probe had passed"), "{v:?}");
        // Within the slack of the pass, the close may have been decided before it.
        assert!(judge(&[closed(15.1, DcA, "handoff")], &changes, &probes).is_empty());
        // The failed probe that began a hand-off within the slack before its first close (CI's
        // seed-3 schedule: a pass 5 s before, `[-]shutdown` 0.24 s before the close).
        let (changes2, mut began) = draining_a();
        began.insert(0, probe(5.0, DcA, true, ""));
        assert!(judge(&[closed(10.24, DcA, "handoff")], &changes2, &began).is_empty());
        // rise 2: still logged unready, the rest cut as unready though it only ever drained.
        let v = judge(&[closed(15.5, DcA, "turned_unready")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].what.contains("it only drained"), "{v:?}");
        // rise 1: ready again at 15 s.
        changes.push(Change::to(15.0, DcA, "ready"));
        assert_eq!(
            judge(&[closed(16.0, DcA, "handoff")], &changes, &probes).len(),
            1
        );
    }

    /// A hand-off with nowhere to go: every apiserver drains at once and the hand-off goes on with no
    /// ready backend to go to.
    #[test]
    fn chaos_invariant_6_fires_on_a_hand_off_with_nowhere_to_go() {
        let (mut changes, mut probes) = draining_a();
        for s in [DcB, Witness] {
            changes.push(Change::to(10.5, s, "unready"));
            probes.push(probe(10.5, s, false, "shutdown"));
        }
        let v = judge(&[closed(12.0, DcA, "handoff")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].what.contains("no other backend was ready"), "{v:?}");
        // Once dc-b is ready again, the hand-off may go on.
        changes.push(Change::to(20.0, DcB, "ready"));
        assert!(judge(&[closed(21.0, DcA, "handoff")], &changes, &probes).is_empty());
    }

    /// A failback that should be called off: it goes on closing connections that are home (the node
    /// renumbered into their zone) or with no ready backend in the node's zone.
    #[test]
    fn chaos_invariant_6_fires_on_a_failback_that_should_be_called_off() {
        let (mut changes, probes) = draining_a();
        let v = judge(&[closed(12.0, DcB, "failback")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].what.contains("in the node's zone"), "{v:?}");
        changes.push(Change::to(13.0, DcB, "unready"));
        let v = judge(&[closed(14.0, Witness, "failback")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].what.contains("no backend in the node's zone"), "{v:?}");
    }

    #[test]
    fn chaos_invariant_6_fires_on_a_cut_with_nowhere_to_go_or_of_a_ready_backend() {
        let mut changes: Vec<Change> = Host::SITES.map(|s| Change::to(1.0, s, "ready")).to_vec();
        let mut probes = Vec::new();
        for s in Host::SITES {
            changes.push(Change::to(10.0, s, "unready"));
            probes.push(probe(9.9, s, false, "etcd"));
        }
        let v = judge(&[closed(11.0, DcA, "turned_unready")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        changes.push(Change::to(20.0, DcB, "ready"));
        assert!(judge(&[closed(20.1, DcA, "left_none_ready")], &changes, &probes).is_empty());
        let v = judge(&[closed(20.5, DcB, "left_none_ready")], &changes, &probes);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].what.contains("it was ready"), "{v:?}");
    }
}
