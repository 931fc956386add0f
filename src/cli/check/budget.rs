//! The NotReady budget `check` prints: for one config, the worst-case time from a backend going
//! bad to new connections avoiding it and its connections being cut, beside the node grace
//! period. Pure: durations in, terms out, each term computed by the function the daemon runs
//! (`health::next_probe_due` for the probes, `table::escape::deadline` for the escape route's
//! confirm, `eviction::EVICT_SPREAD` for the closes).
//!
//! Owns the composition of those terms and its wording; does not own the schedule it describes,
//! nor the dial (`dial::connect`). It follows the probe path for one backend going bad while the
//! others answer: failed client dials count as failed checks at once and can only make the real
//! time shorter.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Routing;
use crate::config::HealthConfig;
use crate::eviction::EVICT_SPREAD;
use crate::health::{next_probe_due, Due, JITTER_PERCENT};
use crate::table::escape::{deadline, Fall, Pass};

/// The node grace period of `kube-controller-manager --node-monitor-grace-period` before
/// Kubernetes 1.32 (50 s from 1.32): a node whose kubelet has not renewed its lease for this
/// long is marked NotReady.
pub const DEFAULT_NODE_GRACE: Duration = Duration::from_secs(40);

/// The terms of the worst case, each a bound taken from the code path it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The settings the terms come from (printed beside them).
    pub health: HealthConfig,
    /// From the backend going bad to the next probe starting. The probe just before it passed
    /// and started at most this long before the next one starts: `started + delay`, the delay
    /// being `interval` with jitter (at most +10 %); the later of that and the previous probe's
    /// end, which `timeout < interval` keeps earlier.
    pub next_probe: Duration,
    /// From the first failing probe's start to the `fall`-th one's end: each probe is bounded
    /// by `timeout` end to end, and while the change is pending the next one starts
    /// `fast_interval` after the previous one started or when it ended, the later of the two.
    /// So `timeout + (fall − 1) × max(timeout, fast_interval)`.
    pub failing_probes: Duration,
    /// From the fall to its escape route confirmed: the writer asks the route's monitor (the
    /// backend the connections would go to) and the fallen backend's own for a confirm probe at
    /// once; the route passes within `timeout`, and with the fallen backend's own result still
    /// outstanding (a silent one), the connections wait one more round trip of the route's
    /// probe beyond its arrival (`escape::deadline`). So up to `2 × timeout`.
    pub escape: Duration,
    /// Connections of a backend turned unready are closed spread over this window
    /// ([`EVICT_SPREAD`]) after the new snapshot is stored.
    pub spread: Duration,
    /// A client dial to the backend begun just before it turned unready waits out this budget
    /// (`connect_timeout`) before the next backend is dialed: an eviction does not interrupt it.
    pub dial: Duration,
    /// A backend that stops acknowledging (a dead path) has each connection with data in flight
    /// cut by TCP this long after the data's send (`dead_path_timeout`), before the probe path
    /// may; `None`: off, such a connection waits for the probe path's cut.
    pub dead_path: Option<Duration>,
}

impl Budget {
    /// The budget for `health` and `routing` as `Monitor::run`, the table writer and the proxy
    /// apply them.
    pub fn of(health: &HealthConfig, routing: &Routing) -> Budget {
        let t0 = Instant::now();
        let due = |last: Instant, pending: bool| {
            next_probe_due(&Due {
                last,
                pending,
                // The longest draw of the jitter.
                interval: health.interval + health.interval * JITTER_PERCENT / 100,
                fast_interval: health.fast_interval,
                passive_failure: None,
            })
        };
        // The probe that passed started at t0; the next starts when due, after it ended.
        let first = due(t0, false).max(t0 + health.timeout);
        // `fall` failing probes, each up to `timeout`; the next starts when due while the fall
        // is pending, or when the previous ended.
        let mut end = first + health.timeout;
        let mut started = first;
        for _ in 1..health.fall.max(1) {
            started = due(started, true).max(end);
            end = started + health.timeout;
        }
        // The fall noted at `end`; both confirms asked then, the route's passing at `timeout`.
        let fall = Fall {
            at: started,
            noted: end,
        };
        let pass = Pass {
            started: end,
            arrived: end + health.timeout,
        };
        Budget {
            health: health.clone(),
            next_probe: first - t0,
            failing_probes: end - first,
            escape: deadline(fall, pass) - end,
            spread: EVICT_SPREAD,
            dial: routing.connect_timeout,
            dead_path: routing.dead_path_timeout,
        }
    }

    /// When the backend is marked unready: from then on new connections avoid it.
    pub fn unready_after(&self) -> Duration {
        self.next_probe + self.failing_probes
    }

    /// When the last of its connections has been cut.
    pub fn cut_by(&self) -> Duration {
        self.unready_after() + self.escape + self.spread
    }

    /// When a request sent to it as it went bad is cut if it stops acknowledging: by TCP after
    /// `dead_path_timeout`, or with the other connections, whichever comes first.
    pub fn in_flight_cut_by(&self) -> Duration {
        self.dead_path
            .map_or(self.cut_by(), |d| d.min(self.cut_by()))
    }

    /// When no client is left waiting on it: its connections cut, and a dial begun just before
    /// it was marked unready given up. A cut client re-dials from the new snapshot, which puts
    /// the backend after every ready one, so the two do not add up.
    pub fn worst_case(&self) -> Duration {
        self.unready_after() + (self.escape + self.spread).max(self.dial)
    }

    /// The worst case is over half of `grace`: one more failure on the way (a slow re-dial, a
    /// second backend) and the node's lease may lapse.
    pub fn over_half_of(&self, grace: Duration) -> bool {
        self.worst_case() * 2 > grace
    }

    /// The budget as YAML comment lines (so `check`'s output stays valid YAML), with the share
    /// of `grace` it takes.
    pub fn render(&self, grace: Duration) -> String {
        let h = &self.health;
        let probes = match h.fall {
            0 | 1 => (
                "1 failing probe".to_string(),
                format!("up to timeout {}", s(h.timeout)),
            ),
            n => (
                format!("{n} failing probes"),
                format!(
                    "up to timeout {} each, started max(timeout {}, fast_interval {}) apart",
                    s(h.timeout),
                    s(h.timeout),
                    s(h.fast_interval)
                ),
            ),
        };
        let rows = [
            (
                "next probe starts".to_string(),
                self.next_probe,
                format!("interval {} + {JITTER_PERCENT} % jitter", s(h.interval)),
            ),
            (probes.0, self.failing_probes, probes.1),
            (
                "marked unready".to_string(),
                self.unready_after(),
                "new connections avoid it from here".to_string(),
            ),
            (
                "escape confirmed".to_string(),
                self.unready_after() + self.escape,
                format!(
                    "+ up to 2 × timeout {}: the route's confirm probe, then one more of its round trips for the fallen backend's own",
                    s(h.timeout)
                ),
            ),
            (
                "connections cut".to_string(),
                self.cut_by(),
                format!("+ spread {}", s(self.spread)),
            ),
            (
                "request in flight".to_string(),
                self.in_flight_cut_by(),
                match self.dead_path {
                    Some(d) => format!(
                        "dead_path_timeout {}: cut by TCP once unacknowledged that long, if sooner",
                        s(d)
                    ),
                    None => "dead_path_timeout 0s (off): cut with the others".to_string(),
                },
            ),
            (
                "dial under way".to_string(),
                self.unready_after() + self.dial,
                format!(
                    "+ connect_timeout {}: a client dial to it begun just before is not cut short",
                    s(self.dial)
                ),
            ),
            (
                "worst case".to_string(),
                self.worst_case(),
                "the later of connections cut and dial under way".to_string(),
            ),
        ];
        let mut out = String::from(
            "# NotReady budget (worst case from a backend going bad, on the probe path):\n",
        );
        for (what, at, why) in rows {
            out.push_str(&format!("#   {what:<18} {:>7}  {why}\n", s(at)));
        }
        let share = self.worst_case().as_secs_f64() / grace.as_secs_f64() * 100.0;
        out.push_str(&format!(
            "#   node grace period {} (--node-grace): the worst case is {share:.0} % of it\n",
            s(grace)
        ));
        out.push_str(
            "#   Failed client dials count as failed checks at once and can only make it shorter.\n",
        );
        out
    }

    /// The warning `check` prints when [`Budget::over_half_of`] holds.
    pub fn warning(&self, grace: Duration) -> String {
        format!(
            "the NotReady budget's worst case {} is over half the node grace period {}: a backend \
             going bad may leave this node's kubelet without the API long enough to be marked \
             NotReady; shorten health.interval, health.timeout or health.fall",
            s(self.worst_case()),
            s(grace)
        )
    }
}

/// Seconds to the millisecond, without trailing zeros: `5.5s`, `12s`, `0.275s`.
fn s(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(interval: u64, timeout: u64, fast_interval: u64, fall: u32) -> HealthConfig {
        let ms = Duration::from_millis;
        HealthConfig {
            interval: ms(interval),
            timeout: ms(timeout),
            fast_interval: ms(fast_interval),
            fall,
            ..crate::testing::fixtures::health_config()
        }
    }

    fn routing(connect_timeout: u64) -> Routing {
        Routing {
            connect_timeout: Duration::from_millis(connect_timeout),
            ..Routing::default()
        }
    }

    #[test]
    fn every_budget_term_follows_the_settings() {
        let spread = EVICT_SPREAD.as_millis() as u64;
        // (interval, timeout, fast_interval, fall, connect_timeout) in ms →
        // (next probe, failing probes, escape, worst case) in ms, and whether 40 s warns.
        let cases = [
            // The defaults: 5.5 + (3 + 1 × 3) + 2 × 3 + 0.5.
            (
                (5000, 3000, 1000, 2, 1000),
                (5500, 6000, 6000, 18_000),
                false,
            ),
            // Slow: 33 + (10 + 2 × 10) + 2 × 10 + 0.5 = 83.5 s, over 20 s.
            (
                (30_000, 10_000, 1000, 3, 1000),
                (33_000, 30_000, 20_000, 83_500),
                true,
            ),
            // fast_interval > timeout: probes start fast_interval apart, the last lasts timeout.
            (
                (10_000, 1000, 2000, 3, 1000),
                (11_000, 5000, 2000, 18_500),
                false,
            ),
            // fall 1: one probe.
            (
                (5000, 3000, 1000, 1, 100),
                (5500, 3000, 6000, 14_500 + spread),
                false,
            ),
            // A dial budget longer than the escape and the spread: it decides the worst case.
            (
                (5000, 1000, 1000, 2, 5000),
                (5500, 2000, 2000, 12_500),
                false,
            ),
            // Over half of 40 s: 11 + (9 + 9) + 2 × 9 + 0.5 = 47.5 s.
            (
                (10_000, 9000, 1000, 2, 1000),
                (11_000, 18_000, 18_000, 47_500),
                true,
            ),
        ];
        for ((interval, timeout, fast, fall, dial), (next, failing, escape, worst), warns) in cases
        {
            let b = Budget::of(&health(interval, timeout, fast, fall), &routing(dial));
            let ms = Duration::from_millis;
            let case = (interval, timeout, fast, fall, dial);
            assert_eq!(b.next_probe, ms(next), "{case:?}");
            assert_eq!(b.failing_probes, ms(failing), "{case:?}");
            assert_eq!(b.escape, ms(escape), "{case:?}");
            assert_eq!(b.unready_after(), ms(next + failing), "{case:?}");
            assert_eq!(b.cut_by(), ms(next + failing + escape + spread), "{case:?}");
            assert_eq!(b.worst_case(), ms(worst), "{case:?}");
            assert_eq!(b.over_half_of(DEFAULT_NODE_GRACE), warns, "{case:?}");
        }
    }

    #[test]
    fn a_request_in_flight_is_cut_by_the_dead_path_timeout_when_sooner() {
        let h = health(5000, 3000, 1000, 2);
        let with = |dead_path: Option<u64>| {
            let routing = Routing {
                dead_path_timeout: dead_path.map(Duration::from_secs),
                ..routing(1000)
            };
            Budget::of(&h, &routing)
        };
        let (cut, ms) = (with(None).cut_by(), Duration::from_millis);
        assert_eq!(cut, ms(18_000));
        assert_eq!(with(Some(10)).in_flight_cut_by(), ms(10_000));
        assert_eq!(with(Some(4)).in_flight_cut_by(), ms(4000));
        assert_eq!(
            with(Some(60)).in_flight_cut_by(),
            cut,
            "the probe path cuts first"
        );
        assert_eq!(with(None).in_flight_cut_by(), cut, "off: with the others");
        let off = with(None).render(DEFAULT_NODE_GRACE);
        assert!(off.contains("18s  dead_path_timeout 0s (off)"), "{off}");
        assert_eq!(with(Some(4)).worst_case(), with(None).worst_case());
    }

    #[test]
    fn exactly_half_the_grace_period_does_not_warn() {
        let b = Budget::of(&health(5000, 3000, 1000, 2), &routing(1000));
        assert!(!b.over_half_of(b.worst_case() * 2));
        assert!(b.over_half_of(b.worst_case() * 2 - Duration::from_millis(1)));
    }

    #[test]
    fn render_names_every_term_of_the_budget() {
        let b = Budget::of(&health(5000, 3000, 1000, 2), &routing(1000));
        let text = b.render(Duration::from_secs(50));
        for want in [
            "next probe starts",
            "5.5s  interval 5s + 10 % jitter",
            "2 failing probes",
            "6s  up to timeout 3s each, started max(timeout 3s, fast_interval 1s) apart",
            "11.5s  new connections avoid it",
            "17.5s  + up to 2 × timeout 3s: the route's confirm probe",
            "18s  + spread 0.5s",
            "12.5s  + connect_timeout 1s",
            "request in flight      10s  dead_path_timeout 10s: cut by TCP",
            "worst case             18s",
            "node grace period 50s (--node-grace): the worst case is 36 % of it",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        assert!(text.lines().all(|l| l.starts_with('#')), "{text}");
        assert_eq!(s(Duration::from_millis(275)), "0.275s");
    }
}
