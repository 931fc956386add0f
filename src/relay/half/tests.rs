//! Unit tests of one direction of a relay (`super`): its tiers, its release when idle, a small
//! read the peer cannot take at once, the last bytes sent with their FIN, and its size.

use super::stuck::SAMPLE_EVERY;
use super::*;
use crate::stall::Stall;

/// The counters of a direction to the backend, over `moved` and `total`.
fn to_backend<'a>(moved: &'a Moved, total: &'a Totals) -> Counters<'a> {
    Counters {
        moved,
        total,
        way: Way::ToBackend,
    }
}

/// One poll of `h` moving `from` → `to` (not the last direction), ready or not.
async fn poll_once(
    h: &mut Half,
    (from, to): (&TcpStream, &TcpStream),
    counters: &Counters<'_>,
) -> Poll<Result<(), Failed>> {
    std::future::poll_fn(|cx| Poll::Ready(h.poll(cx, from, to, counters, false))).await
}

#[test]
fn a_full_read_moves_up_a_tier_up_to_the_top() {
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
fn an_idle_buffer_is_released_a_tier_down() {
    let mut h = Half {
        store: Store::Buffer(vec![0; TIERS[2]].into()),
        tier: 2,
        ..Half::default()
    };
    assert!(h.holds_large());
    h.release_idle();
    assert!(matches!(&h.store, Store::Buffer(b) if b.is_empty()));
    assert_eq!(h.tier, 1);
}

#[test]
fn an_idle_pipe_is_released_a_tier_down() {
    let mut piped = Half {
        store: Store::Pipe(Pipe::open().expect("a pipe")),
        tier: 2,
        ..Half::default()
    };
    assert!(piped.holds_large(), "an idle pipe is to be released");
    piped.release_idle();
    assert!(!piped.piped(), "released");
    assert_eq!(piped.tier, 1, "the next burst copies first");
}

#[test]
fn going_idle_keeps_unwritten_data() {
    let mut pending = Half {
        store: Store::Buffer(vec![1, 2, 3].into()),
        end: 3,
        tier: 1,
        ..Half::default()
    };
    pending.release_idle();
    assert!(
        matches!(&pending.store, Store::Buffer(b) if b[..] == [1, 2, 3]),
        "data in flight is never dropped"
    );
}

/// Two ends of a loopback connection.
async fn pair() -> (TcpStream, TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (b, _) = l.accept().await.expect("accept");
    (a, b)
}

#[tokio::test]
async fn a_small_read_the_peer_cannot_take_yet_waits_in_a_buffer_to_arrive_in_order() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut src, from) = pair().await;
    let (to, mut sink) = pair().await;
    // `to` takes nothing more until `sink` reads.
    let chunk = vec![7u8; 64 * 1024];
    let mut prefill = 0;
    to.writable().await.expect("writable");
    loop {
        match to.try_write(&chunk) {
            Ok(n) => prefill += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("prefill: {e}"),
        }
    }
    src.write_all(b"0123456789").await.expect("write");
    from.readable().await.expect("readable");
    let (moved, total) = (Moved::default(), Totals::default());
    let counters = to_backend(&moved, &total);
    let mut h = Half::default();
    let first = poll_once(&mut h, (&from, &to), &counters).await;
    assert!(first.is_pending());
    assert_eq!(h.held(), 10, "read, not written, and kept");
    assert!(matches!(&h.store, Store::Buffer(b) if b.len() == TIERS[0]));
    let reader = tokio::spawn(async move {
        let mut all = vec![0u8; prefill + 10];
        sink.read_exact(&mut all).await.expect("read");
        all
    });
    let flushed = std::future::poll_fn(|cx| match h.poll(cx, &from, &to, &counters, false) {
        Poll::Ready(r) => Poll::Ready(r.map_err(|_| "the direction failed")),
        Poll::Pending if h.held() == 0 => Poll::Ready(Ok(())),
        Poll::Pending => Poll::Pending,
    });
    tokio::time::timeout(std::time::Duration::from_secs(10), flushed)
        .await
        .expect("flushed in time")
        .expect("flushed");
    let all = reader.await.expect("reader");
    assert_eq!(&all[prefill..], b"0123456789");
    assert_eq!(moved.to_backend.load(Ordering::Relaxed), 10);
}

#[test]
fn a_stuck_write_is_sampled_once_per_ten_ticks() {
    let mut h = Half::default();
    let mut samples = 0;
    for _ in 0..25 {
        h.stuck_tick(|| {
            samples += 1;
            Some(Stall::StoppedReading)
        });
    }
    assert_eq!(samples, 2, "25 ticks of 100 ms: a sample a second, no more");
    assert!(h.stopped_reading());
    h.stuck_tick(|| Some(Stall::Unacknowledged));
    assert!(h.stopped_reading(), "not a sample tick: the verdict stands");
}

#[test]
fn progress_clears_a_stopped_reader_verdict() {
    let mut h = Half::default();
    for _ in 0..SAMPLE_EVERY {
        h.stuck_tick(|| Some(Stall::StoppedReading));
    }
    assert!(h.stopped_reading());
    let (moved, total) = (Moved::default(), Totals::default());
    let counters = to_backend(&moved, &total);
    h.wrote(1, &counters);
    assert!(!h.stopped_reading(), "it read again");
    for _ in 0..SAMPLE_EVERY - 1 {
        assert!(
            !h.stuck_tick(|| Some(Stall::StoppedReading)),
            "the count started over"
        );
    }
}

#[test]
fn a_write_is_counted_and_marks_its_way_the_latest() {
    let (moved, total) = (Moved::default(), Totals::default());
    for (way, n, spliced) in [
        (Way::ToBackend, 3, false),
        (Way::ToClient, 5, true),
        (Way::ToBackend, 7, false),
    ] {
        let counters = Counters {
            moved: &moved,
            total: &total,
            way,
        };
        counters.add(n, spliced);
        assert_eq!(moved.latest.way(), Some(way), "after {n} B");
    }
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!((load(&moved.to_backend), load(&moved.to_client)), (10, 5));
    assert_eq!((load(&total.to_backend), load(&total.to_client)), (10, 5));
    assert_eq!(load(&total.spliced), 5);
}

#[test]
fn a_direction_costs_no_more_than_before_it_could_splice() {
    // A Box<[u8]> (16 B) and a pipe (two descriptors, 8 B) share one word pair; two 4 B
    // offsets, the tier, four flags and the stuck write's tick count take the other 16 B.
    assert_eq!(std::mem::size_of::<Store>(), 16);
    assert_eq!(std::mem::size_of::<Half>(), 32);
}

/// What `ss` says of the connection from `local` to `peer`: (segments it received, bytes it
/// holds not yet sent). `ss` (iproute2, which `.ci/run` installs) reads the kernel's own count:
/// how bytes were cut into segments shows nowhere in the bytes themselves.
fn segments(local: &TcpStream, peer: &TcpStream) -> (u64, u64) {
    let (l, p) = (
        local.local_addr().expect("addr"),
        peer.local_addr().expect("addr"),
    );
    let out = std::process::Command::new("ss")
        .args([
            "-tinH",
            "state",
            "all",
            "src",
            &l.to_string(),
            "dst",
            &p.to_string(),
        ])
        .output()
        .expect("run ss (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .map(|v| v.parse::<u64>().expect("a count"))
    };
    (
        field("segs_in:").expect("ss lists the connection"),
        field("notsent:").unwrap_or(0),
    )
}

#[tokio::test]
async fn only_bytes_with_a_fin_right_behind_wait_to_share_its_segment() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut src, from) = pair().await;
    let (to, mut sink) = pair().await;
    to.set_nodelay(true)
        .expect("TCP_NODELAY, as both legs have");
    let (moved, total) = (Moved::default(), Totals::default());
    let counters = to_backend(&moved, &total);
    let mut h = Half::default();

    // Bytes with no FIN behind them are not held back.
    src.write_all(b"ping").await.expect("write");
    from.readable().await.expect("readable");
    let (before, _) = segments(&sink, &to);
    let r = poll_once(&mut h, (&from, &to), &counters).await;
    assert!(r.is_pending(), "the direction goes on");
    assert_eq!(segments(&to, &sink).1, 0, "nothing held back");
    let mut ping = [0u8; 4];
    sink.read_exact(&mut ping).await.expect("read");
    assert_eq!(&ping, b"ping");
    assert_eq!(segments(&sink, &to).0, before + 1);

    // Bytes and the FIN right behind them: one segment.
    src.write_all(b"bye").await.expect("write");
    src.shutdown().await.expect("FIN");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !from
        .ready(Interest::READABLE)
        .await
        .expect("ready")
        .is_read_closed()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the FIN never arrived"
        );
        tokio::task::yield_now().await;
    }
    let (before, _) = segments(&sink, &to);
    let r = poll_once(&mut h, (&from, &to), &counters).await;
    assert!(matches!(r, Poll::Ready(Ok(()))), "the EOF is relayed");
    let mut rest = Vec::new();
    sink.read_to_end(&mut rest).await.expect("read to EOF");
    assert_eq!(rest, b"bye");
    assert_eq!(
        segments(&sink, &to).0,
        before + 1,
        "the last bytes and the FIN came in one segment"
    );
    assert_eq!(moved.to_backend.load(Ordering::Relaxed), 7);
}
