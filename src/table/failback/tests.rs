//! The failback decisions, table-tested: when a failback is due, and what is called off.

use super::*;
use crate::backend::Routing;
use crate::testing::fixtures;

/// Backends by zone and state; a backend's id is its zone and its place among the zone's
/// (`dc-b-0:6443`), so it is the same backend in every snapshot.
fn snap(states: &[(&str, State)]) -> Snapshot {
    Snapshot {
        generation: 1,
        routing: Routing::in_zone("dc-a"),
        backends: states
            .iter()
            .enumerate()
            .map(|(i, &(zone, state))| {
                let id = id(zone, states[..i].iter().filter(|(z, _)| *z == zone).count());
                fixtures::backend(fixtures::spec(id.as_str(), Some(zone)), state)
            })
            .collect(),
    }
}

fn id(zone: &str, n: usize) -> BackendId {
    BackendId::new(&format!("{zone}-{n}:6443"))
}

/// `snap` with this node in `zone`.
fn in_zone(zone: &str, mut s: Snapshot) -> Snapshot {
    s.routing = Routing::in_zone(zone);
    s
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
fn a_degraded_same_zone_backend_starts_its_clock_once_healthy() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut f = Failback::default();
    let mut worn = snap(&[("dc-a", State::Ready), ("dc-b", State::Ready)]);
    worn.backends[0].degraded = Some("HTTP 429 Too Many Requests".into());
    f.observe(&worn, t0);
    assert_eq!(f.next_due(AFTER), None, "overloaded: no failback onto it");
    f.observe(
        &snap(&[("dc-a", State::Ready), ("dc-b", State::Ready)]),
        s(30),
    );
    assert_eq!(f.next_due(AFTER), Some(s(90)));
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
        assert!(
            f.take_call_off(at_failback, t0).is_empty(),
            "{what}: nothing under way yet"
        );
        assert!(f.take_due(AFTER, s(60_000)), "{what}: due");
        f.closing(vec![id("dc-b", 0)]);
        let now = s(60_000 + after);
        f.observe(then, now);
        let off = f.take_call_off(then, now);
        let want = if want { vec![id("dc-b", 0)] } else { vec![] };
        assert_eq!(off, want, "{what}");
        assert!(f.take_call_off(then, now).is_empty(), "{what}: once");
    }
}

#[test]
fn a_renumbered_node_calls_off_the_failback_of_backends_now_home_only() {
    let t0 = Instant::now();
    let s = |ms| t0 + Duration::from_millis(ms);
    let states = [
        ("dc-a", State::Ready),
        ("dc-b", State::Ready),
        ("dc-c", State::Ready),
    ];
    let mut f = Failback::default();
    f.observe(&snap(&states), t0);
    assert!(f.take_due(AFTER, s(60_000)));
    f.closing(vec![id("dc-b", 0), id("dc-c", 0)]);
    let moved = in_zone("dc-b", snap(&states));
    f.observe(&moved, s(61_000));
    assert_eq!(
        f.take_call_off(&moved, s(61_000)),
        vec![id("dc-b", 0)],
        "dc-b is home now; dc-c is still away"
    );
    assert!(f.take_call_off(&moved, s(62_000)).is_empty(), "once");
    let gone = in_zone("dc-c", snap(&states));
    f.observe(&gone, s(70_000));
    assert!(
        f.take_call_off(&gone, s(70_000)).is_empty(),
        "its spread is over: nothing left to call off"
    );
}

#[test]
fn a_failback_long_over_is_not_called_off_with_the_next() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let up = snap(&[
        ("dc-a", State::Ready),
        ("dc-b", State::Ready),
        ("dc-c", State::Ready),
    ]);
    let down = snap(&[
        ("dc-a", State::Unready),
        ("dc-b", State::Ready),
        ("dc-c", State::Ready),
    ]);
    let mut f = Failback::default();
    f.observe(&up, t0);
    assert!(f.take_due(AFTER, s(60)));
    f.closing(vec![id("dc-b", 0)]);
    f.observe(&down, s(100));
    assert!(f.take_call_off(&down, s(100)).is_empty(), "long over");
    f.observe(&up, s(200));
    assert!(f.take_due(AFTER, s(260)));
    f.closing(vec![id("dc-c", 0)]);
    f.observe(&down, s(261));
    assert_eq!(
        f.take_call_off(&down, s(261)),
        vec![id("dc-c", 0)],
        "only the backend this failback closes"
    );
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
    f.closing(vec![id("dc-b", 0)]);
    f.observe(&down, s(61));
    assert_eq!(f.take_call_off(&down, s(61)), vec![id("dc-b", 0)]);
    f.observe(&up, s(62));
    assert!(f.take_call_off(&up, s(62)).is_empty());
    assert_eq!(f.next_due(AFTER), Some(s(122)), "a new spell, a new clock");
    assert!(f.take_due(AFTER, s(122)));
    f.closing(vec![id("dc-b", 0)]);
    f.observe(&down, s(123));
    assert_eq!(
        f.take_call_off(&down, s(123)),
        vec![id("dc-b", 0)],
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
