//! Dialing a backend, for client connections and probes alike. Attempts are started a moment
//! apart and raced, the first to connect wins (the idea of Happy Eyeballs, RFC 8305):
//!
//! - every address a name resolves to gets its own attempt, so one black-holed address (typically
//!   an IPv6 path that a firewall drops) does not eat the whole connect budget as a sequential
//!   walk would;
//! - while nothing has connected, each address not known to fail gets a bounded number of fresh
//!   attempts ([`schedule`]: the first re-attempt 150 ms after the first attempt, then a jittered,
//!   doubled gap, at most 3 per address), so a lost SYN or SYN-ACK costs 150 ms instead of Linux's
//!   initial 1 s SYN retransmission — which is the whole default `connect_timeout` — while a
//!   black-holed or overloaded backend gets at most 3 SYNs per dial, not a storm;
//! - while a herd of dials waits on the same backend and none of its attempts has connected since
//!   they began ([`herd`]), re-attempts are skipped: a herd into a full accept queue sends about
//!   one SYN per dial.
//!
//! Each attempt's socket gets the caller's [`SocketOptions`] before its `connect`, and a connect
//! that succeeds is not asked for its error, so the connection a dial returns costs `socket`,
//! the options' `setsockopt`s and `connect`, nothing more.
//!
//! Owns resolution order, the race and the budget; [`DialError`] owns what a failure means.

pub mod bounded;
mod error;
pub mod herd;
mod memory;
mod options;
mod plan;
pub mod schedule;

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, Type};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use error::{Blame, DialError, SHORTAGE_LABELS};
use herd::Herd;
pub use memory::Memory;
pub use options::{Keepalive, SocketOptions};
use plan::Plan;
use schedule::ATTEMPT_LIFETIME;

/// What one dial sent, for the connection's record and `readyprism_dial_reattempts_total`.
/// Atomics, so the counts are right also when the dial is dropped (its budget ran out, shutdown).
#[derive(Debug, Default)]
pub struct Tally {
    /// Attempts started: the SYNs the dial sent (attempts are given up before the kernel would
    /// retransmit one, see [`ATTEMPT_LIFETIME`]).
    pub attempts: AtomicU32,
    /// Of those, attempts to an address the dial had already tried.
    pub reattempts: AtomicU32,
}

/// Connects to `host:port` within `budget`: an IP literal directly, a name through the system
/// resolver with every address raced, those in `memory` as failing lately last, attempts as
/// [`schedule::plan`] says, each attempt's socket set up with `options`. `tally` counts what was
/// sent, also when the budget runs out.
pub async fn connect(
    host: &str,
    port: u16,
    budget: Duration,
    tally: &Tally,
    memory: &Memory,
    options: &SocketOptions,
) -> Result<TcpStream, DialError> {
    let deadline = Instant::now() + budget;
    let won = match host.parse::<IpAddr>() {
        Ok(ip) => {
            let addr = [SocketAddr::new(ip, port)];
            connect_any(&addr, deadline, budget, tally, &memory.herd, options).await
        }
        Err(_) => {
            let addrs = tokio::time::timeout_at(deadline, tokio::net::lookup_host((host, port)))
                .await
                .map_err(|_| DialError::Timeout(budget))?
                .map_err(DialError::Resolve)?
                .collect();
            race(interleave(addrs), deadline, budget, tally, memory, options).await
        }
    };
    won.map(|won| won.stream)
}

/// [`connect_any`] with the addresses that failed lately last, teaching `memory` what lost.
async fn race(
    mut addrs: Vec<SocketAddr>,
    deadline: Instant,
    budget: Duration,
    tally: &Tally,
    memory: &Memory,
    options: &SocketOptions,
) -> Result<Won, DialError> {
    if addrs.len() < 2 {
        return connect_any(&addrs, deadline, budget, tally, &memory.herd, options).await;
    }
    memory.order(&mut addrs, Instant::now());
    let won = connect_any(&addrs, deadline, budget, tally, &memory.herd, options).await?;
    if let Ok(peer) = won.stream.peer_addr() {
        memory.learn(peer, &won.beaten, Instant::now());
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

/// How one attempt ended.
enum Ended {
    Connected(TcpStream),
    /// `connect` failed (refused, unreachable, ...): the address gets no more attempts.
    Failed(io::Error),
    /// No answer within [`ATTEMPT_LIFETIME`]: dropped; the address keeps its planned re-attempts.
    Unanswered,
}

/// One attempt to `addr` with no time limit of its own: its socket is made, set up with
/// `options` and sends its SYN at once, before the future is first polled; the future only waits
/// (and holds no copy of the options). The first attempt of a dial, which the dial's own timer
/// gives up.
fn unbounded(addr: SocketAddr, options: &SocketOptions) -> impl Future<Output = Ended> + 'static {
    let started = start(addr, options);
    async move {
        match started {
            Ok(stream) => Ended::from(connected(stream).await),
            Err(e) => Ended::Failed(e),
        }
    }
}

/// [`unbounded`], given up after [`ATTEMPT_LIFETIME`]: a re-attempt, run as a task of its own.
fn attempt(addr: SocketAddr, options: &SocketOptions) -> impl Future<Output = Ended> + 'static {
    let attempt = unbounded(addr, options);
    async move {
        tokio::time::timeout(ATTEMPT_LIFETIME, attempt)
            .await
            .unwrap_or(Ended::Unanswered)
    }
}

impl From<io::Result<TcpStream>> for Ended {
    fn from(r: io::Result<TcpStream>) -> Ended {
        match r {
            Ok(stream) => Ended::Connected(stream),
            Err(e) => Ended::Failed(e),
        }
    }
}

/// A non-blocking socket to `addr` with `options` set, its connect started.
fn start(addr: SocketAddr, options: &SocketOptions) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking(), None)?;
    options.apply(SockRef::from(&socket));
    match socket.connect(&addr.into()) {
        Err(e) if e.raw_os_error() != Some(libc::EINPROGRESS) => return Err(e),
        _ => {}
    }
    TcpStream::from_std(socket.into())
}

/// Waits until `stream`'s connect ends. Writable without an error is connected: only a failed
/// connect reads `SO_ERROR` (tokio's own connect reads it every time, a syscall per dial).
async fn connected(stream: TcpStream) -> io::Result<TcpStream> {
    let ready = stream.ready(Interest::WRITABLE | Interest::ERROR).await?;
    if ready.is_error() || ready.is_write_closed() {
        return Err(stream
            .take_error()?
            .unwrap_or_else(|| io::ErrorKind::NotConnected.into()));
    }
    Ok(stream)
}

/// Races connections to `addrs` on [`schedule::plan`]'s times until `deadline` (`budget` from
/// the dial's start). The first to connect wins (with its attempt number and the addresses it
/// beat) and the others are dropped.
/// A failed address gets no more attempts; when nothing is in flight, the next address's first
/// attempt starts at once (re-attempts keep their time: a black hole is not hammered). When the
/// plan is used up, the last error is returned; at the deadline, [`DialError::Timeout`]. A
/// shortage of this node fails the dial at once. A re-attempt that `herd` says a herd skips is
/// dropped from the plan, not sent.
///
/// One timer serves the whole dial: the next of the budget's end, the first attempt's
/// [`ATTEMPT_LIFETIME`] and the next planned attempt. A dial that connects before its first
/// re-attempt is due, nearly every one, registers that timer once and never fires it.
async fn connect_any(
    addrs: &[SocketAddr],
    deadline: Instant,
    budget: Duration,
    tally: &Tally,
    herd: &Herd,
    options: &SocketOptions,
) -> Result<Won, DialError> {
    let _waiting = herd.wait();
    let began = Instant::now();
    let mut plan = Plan::new(addrs, deadline.saturating_duration_since(began), seed());
    let (first_addr, first_n) = plan.take(tally).ok_or(DialError::NoAddress)?;
    // The first attempt runs in this task: the common dial, which connects before the next
    // attempt is due, spawns nothing and allocates no set. Later attempts are tasks in `running`,
    // made at the first of them. `None` once it ended or was given up (dropping its socket).
    let first_expires = began + ATTEMPT_LIFETIME;
    let mut first = std::pin::pin!(Some(unbounded(first_addr, options)));
    let mut running: Option<JoinSet<(SocketAddr, u32, Ended)>> = None;
    let mut last_error = None;
    // The next of the budget's end, the first attempt's end (while it runs) and the plan's next.
    let next_wake = |first_pending: bool, plan: &Plan| {
        let mut wake = deadline;
        if first_pending {
            wake = wake.min(first_expires);
        }
        plan.due().map_or(wake, |due| wake.min(due))
    };
    let timer = tokio::time::sleep_until(next_wake(true, &plan));
    tokio::pin!(timer);
    loop {
        let first_pending = first.is_some();
        let in_flight = running.as_ref().is_some_and(|r| !r.is_empty());
        if !first_pending && !in_flight && !plan.bring_forward() {
            return Err(last_error.unwrap_or(DialError::NoAddress));
        }
        let wake = next_wake(first_pending, &plan);
        if timer.deadline() != wake {
            timer.as_mut().reset(wake);
        }
        let ended = tokio::select! {
            r = async { Some(first.as_mut().as_pin_mut()?.await) }, if first_pending => {
                first.set(None);
                r.map(|r| (first_addr, first_n, r))
            }
            done = join_next(&mut running), if in_flight => match done {
                Some(Ok(ended)) => Some(ended),
                Some(Err(join)) => {
                    last_error = Some(DialError::Connect(io::Error::other(join)));
                    None
                }
                None => None,
            },
            () = &mut timer => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(DialError::Timeout(budget));
                }
                if first_pending && now >= first_expires {
                    first.set(None);
                    last_error = Some(DialError::Unanswered(plan.started()));
                }
                if plan.due().is_some_and(|due| due <= now) {
                    if plan.next_is_reattempt() && herd.skips_reattempt(began) {
                        plan.skip();
                    } else if let Some((addr, n)) = plan.take(tally) {
                        running
                            .get_or_insert_with(JoinSet::new)
                            .spawn({
                                let attempt = attempt(addr, options);
                                async move { (addr, n, attempt.await) }
                            });
                    }
                }
                None
            }
        };
        let Some((addr, n, result)) = ended else {
            continue;
        };
        let e = match result {
            Ended::Connected(stream) => {
                herd.connected(Instant::now());
                // Dropping the set aborts the rest.
                drop(running);
                return Ok(Won {
                    stream,
                    attempt: n,
                    beaten: plan.beaten(addr, n),
                });
            }
            Ended::Unanswered => {
                last_error = Some(DialError::Unanswered(plan.started()));
                continue;
            }
            Ended::Failed(e) => DialError::Connect(e),
        };
        // This node cannot dial (no descriptor, port or memory): the whole dial fails at once
        // with that error, which no health check counts, rather than dropping the address from
        // the rotation and running into a timeout that would count.
        if e.blame() == Blame::ThisNode {
            return Err(e);
        }
        last_error = Some(e);
        plan.failed(addr);
    }
}

/// The next attempt of `running` to end; `None` when there is none.
async fn join_next<T: 'static>(
    running: &mut Option<JoinSet<T>>,
) -> Option<Result<T, tokio::task::JoinError>> {
    running.as_mut()?.join_next().await
}

/// A fresh jitter seed per dial.
fn seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0u8)
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
