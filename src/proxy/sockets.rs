//! The TCP options of the proxy's two legs, each set once where its socket is made: on the client
//! listener before it listens (Linux copies them from the listening socket to every connection it
//! accepts) and on each backend dial attempt before its `connect` (by `dial`). An accepted or
//! dialed connection then needs no `setsockopt` of its own; the one exception is a client leg
//! whose backend reset: it is reset too ([`reset_on_close`]). Does not own how options are set
//! (`dial::SocketOptions`) or the user timeout's value (`dead_path_timeout`, in the snapshot's
//! routing; its reasoning is in `docs/config.md`, "Dead paths").

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::dial::{Keepalive, SocketOptions};

/// TCP keepalive on both legs: the first probe after 30 s of quiet, then every 10 s, three
/// unanswered probes end a client leg (about a minute to find a dead peer behind NAT); a backend
/// leg with a user timeout ends once a probe is unanswered for that long (without one, as the
/// client leg).
const KEEPALIVE: Keepalive = Keepalive {
    idle: Duration::from_secs(30),
    interval: Duration::from_secs(10),
    retries: 3,
};

/// The client leg: TCP_NODELAY (kubelet's requests are small and latency-bound) and keepalive.
pub const CLIENT: SocketOptions = SocketOptions {
    nodelay: true,
    keepalive: Some(KEEPALIVE),
    user_timeout: None,
};

/// The backend leg: the client leg's options and the user timeout that cuts a dead path
/// (`dead_path_timeout`; `None`: not set, the kernel's default).
pub fn backend(user_timeout: Option<Duration>) -> SocketOptions {
    SocketOptions {
        user_timeout,
        ..CLIENT
    }
}

/// The user timeout `backend` carries, as the log says it (`10s`); `unset` if it has none or it
/// cannot be read. One `getsockopt`, at the end of a connection cut as a dead path only.
pub fn user_timeout_text(backend: &TcpStream) -> String {
    match socket2::SockRef::from(backend).tcp_user_timeout() {
        Ok(Some(t)) => crate::config::DurationValue(t).to_string(),
        _ => "unset".to_string(),
    }
}

/// A client listener on `addr` whose accepted connections carry [`CLIENT`]'s options, set before
/// it listens so none is accepted without them. Otherwise as `TcpListener::bind`: SO_REUSEADDR,
/// a backlog of 128.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    CLIENT.apply(socket2::SockRef::from(&socket));
    socket.bind(addr)?;
    socket.listen(128)
}

/// Makes the close of `client` a reset instead of a FIN (`SO_LINGER` 0): its backend reset the
/// other leg, and a client told the stream ended cleanly could take what it got for all there
/// was (a response without a length, a stream read to its end). One `setsockopt`, at the end of
/// such a connection only. If it cannot be set, the client gets the FIN, as before.
pub fn reset_on_close(client: &TcpStream) {
    if let Err(e) = socket2::SockRef::from(client).set_linger(Some(Duration::ZERO)) {
        tracing::debug!(error = %e, "cannot pass the backend's reset on; the client gets a FIN");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::SockRef;
    use tokio::net::TcpStream;

    /// The options a connection carries, read back from the kernel.
    fn options(s: &TcpStream) -> (bool, bool, Duration, Duration, u32) {
        let s = SockRef::from(s);
        (
            s.tcp_nodelay().expect("TCP_NODELAY"),
            s.keepalive().expect("SO_KEEPALIVE"),
            s.tcp_keepalive_time().expect("TCP_KEEPIDLE"),
            s.tcp_keepalive_interval().expect("TCP_KEEPINTVL"),
            s.tcp_keepalive_retries().expect("TCP_KEEPCNT"),
        )
    }

    #[tokio::test]
    async fn an_accepted_connection_inherits_the_listeners_socket_options() {
        let l = listen("127.0.0.1:0".parse().expect("literal")).expect("listen");
        let dialer = TcpStream::connect(l.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (accepted, _) = l.accept().await.expect("accept");
        assert_eq!(
            options(&accepted),
            (
                true,
                true,
                Duration::from_secs(30),
                Duration::from_secs(10),
                3
            )
        );
        assert_ne!(
            options(&dialer),
            options(&accepted),
            "an untuned socket has the kernel's defaults"
        );
        assert_eq!(
            SockRef::from(&accepted).tcp_user_timeout().expect("get"),
            None,
            "the client leg has no user timeout"
        );
    }

    /// The user timeout a backend dial with `dead_path_timeout` leaves on its connection.
    async fn dialed_user_timeout(dead_path_timeout: Option<Duration>) -> Option<Duration> {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        let s = crate::dial::connect(
            "127.0.0.1",
            port,
            Duration::from_secs(30),
            &crate::dial::Tally::default(),
            &crate::dial::Memory::default(),
            &backend(dead_path_timeout),
        )
        .await
        .expect("dial");
        SockRef::from(&s).tcp_user_timeout().expect("get")
    }

    #[tokio::test]
    async fn a_backend_leg_carries_the_dead_path_timeout() {
        let t = Duration::from_secs(3);
        assert_eq!(dialed_user_timeout(Some(t)).await, Some(t));
    }

    #[tokio::test]
    async fn a_zero_dead_path_timeout_leaves_the_user_timeout_unset() {
        assert_eq!(dialed_user_timeout(None).await, None);
    }
}
