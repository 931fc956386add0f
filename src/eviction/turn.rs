//! An evicted connection's turn to close when bumps follow one another, told the time: the
//! sooner turn stands. A later bump whose turn would come sooner takes over (a far backend that
//! turns unready during its failback closes at its `turned_unready` turn, not its failback one);
//! a later bump whose turn would come later never delays a close already due (a failback that
//! begins just after a backend turned unready leaves its connections closing within the eviction
//! spread). A call-off ends only the turn of the bump called off. Owns the spread of turns over
//! a window.
//!
//! Pure: the proxy's connection (`proxy::turn`) and the table's step harness drive it alike.
//! Does not own the bumps ([`super::Eviction`]) nor when a hand-off's turn is quiet enough.

use std::time::Duration;

use tokio::time::Instant;

use super::CloseReason;

/// A per-connection delay in [0, window), spread by the connection's sequence number.
pub fn spread(seq: u32, window: Duration) -> Duration {
    let frac = u64::from(seq).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44; // 20 bits
    window.mul_f64(frac as f64 / (1u64 << 20) as f64)
}

/// The turn a bump gives: its reason, when it came, and when the connection is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// The bump's reason: the close's.
    pub why: CloseReason,
    /// When the connection heard the bump.
    pub came: Instant,
    /// When the connection is to close (a hand-off's: once quiet from then on).
    pub due: Instant,
}

impl Turn {
    /// Connection `seq`'s turn for a bump for `why` heard at `came`; `handoff` is the backend's
    /// hand-off window.
    pub fn of(why: CloseReason, came: Instant, seq: u32, handoff: Duration) -> Turn {
        Turn {
            why,
            came,
            due: came + spread(seq, why.window(handoff)),
        }
    }
}

/// One evicted connection's turn in force, if any, and whether it is the latest bump's (only
/// then can a call-off end it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closing {
    turn: Option<Turn>,
    latest: bool,
}

impl Closing {
    /// Connection `seq` evicted for `why` at `now`.
    pub fn evicted(why: CloseReason, now: Instant, seq: u32, handoff: Duration) -> Closing {
        Closing {
            turn: Some(Turn::of(why, now, seq, handoff)),
            latest: true,
        }
    }

    /// The turn in force; `None` after its bump was called off (the connection relays on).
    pub fn turn(&self) -> Option<Turn> {
        self.turn
    }

    /// Whether a call-off of the latest bump ends the turn in force.
    pub fn hears_call_off(&self) -> bool {
        self.turn.is_some() && self.latest
    }

    /// The latest bump was called off: its turn, if in force, ends.
    pub fn called_off(&mut self) {
        if self.latest {
            self.turn = None;
        }
    }

    /// A later bump for `why` at `now`: its turn takes over if none is in force or it comes
    /// sooner.
    pub fn bumped(&mut self, why: CloseReason, now: Instant, seq: u32, handoff: Duration) {
        let theirs = Turn::of(why, now, seq, handoff);
        self.latest = self.turn.is_none_or(|t| theirs.due < t.due);
        if self.latest {
            self.turn = Some(theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const HANDOFF: Duration = Duration::from_secs(5);

    /// A sequence number whose failback turn comes after its eviction turn.
    fn late_in_failback() -> u32 {
        (0..64)
            .find(|&s| {
                spread(s, CloseReason::Failback.spread()) > 2 * crate::eviction::EVICT_SPREAD
            })
            .expect("one")
    }

    #[test]
    fn the_sooner_turn_stands_and_a_call_off_ends_only_its_own() {
        let (t0, seq) = (Instant::now(), late_in_failback());
        let mut c = Closing::evicted(CloseReason::TurnedUnready, t0, seq, HANDOFF);
        let unready = c.turn().expect("a turn");
        c.bumped(CloseReason::Failback, t0 + 10 * MS, seq, HANDOFF);
        assert_eq!(
            c.turn(),
            Some(unready),
            "a later bump due later never delays"
        );
        assert!(
            !c.hears_call_off(),
            "the failback's call-off is not this turn's"
        );
        c.called_off();
        assert_eq!(c.turn(), Some(unready));

        let mut c = Closing::evicted(CloseReason::Failback, t0, seq, HANDOFF);
        c.bumped(CloseReason::TurnedUnready, t0 + 100 * MS, seq, HANDOFF);
        let turn = c.turn().expect("a turn");
        assert_eq!(
            turn.why,
            CloseReason::TurnedUnready,
            "a sooner one takes over"
        );
        assert!(c.hears_call_off());
        c.called_off();
        assert_eq!(c.turn(), None);
        c.bumped(CloseReason::Failback, t0 + 200 * MS, seq, HANDOFF);
        assert_eq!(
            c.turn().map(|t| t.why),
            Some(CloseReason::Failback),
            "after a call-off any bump"
        );
    }
}
