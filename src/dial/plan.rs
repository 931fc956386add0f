//! One dial's plan of attempts: those still to start, from [`schedule::plan`] (moved forward
//! when nothing is in flight, dropped for an address that failed), and those started (for the
//! addresses a winner beat).
//!
//! Does not own when attempts are due ([`schedule`]), nor the race that starts them (`super`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::bounded::Bounded;
use super::schedule::{self, MAX_ATTEMPTS};
use super::Tally;

/// One dial's attempts still to start, from [`schedule::plan`], and those started: inline, at
/// most [`MAX_ATTEMPTS`] each (every attempt comes from the plan).
pub(super) struct Plan<'a> {
    addrs: &'a [SocketAddr],
    /// When the plan was made: the attempts' offsets count from here.
    start: Instant,
    /// `(address index, offset from start, attempt of that address)`, in start order.
    pending: Bounded<(usize, Duration, usize), MAX_ATTEMPTS>,
    /// Every started attempt's address index, in start order.
    tried: Bounded<usize, MAX_ATTEMPTS>,
}

impl<'a> Plan<'a> {
    pub(super) fn new(addrs: &'a [SocketAddr], budget: Duration, seed: u64) -> Plan<'a> {
        let planned = schedule::plan(addrs.len(), budget, seed);
        let mut pending = Bounded::new();
        for (i, &(a, at)) in planned.iter().enumerate() {
            let earlier = planned[..i].iter().filter(|p| p.0 == a).count();
            pending.try_push((a, at, earlier));
        }
        Plan {
            addrs,
            start: Instant::now(),
            pending,
            tried: Bounded::new(),
        }
    }

    /// When the next attempt is due.
    pub(super) fn due(&self) -> Option<Instant> {
        self.pending.first().map(|p| self.start + p.1)
    }

    /// Attempts started so far.
    pub(super) fn started(&self) -> u32 {
        self.tried.len() as u32
    }

    /// Whether the next attempt is a re-attempt (its address has had one).
    pub(super) fn next_is_reattempt(&self) -> bool {
        self.pending.first().is_some_and(|p| p.2 > 0)
    }

    /// Drops the next attempt unsent.
    pub(super) fn skip(&mut self) {
        let _ = self.pending.remove_first();
    }

    /// Starts the next attempt: its address and number, counted in `tally`.
    pub(super) fn take(&mut self, tally: &Tally) -> Option<(SocketAddr, u32)> {
        let (a, _, k) = self.pending.remove_first()?;
        tally.attempts.fetch_add(1, Ordering::Relaxed);
        if k > 0 {
            tally.reattempts.fetch_add(1, Ordering::Relaxed);
        }
        // Holds: `tried` has room for every attempt of the plan.
        self.tried.try_push(a);
        Some((*self.addrs.get(a)?, self.started() - 1))
    }

    /// Nothing is in flight: moves the next address's first attempt (and that address's
    /// re-attempts with it) to now if it is next. False when nothing is left at all.
    pub(super) fn bring_forward(&mut self) -> bool {
        let Some(&(a, at, 0)) = self.pending.first() else {
            return !self.pending.is_empty();
        };
        let early = (self.start + at).saturating_duration_since(Instant::now());
        for p in self.pending.iter_mut().filter(|p| p.0 == a) {
            p.1 = p.1.saturating_sub(early);
        }
        self.pending.sort_by_key(|p| (p.1, p.2));
        true
    }

    /// An attempt to `addr` failed (refused, unreachable): it gets no more.
    pub(super) fn failed(&mut self, addr: SocketAddr) {
        let addrs = self.addrs;
        self.pending.retain(|p| addrs[p.0] != addr);
    }

    /// Addresses whose attempts started before attempt `n` (to `winner`) and did not connect.
    pub(super) fn beaten(&self, winner: SocketAddr, n: u32) -> Vec<SocketAddr> {
        let mut beaten: Vec<SocketAddr> = Vec::new();
        for a in self.tried.iter().take(n as usize).map(|&a| self.addrs[a]) {
            if a != winner && !beaten.contains(&a) {
                beaten.push(a);
            }
        }
        beaten
    }
}
