//! The recovery decision, table-tested: who moves one probe interval after a spell with none
//! ready, and who stays while rising.

use super::*;
use crate::testing::fixtures;
use crate::verdict::Pending;

/// Backends by course: `R` ready, `U` unready and not rising, `r` unready and rising, `d`
/// unready draining (only `shutdown` fails).
fn snap(courses: &str) -> Snapshot {
    let letters: String = courses
        .chars()
        .map(|c| match c {
            'U' | 'r' => 'A',
            'd' => 'D',
            other => other,
        })
        .collect();
    let mut snap = fixtures::snapshot(&letters);
    for (b, c) in snap.backends.iter_mut().zip(courses.chars()) {
        b.health.pending = (c == 'r').then_some(Pending {
            toward: State::Ready,
            count: 1,
            needed: 2,
        });
    }
    snap
}

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn after_a_spell_with_none_ready_down_backends_move_one_interval_later() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(true, &snap("UU"), WAIT, t0);
    assert_eq!(r.next_due(WAIT), None, "in the spell: nothing moves");
    r.observe(false, &snap("RU"), WAIT, s(1));
    assert_eq!(r.next_due(WAIT), Some(s(6)));
    assert!(r.take(WAIT, &snap("RU"), s(5)).is_empty(), "not yet");
    assert_eq!(r.take(WAIT, &snap("RU"), s(6)), vec![1]);
    assert_eq!(r.next_due(WAIT), None, "once");
    assert!(r.take(WAIT, &snap("RU"), s(20)).is_empty());
}

#[test]
fn a_rising_backend_keeps_its_connections_unless_its_rise_fails() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(false, &snap("RrU"), WAIT, t0);
    assert_eq!(
        r.take(WAIT, &snap("RrU"), s(5)),
        vec![2],
        "the rising one stays"
    );
    assert!(r.take(WAIT, &snap("RrU"), s(6)).is_empty(), "still rising");
    assert_eq!(r.take(WAIT, &snap("RUU"), s(7)), vec![1], "its rise failed");
    assert!(r.take(WAIT, &snap("RUU"), s(8)).is_empty(), "once");
    let mut r = Recovery::default();
    r.observe(false, &snap("RrU"), WAIT, t0);
    r.take(WAIT, &snap("RrU"), s(5));
    r.observe(true, &snap("RRU"), WAIT, s(6));
    assert!(r.take(WAIT, &snap("RRU"), s(6)).is_empty(), "it rose");
    assert!(
        r.take(WAIT, &snap("RUU"), s(7)).is_empty(),
        "a later fall is not ours"
    );
}

#[test]
fn a_new_spell_before_the_wait_is_over_moves_nothing() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(false, &snap("RU"), WAIT, t0);
    r.observe(true, &snap("UU"), WAIT, s(2));
    assert_eq!(r.next_due(WAIT), None);
    assert!(r.take(WAIT, &snap("UU"), s(5)).is_empty());
}

#[test]
fn a_backend_falling_after_the_spell_is_not_moved_by_the_recovery() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(false, &snap("RU"), WAIT, t0);
    r.observe(true, &snap("RR"), WAIT, s(1));
    r.observe(true, &snap("UR"), WAIT, s(2));
    assert!(
        r.take(WAIT, &snap("UR"), s(5)).is_empty(),
        "not unready since the spell"
    );
    let mut r = Recovery::default();
    r.observe(false, &snap("RU"), WAIT, t0);
    r.observe(true, &snap("RR"), WAIT, s(1));
    r.observe(true, &snap("RU"), WAIT, s(2));
    assert!(
        r.take(WAIT, &snap("RU"), s(5)).is_empty(),
        "recovered, then fell again"
    );
}

#[test]
fn a_backend_down_long_before_the_spell_has_its_connections_moved_as_soon_as_it_ends() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(true, &snap("UR"), WAIT, t0);
    r.observe(true, &snap("UR"), WAIT, s(6));
    r.observe(true, &snap("UU"), WAIT, s(7));
    r.observe(false, &snap("UR"), WAIT, s(9));
    assert_eq!(r.next_due(WAIT), Some(s(9)), "at once");
    assert_eq!(r.take(WAIT, &snap("UR"), s(9)), vec![0], "down since t0");
    assert_eq!(r.next_due(WAIT), Some(s(14)), "then the spell's wait");
    assert!(r.take(WAIT, &snap("UR"), s(14)).is_empty(), "once");
}

#[test]
fn a_backend_that_fell_within_an_interval_of_the_spell_waits_with_it() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(true, &snap("RR"), WAIT, t0);
    r.observe(true, &snap("UR"), WAIT, s(1));
    r.observe(true, &snap("UU"), WAIT, s(5));
    r.observe(false, &snap("UR"), WAIT, s(8));
    assert!(
        r.take(WAIT, &snap("UR"), s(8)).is_empty(),
        "part of the event"
    );
    assert_eq!(r.take(WAIT, &snap("UR"), s(13)), vec![0]);
}

#[test]
fn a_long_down_backend_rising_when_the_spell_ends_is_watched() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(true, &snap("UR"), WAIT, t0);
    r.observe(true, &snap("UU"), WAIT, s(7));
    r.observe(false, &snap("rR"), WAIT, s(9));
    assert!(r.take(WAIT, &snap("rR"), s(9)).is_empty(), "rising: stays");
    assert_eq!(r.take(WAIT, &snap("UR"), s(10)), vec![0], "its rise failed");
}

#[test]
fn a_draining_backend_is_left_to_its_hand_off() {
    let t0 = Instant::now();
    let s = |secs| t0 + Duration::from_secs(secs);
    let mut r = Recovery::default();
    r.observe(true, &snap("dU"), WAIT, t0);
    r.observe(false, &snap("dUR"), WAIT, s(1));
    assert_eq!(
        r.take(WAIT, &snap("dUR"), s(6)),
        vec![1],
        "only the down one"
    );
    let mut r = Recovery::default();
    r.observe(true, &snap("rU"), WAIT, t0);
    r.observe(false, &snap("rUR"), WAIT, s(1));
    assert_eq!(r.take(WAIT, &snap("rUR"), s(6)), vec![1], "rising: watched");
    assert!(
        r.take(WAIT, &snap("dUR"), s(7)).is_empty(),
        "its rise failed draining again: its hand-off's, not a recovery's"
    );
}
