//! Dialing a backend, for client connections and probes alike. Attempts are started a moment
//! apart and raced, the first to connect wins (the idea of Happy Eyeballs, RFC 8305):
//!
//! - every address a name resolves to gets its own attempt, so one black-holed address (typically
//!   an IPv6 path that a firewall drops) does not eat the whole connect budget as a sequential
//!   walk would;
//! - while nothing has connected, the addresses not known to fail get fresh attempts, so a lost
//!   SYN or SYN-ACK costs one attempt delay instead of Linux's initial 1 s SYN retransmission —
//!   which is the whole default `connect_timeout`. On a lossy link a dial then fails only when
//!   every attempt in the budget lost a packet, and passive health (a failed dial is a failed
//!   check) does not mistake loss for a black hole.
//!
//! Owns resolution order, the race and the budget; [`DialError`] owns what a failure means.

mod error;
mod memory;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinSet;

pub use error::{Blame, DialError};
pub use memory::Memory;

/// The next attempt starts this long after the previous one, if nothing has connected or failed
/// by then. RFC 8305 allows 100 ms to 2 s and recommends 250 ms between addresses; 150 ms gives
/// a 1 s budget seven attempts, and a backend closer than 150 ms never sees a second one unless
/// a packet was lost.
pub const ATTEMPT_DELAY: Duration = Duration::from_millis(150);

/// At most this many attempts per dial, whatever the budget: a black-holed backend gets a handful
/// of SYNs per dial, not a flood.
pub const MAX_ATTEMPTS: usize = 8;

/// Connects to `host:port` within `budget`: an IP literal directly, a name through the system
/// resolver with every address raced, those in `memory` as failing lately last. `attempts` counts
/// the connection attempts started (the SYNs this dial sent, retransmissions aside), also when
/// the budget runs out.
pub async fn connect(
    host: &str,
    port: u16,
    budget: Duration,
    attempts: &AtomicU32,
    memory: &Memory,
) -> Result<TcpStream, DialError> {
    let dial = async {
        let addrs = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => interleave(
                tokio::net::lookup_host((host, port))
                    .await
                    .map_err(DialError::Resolve)?
                    .collect(),
            ),
        };
        race(addrs, ATTEMPT_DELAY, attempts, memory)
            .await
            .map(|won| won.stream)
    };
    tokio::time::timeout(budget, dial)
        .await
        .unwrap_or(Err(DialError::Timeout(budget)))
}

/// [`connect_any`] with the addresses that failed lately last, teaching `memory` what lost.
async fn race(
    mut addrs: Vec<SocketAddr>,
    delay: Duration,
    attempts: &AtomicU32,
    memory: &Memory,
) -> Result<Won, DialError> {
    if addrs.len() < 2 {
        return connect_any(addrs, delay, attempts).await;
    }
    memory.order(&mut addrs, tokio::time::Instant::now());
    let won = connect_any(addrs, delay, attempts).await?;
    if let Ok(peer) = won.stream.peer_addr() {
        memory.learn(peer, &won.beaten, tokio::time::Instant::now());
    }
    Ok(won)
}

/// A dial that connected.
#[derive(Debug)]
struct Won {
    stream: TcpStream,
    /// The winning attempt's number (0: the first): what the tests of the race assert on.
    #[cfg_attr(not(test), allow(dead_code))]
    attempt: u32,
    /// Addresses whose attempts started before the winner's and did not connect.
    beaten: Vec<SocketAddr>,
}

/// Races connections to `addrs`: each `delay` after the previous attempt (or at once when one
/// failed) the next attempt starts, to the next address in order and, once all have had one,
/// again to those whose attempts have not failed, up to [`MAX_ATTEMPTS`]. The first to connect
/// wins (with its attempt number and the addresses it beat) and the others are dropped; when
/// every address has failed, the last error is returned. A shortage of this node fails the dial
/// at once.
async fn connect_any(
    addrs: Vec<SocketAddr>,
    delay: Duration,
    attempts: &AtomicU32,
) -> Result<Won, DialError> {
    let mut schedule = Schedule {
        live: addrs,
        next: 0,
        started: 0,
    };
    // Every attempt's address, in the order they started.
    let mut tried = Vec::new();
    let mut take = |schedule: &mut Schedule| {
        let next = schedule.take()?;
        tried.push(next);
        attempts.fetch_add(1, Ordering::Relaxed);
        Some((next, tried.len() as u32 - 1))
    };
    let (first_addr, _) = take(&mut schedule).ok_or(DialError::NoAddress)?;
    // The first attempt runs in this task: the common dial, which connects before the next
    // attempt is due, spawns nothing. Later attempts are tasks in `attempts`.
    let first = TcpStream::connect(first_addr);
    tokio::pin!(first);
    let mut first_pending = true;
    let mut running = JoinSet::new();
    let mut last_error = None;
    let start = |running: &mut JoinSet<_>, (addr, n): (SocketAddr, u32)| {
        running.spawn(async move { (addr, n, TcpStream::connect(addr).await) });
    };
    loop {
        if !first_pending && running.is_empty() {
            match take(&mut schedule) {
                Some(a) => start(&mut running, a),
                None => return Err(last_error.unwrap_or(DialError::NoAddress)),
            }
        }
        let ended = tokio::select! {
            r = &mut first, if first_pending => {
                first_pending = false;
                Some((first_addr, 0, r))
            }
            done = running.join_next(), if !running.is_empty() => match done {
                Some(Ok(ended)) => Some(ended),
                Some(Err(join)) => {
                    last_error = Some(DialError::Connect(io::Error::other(join)));
                    None
                }
                None => None,
            },
            _ = tokio::time::sleep(delay), if schedule.can_start() => {
                if let Some(a) = take(&mut schedule) {
                    start(&mut running, a);
                }
                None
            }
        };
        let Some((addr, n, result)) = ended else {
            continue;
        };
        let e = match result {
            Ok(stream) => {
                // Dropping the set aborts the rest.
                drop(running);
                let mut beaten: Vec<SocketAddr> = Vec::new();
                for a in tried.iter().take(n as usize) {
                    if *a != addr && !beaten.contains(a) {
                        beaten.push(*a);
                    }
                }
                return Ok(Won {
                    stream,
                    attempt: n,
                    beaten,
                });
            }
            Err(e) => DialError::Connect(e),
        };
        // This node cannot dial (no descriptor, port or memory): the whole dial fails at once
        // with that error, which no health check counts, rather than dropping the address from
        // the rotation and running into a timeout that would count.
        if e.blame() == Blame::ThisNode {
            return Err(e);
        }
        last_error = Some(e);
        schedule.failed(addr);
        if let Some(a) = take(&mut schedule) {
            start(&mut running, a);
        }
    }
}

/// Which address the next attempt goes to: round-robin over the addresses not known to fail.
struct Schedule {
    live: Vec<SocketAddr>,
    next: usize,
    started: usize,
}

impl Schedule {
    fn can_start(&self) -> bool {
        self.started < MAX_ATTEMPTS && !self.live.is_empty()
    }

    fn take(&mut self) -> Option<SocketAddr> {
        if !self.can_start() {
            return None;
        }
        let addr = *self.live.get(self.next % self.live.len())?;
        self.next = (self.next + 1) % self.live.len();
        self.started += 1;
        Some(addr)
    }

    /// An attempt to `addr` failed (refused, unreachable): it gets no more.
    fn failed(&mut self, addr: SocketAddr) {
        if let Some(pos) = self.live.iter().position(|a| *a == addr) {
            self.live.remove(pos);
            if pos < self.next {
                self.next -= 1;
            }
            if self.next >= self.live.len() {
                self.next = 0;
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
mod tests;
