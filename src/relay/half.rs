//! One direction of a relay: where its bytes wait (nowhere on the heap for a small read the other
//! socket takes at once: it passes through the stack; else a tiered buffer, never zeroed, released
//! when idle; or, once the direction moves bulk, a pipe they are spliced through), the moves from
//! one socket to the other, and the relayed half-close.
//!
//! Does not own the connection (both directions, the timers): the relay in `mod.rs` does; nor the
//! splice mechanics (`splice`).

use std::io;
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::task::{ready, Context, Poll};

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::splice::{self, Pipe};
use super::{Moved, Totals, Way, TIERS};

mod stuck;

/// The top tier: a direction whose reads fill the buffer below it moves bulk, and splices.
const TOP: u8 = (TIERS.len() - 1) as u8;

/// Which socket of a direction failed.
#[derive(Debug)]
pub(super) enum Failed {
    /// The one read from.
    Reading(io::Error),
    /// The one written to.
    Writing(io::Error),
}

/// Where a direction's bytes wait between the read and the write.
#[derive(Debug)]
enum Store {
    /// A buffer of the current tier's size, or empty (released: an idle direction holds nothing).
    Buffer(Box<[u8]>),
    /// The top tier where splicing works: a pipe instead of a 256 KiB buffer.
    Pipe(Pipe),
}

impl Default for Store {
    fn default() -> Store {
        Store::Buffer(Box::default())
    }
}

/// The counters one direction adds to, each as its bytes are written: the connection's and the
/// backend's, the spliced ones among the backend's, and the way of the connection's latest
/// bytes. Made afresh at every poll from what the relay borrows, so an idle connection's future
/// holds no copy of it.
pub(super) struct Counters<'a> {
    /// The connection's tally.
    pub(super) moved: &'a Moved,
    /// The backend's.
    pub(super) total: &'a Totals,
    /// Which direction.
    pub(super) way: Way,
}

impl Counters<'_> {
    /// `n` bytes written, `spliced` or copied: counted, and this way marked the latest (a
    /// relaxed store: no lock, no allocation on the relay's path).
    fn add(&self, n: usize, spliced: bool) {
        let n = n as u64;
        let (tally, total) = match self.way {
            Way::ToBackend => (&self.moved.to_backend, &self.total.to_backend),
            Way::ToClient => (&self.moved.to_client, &self.total.to_client),
        };
        tally.fetch_add(n, Ordering::Relaxed);
        total.fetch_add(n, Ordering::Relaxed);
        if spliced {
            self.total.spliced.fetch_add(n, Ordering::Relaxed);
        }
        self.moved.latest.wrote(self.way);
    }
}

/// One direction's state.
#[derive(Debug, Default)]
pub(super) struct Half {
    /// Bytes read and not yet written: `start..end` of the buffer, or `end - start` in the pipe.
    /// Offsets of 4 B each, not 8 (a buffer is at most 256 KiB and a pipe 1 MiB): the half lives
    /// in every idle connection.
    store: Store,
    start: u32,
    end: u32,
    /// Index into [`TIERS`] of the next buffer.
    tier: u8,
    /// A splice was refused on these sockets: the top tier is a buffer for good.
    splice_refused: bool,
    /// EOF relayed: nothing more to do.
    done: bool,
    /// Moved bytes since the relay last looked.
    pub(super) moved: bool,
    /// Idle ticks ([`super::IDLE_RELEASE`]) this direction's write has been stuck since its last
    /// sample (or its last progress), up to [`stuck::SAMPLE_EVERY`].
    stuck_ticks: u8,
    /// The last sample of the stuck write's socket said its peer stopped reading (zero window).
    /// Cleared by any progress.
    stopped_reading: bool,
}

impl Half {
    /// Moves bytes `from` → `to` until one of them is not ready; `Ready` once EOF is relayed.
    /// `last`: the other direction has ended, so this EOF ends the connection and both sockets
    /// are closed at once: the close sends `to` its FIN, and no `shutdown` is made for it.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        counters: &Counters<'_>,
        last: bool,
    ) -> Poll<Result<(), Failed>> {
        let mut held_back = false;
        let r = self.moves(cx, from, to, counters, last, &mut held_back);
        if held_back && r.is_pending() {
            // The EOF that would have sent them did not come in this poll (a read side closed
            // while a driver on another thread raced the read): send them now. Setting
            // TCP_NODELAY again pushes what a socket holds back.
            let _ = socket2::SockRef::from(to).set_tcp_nodelay(true);
        }
        r
    }

    /// [`Half::poll`]'s moves; `held_back` is set once bytes were written to wait for the FIN.
    fn moves(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        counters: &Counters<'_>,
        last: bool,
        held_back: &mut bool,
    ) -> Poll<Result<(), Failed>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(self.flush(cx, to, counters))?;
            (self.start, self.end) = (0, 0);
            if let Store::Buffer(buf) = &self.store {
                if !buf.is_empty() && buf.len() < TIERS[usize::from(self.tier)] {
                    self.store = Store::default(); // grown: the next read gets the next tier
                }
            }
            if from
                .poll_read_ready(cx)
                .map_err(Failed::Reading)?
                .is_pending()
            {
                if self.tier == 0 {
                    self.store = Store::default(); // nothing to read: an idle connection holds nothing
                }
                return Poll::Pending;
            }
            let empty = matches!(&self.store, Store::Buffer(buf) if buf.is_empty());
            let read = if empty && self.tier == 0 {
                // A small exchange: read on the stack and write straight on, so that kubelet's
                // requests and their answers take no heap buffer (one per burst before).
                let mut small = [0u8; TIERS[0]];
                match read_drained(from, &mut small) {
                    Ok(n) if n > 0 => {
                        self.tier = grown(self.tier, n, small.len());
                        // A short read drained the socket and cleared its readiness, so a socket
                        // still ready now has its read side closed: the FIN came with these
                        // bytes (tokio never clears a closed read side, and its driver does not
                        // run during this poll). They are this direction's last, and unless the
                        // connection ends with them, the shutdown that relays the EOF follows in
                        // this poll: held back until then, they and the FIN leave in one segment.
                        let drained = n < small.len();
                        let ends = drained && from.poll_read_ready(cx).is_ready();
                        let fin_follows = ends && !last;
                        *held_back |= fin_follows;
                        self.pass_on(&small[..n], to, counters, fin_follows)
                            .map_err(Failed::Writing)?;
                        if drained && !ends && self.start == self.end {
                            // Passed on whole, and nothing more to read (the waker is registered).
                            return Poll::Pending;
                        }
                        continue;
                    }
                    r => r,
                }
            } else {
                if empty {
                    self.store = self.next_store();
                }
                match &mut self.store {
                    Store::Buffer(buf) => read_drained(from, buf).inspect(|&n| {
                        self.tier = grown(self.tier, n, buf.len());
                    }),
                    Store::Pipe(pipe) => pipe.fill(from),
                }
            };
            match read {
                Ok(0) => {
                    self.done = true;
                    self.store = Store::default();
                    if last {
                        return Poll::Ready(Ok(()));
                    }
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
                Ok(n) => self.end = offset(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if self.piped() && splice::refused(&e) => {
                    // The pipe is empty here: nothing to take back.
                    self.copy_from_now_on().map_err(Failed::Reading)?;
                }
                Err(e) => return Poll::Ready(Err(Failed::Reading(e))),
            }
        }
    }

    /// Writes out what was read, to the last byte, before anything more is read: the next read
    /// may land in another store (a pipe after a buffer, a buffer after a pipe), and bytes must
    /// not overtake each other.
    fn flush(
        &mut self,
        cx: &mut Context<'_>,
        to: &TcpStream,
        counters: &Counters<'_>,
    ) -> Poll<Result<(), Failed>> {
        while self.start < self.end {
            ready!(to.poll_write_ready(cx)).map_err(Failed::Writing)?;
            let written = match &self.store {
                Store::Buffer(buf) => to.try_write(&buf[self.start as usize..self.end as usize]),
                Store::Pipe(pipe) => pipe.drain(to, self.held()),
            };
            match written {
                Ok(n) => {
                    self.start += offset(n);
                    self.wrote(n, counters);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if self.piped() && splice::refused(&e) => {
                    self.copy_from_now_on().map_err(Failed::Writing)?;
                }
                Err(e) => return Poll::Ready(Err(Failed::Writing(e))),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Writes `bytes`, read on the stack, straight to `to`; with `fin_follows`, held back
    /// (`MSG_MORE`) for the FIN about to be sent, so the two leave in one segment. What `to` does
    /// not take now is kept in a buffer of the smallest tier, flushed before anything more is read.
    fn pass_on(
        &mut self,
        bytes: &[u8],
        to: &TcpStream,
        counters: &Counters<'_>,
        fin_follows: bool,
    ) -> io::Result<()> {
        let sent = if fin_follows {
            to.try_io(Interest::WRITABLE, || {
                socket2::SockRef::from(to)
                    .send_with_flags(bytes, libc::MSG_MORE | libc::MSG_NOSIGNAL)
            })
        } else {
            to.try_write(bytes)
        };
        let written = match sent {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        self.wrote(written, counters);
        if written < bytes.len() {
            let mut buf = vec![0u8; TIERS[0]].into_boxed_slice();
            buf[..bytes.len()].copy_from_slice(bytes);
            self.store = Store::Buffer(buf);
            (self.start, self.end) = (offset(written), offset(bytes.len()));
        }
        Ok(())
    }

    /// `n` bytes of this direction were written: counted, and the relay told that it moved.
    fn wrote(&mut self, n: usize, counters: &Counters<'_>) {
        if n > 0 {
            self.moved = true;
            (self.stuck_ticks, self.stopped_reading) = (0, false);
            counters.add(n, self.piped());
        }
    }

    /// The store for a read at this tier: a pipe at the top tier unless splicing was refused or
    /// no pipe can be had (then a buffer, and a pipe is tried again at the next burst).
    fn next_store(&self) -> Store {
        if self.tier == TOP && !self.splice_refused {
            if let Some(pipe) = Pipe::open() {
                return Store::Pipe(pipe);
            }
        }
        Store::Buffer(vec![0u8; TIERS[usize::from(self.tier)]].into_boxed_slice())
    }

    /// Bytes read and not yet written.
    fn held(&self) -> usize {
        (self.end - self.start) as usize
    }

    fn piped(&self) -> bool {
        matches!(self.store, Store::Pipe(_))
    }

    /// A splice was refused: this direction copies from now on, starting with the bytes the
    /// pipe holds (taken back into a buffer, so none is lost or reordered).
    /// (Reading a pipe that holds the bytes does not fail; if it did, they are lost, and the
    /// error fails the direction rather than relaying a stream with a gap.)
    fn copy_from_now_on(&mut self) -> io::Result<()> {
        self.splice_refused = true;
        let Store::Pipe(pipe) = std::mem::take(&mut self.store) else {
            return Ok(());
        };
        let held = self.held();
        let mut buf = vec![0u8; TIERS[usize::from(TOP)].max(held)].into_boxed_slice();
        (self.start, self.end) = (0, 0);
        pipe.take_back(&mut buf[..held])?;
        self.store = Store::Buffer(buf);
        self.end = offset(held);
        Ok(())
    }

    /// Its EOF has been relayed: this direction has ended.
    pub(super) fn is_done(&self) -> bool {
        self.done
    }

    /// Holds a buffer above the smallest tier, or a pipe, while waiting to read.
    pub(super) fn holds_large(&self) -> bool {
        let large = match &self.store {
            Store::Buffer(buf) => buf.len() > TIERS[0],
            Store::Pipe(_) => true,
        };
        large && self.start == self.end
    }

    /// The connection went quiet: give the buffer or pipe back (unless it holds unwritten data)
    /// and start the next burst a tier lower (copying: small exchanges never open a pipe).
    pub(super) fn release_idle(&mut self) {
        if self.start == self.end && !self.done {
            self.store = Store::default();
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
fn grown(tier: u8, n: usize, capacity: usize) -> u8 {
    if n >= capacity {
        (tier + 1).min(TOP)
    } else {
        tier
    }
}

/// A count of bytes in a store as an offset. Every count fits: a read or write moves at most a
/// store's size (a buffer of at most 256 KiB, a pipe of 1 MiB); saturating is never reached.
fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
