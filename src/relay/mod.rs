//! The byte pump between a client and the backend, both directions, with half-close.
//!
//! One hand-polled future drives both directions (no per-direction futures, no join): a
//! connection costs a few words while idle and no relay buffer. A direction's buffer grows with
//! its traffic, 1 KiB → 16 KiB → 256 KiB (a read that fills the buffer moves it up a tier, as
//! ztunnel's copy loop does), is never zeroed (reads land in spare capacity), and is not freed
//! and re-allocated on every readiness event: a 1 KiB buffer goes back as soon as its socket has
//! nothing to read (a thread-cache allocation, cheaper than keeping it), larger ones are kept
//! while traffic flows and released, a tier lower, after [`IDLE_RELEASE`] without any.
//! Does not own dialing, eviction or shutdown (`proxy`).

use std::future::{poll_fn, Future};
use std::io;
mod half;

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::Poll;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Sleep;

use half::{Failed, Half};

/// Buffer sizes by tier: 1 KiB holds a kubelet request or a watch event, 16 KiB a TCP segment
/// burst, 256 KiB a socket buffer's worth of a bulk transfer per syscall pair.
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
}

impl RelayError {
    /// TCP gave up on the backend leg: data we sent stayed unacknowledged for the user timeout,
    /// or keepalive probes went unanswered (`ETIMEDOUT` on the backend's socket). A dead path,
    /// not a peer that closed or reset.
    pub fn backend_timed_out(&self) -> bool {
        matches!(self, RelayError::Backend(e) if e.raw_os_error() == Some(libc::ETIMEDOUT))
    }
}

/// Bytes one connection moved, per direction, for its record. Updated as bytes are written, so
/// they are right also when the relay is dropped (evicted, cut).
#[derive(Debug, Default)]
pub struct Moved {
    /// Client → backend.
    pub to_backend: AtomicU64,
    /// Backend → client.
    pub to_client: AtomicU64,
}

/// Relays until both directions have ended (EOF each way), either fails (saying which leg), or
/// one has ended and the other stays silent for [`HALF_CLOSED_IDLE`]. Bytes are added to the
/// connection's tally `moved` and to the backend's `total`.
pub async fn relay(
    client: &TcpStream,
    backend: &TcpStream,
    moved: &Moved,
    total: &Moved,
) -> Result<Ended, RelayError> {
    let mut first_done = None;
    let mut up = Half::default();
    let mut down = Half::default();
    // Armed only while a direction keeps a buffer above the smallest tier.
    let mut idle: Option<Pin<Box<Sleep>>> = None;
    let mut active = false;
    // Armed once one direction has ended.
    let mut half_closed: Option<Pin<Box<Sleep>>> = None;
    poll_fn(|cx| {
        let a = up
            .poll(cx, client, backend, [&moved.to_backend, &total.to_backend])
            .map_err(|f| match f {
                Failed::Reading(e) => RelayError::Client(e),
                Failed::Writing(e) => RelayError::Backend(e),
            })?;
        let b = down
            .poll(cx, backend, client, [&moved.to_client, &total.to_client])
            .map_err(|f| match f {
                Failed::Reading(e) => RelayError::Backend(e),
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
        if !(up.holds_large() || down.holds_large()) {
            idle = None;
            return Poll::Pending;
        }
        if idle.is_none() {
            active = false;
        }
        let timer = idle.get_or_insert_with(|| Box::pin(tokio::time::sleep(IDLE_RELEASE)));
        while timer.as_mut().poll(cx).is_ready() {
            if !std::mem::take(&mut active) {
                up.release_idle();
                down.release_idle();
                idle = None;
                break;
            }
            timer
                .as_mut()
                .reset(tokio::time::Instant::now() + IDLE_RELEASE);
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair through `relay`: (client end, backend end, relay task).
    async fn relayed() -> (
        TcpStream,
        TcpStream,
        tokio::task::JoinHandle<(Result<Ended, RelayError>, u64, u64)>,
    ) {
        let l1 = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let l2 = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(l1.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (proxy_client, _) = l1.accept().await.expect("accept");
        let proxy_backend = TcpStream::connect(l2.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (backend, _) = l2.accept().await.expect("accept");
        let task = tokio::spawn(async move {
            let (moved, total) = (Moved::default(), Moved::default());
            total.to_client.store(1000, Ordering::Relaxed); // earlier connections' bytes
            let r = relay(&proxy_client, &proxy_backend, &moved, &total).await;
            let up = moved.to_backend.load(Ordering::Relaxed);
            let down = moved.to_client.load(Ordering::Relaxed);
            // The backend's totals grew by exactly the connection's own tally.
            assert_eq!(total.to_backend.load(Ordering::Relaxed), up);
            assert_eq!(total.to_client.load(Ordering::Relaxed), 1000 + down);
            (r, up, down)
        });
        (client, backend, task)
    }

    #[tokio::test]
    async fn bulk_both_ways_with_half_close_arrives_whole_and_counted() {
        let (mut client, mut backend, task) = relayed().await;
        let up: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let down: Vec<u8> = (0..2_000_000u32).map(|i| (i % 241) as u8).collect();
        let (up2, down2) = (up.clone(), down.clone());
        let send_up = tokio::spawn(async move {
            client.write_all(&up2).await.expect("client write");
            client.shutdown().await.expect("client half-close");
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.expect("client read");
            got
        });
        let mut got_up = Vec::new();
        backend
            .read_to_end(&mut got_up)
            .await
            .expect("backend read");
        assert_eq!(got_up, up, "client → backend, then EOF");
        backend.write_all(&down2).await.expect("backend write");
        backend.shutdown().await.expect("backend half-close");
        assert_eq!(send_up.await.expect("client task"), down);
        let (r, counted_up, counted_down) = task.await.expect("relay task");
        assert_eq!(
            r.expect("relay ends cleanly"),
            Ended::ClientFirst,
            "the client half-closed first"
        );
        assert_eq!(
            (counted_up, counted_down),
            (up.len() as u64, down.len() as u64)
        );
    }

    #[tokio::test]
    async fn small_exchanges_echo_in_order() {
        let (mut client, mut backend, task) = relayed().await;
        for i in 0..50u8 {
            let msg = vec![i; 1 + usize::from(i) * 37];
            client.write_all(&msg).await.expect("write");
            let mut got = vec![0; msg.len()];
            backend.read_exact(&mut got).await.expect("backend read");
            backend.write_all(&got).await.expect("backend write");
            client.read_exact(&mut got).await.expect("client read");
            assert_eq!(got, msg);
        }
        drop((client, backend));
        let _ = task.await.expect("relay task");
    }

    #[tokio::test(start_paused = true)]
    async fn half_closed_and_silent_is_given_up_but_half_closed_and_moving_is_not() {
        // The client sent its request and closed; the backend answers a byte every 50 s, then
        // stalls: the answer arrives whole, and the stall ends the connection.
        let (mut client, mut backend, task) = relayed().await;
        client.write_all(b"request").await.expect("write");
        client.shutdown().await.expect("half-close");
        let mut got = Vec::new();
        backend
            .read_to_end(&mut got)
            .await
            .expect("request and EOF");
        assert_eq!(got, b"request");
        let started = tokio::time::Instant::now();
        for _ in 0..3 {
            tokio::time::sleep(HALF_CLOSED_IDLE - Duration::from_secs(10)).await;
            backend.write_all(b"x").await.expect("backend write");
            let mut one = [0u8; 1];
            client
                .read_exact(&mut one)
                .await
                .expect("a byte, not a cut");
        }
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.expect("EOF");
        assert!(rest.is_empty());
        let (r, _, _) = task.await.expect("relay task");
        assert_eq!(r.expect("given up"), Ended::HalfClosedIdle);
        let took = started.elapsed();
        assert!(
            took >= (HALF_CLOSED_IDLE - Duration::from_secs(10)) * 3 + HALF_CLOSED_IDLE,
            "cut only after a full silence: {took:?}"
        );
        drop(backend);
    }

    #[tokio::test]
    async fn a_failed_relay_names_its_leg_and_only_the_backends_timeout_is_a_dead_path() {
        let (client, backend, task) = relayed().await;
        socket2::SockRef::from(&backend)
            .set_linger(Some(Duration::ZERO))
            .expect("linger");
        drop(backend); // a reset from the backend
        let (r, _, _) = task.await.expect("relay task");
        let e = r.expect_err("reset");
        assert!(matches!(e, RelayError::Backend(_)), "{e}");
        assert!(e.to_string().starts_with("backend: "), "{e}");
        assert!(!e.backend_timed_out(), "a reset is not a dead path");
        drop(client);
        let timed_out = || io::Error::from_raw_os_error(libc::ETIMEDOUT);
        assert!(RelayError::Backend(timed_out()).backend_timed_out());
        assert!(!RelayError::Client(timed_out()).backend_timed_out());
    }

    /// A short read clears readiness without the EAGAIN read: data followed at once by a FIN
    /// must still bring the EOF, also with the driver on another thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn data_and_fin_together_arrive_with_the_eof() {
        for i in 0..100usize {
            let (mut client, mut backend, task) = relayed().await;
            let msg = vec![b'a'; 1 + i * 41];
            client.write_all(&msg).await.expect("write");
            client.shutdown().await.expect("half-close");
            let mut got = Vec::new();
            backend.read_to_end(&mut got).await.expect("read to EOF");
            assert_eq!(got, msg, "round {i}");
            drop(backend);
            let _ = task.await.expect("relay task");
        }
    }
}
