//! Dialing a backend, for client connections and probes alike: every address its name resolves to
//! gets its own attempt, started one after another a moment apart and raced (the idea of Happy
//! Eyeballs, RFC 8305), so one black-holed address — typically an IPv6 path that a firewall drops —
//! does not eat the whole connect budget as a sequential walk would.
//!
//! Owns resolution order and the race; the caller bounds the whole dial with its own timeout.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// The next address is tried this long after the previous attempt started, if that one has
/// neither connected nor failed (RFC 8305 recommends 250 ms).
pub const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// Connects to `host:port`: an IP literal directly, a name through the system resolver with
/// every address raced.
pub async fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return TcpStream::connect((ip, port)).await;
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    connect_any(interleave(addrs), ATTEMPT_DELAY).await
}

/// Races connections to `addrs` in order, starting each `delay` after the previous one (or at
/// once when the previous one failed); the first to connect wins and the others are dropped.
pub async fn connect_any(addrs: Vec<SocketAddr>, delay: Duration) -> io::Result<TcpStream> {
    let mut pending = addrs.into_iter();
    let mut attempts = JoinSet::new();
    let mut last_error = None;
    loop {
        if attempts.is_empty() {
            match pending.next() {
                Some(a) => {
                    attempts.spawn(TcpStream::connect(a));
                }
                None => {
                    return Err(last_error.unwrap_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, "the name has no address")
                    }))
                }
            }
        }
        tokio::select! {
            done = attempts.join_next() => match done {
                Some(Ok(Ok(stream))) => return Ok(stream), // dropping the set aborts the rest
                Some(Ok(Err(e))) => {
                    last_error = Some(e);
                    if let Some(a) = pending.next() {
                        attempts.spawn(TcpStream::connect(a));
                    }
                }
                Some(Err(join)) => last_error = Some(io::Error::other(join)),
                None => {}
            },
            _ = tokio::time::sleep(delay), if pending.len() > 0 => {
                if let Some(a) = pending.next() {
                    attempts.spawn(TcpStream::connect(a));
                }
            }
        }
    }
}

/// Alternates address families, keeping the resolver's order within each, starting with the
/// family it put first (RFC 8305 section 4).
fn interleave(addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let Some(first) = addrs.first().copied() else {
        return addrs;
    };
    let (mut same, mut other): (Vec<_>, Vec<_>) = addrs
        .into_iter()
        .partition(|a| a.is_ipv6() == first.is_ipv6());
    same.reverse();
    other.reverse();
    let mut out = Vec::with_capacity(same.len() + other.len());
    while !same.is_empty() || !other.is_empty() {
        out.extend(same.pop());
        out.extend(other.pop());
    }
    out
}

#[cfg(test)]
mod tests {
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
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
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

    #[tokio::test]
    async fn a_black_holed_first_address_does_not_take_the_budget_of_the_next() {
        let (_hole, _fillers, hole) = black_hole().await;
        let good = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let good_addr = good.local_addr().expect("addr");
        // Sequentially, the first attempt would hang until the caller's budget is gone.
        let dial = connect_any(vec![hole, good_addr], Duration::from_millis(50));
        let stream = tokio::time::timeout(Duration::from_secs(10), dial)
            .await
            .expect("the second address answers within the budget")
            .expect("connected");
        assert_eq!(stream.peer_addr().expect("peer"), good_addr);
    }

    #[tokio::test]
    async fn a_refused_address_moves_on_at_once_and_all_failing_is_the_last_error() {
        let refusing = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
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
        let s = connect_any(vec![refused, good_addr], Duration::from_secs(3600))
            .await
            .expect("connected");
        assert_eq!(s.peer_addr().expect("peer"), good_addr);
        let e = connect_any(vec![refused, refused], Duration::from_secs(3600))
            .await
            .expect_err("nothing answers");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
