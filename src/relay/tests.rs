//! The relay end to end over loopback sockets: bytes, counts, half-close, failures, splicing.

use super::splice::hook;
use super::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A connected pair through `relay`.
struct Relayed {
    /// The client's end.
    client: TcpStream,
    /// The backend's end.
    backend: TcpStream,
    /// The connection's tally, live.
    moved: Arc<Moved>,
    /// The backend's totals, live: only this connection's bytes, besides 1000 from before.
    total: Arc<Totals>,
    /// The relay; it checks at its end that the backend's totals grew by the connection's tally.
    task: tokio::task::JoinHandle<Result<Ended, RelayError>>,
}

async fn relayed() -> Relayed {
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
    let moved = Arc::new(Moved::default());
    let total = Arc::new(Totals::default());
    total.to_client.store(1000, Ordering::Relaxed); // earlier connections' bytes
    let (tally, sum) = (moved.clone(), total.clone());
    let task = tokio::spawn(async move {
        let r = relay(&proxy_client, &proxy_backend, &tally, &sum).await;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(load(&sum.to_backend), load(&tally.to_backend));
        assert_eq!(load(&sum.to_client), 1000 + load(&tally.to_client));
        r
    });
    Relayed {
        client,
        backend,
        moved,
        total,
        task,
    }
}

#[tokio::test]
async fn bulk_both_ways_with_half_close_is_counted_arriving_whole() {
    let r = relayed().await;
    let (mut client, mut backend) = (r.client, r.backend);
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
    let ended = r.task.await.expect("relay task");
    assert_eq!(
        ended.expect("relay ends cleanly"),
        Ended::ClientFirst,
        "the client half-closed first"
    );
    let (counted_up, counted_down) = (
        r.moved.to_backend.load(Ordering::Relaxed),
        r.moved.to_client.load(Ordering::Relaxed),
    );
    assert_eq!(
        (counted_up, counted_down),
        (up.len() as u64, down.len() as u64)
    );
    let spliced = r.total.spliced.load(Ordering::Relaxed);
    assert!(
        spliced > (counted_up + counted_down) * 3 / 4,
        "both ways went bulk, the FIN behind spliced bytes: {spliced} spliced"
    );
}

#[tokio::test]
async fn small_exchanges_echo_in_order_without_opening_a_pipe() {
    let r = relayed().await;
    let (mut client, mut backend) = (r.client, r.backend);
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
    let _ = r.task.await.expect("relay task");
    assert_eq!(hook::PIPES_OPENED.get(), 0, "small exchanges copy");
    assert_eq!(r.total.spliced.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_half_closed_connection_is_given_up_only_when_silent() {
    // The client sent its request and closed; the backend answers a byte every 50 s, then
    // stalls: the answer arrives whole, and the stall ends the connection.
    let r = relayed().await;
    let (mut client, mut backend, task) = (r.client, r.backend, r.task);
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
    let ended = task.await.expect("relay task");
    assert_eq!(ended.expect("given up"), Ended::HalfClosedIdle);
    let took = started.elapsed();
    assert!(
        took >= (HALF_CLOSED_IDLE - Duration::from_secs(10)) * 3 + HALF_CLOSED_IDLE,
        "cut only after a full silence: {took:?}"
    );
    drop(backend);
}

#[tokio::test]
async fn a_relay_failed_by_a_backend_reset_names_the_backend_leg() {
    let r = relayed().await;
    let (client, backend, task) = (r.client, r.backend, r.task);
    socket2::SockRef::from(&backend)
        .set_linger(Some(Duration::ZERO))
        .expect("linger");
    drop(backend); // a reset from the backend
    let e = task.await.expect("relay task").expect_err("reset");
    assert!(matches!(e, RelayError::Backend(_)), "{e}");
    assert!(e.to_string().starts_with("backend: "), "{e}");
    assert!(!e.backend_timed_out(), "a reset is not a dead path");
    drop(client);
}

#[test]
fn only_the_backends_timeout_is_a_dead_path() {
    let timed_out = || io::Error::from_raw_os_error(libc::ETIMEDOUT);
    assert!(RelayError::Backend(timed_out()).backend_timed_out());
    assert!(!RelayError::Client(timed_out()).backend_timed_out());
}

/// A short read clears readiness without the EAGAIN read: data followed at once by a FIN
/// must still bring the EOF, also with the driver on another thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_with_its_fin_arrives_with_the_eof() {
    for i in 0..100usize {
        let r = relayed().await;
        let (mut client, mut backend, task) = (r.client, r.backend, r.task);
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

/// A stream of test bytes: a pseudo-random block of a prime length, repeated. A chunk lost,
/// doubled or reordered shows unless its length is a multiple of the block's.
fn block(seed: u64) -> Arc<[u8]> {
    let mut x = seed | 1;
    (0..1_000_003)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect()
}

/// Writes `len` bytes of `block` repeated, then half-closes.
async fn send(mut w: impl tokio::io::AsyncWrite + Unpin, block: Arc<[u8]>, len: usize) {
    let mut off = 0;
    while off < len {
        let at = off % block.len();
        let n = (block.len() - at).min(len - off).min(200_000);
        w.write_all(&block[at..at + n]).await.expect("write");
        off += n;
    }
    w.shutdown().await.expect("half-close");
}

/// Reads to EOF, checking every byte against `block` repeated; returns how many came.
async fn check(mut r: impl tokio::io::AsyncRead + Unpin, block: Arc<[u8]>) -> usize {
    let mut buf = vec![0u8; 100_000];
    let mut off = 0;
    loop {
        let n = r.read(&mut buf).await.expect("read");
        if n == 0 {
            return off;
        }
        let mut got = &buf[..n];
        while !got.is_empty() {
            let at = off % block.len();
            let k = got.len().min(block.len() - at);
            assert!(got[..k] == block[at..at + k], "bytes from {off} differ");
            (got, off) = (&got[k..], off + k);
        }
    }
}

/// Sends `len` bytes each way at once through a relay, checks them, and returns the relay.
async fn both_ways(len: usize) -> (Arc<Totals>, Result<Ended, RelayError>) {
    let r = relayed().await;
    let (up, down) = (block(1), block(2));
    let (client_r, client_w) = r.client.into_split();
    let (backend_r, backend_w) = r.backend.into_split();
    let sent = tokio::join!(
        send(client_w, up.clone(), len),
        send(backend_w, down.clone(), len),
        check(backend_r, up),
        check(client_r, down),
    );
    assert_eq!((sent.2, sent.3), (len, len), "all of it, then the EOF");
    let ended = r.task.await.expect("relay task");
    assert_eq!(r.moved.to_backend.load(Ordering::Relaxed), len as u64);
    assert_eq!(r.moved.to_client.load(Ordering::Relaxed), len as u64);
    (r.total, ended)
}

#[tokio::test]
async fn tens_of_mib_each_way_at_once_arrive_byte_identical_through_splice() {
    let len = 32 << 20;
    let (total, ended) = both_ways(len).await;
    ended.expect("relay ends cleanly");
    let spliced = total.spliced.load(Ordering::Relaxed);
    // Only each burst's first 17 KiB is copied: more than 3/4 spliced means both ways were.
    assert!(
        spliced > (2 * len as u64) * 3 / 4,
        "{spliced} of {} spliced",
        2 * len
    );
    assert!(hook::PIPES_OPENED.get() >= 2, "a pipe each way");
    assert_eq!(hook::PIPES_OPEN.get(), 0, "closed with the connection");
}

#[tokio::test]
async fn refused_splices_fall_back_to_copying_without_losing_or_reordering_a_byte() {
    // Refused at the 1st splice (a fill, the pipe empty), the 2nd (the first drain, with bytes
    // in the pipe to take back), and later ones, both ways running at once.
    for allowed in [0, 1, 2, 3, 4, 7, 20, 101] {
        hook::SPLICES_BEFORE_REFUSAL.set(allowed);
        let (total, ended) = both_ways(4 << 20).await;
        ended.expect("a refusal is no failure");
        if allowed == 0 {
            assert_eq!(total.spliced.load(Ordering::Relaxed), 0);
        }
    }
    hook::SPLICES_BEFORE_REFUSAL.set(u64::MAX);
    // No pipe to be had (EMFILE): copying from the start.
    hook::PIPES_REFUSED.set(true);
    hook::PIPES_OPENED.set(0);
    let (total, ended) = both_ways(4 << 20).await;
    ended.expect("no pipe is no failure");
    assert_eq!(total.spliced.load(Ordering::Relaxed), 0);
    assert_eq!(hook::PIPES_OPENED.get(), 0);
}

/// Polls `cond` every 10 ms for up to 30 s (a loaded machine is slow, never this slow).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_spliced_connection_gone_idle_closes_its_pipes_until_the_next_burst() {
    let r = relayed().await;
    let (mut client, backend) = (r.client, r.backend);
    let (mut backend_r, mut backend_w) = backend.into_split();
    let data = block(3);
    let mut got = vec![0u8; data.len()];
    for burst in 1..=2u64 {
        // A download: the backend sends, the client reads it all, the connection stays open.
        backend_w.write_all(&data).await.expect("backend write");
        client.read_exact(&mut got).await.expect("client read");
        assert!(got[..] == data[..], "burst {burst} whole");
        assert_eq!(hook::PIPES_OPENED.get(), burst, "one pipe per bulk burst");
        eventually("the idle connection's pipe closed", || {
            hook::PIPES_OPEN.get() == 0
        })
        .await;
    }
    // Still relaying both ways, now copying small exchanges.
    client.write_all(b"ping").await.expect("write");
    let mut ping = [0u8; 4];
    backend_r.read_exact(&mut ping).await.expect("relayed");
    assert_eq!(&ping, b"ping");
    assert_eq!(hook::PIPES_OPENED.get(), 2, "no pipe for a small exchange");
    drop((client, backend_r, backend_w));
    let _ = r.task.await.expect("relay task");
}

/// Writes test bytes on `s` until the socket fails.
async fn flood(s: Arc<TcpStream>) {
    let data = block(4);
    while s.writable().await.is_ok() {
        match s.try_write(&data) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return,
            _ => {}
        }
    }
}

/// Reads `s` until it ends or fails.
async fn drain(s: Arc<TcpStream>) {
    let mut buf = vec![0u8; 1 << 16];
    while s.readable().await.is_ok() {
        match s.try_read(&mut buf) {
            Ok(0) => return,
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return,
            _ => {}
        }
    }
}

/// One side floods the other through a relay until bytes are spliced, then one side resets
/// (the receiver, which stopped reading, or the sender, while the receiver reads on).
async fn reset_while_spliced(client_sends: bool, client_resets: bool) -> RelayError {
    let r = relayed().await;
    let (client, backend) = (Arc::new(r.client), Arc::new(r.backend));
    let (sender, receiver) = if client_sends {
        (&client, &backend)
    } else {
        (&backend, &client)
    };
    // The receiver stops reading (its socket full: the relay's pipe holds bytes for it) and
    // resets, or keeps reading while the sender resets mid-stream.
    let receiver_resets = client_sends != client_resets;
    let sending = tokio::spawn(flood(sender.clone()));
    let receiving = (!receiver_resets).then(|| tokio::spawn(drain(receiver.clone())));
    let total = r.total.clone();
    eventually("bytes spliced", || {
        total.spliced.load(Ordering::Relaxed) > 0
    })
    .await;
    let (victim, other) = if client_resets {
        (client, backend)
    } else {
        (backend, client)
    };
    socket2::SockRef::from(&*victim)
        .set_linger(Some(Duration::ZERO))
        .expect("linger");
    if !receiver_resets {
        sending.abort(); // it holds the victim
        let _ = sending.await;
    }
    drop(victim); // the last reference: a reset
    let e = r
        .task
        .await
        .expect("relay task")
        .expect_err("a reset fails the relay");
    drop((other, receiving));
    assert_eq!(hook::PIPES_OPEN.get(), 0, "closed with the connection");
    e
}

#[tokio::test]
async fn a_reset_during_a_spliced_transfer_names_its_leg() {
    for (client_sends, client_resets) in
        [(true, false), (false, true), (true, true), (false, false)]
    {
        let case = format!("client sends: {client_sends}, client resets: {client_resets}");
        let e = reset_while_spliced(client_sends, client_resets).await;
        if client_resets {
            assert!(matches!(e, RelayError::Client(_)), "{case}: {e}");
        } else {
            assert!(matches!(e, RelayError::Backend(_)), "{case}: {e}");
        }
        assert!(!e.backend_timed_out(), "{case}: a reset is not a dead path");
    }
}
