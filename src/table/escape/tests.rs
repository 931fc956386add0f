//! The escape decision, table-tested: close only after a pass that started after the fall; the
//! review of a snapshot: the route is the picker's first ready choice, a blink closes nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::{Backend, BackendLive, BackendSpec, Routing};
use crate::verdict::Health;

#[test]
fn judge_closes_only_after_a_pass_that_started_after_the_fall() {
    let fell = Instant::now();
    let before = fell - Duration::from_millis(1);
    let after = fell + Duration::from_millis(1);
    const ASK: Verdict = Verdict::Ask {
        route: true,
        own: false,
    };
    let cases = [
        ("no pass known, not asked: ask", None, false, ASK),
        ("no pass known, asked: wait", None, true, Verdict::Wait),
        ("a pass before the fall: ask", Some(before), false, ASK),
        (
            "a pass before the fall, asked: wait",
            Some(before),
            true,
            Verdict::Wait,
        ),
        (
            "a pass at the fall: not after",
            Some(fell),
            true,
            Verdict::Wait,
        ),
        (
            "a pass after the fall: close",
            Some(after),
            false,
            Verdict::Close,
        ),
        (
            "a pass after the fall, asked: close",
            Some(after),
            true,
            Verdict::Close,
        ),
    ];
    for (name, passed, asked, want) in cases {
        assert_eq!(
            judge(fell, true, passed, asked, Own::Unsuspected),
            want,
            "{name}"
        );
        assert_eq!(
            judge(fell, false, passed, asked, Own::Unsuspected),
            Verdict::Close,
            "idle: {name}"
        );
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
                    spec: Arc::new(BackendSpec {
                        id: BackendId::new(&format!("10.0.0.{i}:6443")),
                        host: format!("10.0.0.{i}"),
                        port: 6443,
                        zone: None,
                        server_name: rustls_pki_types::ServerName::try_from("x").expect("name"),
                        source: crate::backend::BackendSource::Config,
                    }),
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
                }
            })
            .collect(),
    }
}

fn id(i: usize) -> BackendId {
    BackendId::new(&format!("10.0.0.{i}:6443"))
}

#[test]
fn a_fallen_backend_asks_its_route_once_then_closes_on_its_pass() {
    let t0 = Instant::now();
    let mut e = Escapes::default();
    e.passed(&id(1), t0);
    e.fell(&id(0), t0 + Duration::from_millis(10));
    let s = snap("UR");
    assert_eq!(
        e.review(&s),
        Review {
            close: vec![],
            ask: vec![1]
        },
        "ask the route"
    );
    assert_eq!(e.review(&s), Review::default(), "asked once");
    e.passed(&id(1), t0 + Duration::from_millis(5));
    assert_eq!(
        e.review(&s),
        Review::default(),
        "a pass that started before the fall"
    );
    e.passed(&id(1), t0 + Duration::from_millis(20));
    assert_eq!(
        e.review(&s),
        Review {
            close: vec![0],
            ask: vec![]
        }
    );
    assert!(!e.is_waiting());
}

#[test]
fn nothing_ready_or_a_recovered_backend_waits_no_more() {
    let t0 = Instant::now();
    let mut e = Escapes::default();
    e.fell(&id(0), t0);
    assert_eq!(
        e.review(&snap("UU")),
        Review::default(),
        "a blink: nowhere to go"
    );
    assert!(!e.is_waiting());
    e.fell(&id(0), t0);
    assert_eq!(e.review(&snap("RR")), Review::default(), "ready again");
    assert!(!e.is_waiting());
}

#[test]
fn judge_in_a_suspected_cluster_wide_event_closes_only_while_the_fallen_backend_still_fails() {
    let fell = Instant::now();
    let after = Some(fell + Duration::from_millis(1));
    let pending = Own::Pending { asked: false };
    let asked = Own::Pending { asked: true };
    let cases = [
        (
            "nothing known: ask both",
            None,
            false,
            pending,
            Verdict::Ask {
                route: true,
                own: true,
            },
        ),
        (
            "the route passed, its own not asked: ask it",
            after,
            true,
            pending,
            Verdict::Ask {
                route: false,
                own: true,
            },
        ),
        (
            "the route passed, its own asked: wait",
            after,
            true,
            asked,
            Verdict::Wait,
        ),
        (
            "the route passed, it still fails: close",
            after,
            true,
            Own::Failed,
            Verdict::Close,
        ),
        (
            "it passes again: it rises, wait",
            after,
            true,
            Own::Passing,
            Verdict::Wait,
        ),
        (
            "it still fails, the route not confirmed: wait",
            None,
            true,
            Own::Failed,
            Verdict::Wait,
        ),
    ];
    for (name, passed, route_asked, own, want) in cases {
        assert_eq!(judge(fell, true, passed, route_asked, own), want, "{name}");
    }
}

#[test]
fn a_fall_while_another_backend_fails_waits_for_its_own_confirm() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut e = Escapes::default();
    e.passed(&id(1), at(0));
    e.failed(&id(2), at(5)); // a third backend failed too: a suspected cluster-wide event
    e.fell(&id(0), at(10));
    let s = snap("URU");
    assert_eq!(
        e.review(&s),
        Review {
            close: vec![],
            ask: vec![0, 1]
        },
        "ask the route and the fallen backend itself"
    );
    e.passed(&id(1), at(20));
    assert_eq!(
        e.review(&s),
        Review::default(),
        "its own confirm outstanding"
    );
    e.passed(&id(0), at(20));
    assert_eq!(e.review(&s), Review::default(), "it passes again: it rises");
    assert!(e.is_waiting(), "watched while it rises");
    e.failed(&id(0), at(30));
    assert_eq!(
        e.review(&s),
        Review {
            close: vec![0],
            ask: vec![]
        },
        "its rise failed: the route is confirmed, its connections move"
    );
}

#[test]
fn a_fall_while_the_others_pass_is_judged_by_the_route_alone() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut e = Escapes::default();
    e.failed(&id(0), at(5)); // its own first failure: no suspicion
    e.passed(&id(1), at(20));
    e.fell(&id(0), at(10));
    assert_eq!(
        e.review(&snap("UR")),
        Review {
            close: vec![0],
            ask: vec![]
        }
    );
}

#[test]
fn a_failure_of_its_own_older_than_the_routes_pass_is_not_news() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut e = Escapes::default();
    e.failed(&id(2), at(5)); // a suspected cluster-wide event
    e.fell(&id(0), at(10));
    let s = snap("URU");
    assert_eq!(e.review(&s).ask, vec![0, 1]);
    e.failed(&id(0), at(20)); // its own confirm failed, in the blink
    e.passed(&id(1), at(4_000)); // the route passed seconds later: the blink may be over
    assert_eq!(
        e.review(&s),
        Review::default(),
        "its next result is awaited"
    );
    e.passed(&id(0), at(5_000));
    assert_eq!(e.review(&s), Review::default(), "it passes: it rises");
    e.failed(&id(0), at(6_000));
    assert_eq!(
        e.review(&s).close,
        vec![0],
        "its rise failed: its connections move"
    );
}
