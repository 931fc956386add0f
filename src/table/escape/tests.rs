//! The escape decision, table-tested: close only after a pass that started after the fall, and
//! only while the fallen backend's own confirm fails or once a round trip's wait for it ran out;
//! the review of a snapshot: both confirms asked on every fall, the route is the picker's first
//! ready choice, a blink closes nothing, a wait's end is due.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::{Backend, BackendLive, Routing};
use crate::verdict::Health;

/// Instants as milliseconds after one base.
#[derive(Debug, Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn new() -> Clock {
        Clock(Instant::now())
    }

    fn at(self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }

    /// A pass that started at `started` and reached the writer at `arrived`.
    fn pass(self, started: u64, arrived: u64) -> Pass {
        Pass {
            started: self.at(started),
            arrived: self.at(arrived),
        }
    }

    /// A fall at `ms`, learnt of at once.
    fn fall(self, ms: u64) -> Fall {
        Fall {
            at: self.at(ms),
            noted: self.at(ms),
        }
    }
}

#[test]
fn judge_closes_only_after_a_pass_that_started_after_the_fall() {
    use Ruling::{Close, Wait};
    let c = Clock::new();
    let fall = c.fall(10);
    // Arrived long ago, so no wait for the fallen backend's own answer is left either.
    let pass = |started| Some(c.pass(started, started));
    const ASK: Ruling = Ruling::Ask {
        route: true,
        own: false,
    };
    let cases = [
        ("no pass known, not asked: ask", None, false, ASK),
        ("no pass known, asked: wait", None, true, Wait),
        ("a pass before the fall: ask", pass(9), false, ASK),
        ("a pass before the fall, asked: wait", pass(9), true, Wait),
        ("a pass at the fall: not after", pass(10), true, Wait),
        ("a pass after the fall: close", pass(11), false, Close),
        ("a pass after the fall, asked: close", pass(11), true, Close),
    ];
    let now = c.at(10_000);
    for (name, route, asked, want) in cases {
        for own in [Own::Failed, Own::Pending { asked: true }] {
            let got = judge(fall, true, route, asked, own, now);
            assert_eq!(got, want, "{name}, {own:?}");
        }
        let idle = judge(fall, false, route, asked, Own::Passing, now);
        assert_eq!(idle, Close, "idle: {name}");
    }
}

#[test]
fn judge_closes_only_while_the_fallen_backend_still_fails_or_did_not_answer_in_time() {
    use Own::{Failed, Passing};
    use Ruling::{Close, Wait};
    let c = Clock::new();
    let fall = Fall {
        at: c.at(10),
        noted: c.at(20),
    };
    // The route's confirm started at 30 and its pass reached the writer at 50: a 20 ms round
    // trip, so the fallen backend's own answer is awaited until 70.
    let passed = Some(c.pass(30, 50));
    let pending = Own::Pending { asked: false };
    let asked = Own::Pending { asked: true };
    let both = Ruling::Ask {
        route: true,
        own: true,
    };
    let own = Ruling::Ask {
        route: false,
        own: true,
    };
    let first = judge(fall, true, None, false, pending, c.at(20));
    assert_eq!(first, both, "nothing known: ask both");
    // The route asked from here on.
    let cases = [
        ("both asked: wait", None, asked, 40, Wait),
        (
            "it fails, the route not confirmed: wait",
            None,
            Failed,
            40,
            Wait,
        ),
        (
            "the route passed, its own not asked: ask",
            passed,
            pending,
            50,
            own,
        ),
        (
            "the route passed, its own outstanding: wait",
            passed,
            asked,
            50,
            Wait,
        ),
        ("... until one round trip later", passed, asked, 69, Wait),
        ("... then close", passed, asked, 70, Close),
        (
            "... not asked in time either: close",
            passed,
            pending,
            70,
            Close,
        ),
        (
            "the route passed, it still fails: close",
            passed,
            Failed,
            50,
            Close,
        ),
        ("it passes again: it rises, wait", passed, Passing, 50, Wait),
        (
            "it rises: no end to the wait",
            passed,
            Passing,
            10_000,
            Wait,
        ),
    ];
    for (name, route, own, now, want) in cases {
        let got = judge(fall, true, route, true, own, c.at(now));
        assert_eq!(got, want, "{name}");
    }
    assert_eq!(until(fall, passed, asked), Some(c.at(70)), "due then");
    assert_eq!(until(fall, None, asked), None, "the route not confirmed");
    assert_eq!(until(fall, passed, Passing), None, "it rises");
    assert_eq!(until(fall, passed, Failed), None, "closed at once");
}

#[test]
fn the_wait_for_its_own_answer_counts_from_when_it_was_asked_at_the_latest() {
    let c = Clock::new();
    let at = |ms| c.at(ms);
    let pass = Pass {
        started: at(30),
        arrived: at(50),
    };
    let cases = [
        ("asked before the route's pass arrived", at(20), at(70)),
        ("asked as it arrived", at(50), at(70)),
        (
            "the fall learnt of after the pass arrived",
            at(100),
            at(120),
        ),
    ];
    for (name, noted, want) in cases {
        let fall = Fall { at: at(10), noted };
        assert_eq!(deadline(fall, pass), want, "{name}");
    }
}

/// Backends by state (`R` ready, `U` unready), all in this node's zone, each relaying one
/// connection.
fn snap(states: &str) -> Snapshot {
    Snapshot {
        generation: 1,
        routing: Routing::default(),
        backends: states
            .chars()
            .enumerate()
            .map(|(i, c)| {
                let live = Arc::new(BackendLive::default());
                live.active.store(1, Ordering::Relaxed);
                Backend {
                    spec: crate::testing::fixtures::spec(&format!("10.0.0.{i}:6443"), None),
                    health: Health {
                        state: if c == 'R' {
                            State::Ready
                        } else {
                            State::Unready
                        },
                        ..Health::UNKNOWN
                    },
                    live,
                    evict_epoch: 0,
                    degraded: None,
                }
            })
            .collect(),
    }
}

fn id(i: usize) -> BackendId {
    BackendId::new(&format!("10.0.0.{i}:6443"))
}

/// Backends by `states` ([`snap`]), the first fallen at `ms`: both confirms asked (its own and
/// its route's, the second backend).
fn fallen(states: &str, ms: u64) -> (Clock, Escapes, Snapshot) {
    let c = Clock::new();
    let mut e = Escapes::default();
    let s = snap(states);
    e.fell(&id(0), c.fall(ms));
    assert_eq!(
        e.review(&s, c.at(ms)).ask,
        vec![0, 1],
        "both asked at the fall"
    );
    (c, e, s)
}

#[test]
fn nothing_ready_or_a_recovered_backend_waits_no_more() {
    let c = Clock::new();
    let mut e = Escapes::default();
    e.fell(&id(0), c.fall(0));
    assert_eq!(
        e.review(&snap("UU"), c.at(0)),
        Review::default(),
        "a blink: nowhere to go"
    );
    assert!(!e.is_waiting());
    e.fell(&id(0), c.fall(0));
    assert_eq!(
        e.review(&snap("RR"), c.at(0)),
        Review::default(),
        "ready again"
    );
    assert!(!e.is_waiting());
}

#[test]
fn every_fall_asks_the_route_and_the_fallen_backend_itself() {
    let c = Clock::new();
    let at = |ms| c.at(ms);
    let mut e = Escapes::default();
    let s = snap("UR");
    // The other backend passes: no sign of a cluster-wide event, its own confirm is asked anyway.
    e.passed(&id(1), c.pass(0, 1));
    e.fell(&id(0), c.fall(10));
    assert_eq!(
        e.review(&s, at(10)),
        Review {
            close: vec![],
            ask: vec![0, 1]
        },
        "ask the route and the fallen backend itself"
    );
    assert_eq!(e.review(&s, at(11)), Review::default(), "asked once");
    assert_eq!(e.next_due(), None, "nothing to time yet");
    e.passed(&id(1), c.pass(5, 12));
    assert_eq!(
        e.review(&s, at(12)),
        Review::default(),
        "a pass that started before the fall"
    );
    e.failed(&id(0), at(11));
    e.passed(&id(1), c.pass(11, 15));
    assert_eq!(
        e.review(&s, at(15)),
        Review {
            close: vec![0],
            ask: vec![]
        },
        "the route passed and it still fails"
    );
    assert!(!e.is_waiting());
}

#[test]
fn an_outstanding_own_answer_is_awaited_one_round_trip_of_the_route() {
    let (c, mut e, s) = fallen("UR", 10);
    let at = |ms| c.at(ms);
    e.passed(&id(1), c.pass(10 + 1, 31)); // a 20 ms round trip
    assert_eq!(
        e.review(&s, at(31)),
        Review::default(),
        "its own outstanding"
    );
    assert_eq!(e.next_due(), Some(at(51)), "one round trip later");
    assert_eq!(e.review(&s, at(50)), Review::default(), "not yet");
    assert_eq!(
        e.review(&s, at(51)),
        Review {
            close: vec![0],
            ask: vec![]
        },
        "no answer in time: one bad apiserver, silent or slow"
    );
    assert!(!e.is_waiting());
    assert_eq!(e.next_due(), None);
}

#[test]
fn a_fallen_backend_that_passes_its_own_confirm_keeps_its_connections_while_it_rises() {
    let (c, mut e, s) = fallen("UR", 10);
    let at = |ms| c.at(ms);
    e.passed(&id(0), c.pass(11, 13)); // the blink ended as it fell
    e.passed(&id(1), c.pass(11, 14));
    assert_eq!(e.review(&s, at(14)), Review::default(), "it rises");
    assert_eq!(e.next_due(), None, "no end to the wait while it rises");
    assert_eq!(e.review(&s, at(10_000)), Review::default(), "still rising");
    assert!(e.is_waiting(), "watched while it rises");
    e.failed(&id(0), at(10_001));
    assert_eq!(
        e.review(&s, at(10_002)),
        Review {
            close: vec![0],
            ask: vec![]
        },
        "its rise failed: the route is confirmed, its connections move"
    );
}

#[test]
fn a_failure_of_its_own_older_than_the_routes_pass_is_not_news() {
    let (c, mut e, s) = fallen("URU", 10);
    let at = |ms| c.at(ms);
    e.failed(&id(0), at(20)); // its own confirm failed, in the blink
    e.passed(&id(1), c.pass(4_000, 4_100)); // the route passed seconds later: the blink may be over
    assert_eq!(
        e.review(&s, at(4_100)),
        Review::default(),
        "its next result is awaited"
    );
    assert_eq!(
        e.next_due(),
        Some(at(4_200)),
        "for one round trip of the route"
    );
    e.passed(&id(0), c.pass(4_150, 4_160));
    assert_eq!(
        e.review(&s, at(4_160)),
        Review::default(),
        "it passes: it rises"
    );
    assert_eq!(e.next_due(), None);
    e.failed(&id(0), at(6_000));
    assert_eq!(
        e.review(&s, at(6_001)).close,
        vec![0],
        "its rise failed: its connections move"
    );
    // Another fall, the same stale failure: its next result, a failure, closes before the wait
    // is over.
    e.fell(&id(0), c.fall(7_000));
    e.review(&s, at(7_000));
    e.failed(&id(0), at(7_010));
    e.passed(&id(1), c.pass(9_000, 9_100));
    assert_eq!(e.review(&s, at(9_100)), Review::default(), "stale");
    e.failed(&id(0), at(9_050));
    assert_eq!(
        e.review(&s, at(9_150)).close,
        vec![0],
        "its next result fails"
    );
}

#[test]
fn once_the_route_failed_since_the_fall_only_a_newer_failure_of_its_own_moves_it() {
    // The herd's blink at fleet scale: the fallen backend and its route both fail their confirms
    // in the blink; the route passes its next check one fast interval later, the blink over.
    let (c, mut e, s) = fallen("UR", 10);
    let at = |ms| c.at(ms);
    e.failed(&id(0), at(12)); // its own confirm, in the blink
    e.failed(&id(1), at(12)); // the route's confirm, in the blink: this node saw the event
    assert_eq!(e.review(&s, at(15)), Review::default(), "no route yet");
    e.passed(&id(1), c.pass(1_012, 1_015));
    assert_eq!(
        e.review(&s, at(1_015)),
        Review::default(),
        "its failure is a round older than the route's pass: not news"
    );
    assert_eq!(
        e.next_due(),
        None,
        "no round-trip deadline: its next result decides"
    );
    assert_eq!(e.review(&s, at(4_000)), Review::default(), "still awaited");
    e.passed(&id(0), c.pass(5_010, 5_012));
    assert_eq!(
        e.review(&s, at(5_012)),
        Review::default(),
        "it passes: it rises"
    );
    assert!(e.is_waiting(), "watched while it rises");

    // Down for good: its next result fails after the route's pass, and that moves it.
    let mut e = Escapes::default();
    e.fell(&id(0), c.fall(10));
    e.review(&s, at(10));
    e.failed(&id(0), at(12));
    e.failed(&id(1), at(12));
    e.passed(&id(1), c.pass(1_012, 1_015));
    assert_eq!(e.review(&s, at(1_015)), Review::default());
    e.failed(&id(0), at(5_010));
    assert_eq!(e.review(&s, at(5_012)).close, vec![0], "it still fails");

    // Confirms asked together, the route's first failing then passing within the same moment:
    // a failure of its own that close to the pass says it fails while the route passes.
    let mut e = Escapes::default();
    e.fell(&id(0), c.fall(10));
    e.review(&s, at(10));
    e.failed(&id(1), at(12));
    e.failed(&id(0), at(1_000));
    e.passed(&id(1), c.pass(1_100, 1_110));
    assert_eq!(e.review(&s, at(1_110)).close, vec![0], "the same moment");
}

#[test]
fn a_route_that_failed_within_an_interval_before_the_fall_saw_the_same_event() {
    // The route fell in the blink first and rose again; the other backend fell a round after it:
    // its failure from the blink moves nothing once the risen route passes.
    let c = Clock::new();
    let at = |ms| c.at(ms);
    let s = snap("UR");
    let mut e = Escapes::default();
    e.failed(&id(1), at(6_000)); // the route, in the blink, before this fall (interval 5 s)
    e.fell(&id(0), c.fall(10_000));
    e.review(&s, at(10_000));
    e.failed(&id(0), at(10_010));
    e.passed(&id(1), c.pass(14_900, 14_910));
    assert_eq!(e.review(&s, at(14_910)), Review::default(), "awaited");
    assert_eq!(e.next_due(), None, "its next result decides");
    // A route failure more than an interval before the fall is another story: the stale failure
    // is awaited one round trip of the route, then it moves.
    let mut e = Escapes::default();
    e.failed(&id(1), at(4_000));
    e.fell(&id(0), c.fall(10_000));
    e.review(&s, at(10_000));
    e.failed(&id(0), at(10_010));
    e.passed(&id(1), c.pass(14_900, 14_910));
    assert_eq!(e.review(&s, at(14_910)), Review::default());
    assert_eq!(e.next_due(), Some(at(14_920)));
    assert_eq!(e.review(&s, at(14_920)).close, vec![0]);
}

#[test]
fn a_result_of_its_own_that_started_before_the_fall_is_no_news_of_it() {
    let c = Clock::new();
    let at = |ms| c.at(ms);
    let mut e = Escapes::default();
    let s = snap("UR");
    // Failed client dials decide the fall at 1 s while a probe that started at 0.5 s is out.
    e.fell(&id(0), c.fall(1_000));
    assert_eq!(e.review(&s, at(1_000)).ask, vec![0, 1]);
    e.passed(&id(0), c.pass(500, 1_020)); // that probe's pass: from before the fall
    e.passed(&id(1), c.pass(1_001, 1_021)); // the route is confirmed
    assert_eq!(
        e.review(&s, at(1_021)),
        Review::default(),
        "its own confirm is outstanding"
    );
    assert_eq!(
        e.next_due(),
        Some(at(1_041)),
        "awaited one round trip, not watched as rising"
    );
    assert_eq!(e.review(&s, at(1_041)).close, vec![0], "no news: they move");
}
