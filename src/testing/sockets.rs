//! Sockets that fail the way networks do: an address that refuses, a listener that black-holes
//! SYNs, and one whose accept queue holds a single connection. Not a backend that answers
//! (`backends.rs`, `apiservers.rs`).
//!
//! Reads only the eviction spreads, which tests wait out to show a negative.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// The balancer spreads the closes of an evicted backend's connections over this window.
pub use crate::eviction::EVICT_SPREAD;

/// ... and a failback's closes over this one.
pub use crate::eviction::FAILBACK_SPREAD;

/// A bound socket of `addr`'s family.
fn bound(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.bind(&addr.into())?;
    Ok(s)
}

/// The address a socket is bound to.
fn local(s: &Socket) -> io::Result<SocketAddr> {
    s.local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an IP socket"))
}

/// An address on 127.0.0.1 that refuses connections for as long as the returned socket lives:
/// bound, never listening, so no other test can take the port and answer in its place.
pub fn refusing() -> io::Result<(Socket, SocketAddr)> {
    let s = bound(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = local(&s)?;
    Ok((s, addr))
}

/// A listener on 127.0.0.1 with a one-slot accept queue: once its owner stops accepting and the
/// queue is full, new SYNs are dropped and dials hang, as towards a black-holed site.
pub fn short_queue() -> io::Result<tokio::net::TcpListener> {
    let s = bound(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    s.listen(1)?;
    s.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(s.into())
}

/// A listener whose accept queue is full: the kernel drops SYNs to it, as on a black-holed path
/// (or a lossy link, until [`BlackHole::listener`] accepts). Holds its fillers; drop it to end.
#[derive(Debug)]
pub struct BlackHole {
    /// The listener, never accepting unless a test does.
    pub listener: Socket,
    /// Where dials hang.
    pub addr: SocketAddr,
    /// The connections that fill its queue.
    _fillers: Vec<TcpStream>,
}

impl BlackHole {
    /// A black hole on 127.0.0.1, on a port of the kernel's choosing.
    pub fn new() -> io::Result<BlackHole> {
        BlackHole::at(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// A black hole at `addr` (fails if the address is taken).
    pub fn at(addr: SocketAddr) -> io::Result<BlackHole> {
        let listener = bound(addr)?;
        listener.listen(1)?;
        let addr = local(&listener)?;
        let mut fillers = Vec::new();
        // A connection that does not complete within this is one whose SYN was dropped: full.
        while let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            fillers.push(c);
        }
        Ok(BlackHole {
            listener,
            addr,
            _fillers: fillers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusing_address_refuses_while_held() {
        let (_held, addr) = refusing().unwrap();
        let e = TcpStream::connect(addr).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_black_hole_leaves_a_dial_unanswered() {
        let hole = BlackHole::new().unwrap();
        let e = TcpStream::connect_timeout(&hole.addr, Duration::from_millis(300)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }
}
