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
    let cases = [
        ("no pass known, not asked: ask", None, false, Verdict::Ask),
        ("no pass known, asked: wait", None, true, Verdict::Wait),
        (
            "a pass before the fall: ask",
            Some(before),
            false,
            Verdict::Ask,
        ),
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
        assert_eq!(judge(fell, true, passed, asked), want, "{name}");
        assert_eq!(
            judge(fell, false, passed, asked),
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
