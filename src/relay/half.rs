//! One direction of a relay: its buffer (tiered, never zeroed, released when idle), the moves
//! from one socket to the other, and the relayed half-close.
//!
//! Does not own the connection (both directions, the timers): the relay in `mod.rs` does.

use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{ready, Context, Poll};

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::TIERS;

/// Which socket of a direction failed.
#[derive(Debug)]
pub(super) enum Failed {
    /// The one read from.
    Reading(io::Error),
    /// The one written to.
    Writing(io::Error),
}

/// One direction's state.
#[derive(Debug, Default)]
pub(super) struct Half {
    /// Data read and not yet written is `buf[start..end]`; empty while released.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Index into [`TIERS`] of the next buffer.
    tier: usize,
    /// EOF relayed: nothing more to do.
    done: bool,
    /// Moved bytes since the relay last looked.
    pub(super) moved: bool,
}

impl Half {
    /// Moves bytes `from` → `to` until one of them is not ready; `Ready` once EOF is relayed.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        counters: [&AtomicU64; 2],
    ) -> Poll<Result<(), Failed>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            while self.start < self.end {
                ready!(to.poll_write_ready(cx)).map_err(Failed::Writing)?;
                match to.try_write(&self.buf[self.start..self.end]) {
                    Ok(n) => {
                        self.start += n;
                        self.moved = true;
                        for c in counters {
                            c.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(Failed::Writing(e))),
                }
            }
            (self.start, self.end) = (0, 0);
            if !self.buf.is_empty() && self.buf.len() < TIERS[self.tier] {
                self.buf = Box::default(); // grown: the next read gets the bigger buffer
            }
            if from
                .poll_read_ready(cx)
                .map_err(Failed::Reading)?
                .is_pending()
            {
                if self.tier == 0 {
                    self.buf = Box::default(); // nothing to read: an idle connection holds nothing
                }
                return Poll::Pending;
            }
            if self.buf.is_empty() {
                self.buf = vec![0u8; TIERS[self.tier]].into_boxed_slice();
            }
            match read_drained(from, &mut self.buf) {
                Ok(0) => {
                    self.done = true;
                    self.buf = Box::default();
                    return Poll::Ready(
                        match socket2::SockRef::from(to).shutdown(Shutdown::Write) {
                            // The peer may already be gone; the other direction reports that.
                            Err(e) if e.kind() != io::ErrorKind::NotConnected => {
                                Err(Failed::Writing(e))
                            }
                            _ => Ok(()),
                        },
                    );
                }
                Ok(n) => {
                    self.end = n;
                    self.tier = grown(self.tier, n, self.buf.len());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(Failed::Reading(e))),
            }
        }
    }

    /// Holds a buffer above the smallest tier while waiting to read.
    pub(super) fn holds_large(&self) -> bool {
        self.buf.len() > TIERS[0] && self.start == self.end
    }

    /// The connection went quiet: give the buffer back (unless it holds unwritten data) and
    /// start the next burst a tier lower.
    pub(super) fn release_idle(&mut self) {
        if self.start == self.end && !self.done {
            self.buf = Box::default();
            (self.start, self.end) = (0, 0);
            self.tier = self.tier.saturating_sub(1);
        }
    }
}

/// One read into `buf`. A read that does not fill the buffer emptied the socket's receive queue,
/// so it also clears the socket's readiness, sparing the read that would only return EAGAIN (one
/// syscall per direction per exchange). Safe against lost wake-ups: tokio takes the readiness
/// tick before the read and clears only that one, so data (or a FIN) that arrives after the read
/// raises a new event, and a closed read side is never cleared.
fn read_drained(from: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let mut n = 0;
    let r = from.try_io(Interest::READABLE, || {
        n = (&*socket2::SockRef::from(from)).read(buf)?;
        if n > 0 && n < buf.len() {
            Err(io::ErrorKind::WouldBlock.into()) // drained: clear readiness, keep the bytes
        } else {
            Ok(())
        }
    });
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && n > 0 => Ok(n),
        Err(e) => Err(e),
        Ok(()) => Ok(n),
    }
}

/// The tier after a read of `n` bytes into a buffer of `capacity`: up one if the read filled it.
fn grown(tier: usize, n: usize, capacity: usize) -> usize {
    if n >= capacity {
        (tier + 1).min(TIERS.len() - 1)
    } else {
        tier
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_read_moves_up_a_tier_and_the_top_tier_stays() {
        let cases = [
            // (tier, read, capacity, next tier)
            (0, 1024, 1024, 1),
            (0, 1023, 1024, 0),
            (1, 16 * 1024, 16 * 1024, 2),
            (1, 100, 16 * 1024, 1),
            (2, 256 * 1024, 256 * 1024, 2),
        ];
        for (tier, n, cap, want) in cases {
            assert_eq!(grown(tier, n, cap), want, "tier {tier}, read {n} of {cap}");
        }
    }

    #[test]
    fn going_idle_releases_the_buffer_and_drops_a_tier_but_keeps_unwritten_data() {
        let mut h = Half {
            buf: vec![0; TIERS[2]].into(),
            tier: 2,
            ..Half::default()
        };
        assert!(h.holds_large());
        h.release_idle();
        assert_eq!((h.buf.len(), h.tier), (0, 1));
        let mut pending = Half {
            buf: vec![1, 2, 3].into(),
            end: 3,
            tier: 1,
            ..Half::default()
        };
        pending.release_idle();
        assert_eq!(
            &pending.buf[..],
            &[1, 2, 3],
            "data in flight is never dropped"
        );
    }
}
