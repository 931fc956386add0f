//! The eviction protocol's unit tests: publish then bump, the reasons' word, the shutdown cut,
//! and calling a bump off.

use super::*;

#[test]
fn every_reason_is_listed_once_at_its_index_with_its_own_name() {
    for (i, r) in CloseReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i, "{r:?}");
    }
    let mut names: Vec<_> = CloseReason::ALL.iter().map(|r| r.as_str()).collect();
    names.dedup();
    assert_eq!(names.len(), CloseReason::ALL.len());
}

#[tokio::test]
async fn a_watch_made_from_the_current_epoch_fires_on_the_next_bump_with_its_reason() {
    let e = Eviction::default();
    let w = e.watch_from(e.epoch()).expect("not evicted");
    assert!(!e.fired(w));
    e.bump_to(e.next(), CloseReason::Silent);
    assert!(e.fired(w));
    assert_eq!(reason(e.stopped(w).await), Some(CloseReason::Silent));
}

#[test]
fn publish_then_bump_leaves_no_window() {
    let e = Eviction::default();
    let old_snapshot_epoch = e.epoch();
    let new_snapshot_epoch = e.next(); // stamped on the snapshot that stops offering it
                                       // Published, not yet bumped: neither reader may connect.
    assert!(e.watch_from(new_snapshot_epoch).is_none());
    let early = e.watch_from(old_snapshot_epoch).expect("bump not sent yet");
    e.bump_to(new_snapshot_epoch, CloseReason::TurnedUnready);
    assert!(e.fired(early), "a watch made before the bump fires");
    assert!(
        e.watch_from(old_snapshot_epoch).is_none(),
        "a reader of the old snapshot after the bump skips the backend"
    );
}

#[tokio::test]
async fn evict_now_ends_every_earlier_watch_as_removed() {
    let e = Eviction::default();
    let before = e.epoch();
    let w = e.watch_from(before).expect("fresh");
    e.evict_now();
    assert!(e.fired(w));
    assert_eq!(
        reason(e.stopped(w).await),
        Some(CloseReason::Removed),
        "the watch says why"
    );
    assert!(e.watch_from(before).is_none());
}

#[tokio::test]
async fn a_waiting_connection_wakes_on_a_bump_or_the_shutdown_cut() {
    let e = std::sync::Arc::new(Eviction::default());
    let waiting = |e: &std::sync::Arc<Eviction>| {
        let (e, w) = (e.clone(), e.watch_from(e.epoch()).expect("fresh"));
        tokio::spawn(async move { e.stopped(w).await })
    };
    let evicted = waiting(&e);
    tokio::task::yield_now().await; // let it start waiting (it must wake either way)
    e.bump_to(e.next(), CloseReason::Failback);
    assert_eq!(
        reason(evicted.await.expect("waiter")),
        Some(CloseReason::Failback)
    );
    let cut = waiting(&e);
    tokio::task::yield_now().await;
    e.shut();
    assert_eq!(cut.await.expect("waiter"), Stop::Shutdown);
}

#[test]
fn the_cut_stops_watches_without_evicting_so_a_dial_that_connects_now_still_counts() {
    let e = Eviction::default();
    let w = e.watch_from(e.epoch()).expect("fresh");
    e.shut();
    assert!(!e.fired(w), "not an eviction: the dial is not skipped");
    assert!(e.watch_from(e.epoch()).is_some());
}

/// Why a stop came: the eviction's reason, `None` for the shutdown cut.
fn reason(stop: Stop) -> Option<CloseReason> {
    match stop {
        Stop::Evicted(why, _) => Some(why),
        Stop::Shutdown => None,
    }
}

/// Polls `f` once: `Some` if it completed.
fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    let f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

#[test]
fn a_connection_waiting_its_turn_stays_watching_when_its_bump_is_called_off() {
    let e = Eviction::default();
    let idle = e.watch_from(e.epoch()).expect("fresh");
    e.bump_to(e.next(), CloseReason::Failback);
    let Some(Stop::Evicted(CloseReason::Failback, by)) = poll_once(e.stopped(idle)) else {
        panic!("the failback stops it");
    };
    assert!(poll_once(e.called_off(by)).is_none(), "not called off yet");
    assert!(e.call_off(CloseReason::Failback));
    assert!(
        poll_once(e.called_off(by)).is_some(),
        "its turn is called off"
    );
    assert!(!e.call_off(CloseReason::Failback), "once");
    assert!(
        poll_once(e.stopped(by)).is_none(),
        "it watches on from the bump"
    );
    // The next failback stops it again; the call-off of the first is not heard as its.
    e.bump_to(e.next(), CloseReason::Failback);
    let Some(Stop::Evicted(CloseReason::Failback, again)) = poll_once(e.stopped(by)) else {
        panic!("the next failback stops it");
    };
    assert!(e.call_off(CloseReason::Failback));
    assert!(poll_once(e.called_off(by)).is_none(), "a later bump stands");
    assert!(poll_once(e.called_off(again)).is_some());
}

#[test]
fn what_a_watch_sees_after_a_call_off() {
    use CloseReason::{Failback, TurnedUnready};
    // (bumps, whether the last is called off, the watch's epoch, its reason to stop if any)
    type Case = (&'static [CloseReason], bool, u64, Option<CloseReason>);
    let cases: [Case; 6] = [
        (&[Failback], true, 0, None), // looked only after the call-off: never stopped
        (&[Failback], true, 1, None), // made from the failback's snapshot
        (&[Failback], false, 0, Some(Failback)),
        (&[Failback, TurnedUnready], false, 1, Some(TurnedUnready)),
        // Missed an earlier bump too: that one stands (named by the latest, as always).
        (&[TurnedUnready, Failback], true, 0, Some(Failback)),
        (&[TurnedUnready, Failback], true, 1, None),
    ];
    for (bumps, call_off, watch, want) in cases {
        let e = Eviction::default();
        for &r in bumps {
            e.bump_to(e.next(), r);
        }
        if call_off {
            assert!(e.call_off(Failback));
        }
        let got = poll_once(e.stopped(EvictionWatch(watch))).and_then(reason);
        assert_eq!(got, want, "{bumps:?} called off {call_off}, watch {watch}");
        if let Some(Stop::Evicted(_, by)) = poll_once(e.stopped(EvictionWatch(watch))) {
            assert!(
                poll_once(e.called_off(by)).is_none(),
                "{bumps:?}: nothing calls it off"
            );
        }
    }
}

#[test]
fn only_the_latest_bump_is_called_off_only_for_its_own_reason() {
    // (bumps in order, the reason called off, whether it is)
    type Case = (&'static [CloseReason], CloseReason, bool);
    let cases: [Case; 5] = [
        (&[], CloseReason::Failback, false),
        (&[CloseReason::Failback], CloseReason::Failback, true),
        (&[CloseReason::TurnedUnready], CloseReason::Failback, false),
        (
            &[CloseReason::Failback, CloseReason::TurnedUnready],
            CloseReason::Failback,
            false,
        ),
        (
            &[CloseReason::TurnedUnready, CloseReason::Failback],
            CloseReason::Failback,
            true,
        ),
    ];
    for (bumps, reason, want) in cases {
        let e = Eviction::default();
        for &r in bumps {
            e.bump_to(e.next(), r);
        }
        let epoch = e.epoch();
        assert_eq!(e.call_off(reason), want, "{bumps:?}");
        assert_eq!(e.epoch(), epoch, "{bumps:?}: the epoch stays");
    }
}

#[test]
fn the_epoch_wraps_within_the_word_it_shares_with_the_reason() {
    let e = Eviction::default();
    let last = u64::MAX >> REASON_BITS;
    e.bump_to(last, CloseReason::DeadPath);
    assert_eq!(e.epoch(), last);
    assert_eq!(e.next(), 0);
    e.evict_now();
    assert_eq!(e.epoch(), 0);
}
