//! An evicted connection's turn to close, when bumps follow one another: the sooner turn stands.
//! A later bump whose turn would come sooner takes over (a far backend that turns unready during
//! its failback closes at its `turned_unready` turn, not its failback one); a later bump whose
//! turn would come later never delays a close already due (a failback that begins just after a
//! backend turned unready leaves its connections closing within the eviction spread). A call-off
//! ends only the turn of the bump called off. Owns the spread of turns over a window.
//!
//! Does not own when a hand-off's turn is quiet enough (`quiet`) nor the bumps (`eviction`).

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::quiet;
use crate::eviction::{CloseReason, Eviction, EvictionWatch, Stop};
use crate::relay::Moved;

/// A per-connection delay in [0, window), spread by the connection's sequence number.
pub(super) fn spread(seq: u32, window: Duration) -> Duration {
    let frac = u64::from(seq).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44; // 20 bits
    window.mul_f64(frac as f64 / (1u64 << 20) as f64)
}

/// The turn a bump gives: its reason, when it came, and when the connection is due.
#[derive(Clone, Copy)]
struct Turn {
    why: CloseReason,
    came: Instant,
    due: Instant,
}

impl Turn {
    fn of(why: CloseReason, came: Instant, seq: u32, handoff: Duration) -> Turn {
        Turn {
            why,
            came,
            due: came + spread(seq, why.window(handoff)),
        }
    }
}

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
    let mut turn = Turn::of(why, Instant::now(), seq, handoff());
    // Whether the turn in force is the latest bump's: only then can a call-off end it.
    let mut latest = true;
    loop {
        let window = turn.why.window(handoff());
        let (next, waiting) = tokio::select! {
            () = quiet::turn(turn.why, (turn.came, turn.due), window, moved) => return Some(turn.why),
            _ = cut.cancelled() => return None,
            // Called off: no turn is in force; the connection relays until a later bump.
            _ = eviction.called_off(by), if latest => (eviction.stopped(by).await, false),
            // A later bump before the close (a draining backend failed another check, also
            // while its hand-off waits; a far backend's failback after it turned unready).
            later = eviction.stopped(by) => (later, true),
        };
        match next {
            Stop::Shutdown => return None,
            Stop::Evicted(why, next_by) => {
                let theirs = Turn::of(why, Instant::now(), seq, handoff());
                latest = !waiting || theirs.due < turn.due;
                if latest {
                    turn = theirs;
                }
                by = next_by;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
