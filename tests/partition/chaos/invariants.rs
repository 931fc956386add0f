//! The invariants of routing judged over a played schedule, from the records the lab keeps: the
//! client's requests and lease renewals (1, 2) and the balancer's logged states with the sampled
//! `readyprism_connections_active` (3). Pure: records in, violations out; every time in seconds
//! from the schedule's start. The balancer's own health and the return after the last heal
//! (4, 5) are `liveness.rs`'s.

use crate::partition::balancer_log::Change;
use crate::partition::client::{ClientEvent, Exchange};
use crate::partition::netlab::Host;
use crate::partition::scenarios::{probe_bound, EVICT_SPREAD, PROBE_TIMEOUT, SLACK};

use super::model::{self, Applied, Site};
use super::sampler::Sample;

/// The detection bound, as the scenarios compute it for a silent backend (`probe_bound`): the
/// next probe, `fall` probe timeouts, the eviction spread, three dial timeouts and the slack.
pub fn bound() -> f64 {
    probe_bound(PROBE_TIMEOUT, 3.0)
}

/// Invariant 2: the node's grace period.
pub const LEASE_LIMIT: f64 = 40.0;
/// Invariant 3: from the logged `unready` to the last connection cut: the spread, one confirm
/// probe, the slack and a sampling period.
pub const CUT_LIMIT: f64 = EVICT_SPREAD + PROBE_TIMEOUT + SLACK + 1.0;
/// The longest probe interval (5 s and its jitter; the chaos edits set 4 s or 5 s).
const INTERVAL: f64 = 5.5;
/// The blink rule's own bound, when another backend changed state or failed a check from an
/// interval before the fall on (the node saw the event through it too: `docs/behaviour.md`,
/// "the escape route is confirmed first"): the route's confirm fails, its next probe passes
/// within an interval and a timeout, and the fallen backend's next failure from then on moves
/// the connections, within another interval; then the cut as in [`CUT_LIMIT`].
pub const BLINK_LIMIT: f64 = CUT_LIMIT + 2.0 * INTERVAL + PROBE_TIMEOUT;

#[derive(Clone, Debug)]
pub struct Violation {
    pub invariant: u8,
    pub t: f64,
    pub what: String,
}

/// What the run's records are, in the schedule's time.
pub struct Records<'r> {
    pub applied: &'r [Applied],
    pub client: &'r [ClientEvent],
    pub changes: &'r [Change],
    pub samples: &'r [Sample],
    /// The schedule's start (wall clock): subtracted from the records' times.
    pub t0: f64,
}

impl Records<'_> {
    /// Whether `t` is within a restart or the detection bound after it.
    pub fn restarting(&self, t: f64) -> bool {
        model::restarts(self.applied)
            .iter()
            .any(|&(s, e)| t >= s - 1.0 && t <= e + bound())
    }

    /// The balancer's logged state of `site` at `t`, and since when.
    fn state(&self, site: Host, t: f64) -> Option<(&str, f64)> {
        self.changes
            .iter()
            .rfind(|c| c.site == site && c.t - self.t0 <= t)
            .map(|c| (c.to.as_str(), c.t - self.t0))
    }

    /// Every request: the steady load's, the `/slow` ones held 2 s (one always in flight, so
    /// that a cut of the node's path is scenario 7's dying path) and the herds' dials.
    /// Whether every site was logged ready at `t`.
    pub fn all_ready(&self, t: f64) -> bool {
        Host::SITES
            .into_iter()
            .all(|s| self.state(s, t).is_some_and(|(st, _)| st == "ready"))
    }

    /// Whether a site other than `site` changed state (logged) or failed a check (sampled)
    /// within `[from, to]`.
    fn others_stirred(&self, site: Host, (from, to): (f64, f64)) -> bool {
        let changed = self.changes.iter().any(|c| {
            let t = c.t - self.t0;
            c.site != site && t >= from && t <= to
        });
        let failed = self.samples.windows(2).any(|w| {
            w[1].t >= from
                && w[1].t <= to + 1.0
                && w[0].pid == w[1].pid
                && w[1]
                    .failed
                    .iter()
                    .any(|(&o, &n)| o != site && n > w[0].failed.get(&o).copied().unwrap_or(n))
        });
        changed || failed
    }

    fn requests(&self) -> impl Iterator<Item = &Exchange> {
        self.client.iter().filter_map(|e| match e {
            ClientEvent::Req(x) | ClientEvent::Slow(x) => Some(x),
            _ => None,
        })
    }
}

/// Whether some site got worse (to `Unsure` or `Bad`) within `[from, to]`, or a lossy path to
/// the node was in force then: a failure there may be the fault's, not readyprism's.
fn worsened(applied: &[Applied], (from, to): (f64, f64)) -> bool {
    let rank = |s: Site| match s {
        Site::Good => 0,
        Site::Unsure => 1,
        Site::Bad => 2,
    };
    let mut times = vec![from];
    times.extend(
        model::edges(applied)
            .into_iter()
            .filter(|&e| e > from && e <= to),
    );
    times.push(to);
    let mut before = model::sites_at(applied, from - 0.001);
    for t in times {
        let now = model::sites_at(applied, t);
        if now
            .iter()
            .zip(&before)
            .any(|((_, n), (_, b))| rank(*n) > rank(*b))
        {
            return true;
        }
        before = now;
    }
    false
}

/// Invariant 1: once an apiserver with quorum has been reachable for the detection bound, new
/// requests land on one, and none fails unless a site got worse within the bound.
pub fn requests_land_on_good(r: &Records) -> Vec<Violation> {
    let mut out = Vec::new();
    for x in r.requests() {
        let (t, end) = (x.t0 - r.t0, x.t1 - r.t0);
        if t < 0.0 || r.restarting(t) {
            continue;
        }
        let window = (t - bound(), end);
        let good = model::throughout(r.applied, window, Site::Good);
        if good.is_empty() {
            continue;
        }
        let names = || good.iter().map(|h| h.name()).collect::<Vec<_>>().join(", ");
        if !x.ok && !worsened(r.applied, window) {
            out.push(Violation {
                invariant: 1,
                t,
                what: format!(
                    "a request failed ({}) while {} had quorum and was reachable",
                    x.error.as_deref().unwrap_or("?"),
                    names()
                ),
            });
        }
        if let Some(site) = x.site.as_deref() {
            let bad = model::throughout(r.applied, (t - bound(), t), Site::Bad);
            if bad.iter().any(|h| h.name() == site) {
                out.push(Violation {
                    invariant: 1,
                    t,
                    what: format!(
                        "a request landed on {site}, bad for the whole detection bound, while {} was good",
                        names()
                    ),
                });
            }
        }
    }
    out
}

/// Invariant 2: the longest time between successful lease renewals, and the violations: a gap
/// with more than [`LEASE_LIMIT`] seconds in which an apiserver with quorum was reachable.
pub fn lease_renewed(r: &Records, end: f64) -> (f64, Vec<Violation>) {
    let mut ok: Vec<f64> = r
        .client
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Lease { t1, ok: true, .. } => Some(t1 - r.t0),
            _ => None,
        })
        .filter(|&t| t >= 0.0)
        .collect();
    ok.insert(0, 0.0);
    ok.push(end);
    let mut longest: f64 = 0.0;
    let mut out = Vec::new();
    for w in ok.windows(2) {
        let (a, b) = (w[0], w[1]);
        longest = longest.max(b - a);
        if b - a <= LEASE_LIMIT {
            continue;
        }
        let step = 0.25;
        let good_time = (0..((b - a) / step) as usize)
            .map(|i| a + i as f64 * step)
            .filter(|&t| {
                model::sites_at(r.applied, t)
                    .iter()
                    .any(|(_, s)| *s == Site::Good)
            })
            .count() as f64
            * step;
        if good_time > LEASE_LIMIT {
            out.push(Violation {
                invariant: 2,
                t: a,
                what: format!(
                    "the lease went unrenewed {:.1} s ({good_time:.1} s of it with a good apiserver reachable)",
                    b - a
                ),
            });
        }
    }
    (longest, out)
}

/// Invariant 3: no sampled connection on a backend logged unready for over [`CUT_LIMIT`] while
/// another was logged ready all that time (a blink, every backend unready, is not one of these);
/// over [`BLINK_LIMIT`] when another backend stirred around the fall (the blink rule may hold
/// them: its own bound). A removed backend is not ready.
pub fn no_connection_stays_on_unready(r: &Records) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut reported: Vec<(Host, f64)> = Vec::new();
    for s in r.samples {
        if r.restarting(s.t) {
            continue;
        }
        for (&site, &n) in &s.active {
            if n <= 0.0 {
                continue;
            }
            let Some(("unready", since)) = r.state(site, s.t) else {
                continue;
            };
            let blink = r.others_stirred(site, (since - INTERVAL, s.t));
            let limit = if blink { BLINK_LIMIT } else { CUT_LIMIT };
            if s.t - since <= limit || reported.contains(&(site, since)) {
                continue;
            }
            let ready_all_along = Host::SITES.into_iter().filter(|&o| o != site).find(|&o| {
                r.state(o, since).is_some_and(|(st, _)| st == "ready")
                    && r.changes.iter().all(|c| {
                        c.site != o || c.t - r.t0 <= since || c.t - r.t0 > s.t || c.to == "ready"
                    })
            });
            if let Some(other) = ready_all_along {
                reported.push((site, since));
                out.push(Violation {
                    invariant: 3,
                    t: s.t,
                    what: format!(
                        "{n} connection(s) still on {}, unready since {since:.1} s, while {} was ready{}",
                        site.name(),
                        other.name(),
                        if blink {
                            " (the blink rule's bound: another backend stirred around the fall)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
    }
    out
}

mod tests {
    use super::*;
    use crate::partition::chaos::schedule::{Event, Fault, Kind};
    use crate::partition::netlab::Host::DcB;

    fn no_quorum_at_dcb(from: f64, to: f64) -> Vec<Applied> {
        vec![Applied {
            event: Event {
                at: from,
                len: to - from,
                kind: Kind::Fault(Fault::NoQuorum(DcB)),
            },
            start: from,
            end: to,
            resolved: None,
        }]
    }

    fn req(t: f64, site: &str) -> ClientEvent {
        ClientEvent::Req(Exchange {
            t0: t,
            t1: t + 0.01,
            ok: true,
            site: Some(site.to_string()),
            attempts: 1,
            error: None,
        })
    }

    fn lease(t: f64) -> ClientEvent {
        ClientEvent::Lease {
            t0: t - 0.01,
            t1: t,
            ok: true,
            site: Some("dc-a".to_string()),
            attempt: 1,
            conn: "reused".to_string(),
            error: None,
        }
    }

    fn records<'r>(applied: &'r [Applied], client: &'r [ClientEvent]) -> Records<'r> {
        Records {
            applied,
            client,
            changes: &[],
            samples: &[],
            t0: 0.0,
        }
    }

    #[test]
    fn chaos_invariant_1_fires_on_a_request_to_a_site_bad_for_the_whole_bound() {
        let applied = no_quorum_at_dcb(0.0, 60.0);
        let late = [req(bound() + 1.0, "dc-b")];
        let early = [req(bound() - 1.0, "dc-b"), req(bound() + 1.0, "dc-a")];
        assert_eq!(requests_land_on_good(&records(&applied, &late)).len(), 1);
        assert!(requests_land_on_good(&records(&applied, &early)).is_empty());
    }

    #[test]
    fn chaos_invariant_2_counts_only_time_with_a_good_apiserver() {
        let applied = no_quorum_at_dcb(0.0, 60.0);
        let leases = [lease(5.0), lease(50.0)];
        let (longest, v) = lease_renewed(&records(&applied, &leases), 55.0);
        assert!((longest - 45.0).abs() < 1e-9);
        assert_eq!(v.len(), 1);
        let (_, v) = lease_renewed(&records(&applied, &[lease(5.0), lease(40.0)]), 55.0);
        assert!(v.is_empty());
        // No quorum anywhere: the same 45 s gap is nobody's fault.
        let mut nowhere = no_quorum_at_dcb(0.0, 60.0);
        for site in [Host::DcA, Host::Witness] {
            let mut a = nowhere[0].clone();
            a.event.kind = Kind::Fault(Fault::NoQuorum(site));
            nowhere.push(a);
        }
        let (_, v) = lease_renewed(&records(&nowhere, &leases), 55.0);
        assert!(v.is_empty());
    }

    fn change(t: f64, site: Host, from: &str, to: &str) -> Change {
        Change {
            t,
            site,
            from: from.to_string(),
            to: to.to_string(),
            reason: String::new(),
        }
    }

    /// A sample at `t` with `on` connections on dc-b and `failed` checks of dc-a so far.
    fn sample(t: f64, on: f64, failed: f64) -> Sample {
        Sample {
            t,
            pid: 1,
            live: true,
            fds: Some(10),
            fixed_fds: Some(8),
            rss_kib: Some(1000),
            no_ready: Some(0.0),
            active: [(DcB, on)].into(),
            failed: [(Host::DcA, failed)].into(),
        }
    }

    /// dc-b logged unready at 10 s with a connection sampled on it every second until `until`;
    /// dc-a ready all along, with `failed_at` its sampled check failures.
    fn held(until: f64, failed_at: Option<f64>, changes: &[Change]) -> Vec<Violation> {
        let samples: Vec<Sample> = (0..=until as usize)
            .map(|t| {
                let t = t as f64;
                let failed = failed_at.is_some_and(|f| t >= f);
                sample(t, 1.0, f64::from(u8::from(failed)))
            })
            .collect();
        let r = Records {
            applied: &[],
            client: &[],
            changes,
            samples: &samples,
            t0: 0.0,
        };
        no_connection_stays_on_unready(&r)
    }

    #[test]
    fn chaos_invariant_3_allows_the_cut_limit_or_the_blink_rules_bound() {
        use crate::partition::netlab::Host::DcA;
        let fell = [
            change(1.0, DcA, "unknown", "ready"),
            change(10.0, DcB, "ready", "unready"),
        ];
        // A single bad backend: the cut within CUT_LIMIT.
        assert!(held(10.0 + CUT_LIMIT - 0.5, None, &fell).is_empty());
        assert_eq!(held(10.0 + CUT_LIMIT + 1.5, None, &fell).len(), 1);
        // dc-a failed a check around the fall (the blink rule may hold them): its own bound.
        assert!(held(10.0 + BLINK_LIMIT - 0.5, Some(11.0), &fell).is_empty());
        let late = held(10.0 + BLINK_LIMIT + 1.5, Some(11.0), &fell);
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(late[0].what.contains("blink"), "{late:?}");
        // dc-a rose less than an interval before the fall: the same.
        let rose = [
            change(7.0, DcA, "unready", "ready"),
            change(10.0, DcB, "ready", "unready"),
        ];
        assert!(held(10.0 + CUT_LIMIT + 1.5, None, &rose).is_empty());
        // dc-a removed: not ready, nothing to move to.
        let removed = [
            change(1.0, DcA, "unknown", "ready"),
            change(2.0, DcA, "", "removed"),
            change(10.0, DcB, "ready", "unready"),
        ];
        assert!(held(10.0 + BLINK_LIMIT + 1.5, None, &removed).is_empty());
    }
}
