//! The race's unit tests: order, re-attempts, black holes, refusals and the address memory.

use std::sync::atomic::Ordering;

use super::*;
use crate::testing::{holds, refusing, BlackHole};

#[test]
fn families_alternate_starting_with_the_resolvers_first() {
    let a = |s: &str| s.parse::<SocketAddr>().expect("literal");
    let got = interleave(vec![
        a("[::1]:1"),
        a("[::2]:1"),
        a("[::3]:1"),
        a("10.0.0.1:1"),
    ]);
    assert_eq!(
        got,
        [a("[::1]:1"), a("10.0.0.1:1"), a("[::2]:1"), a("[::3]:1")]
    );
}

/// [`connect_any`] with `budget` from now and no socket options, in a herd of its own.
async fn race_alone(
    addrs: &[SocketAddr],
    budget: Duration,
    tally: &Tally,
) -> Result<Won, DialError> {
    race_with(addrs, budget, tally, &Herd::default()).await
}

/// [`connect`] to `addr` by its IP literal with a 1 s budget and no socket options.
async fn dial_ip(addr: SocketAddr, tally: &Tally, memory: &Memory) -> Result<TcpStream, DialError> {
    let ip = addr.ip().to_string();
    let budget = Duration::from_secs(1);
    connect(
        &ip,
        addr.port(),
        budget,
        tally,
        memory,
        &SocketOptions::NONE,
    )
    .await
}

/// A black hole (held by the caller) and a backend that holds what it accepts, and their
/// addresses in that order.
fn black_hole_then_listener() -> (BlackHole, [SocketAddr; 2]) {
    let black = BlackHole::new().expect("black hole");
    let addrs = [black.addr, holds()];
    (black, addrs)
}

/// [`race`] over `addrs` with `budget` from now and no socket options, learning in `memory`.
async fn remembering(
    addrs: &[SocketAddr],
    budget: Duration,
    tally: &Tally,
    memory: &Memory,
) -> Result<Won, DialError> {
    let deadline = Instant::now() + budget;
    race(
        addrs.to_vec(),
        deadline,
        budget,
        tally,
        memory,
        &SocketOptions::NONE,
    )
    .await
}

/// [`connect_any`] with `budget` from now and no socket options, in `herd`.
async fn race_with(
    addrs: &[SocketAddr],
    budget: Duration,
    tally: &Tally,
    herd: &Herd,
) -> Result<Won, DialError> {
    connect_any(
        addrs,
        Instant::now() + budget,
        budget,
        tally,
        herd,
        &SocketOptions::NONE,
    )
    .await
}

#[tokio::test]
async fn a_black_hole_gets_three_syns_per_dial_the_kernel_none() {
    // The listener drops every SYN (its queue is full): a 1 s budget sends exactly the plan's
    // three attempts, two of them re-attempts, and fails with the budget's timeout; a longer
    // budget (a probe's 3 s) ends once the plan is used up, with no fourth attempt.
    let hole = BlackHole::new().expect("black hole");
    let addr = hole.addr;
    let tally = Tally::default();
    let e = connect(
        &addr.ip().to_string(),
        addr.port(),
        Duration::from_secs(1),
        &tally,
        &Memory::default(),
        &SocketOptions::NONE,
    )
    .await
    .expect_err("black hole");
    assert_eq!(e.to_string(), "dial: timeout after 1s");
    let count = |t: &Tally| {
        (
            t.attempts.load(Ordering::Relaxed),
            t.reattempts.load(Ordering::Relaxed),
        )
    };
    assert_eq!(count(&tally), (3, 2));
    let tally = Tally::default();
    let e = race_alone(&[addr], Duration::from_secs(3), &tally)
        .await
        .expect_err("black hole");
    assert_eq!(e.to_string(), "dial: timeout: 3 attempts unanswered");
    assert_eq!(count(&tally), (3, 2));
}

/// Once `after` has passed, the backend answers again: its queue grows from 1 to 1024 (Linux
/// takes a second `listen` as a new backlog) and what is queued is accepted. Only accepting,
/// every 5 ms, left a queue of 1 that a burst of re-attempts could fill again under load, and a
/// dial of the herd test then lost its re-attempt too (CI, loaded).
fn drain_after(s: &socket2::Socket, after: Duration) -> std::thread::JoinHandle<()> {
    let s = s.try_clone().expect("clone");
    std::thread::spawn(move || {
        std::thread::sleep(after);
        s.listen(1024).expect("listen");
        s.set_nonblocking(true).expect("nonblocking");
        let mut held = Vec::new();
        for _ in 0..300 {
            match s.accept() {
                Ok(c) => held.push(c),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    })
}

#[tokio::test]
async fn a_lost_syn_costs_an_attempt_delay_not_the_kernels_retransmission() {
    // The queue is full, so the listener drops SYNs (as a lossy link would) until it is
    // drained at 200 ms. Linux retransmits the first attempt's SYN only after 1 s; the last
    // re-attempt starts after 375 ms, after the drain, and connects first: the winner is a
    // fresh attempt, not the first one's retransmission.
    let hole = BlackHole::new().expect("black hole");
    let addr = hole.addr;
    let drain = drain_after(&hole.listener, Duration::from_millis(200));
    let tally = Tally::default();
    let winner = race_alone(&[addr], Duration::from_secs(1), &tally)
        .await
        .expect("connected")
        .attempt;
    assert!(
        winner >= 1,
        "a re-attempt connected, not the first attempt (won by attempt {winner})"
    );
    assert!(tally.attempts.load(Ordering::Relaxed) > winner);
    drain.join().expect("drain");
}

#[tokio::test]
async fn a_black_holed_first_address_does_not_take_the_budget_of_the_next() {
    let (_black, [hole, good_addr]) = black_hole_then_listener();
    // Sequentially, the first attempt would hang until the caller's budget is gone.
    let n = Tally::default();
    let addrs = [hole, good_addr];
    let herd = Herd::default();
    let dial = race_with(&addrs, Duration::from_secs(10), &n, &herd);
    let won = tokio::time::timeout(Duration::from_secs(10), dial)
        .await
        .expect("the second address answers within the budget")
        .expect("connected");
    assert_eq!(won.stream.peer_addr().expect("peer"), good_addr);
    assert_eq!(won.beaten, [hole]);
}

#[tokio::test]
async fn a_refused_address_moves_on_at_once() {
    let (_held, refused) = refusing().expect("refusing");
    let good_addr = holds();
    let n = Tally::default();
    let won = race_alone(&[refused, good_addr], Duration::from_secs(1), &n)
        .await
        .expect("connected");
    assert_eq!(won.stream.peer_addr().expect("peer"), good_addr);
    assert_eq!(
        n.reattempts.load(Ordering::Relaxed),
        0,
        "a refused address is not re-attempted"
    );
}

#[tokio::test]
async fn when_every_address_fails_the_dial_fails_with_the_last_error() {
    let (_held, refused) = refusing().expect("refusing");
    let n = Tally::default();
    let e = race_alone(&[refused, refused], Duration::from_secs(1), &n)
        .await
        .expect_err("nothing answers");
    assert_eq!(e.to_string(), "dial: connection refused");
    assert_eq!(e.blame(), Blame::Backend);
}

#[tokio::test]
async fn an_address_that_lost_the_race_is_tried_last_by_the_next_dial() {
    let (_black, [hole, good_addr]) = black_hole_then_listener();
    let memory = Memory::default();
    let budget = Duration::from_secs(1);
    let addrs = [hole, good_addr];
    let n = Tally::default();
    let first = remembering(&addrs, budget, &n, &memory)
        .await
        .expect("connected");
    assert_eq!(
        first.attempt, 1,
        "the black hole went first and cost a delay"
    );
    for _ in 0..3 {
        let n = Tally::default();
        let next = remembering(&addrs, budget, &n, &memory)
            .await
            .expect("connected");
        assert_eq!(
            (next.attempt, n.attempts.load(Ordering::Relaxed)),
            (0, 1),
            "the remembered failure goes last: one attempt, no delay"
        );
    }
}

#[tokio::test]
async fn a_dialed_connection_has_the_callers_options_before_any_byte() {
    let addr = holds();
    let keepalive = Keepalive {
        idle: Duration::from_secs(30),
        interval: Duration::from_secs(10),
        retries: 3,
    };
    let with = |user_timeout| SocketOptions {
        nodelay: true,
        keepalive: Some(keepalive),
        user_timeout,
    };
    let read = |s: &TcpStream| {
        let s = socket2::SockRef::from(s);
        (
            s.tcp_nodelay().expect("TCP_NODELAY"),
            s.keepalive().expect("SO_KEEPALIVE"),
            s.tcp_keepalive_time().expect("TCP_KEEPIDLE"),
            s.tcp_keepalive_interval().expect("TCP_KEEPINTVL"),
            s.tcp_keepalive_retries().expect("TCP_KEEPCNT"),
            s.tcp_user_timeout().expect("TCP_USER_TIMEOUT"),
        )
    };
    let dial = |options| async move {
        let tally = Tally::default();
        connect(
            "127.0.0.1",
            addr.port(),
            Duration::from_secs(1),
            &tally,
            &Memory::default(),
            &options,
        )
        .await
        .expect("connected")
    };
    let (s, m) = (Duration::from_secs, Duration::from_millis);
    let plain = read(&dial(with(None)).await);
    assert_eq!(plain, (true, true, s(30), s(10), 3, None));
    // With a user timeout the kernel ignores TCP_KEEPCNT, which is then left at its default.
    let cut = read(&dial(with(Some(m(10_000)))).await);
    assert_eq!(&[cut.0, cut.1], &[true, true]);
    assert_eq!((cut.2, cut.3, cut.5), (s(30), s(10), Some(m(10_000))));
    let untuned = read(&dial(SocketOptions::NONE).await);
    assert_eq!((untuned.0, untuned.1, untuned.5), (false, false, None));
    assert_eq!(cut.4, untuned.4, "TCP_KEEPCNT not set under a user timeout");
}

/// `n` dials at once into `addr` sharing one backend's `memory`, each with a 1 s budget: how
/// each ended and the attempts it sent.
async fn herd_of(
    n: usize,
    addr: SocketAddr,
    memory: std::sync::Arc<Memory>,
) -> Vec<(Result<(), String>, u32)> {
    let mut dials = JoinSet::new();
    for _ in 0..n {
        let memory = memory.clone();
        dials.spawn(async move {
            let tally = Tally::default();
            let r = dial_ip(addr, &tally, &memory).await;
            let sent = tally.attempts.load(Ordering::Relaxed);
            (r.map(drop).map_err(|e| e.to_string()), sent)
        });
    }
    dials.join_all().await
}

#[tokio::test]
async fn a_herd_into_a_black_hole_sends_one_syn_per_dial_not_three() {
    // Six dials wait at once on a backend none of whose attempts connected: each keeps its first
    // attempt and skips its re-attempts (a lone dial sends three: the test above).
    let hole = BlackHole::new().expect("black hole");
    let addr = hole.addr;
    let ended = herd_of(6, addr, Default::default()).await;
    for (r, sent) in &ended {
        assert!(r.is_err(), "{ended:?}");
        assert_eq!(*sent, 1, "one SYN per dial of the herd: {ended:?}");
    }
}

#[tokio::test]
async fn a_herd_keeps_its_re_attempts_while_the_backend_answers_other_dials() {
    // The queue is drained at 100 ms and another dial of the backend connects at 150 ms: the herd's
    // unanswered SYNs look lost, not black-holed, and their later re-attempts go out and connect
    // (their first attempts' SYNs were dropped, and the kernel would retransmit them only at 1 s).
    let hole = BlackHole::new().expect("black hole");
    let addr = hole.addr;
    let memory = std::sync::Arc::new(Memory::default());
    let drain = drain_after(&hole.listener, Duration::from_millis(100));
    let witness = {
        let memory = memory.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            dial_ip(addr, &Tally::default(), &memory)
                .await
                .expect("the drained backend answers a new dial")
        })
    };
    let ended = herd_of(4, addr, memory).await;
    drop(witness.await.expect("witness dial"));
    for (r, sent) in &ended {
        assert!(r.is_ok(), "{ended:?}");
        assert!(*sent >= 2, "connected by a re-attempt: {ended:?}");
    }
    drain.join().expect("drain");
}
