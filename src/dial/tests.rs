//! The race's unit tests: order, re-attempts, black holes, refusals and the address memory.

use super::*;

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

/// A listener that stopped accepting with its queue full: dials to it hang in the SYN stage.
async fn black_hole() -> (socket2::Socket, Vec<TcpStream>, SocketAddr) {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    s.bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("literal").into())
        .expect("bind");
    s.listen(1).expect("listen");
    let addr = s.local_addr().expect("addr").as_socket().expect("ip");
    let mut fillers = Vec::new();
    while let Ok(Ok(c)) =
        tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
    {
        fillers.push(c);
    }
    (s, fillers, addr)
}

#[test]
fn attempts_go_round_the_addresses_that_have_not_failed_up_to_the_cap() {
    let a = |s: &str| s.parse::<SocketAddr>().expect("literal");
    let mut s = Schedule {
        live: vec![a("10.0.0.1:1"), a("10.0.0.2:1"), a("10.0.0.3:1")],
        next: 0,
        started: 0,
    };
    let mut got = vec![s.take(), s.take(), s.take(), s.take()];
    s.failed(a("10.0.0.1:1"));
    s.failed(a("10.0.0.3:1"));
    while let Some(next) = s.take() {
        got.push(Some(next));
    }
    let want: Vec<_> = ["10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.1:1"]
        .into_iter()
        .chain(["10.0.0.2:1"; MAX_ATTEMPTS - 4])
        .map(|x| Some(a(x)))
        .collect();
    assert_eq!(got, want);
    s.failed(a("10.0.0.2:1"));
    assert!(!s.can_start());
}

/// Accepts everything queued on `s` once `after` has passed, freeing its full queue.
fn drain_after(s: &socket2::Socket, after: Duration) -> std::thread::JoinHandle<()> {
    let s = s.try_clone().expect("clone");
    std::thread::spawn(move || {
        std::thread::sleep(after);
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
    // drained at 300 ms. Linux retransmits the first attempt's SYN only after 1 s; attempts
    // start every 100 ms, so one started after the drain connects first: the winner is a
    // fresh attempt, not the first one's retransmission.
    let (hole, _fillers, addr) = black_hole().await;
    let drain = drain_after(&hole, Duration::from_millis(300));
    let attempts = AtomicU32::new(0);
    let winner = connect_any(vec![addr], Duration::from_millis(100), &attempts)
        .await
        .expect("connected")
        .attempt;
    assert!(
        winner >= 1,
        "a re-attempt connected, not the first attempt (won by attempt {winner})"
    );
    assert!(attempts.load(Ordering::Relaxed) > winner);
    drain.join().expect("drain");
}

#[tokio::test]
async fn a_black_holed_first_address_does_not_take_the_budget_of_the_next() {
    let (_hole, _fillers, hole) = black_hole().await;
    let good = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let good_addr = good.local_addr().expect("addr");
    // Sequentially, the first attempt would hang until the caller's budget is gone.
    let n = AtomicU32::new(0);
    let dial = connect_any(vec![hole, good_addr], Duration::from_millis(50), &n);
    let won = tokio::time::timeout(Duration::from_secs(10), dial)
        .await
        .expect("the second address answers within the budget")
        .expect("connected");
    assert_eq!(won.stream.peer_addr().expect("peer"), good_addr);
    assert_eq!(won.beaten, [hole]);
}

#[tokio::test]
async fn a_refused_address_moves_on_at_once_and_all_failing_is_the_last_error() {
    let refusing =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    refusing
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("literal").into())
        .expect("bind");
    let refused = refusing
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("ip");
    let good = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let good_addr = good.local_addr().expect("addr");
    // A long delay: only a failure can start the next attempt before it.
    let n = AtomicU32::new(0);
    let won = connect_any(vec![refused, good_addr], Duration::from_secs(3600), &n)
        .await
        .expect("connected");
    assert_eq!(won.stream.peer_addr().expect("peer"), good_addr);
    let e = connect_any(vec![refused, refused], Duration::from_secs(3600), &n)
        .await
        .expect_err("nothing answers");
    assert_eq!(e.to_string(), "dial: connection refused");
    assert_eq!(e.blame(), Blame::Backend);
}

#[tokio::test]
async fn an_address_that_lost_the_race_is_tried_last_by_the_next_dial() {
    let (_hole, _fillers, hole) = black_hole().await;
    let good = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let good_addr = good.local_addr().expect("addr");
    let memory = Memory::default();
    let delay = Duration::from_millis(50);
    let n = AtomicU32::new(0);
    let first = race(vec![hole, good_addr], delay, &n, &memory)
        .await
        .expect("connected");
    assert_eq!(
        first.attempt, 1,
        "the black hole went first and cost a delay"
    );
    for _ in 0..3 {
        let n = AtomicU32::new(0);
        let next = race(vec![hole, good_addr], delay, &n, &memory)
            .await
            .expect("connected");
        assert_eq!(
            (next.attempt, n.load(Ordering::Relaxed)),
            (0, 1),
            "the remembered failure goes last: one attempt, no delay"
        );
    }
}
