//! A chaos schedule: what the nemesis does and when, drawn from a seed. Pure: seed and length in,
//! events out (no clock, no processes), so the same seed always gives the same schedule and a
//! violation can be replayed.
//!
//! Owns the seeded generator, the kinds of events the lab can cause and the draw with its bounds.
//! Does not apply them (`nemesis.rs`) or judge what follows (`invariants.rs`).

use crate::partition::netlab::Host::{self, DcA, DcB, Node, Witness};

/// SplitMix64: small, seedable, good enough to spread faults over a schedule.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        lo + (hi - lo) * unit
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next_u64() % items.len() as u64) as usize]
    }
}

/// A fault with a length: in force from its start until healed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// The site's etcd member cut from its peers (its peer port blocked): its apiserver answers,
    /// unready.
    NoQuorum(Host),
    /// The site's etcd member stopped (SIGSTOP until the heal's SIGCONT).
    EtcdStopped(Host),
    /// Whichever member leads when the fault starts, stopped (resolved by the nemesis).
    LeaderStopped,
    /// Both ways between two hosts.
    Cut(Host, Host),
    /// Packets from the first host to the second dropped.
    OneWay(Host, Host),
    /// A site cut from every other host.
    Isolated(Host),
    /// New connections to the site's apiserver hang (SYNs dropped); established ones live on.
    SynBlackHole(Host),
    /// Random loss, percent each way, between two hosts.
    Loss(Host, Host, u8),
    /// The site's apiserver restarted gracefully, as a static pod is on an upgrade: SIGTERM (its
    /// `/readyz` fails with `shutdown` for [`SHUTDOWN_DELAY`], then its listener closes and what
    /// is still open is closed after [`SHUTDOWN_GRACE`]), started again at the heal.
    GracefulRestart(Host),
    /// The site's apiserver left out of the cluster's Endpoints object (discovery's answer) until
    /// the heal; the apiserver itself keeps answering, as a node being drained does. Drawn only
    /// in a schedule with discovery on.
    Unlisted(Host),
}

/// An event of the balancer's own, at an instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Poke {
    /// SIGHUP with the config unchanged.
    Sighup,
    /// The config file rewritten with one more comment line.
    CommentEdit,
    /// The config file rewritten with `health.interval` set to this many seconds.
    IntervalEdit(u8),
    /// readyprism stopped (SIGTERM) and started again.
    Restart,
    /// kubelet's client certificate rotated: a new certificate and key from the same CA in a new
    /// file, `kubelet-client-current.pem` swapped to it (a symlink replaced by rename, as kubelet
    /// does).
    CertRotation,
    /// A herd: [`HERD`] clients dial the balancer at once, one request each.
    Herd,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Fault(Fault),
    Poke(Poke),
}

/// One event: seconds from the schedule's start, and how long a fault lasts (0 for a poke).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Event {
    pub at: f64,
    pub len: f64,
    pub kind: Kind,
}

/// A seed's schedule: how the balancer learns the apiservers, and the events.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Discovery on: the config names two seeds (dc-a, the witness), dc-b is known only from the
    /// Endpoints object, zones by network. Otherwise the three sites are listed with their zones.
    pub discovery: bool,
    pub events: Vec<Event>,
}

impl Schedule {
    /// A fixed list of events with the three sites listed.
    pub fn listed(events: Vec<Event>) -> Schedule {
        Schedule {
            discovery: false,
            events,
        }
    }
}

/// Shortest fault.
pub const MIN_LEN: f64 = 1.0;
/// Longest fault in a long schedule, and in a short (CI) one.
pub const MAX_LEN: f64 = 40.0;
pub const MAX_LEN_SHORT: f64 = 20.0;
/// A schedule this long or shorter is a short one.
pub const SHORT: f64 = 150.0;
/// About one fault per this many seconds, one balancer event per that many.
const FAULT_EVERY: f64 = 9.0;
const POKE_EVERY: f64 = 12.0;
/// No restart in a schedule's first seconds (the baseline of the process's descriptors).
const RESTART_AFTER: f64 = 20.0;
/// A graceful restart's `--shutdown-delay` and `--shutdown-grace` (every chaos apiserver runs
/// with them); the fault lasts at least both and a second, the restart itself.
pub const SHUTDOWN_DELAY: f64 = 8.0;
pub const SHUTDOWN_GRACE: f64 = 4.0;
const RESTART_MIN: f64 = SHUTDOWN_DELAY + SHUTDOWN_GRACE + 1.0;
/// Clients in a herd (scenario 8's).
pub const HERD: usize = crate::partition::dying_path::CLIENTS;

const SITES: [Host; 3] = [DcA, DcB, Witness];

/// The longest fault a schedule of `secs` draws.
pub fn max_len(secs: f64) -> f64 {
    let cap = if secs <= SHORT {
        MAX_LEN_SHORT
    } else {
        MAX_LEN
    };
    cap.min(secs / 2.0).max(MIN_LEN)
}

fn other_pair(rng: &mut Rng) -> (Host, Host) {
    let pairs = [
        (Node, DcA),
        (Node, DcB),
        (Node, Witness),
        (DcA, DcB),
        (DcA, Witness),
        (DcB, Witness),
    ];
    let (a, b) = rng.pick(&pairs);
    if rng.next_u64() % 2 == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

fn draw_fault(rng: &mut Rng, discovery: bool) -> Fault {
    match rng.next_u64() % 10 {
        0 => Fault::NoQuorum(rng.pick(&SITES)),
        1 => Fault::EtcdStopped(rng.pick(&SITES)),
        2 => Fault::LeaderStopped,
        3 => {
            let (a, b) = other_pair(rng);
            Fault::Cut(a, b)
        }
        4 => {
            let (a, b) = other_pair(rng);
            Fault::OneWay(a, b)
        }
        5 => Fault::Isolated(rng.pick(&SITES)),
        6 => Fault::SynBlackHole(rng.pick(&SITES)),
        7 => {
            let (a, b) = other_pair(rng);
            Fault::Loss(a, b, rng.pick(&[5u8, 10, 20]))
        }
        8 if discovery => Fault::Unlisted(rng.pick(&SITES)),
        _ => Fault::GracefulRestart(rng.pick(&SITES)),
    }
}

fn draw_poke(rng: &mut Rng, at: f64, restarted: &mut bool) -> Poke {
    match rng.next_u64() % 7 {
        0 => Poke::Sighup,
        1 => Poke::CommentEdit,
        2 => Poke::IntervalEdit(rng.pick(&[4u8, 5])),
        3 if !*restarted && at >= RESTART_AFTER => {
            *restarted = true;
            Poke::Restart
        }
        4 => Poke::CertRotation,
        5 => Poke::Herd,
        _ => Poke::Sighup,
    }
}

/// The schedule of `seed`, `secs` long, by start time: discovery on for about half the seeds;
/// faults of `MIN_LEN` to [`max_len`] seconds (a graceful restart at least its shutdown and a
/// second), each healed by the end, overlapping as they fall; balancer events between them, at
/// most one restart.
pub fn draw(seed: u64, secs: f64) -> Schedule {
    let mut rng = Rng::new(seed);
    let discovery = rng.next_u64() % 2 == 1;
    let longest = max_len(secs);
    let mut events = Vec::new();
    let faults = ((secs / FAULT_EVERY).round() as usize).max(1);
    for _ in 0..faults {
        let fault = draw_fault(&mut rng, discovery);
        let shortest = match fault {
            Fault::GracefulRestart(_) => RESTART_MIN.min(secs),
            _ => MIN_LEN,
        };
        let len = rng.range(shortest, longest.max(shortest)).max(shortest);
        let at = rng.range(0.0, (secs - len).max(0.0));
        events.push(Event {
            at,
            len,
            kind: Kind::Fault(fault),
        });
    }
    let pokes = ((secs / POKE_EVERY).round() as usize).max(1);
    let mut restarted = false;
    let mut times: Vec<f64> = (0..pokes).map(|_| rng.range(0.0, secs)).collect();
    times.sort_by(f64::total_cmp);
    for at in times {
        let poke = draw_poke(&mut rng, at, &mut restarted);
        events.push(Event {
            at,
            len: 0.0,
            kind: Kind::Poke(poke),
        });
    }
    events.sort_by(|a, b| a.at.total_cmp(&b.at));
    Schedule { discovery, events }
}

/// The kind of an event without its hosts or numbers (the by-hand run's tally).
pub fn kind_name(kind: &Kind) -> &'static str {
    match kind {
        Kind::Fault(f) => match f {
            Fault::NoQuorum(_) => "no quorum",
            Fault::EtcdStopped(_) => "member stopped",
            Fault::LeaderStopped => "leader stopped",
            Fault::Cut(..) => "cut",
            Fault::OneWay(..) => "one-way drop",
            Fault::Isolated(_) => "site isolated",
            Fault::SynBlackHole(_) => "SYN black hole",
            Fault::Loss(..) => "loss",
            Fault::GracefulRestart(_) => "apiserver graceful restart",
            Fault::Unlisted(_) => "discovery answer without a site",
        },
        Kind::Poke(p) => match p {
            Poke::Sighup => "SIGHUP",
            Poke::CommentEdit => "config edit (comment)",
            Poke::IntervalEdit(_) => "config edit (interval)",
            Poke::Restart => "readyprism restart",
            Poke::CertRotation => "certificate rotation",
            Poke::Herd => "herd",
        },
    }
}

/// An event in words, e.g. `cut node <-> dc-a`.
pub fn describe(kind: &Kind) -> String {
    match kind {
        Kind::Fault(f) => match f {
            Fault::NoQuorum(s) => format!("no quorum at {} (peer port blocked)", s.name()),
            Fault::EtcdStopped(s) => format!("etcd of {} stopped", s.name()),
            Fault::LeaderStopped => "etcd leader stopped".to_string(),
            Fault::Cut(a, b) => format!("cut {} <-> {}", a.name(), b.name()),
            Fault::OneWay(a, b) => format!("drop {} -> {}", a.name(), b.name()),
            Fault::Isolated(s) => format!("{} isolated", s.name()),
            Fault::SynBlackHole(s) => format!("SYN black hole at {}", s.name()),
            Fault::Loss(a, b, p) => format!("{p}% loss {} <-> {}", a.name(), b.name()),
            Fault::GracefulRestart(s) => format!("graceful restart of {}'s apiserver", s.name()),
            Fault::Unlisted(s) => format!("{} left out of the Endpoints object", s.name()),
        },
        Kind::Poke(p) => match p {
            Poke::Sighup => "SIGHUP (config unchanged)".to_string(),
            Poke::CommentEdit => "config edit: a comment".to_string(),
            Poke::IntervalEdit(s) => format!("config edit: health.interval {s}s"),
            Poke::Restart => "readyprism restarted".to_string(),
            Poke::CertRotation => "kubelet client certificate rotated".to_string(),
            Poke::Herd => format!("herd: {HERD} clients dial at once"),
        },
    }
}

/// The schedule as text, one event a line.
pub fn print(seed: u64, schedule: &Schedule) -> String {
    let how = if schedule.discovery {
        "discovery on (seeds dc-a, witness)"
    } else {
        "three sites listed"
    };
    let mut out = format!(
        "chaos seed {seed}: {} events, {how}\n",
        schedule.events.len()
    );
    for e in &schedule.events {
        let len = if e.len > 0.0 {
            format!(" for {:.1} s", e.len)
        } else {
            String::new()
        };
        out.push_str(&format!("  {:6.1} s  {}{len}\n", e.at, describe(&e.kind)));
    }
    out
}

mod tests {
    use super::*;

    #[test]
    fn chaos_schedule_of_a_seed_is_always_the_same() {
        assert_eq!(draw(7, 120.0), draw(7, 120.0));
        assert_ne!(draw(7, 120.0), draw(8, 120.0));
    }

    #[test]
    fn chaos_schedule_keeps_its_bounds() {
        for seed in 0..200 {
            for secs in [30.0, 120.0, 600.0] {
                let Schedule { discovery, events } = draw(seed, secs);
                let longest = max_len(secs);
                let mut restarts = 0;
                for e in &events {
                    assert!(e.at >= 0.0 && e.at + e.len <= secs, "{seed}: {e:?}");
                    match e.kind {
                        Kind::Fault(Fault::GracefulRestart(_)) => {
                            assert!((RESTART_MIN..=longest).contains(&e.len), "{seed}: {e:?}")
                        }
                        Kind::Fault(f) => {
                            assert!((MIN_LEN..=longest).contains(&e.len), "{seed}: {e:?}");
                            if let Fault::Unlisted(_) = f {
                                assert!(discovery, "{seed}: unlisted without discovery");
                            }
                        }
                        Kind::Poke(p) => {
                            assert_eq!(e.len, 0.0);
                            if p == Poke::Restart {
                                restarts += 1;
                                assert!(e.at >= RESTART_AFTER);
                            }
                        }
                    }
                }
                assert!(restarts <= 1, "{seed}: {restarts} restarts");
                assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
                assert!(events.iter().any(|e| matches!(e.kind, Kind::Fault(_))));
            }
        }
        assert_eq!(max_len(120.0), MAX_LEN_SHORT);
        assert_eq!(max_len(600.0), MAX_LEN);
    }

    /// The kinds of event drawn for `seeds` at `secs`, and whether both ways of learning the
    /// apiservers were.
    fn drawn(seeds: &[u64], secs: f64) -> (std::collections::BTreeSet<&'static str>, bool) {
        let schedules: Vec<Schedule> = seeds.iter().map(|&s| draw(s, secs)).collect();
        let kinds = schedules
            .iter()
            .flat_map(|s| s.events.iter().map(|e| kind_name(&e.kind)))
            .collect();
        let both = schedules.iter().any(|s| s.discovery) && schedules.iter().any(|s| !s.discovery);
        (kinds, both)
    }

    /// Every kind of event (16) is drawn, with discovery on and off, by the CI's three seeds
    /// and by the by-hand run's seeds 1 to 100.
    #[test]
    fn chaos_schedules_draw_every_kind_of_event() {
        use crate::partition::chaos::{CI_SECS, CI_SEEDS};
        let (kinds, both) = drawn(&CI_SEEDS, CI_SECS);
        assert!(
            both && kinds.len() == 16,
            "CI seeds: {kinds:?}, both {both}"
        );
        let seeds: Vec<u64> = (1..=100).collect();
        let (kinds, both) = drawn(&seeds, 180.0);
        assert!(
            both && kinds.len() == 16,
            "seeds 1-100: {kinds:?}, both {both}"
        );
    }
}
