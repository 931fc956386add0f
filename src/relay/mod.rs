//! The byte pump between a client and the backend, both directions, with half-close.
//!
//! One hand-polled future drives both directions (no per-direction futures, no join): a
//! connection costs a few words while idle and no relay buffer. A direction's buffer grows with
//! its traffic, 1 KiB → 16 KiB → 256 KiB (a read that fills the buffer moves it up a tier, as
//! ztunnel's copy loop does), is never zeroed (reads land in spare capacity), and is not freed
//! and re-allocated on every readiness event: a 1 KiB buffer goes back as soon as its socket has
//! nothing to read (a thread-cache allocation, cheaper than keeping it), larger ones are kept
//! while traffic flows and released, a tier lower, after [`IDLE_RELEASE`] without any.
//! A direction whose reads fill the 16 KiB buffer moves bulk: its top tier is a pipe instead of
//! a buffer, and its bytes go socket → pipe → socket by `splice(2)`, never through user space
//! (a buffer where splice or a pipe is refused). The pipe goes with the buffers, at
//! [`IDLE_RELEASE`]: an idle connection holds its two sockets and nothing else.
//! Does not own dialing, eviction or shutdown (`proxy`).

use std::future::{poll_fn, Future};
use std::io;
mod activity;
mod half;
mod splice;

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::Poll;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Sleep;

pub use activity::{Latest, Way};
use half::{Counters, Failed, Half};

/// Buffer sizes by tier: 1 KiB holds a kubelet request or a watch event, 16 KiB a TCP segment
/// burst, 256 KiB a socket buffer's worth of a bulk transfer per syscall pair (where splicing
/// works, the top tier is a pipe instead: `splice::PIPE_SIZE`).
pub const TIERS: [usize; 3] = [1024, 16 * 1024, 256 * 1024];

/// A buffer above the smallest tier is released after this long without traffic on the
/// connection: long enough to span the gaps of a transfer, short enough that a connection gone
/// quiet holds nothing.
pub const IDLE_RELEASE: Duration = Duration::from_millis(100);

/// Once one direction has ended (its EOF relayed as a half-close), the other must move a byte at
/// least this often or the connection is given up: a client that closed while the backend
/// stalls mid-response sends nothing more that would tell us it is gone, and its two
/// descriptors would be held for as long as the backend stays silent. HTTP clients never wait
/// half-closed; 60 s is what Linux itself gives an orphaned half-closed socket
/// (`tcp_fin_timeout`). A connection open both ways has no idle timeout (a quiet watch is normal).
pub const HALF_CLOSED_IDLE: Duration = Duration::from_secs(60);

/// How a relay that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Both ways ended; the client's EOF came first.
    ClientFirst,
    /// Both ways ended; the backend's EOF came first.
    BackendFirst,
    /// One way ended and the other stayed silent for [`HALF_CLOSED_IDLE`].
    HalfClosedIdle,
}

/// A relay that failed, and on which leg.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The client's socket failed (a reset, a broken pipe, its keepalive gave up).
    #[error("client: {0}")]
    Client(io::Error),
    /// The backend's socket failed.
    #[error("backend: {0}")]
    Backend(io::Error),
    /// TCP gave up on the backend leg (`ETIMEDOUT`) while the last sample of its stuck write said
    /// the backend stopped reading (a zero window, [`crate::stall`]): alive, not a dead path.
    #[error("backend: the backend stopped reading (zero window): {0}")]
    StalledReader(io::Error),
}

impl RelayError {
    /// TCP gave up on the backend leg: data we sent stayed unacknowledged for the user timeout,
    /// or keepalive probes went unanswered (`ETIMEDOUT` on the backend's socket). A dead path,
    /// not a peer that closed or reset.
    pub fn backend_timed_out(&self) -> bool {
        matches!(self, RelayError::Backend(e) if e.raw_os_error() == Some(libc::ETIMEDOUT))
    }

    /// The backend reset its leg (`ECONNRESET` on the backend's socket): the connection was
    /// aborted, not ended, and the client's leg should end the same way.
    pub fn backend_reset(&self) -> bool {
        matches!(self, RelayError::Backend(e) if e.raw_os_error() == Some(libc::ECONNRESET))
    }
}

/// Bytes one connection moved, per direction, for its record, and the way the latest went (a
/// hand-off waits for a request's answer before it closes the connection). Updated as bytes are
/// written, so they are right also when the relay is dropped (evicted, cut). Three words: every
/// idle connection holds one.
#[derive(Debug, Default)]
pub struct Moved {
    /// Client → backend.
    pub to_backend: AtomicU64,
    /// Backend → client.
    pub to_client: AtomicU64,
    /// The way of the latest bytes written.
    pub latest: Latest,
}

/// Bytes relayed to and from one backend over all its connections, per direction, and of those
/// the spliced ones (moved by the kernel, never copied through this process: the bulk of large
/// transfers), for `/metrics`. Updated as bytes are written.
#[derive(Debug, Default)]
pub struct Totals {
    /// Client → backend.
    pub to_backend: AtomicU64,
    /// Backend → client.
    pub to_client: AtomicU64,
    /// Of both directions' bytes, those spliced.
    pub spliced: AtomicU64,
}

/// Relays until both directions have ended (EOF each way), either fails (saying which leg), or
/// one has ended and the other stays silent for [`HALF_CLOSED_IDLE`]. While a write to the backend
/// is stuck, the idle timer keeps ticking and the backend leg's TCP state is sampled once a second
/// ([`crate::stall`]): a leg TCP then gives up on is a [`RelayError::StalledReader`] if the last
/// sample said the backend stopped reading. Bytes are added to the
/// connection's tally `moved` (which also keeps the way of the latest) and to the backend's
/// `total`.
///
/// Not an `async fn`: the relay is where an idle connection waits, and an async fn would keep
/// the arguments and the poll function's captures besides the state itself. The future is the
/// one closure, owning its state.
pub fn relay<'a>(
    client: &'a TcpStream,
    backend: &'a TcpStream,
    moved: &'a Moved,
    total: &'a Totals,
) -> impl Future<Output = Result<Ended, RelayError>> + 'a {
    let mut first_done = None;
    let mut up = Half::default();
    let mut down = Half::default();
    // Armed only while a direction keeps a buffer above the smallest tier.
    let mut idle: Option<Pin<Box<Sleep>>> = None;
    let mut active = false;
    // Armed once one direction has ended.
    let mut half_closed: Option<Pin<Box<Sleep>>> = None;
    poll_fn(move |cx| {
        let down_done = down.is_done();
        let a = up
            .poll(
                cx,
                client,
                backend,
                &Counters {
                    moved,
                    total,
                    way: Way::ToBackend,
                },
                down_done,
            )
            .map_err(|f| match f {
                Failed::Reading(e) => RelayError::Client(e),
                Failed::Writing(e) => backend_failed(e, up.stopped_reading()),
            })?;
        let b = down
            .poll(
                cx,
                backend,
                client,
                &Counters {
                    moved,
                    total,
                    way: Way::ToClient,
                },
                a.is_ready(),
            )
            .map_err(|f| match f {
                Failed::Reading(e) => backend_failed(e, up.stopped_reading()),
                Failed::Writing(e) => RelayError::Client(e),
            })?;
        if first_done.is_none() {
            if a.is_ready() {
                first_done = Some(Ended::ClientFirst);
            } else if b.is_ready() {
                first_done = Some(Ended::BackendFirst);
            }
        }
        if a.is_ready() && b.is_ready() {
            return Poll::Ready(Ok(first_done.unwrap_or(Ended::ClientFirst)));
        }
        let moved = up.moved || down.moved;
        if a.is_ready() || b.is_ready() {
            let timer =
                half_closed.get_or_insert_with(|| Box::pin(tokio::time::sleep(HALF_CLOSED_IDLE)));
            if moved {
                timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + HALF_CLOSED_IDLE);
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(Ended::HalfClosedIdle));
            }
        }
        active |= moved;
        (up.moved, down.moved) = (false, false);
        let stuck = up.write_stuck();
        if !(up.holds_large() || down.holds_large() || stuck) {
            idle = None;
            return Poll::Pending;
        }
        if idle.is_none() {
            active = false;
        }
        let timer = idle.get_or_insert_with(|| Box::pin(tokio::time::sleep(IDLE_RELEASE)));
        while timer.as_mut().poll(cx).is_ready() {
            if stuck {
                up.stuck_tick(|| {
                    crate::stall::sample(backend.local_addr().ok()?, backend.peer_addr().ok()?)
                });
            }
            if !std::mem::take(&mut active) {
                up.release_idle();
                down.release_idle();
                if !stuck {
                    idle = None;
                    break;
                }
            }
            timer
                .as_mut()
                .reset(tokio::time::Instant::now() + IDLE_RELEASE);
        }
        Poll::Pending
    })
}

/// The backend's socket failed with `e`; `stopped_reading`: the last sample of the stuck write to
/// it said the backend stopped reading, which makes TCP's giving up a stalled reader.
fn backend_failed(e: io::Error, stopped_reading: bool) -> RelayError {
    if stopped_reading && e.raw_os_error() == Some(libc::ETIMEDOUT) {
        RelayError::StalledReader(e)
    } else {
        RelayError::Backend(e)
    }
}

#[cfg(test)]
mod tests;
