//! A direction whose write is stuck (the socket written to takes no more): its idle ticks, the
//! sample of the socket's TCP state once a second, and what the last sample said.
//!
//! Does not own the sample itself (`crate::stall`) nor the timer that ticks (the relay in
//! `mod.rs`).

use super::Half;
use crate::stall::Stall;

/// A stuck write's socket is sampled once per this many idle ticks ([`super::super::IDLE_RELEASE`]
/// each): once a second.
pub(in crate::relay) const SAMPLE_EVERY: u8 = 10;

impl Half {
    /// Holds bytes its write could not pass on yet: the socket written to takes no more.
    pub(in crate::relay) fn write_stuck(&self) -> bool {
        self.start < self.end
    }

    /// One idle tick with the write stuck: every [`SAMPLE_EVERY`]th, `sample` reads why from the
    /// socket written to (`None`: it could not be read). Returns whether it sampled.
    pub(in crate::relay) fn stuck_tick(&mut self, sample: impl FnOnce() -> Option<Stall>) -> bool {
        self.stuck_ticks += 1;
        if self.stuck_ticks < SAMPLE_EVERY {
            return false;
        }
        self.stuck_ticks = 0;
        self.stopped_reading = sample() == Some(Stall::StoppedReading);
        true
    }

    /// The last sample of its stuck write said the peer stopped reading.
    pub(in crate::relay) fn stopped_reading(&self) -> bool {
        self.stopped_reading
    }
}
