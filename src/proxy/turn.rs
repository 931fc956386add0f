//! Waits out an evicted connection's turn to close: the rule of which turn stands is
//! [`crate::eviction::turn::Closing`] (pure); this drives it with the connection's bumps,
//! call-offs and the shutdown cut.
//!
//! Does not own when a hand-off's turn is quiet enough (`quiet`) nor the bumps (`eviction`).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::quiet;
use crate::eviction::turn::Closing;
use crate::eviction::{CloseReason, Eviction, EvictionWatch, Stop};
use crate::relay::Moved;

/// Completes when the connection evicted by bump `by` for `why` is to be closed, with the reason
/// of the turn that stood; `None` if `cut` (shutdown) came first. `handoff` is the
/// `handoff_window` setting, read at each bump. An eviction called off before the turn (a
/// failback whose home zone has no ready backend left) leaves the connection relaying, watching
/// on from the called-off bump.
pub(super) async fn close_turn(
    eviction: &Eviction,
    (why, mut by): (CloseReason, EvictionWatch),
    seq: u32,
    handoff: impl Fn() -> Duration,
    moved: &Moved,
    cut: &CancellationToken,
) -> Option<CloseReason> {
    let mut closing = Closing::evicted(why, Instant::now(), seq, handoff());
    loop {
        let next = match closing.turn() {
            Some(turn) => {
                let window = turn.why.window(handoff());
                tokio::select! {
                    () = quiet::turn(turn.why, (turn.came, turn.due), window, moved) => return Some(turn.why),
                    _ = cut.cancelled() => return None,
                    // Called off: no turn is in force; the connection relays until a later bump.
                    _ = eviction.called_off(by), if closing.hears_call_off() => {
                        closing.called_off();
                        continue;
                    }
                    // A later bump before the close (a draining backend failed another check,
                    // also while its hand-off waits; a far backend's failback after it turned
                    // unready).
                    later = eviction.stopped(by) => later,
                }
            }
            None => tokio::select! {
                _ = cut.cancelled() => return None,
                later = eviction.stopped(by) => later,
            },
        };
        match next {
            Stop::Shutdown => return None,
            Stop::Evicted(why, next_by) => {
                closing.bumped(why, Instant::now(), seq, handoff());
                by = next_by;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::turn::spread;

    const MS: Duration = Duration::from_millis(1);

    /// A connection watching `eviction`, evicted now for `why`: its stop.
    async fn evicted(eviction: &Eviction, why: CloseReason) -> (CloseReason, EvictionWatch) {
        let watch = eviction.watch_from(eviction.epoch()).expect("a watch");
        eviction.bump_to(eviction.next(), why);
        match eviction.stopped(watch).await {
            Stop::Evicted(why, by) => (why, by),
            Stop::Shutdown => unreachable!("not shut"),
        }
    }

    /// Runs the connection's turn beside `then` (the bumps after the first): its reason and
    /// how long after the first bump it closed.
    async fn closes(
        eviction: &Eviction,
        seq: u32,
        first: CloseReason,
        then: impl std::future::Future<Output = ()>,
    ) -> (Option<CloseReason>, Duration) {
        let start = Instant::now();
        let stop = evicted(eviction, first).await;
        let (moved, cut) = (Moved::default(), CancellationToken::new());
        let turn = close_turn(eviction, stop, seq, || 5000 * MS, &moved, &cut);
        let then = async {
            then.await;
            std::future::pending::<()>().await
        };
        // A turn that never comes fails the test rather than hanging it.
        let turn = tokio::time::timeout(60_000 * MS, turn);
        tokio::select! {
            why = turn => (why.ok().flatten(), start.elapsed()),
            () = then => unreachable!("pending"),
        }
    }

    /// Sequence numbers whose failback turn comes after their eviction turn.
    fn seqs() -> impl Iterator<Item = u32> {
        (0..64).filter(|&s| spread(s, CloseReason::Failback.spread()) > 2 * EVICT_WINDOW)
    }

    const EVICT_WINDOW: Duration = crate::eviction::EVICT_SPREAD;

    #[tokio::test(start_paused = true)]
    async fn a_later_bump_due_later_never_delays_a_close_already_due() {
        assert!(seqs().count() > 40, "enough connections to show it");
        for seq in seqs() {
            let e = Eviction::default();
            let failback = async {
                tokio::time::sleep(10 * MS).await;
                e.bump_to(e.next(), CloseReason::Failback);
            };
            let (why, took) = closes(&e, seq, CloseReason::TurnedUnready, failback).await;
            assert_eq!(why, Some(CloseReason::TurnedUnready), "seq {seq}");
            assert!(took < EVICT_WINDOW, "seq {seq}: closed after {took:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_bump_due_sooner_takes_over() {
        for seq in seqs() {
            let e = Eviction::default();
            let unready = async {
                tokio::time::sleep(100 * MS).await;
                e.bump_to(e.next(), CloseReason::TurnedUnready);
            };
            let (why, took) = closes(&e, seq, CloseReason::Failback, unready).await;
            assert_eq!(why, Some(CloseReason::TurnedUnready), "seq {seq}");
            assert!(took < 100 * MS + EVICT_WINDOW, "seq {seq}: after {took:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_off_of_a_later_bump_leaves_the_sooner_turn_standing() {
        for seq in seqs() {
            let e = Eviction::default();
            let failback_called_off = async {
                tokio::time::sleep(10 * MS).await;
                e.bump_to(e.next(), CloseReason::Failback);
                tokio::time::sleep(10 * MS).await;
                assert!(e.call_off(CloseReason::Failback));
            };
            let (why, took) =
                closes(&e, seq, CloseReason::TurnedUnready, failback_called_off).await;
            assert_eq!(why, Some(CloseReason::TurnedUnready), "seq {seq}");
            assert!(took < EVICT_WINDOW, "seq {seq}: after {took:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_called_off_turn_waits_for_the_next_bump() {
        for seq in seqs() {
            let e = Eviction::default();
            let called_off_then_unready = async {
                tokio::time::sleep(10 * MS).await;
                assert!(e.call_off(CloseReason::Failback));
                tokio::time::sleep(20_000 * MS).await;
                e.bump_to(e.next(), CloseReason::TurnedUnready);
            };
            let (why, took) = closes(&e, seq, CloseReason::Failback, called_off_then_unready).await;
            assert_eq!(why, Some(CloseReason::TurnedUnready), "seq {seq}");
            let after = took.saturating_sub(20_010 * MS);
            assert!(
                took >= 20_010 * MS && after < EVICT_WINDOW,
                "seq {seq}: after {took:?}"
            );
        }
    }
}
