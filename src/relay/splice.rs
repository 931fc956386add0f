//! The zero-copy path of one relay direction: a pipe, and `splice(2)` socket → pipe → socket, so
//! bulk bytes stay in the kernel (page references move, no copy through user space).
//!
//! Owns the pipe's life (opened on demand, sized best-effort, closed when dropped), the two
//! splices, and which errors mean "splice refused here: copy instead". Does not own when a
//! direction splices, nor its byte counts (`half`).

use std::io::{self, Read};
use std::os::fd::OwnedFd;

use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The capacity asked of each pipe: 1 MiB, Linux's `pipe-max-size` default. A splice moves at
/// most a pipe's worth, and a pipe is filled only once empty, so this is the step of a bulk
/// transfer: measured on a 256 MiB download (loopback, release build), 1 MiB takes 716 splices
/// and 0.30 CPU-s/GiB, 256 KiB 2074 and 0.40, the 64 KiB default 0.43, copying through the
/// 256 KiB buffer 2204 reads and writes and 0.48. Kernel memory follows the bytes in flight, not
/// the capacity (a 1 MiB pipe costs a 10 KiB slot array until filled). Best-effort: a pipe
/// refused this size (a lower `pipe-max-size`; an unprivileged user past
/// `pipe-user-pages-soft`, 64 MiB of pipes) keeps its default and still works.
pub(super) const PIPE_SIZE: usize = 1024 * 1024;

/// Never block inside the kernel: both sockets are non-blocking already, and this makes the
/// pipe side so too. MOVE is a hint (pages rather than copies) the kernel may ignore.
const FLAGS: SpliceFlags = SpliceFlags::NONBLOCK.union(SpliceFlags::MOVE);

/// A pipe that holds one direction's bytes between its two splices. Two descriptors, held only
/// while the direction moves bulk.
#[derive(Debug)]
pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    #[cfg(test)]
    _counted: hook::Counted,
}

impl Pipe {
    /// A new pipe, or `None` where none can be had (`EMFILE`, `ENFILE`: this process's or the
    /// system's descriptor limit): the direction then copies, which needs no descriptor.
    pub(super) fn open() -> Option<Pipe> {
        #[cfg(test)]
        if hook::PIPES_REFUSED.get() {
            return None;
        }
        let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok()?;
        // Best-effort (see PIPE_SIZE): a refusal leaves a working 64 KiB pipe.
        let _ = fcntl_setpipe_size(&write, PIPE_SIZE);
        Some(Pipe {
            read,
            write,
            #[cfg(test)]
            _counted: hook::Counted::new(),
        })
    }

    /// Moves what `from` has (up to the pipe's capacity) into the pipe, which must be empty:
    /// `WouldBlock` then means the socket has nothing, and clears its readiness. `Ok(0)` is EOF.
    pub(super) fn fill(&self, from: &TcpStream) -> io::Result<usize> {
        from.try_io(Interest::READABLE, || {
            spliced(|| splice(from, None, &self.write, None, PIPE_SIZE, FLAGS))
        })
    }

    /// Moves up to `held` bytes (what the pipe holds) from the pipe to `to`. `WouldBlock` means
    /// the socket is full, and clears its readiness. Unlike the copy path's `send`, a splice to a
    /// closed peer raises SIGPIPE (the kernel passes no MSG_NOSIGNAL); Rust's runtime ignores
    /// that signal before `main`, so the call returns `EPIPE` like a write.
    pub(super) fn drain(&self, to: &TcpStream, held: usize) -> io::Result<usize> {
        to.try_io(Interest::WRITABLE, || {
            spliced(|| splice(&self.read, None, to, None, held, FLAGS))
        })
    }

    /// Takes back the bytes the pipe holds into `buf` (exactly its length), for a direction
    /// that falls back to copying with data in flight: nothing is lost or reordered.
    pub(super) fn take_back(self, buf: &mut [u8]) -> io::Result<()> {
        std::fs::File::from(self.read).read_exact(buf)
    }
}

/// Whether a splice error means splicing is refused for these descriptors rather than that a
/// socket failed: `EINVAL` (a descriptor that does not support splice), `ENOSYS`, `EOPNOTSUPP`,
/// and `EPERM` (a seccomp filter denying the call). Copying instead is safe for all four even if
/// a socket was the cause: none is a socket's pending error, which a failed call would consume,
/// so the copy's own read or write meets the same condition and reports it on the same leg.
pub(super) fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM)
    )
}

/// One splice, its result as `std::io`; under the test hook, refused before it is made.
fn spliced(call: impl FnOnce() -> rustix::io::Result<usize>) -> io::Result<usize> {
    #[cfg(test)]
    if hook::refuse_now() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    call().map_err(io::Error::from)
}

/// Test hooks forcing the fallbacks, per thread: a `#[tokio::test]` runtime and the relay it
/// spawns run on the test's own thread, so parallel tests do not see each other's settings.
#[cfg(test)]
pub(super) mod hook {
    use std::cell::Cell;

    thread_local! {
        /// Splices allowed before every further one is refused with `EINVAL`.
        pub(in crate::relay) static SPLICES_BEFORE_REFUSAL: Cell<u64> = const { Cell::new(u64::MAX) };
        /// Every pipe is refused, as under `EMFILE`.
        pub(in crate::relay) static PIPES_REFUSED: Cell<bool> = const { Cell::new(false) };
        /// Pipes opened.
        pub(in crate::relay) static PIPES_OPENED: Cell<u64> = const { Cell::new(0) };
        /// Pipes open now (opened and not yet closed).
        pub(in crate::relay) static PIPES_OPEN: Cell<u64> = const { Cell::new(0) };
    }

    /// Counts a pipe in [`PIPES_OPENED`] and, until dropped, in [`PIPES_OPEN`].
    #[derive(Debug)]
    pub(super) struct Counted(());

    impl Counted {
        pub(super) fn new() -> Counted {
            PIPES_OPENED.set(PIPES_OPENED.get() + 1);
            PIPES_OPEN.set(PIPES_OPEN.get() + 1);
            Counted(())
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            PIPES_OPEN.set(PIPES_OPEN.get().saturating_sub(1));
        }
    }

    /// Whether this splice is to be refused (counting it down otherwise).
    pub(super) fn refuse_now() -> bool {
        SPLICES_BEFORE_REFUSAL.with(|left| match left.get() {
            0 => true,
            n => {
                left.set(n - 1);
                false
            }
        })
    }
}
