//! The TCP options a dial's caller wants on its connection, set on each attempt's socket before
//! its `connect`, so the connected stream needs no syscall after; the same set also configures a
//! listening socket, whose accepted connections inherit them on Linux. Owns how options are set
//! (best effort, one `setsockopt` each); does not own their values (the proxy and the probe
//! choose them).

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

/// TCP options for a socket, applied by [`SocketOptions::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    /// `TCP_NODELAY`: small, latency-bound requests go out at once.
    pub nodelay: bool,
    /// `SO_KEEPALIVE` with these timings.
    pub keepalive: Option<Keepalive>,
    /// `TCP_USER_TIMEOUT`: how long sent data may stay unacknowledged before the kernel aborts
    /// the connection. Set before `connect` it also bounds the SYN's retransmissions, which a
    /// dial's attempt lifetime (800 ms) cuts far sooner anyway.
    pub user_timeout: Option<Duration>,
}

/// TCP keepalive timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// `TCP_KEEPIDLE`: quiet time before the first probe.
    pub idle: Duration,
    /// `TCP_KEEPINTVL`: time between probes.
    pub interval: Duration,
    /// `TCP_KEEPCNT`: unanswered probes that end the connection. Not set when the options have a
    /// user timeout: Linux then ends a connection whose probe went unanswered for the user
    /// timeout and ignores `TCP_KEEPCNT` (tcp(7), `TCP_USER_TIMEOUT`), a wasted syscall.
    pub retries: u32,
}

impl SocketOptions {
    /// No option: the kernel's defaults.
    pub const NONE: SocketOptions = SocketOptions {
        nodelay: false,
        keepalive: None,
        user_timeout: None,
    };

    /// Sets the options on `socket`, best effort: an option the kernel refuses is logged at
    /// `debug` and the connection goes on without it, on the kernel's default.
    pub fn apply(&self, socket: SockRef<'_>) {
        if self.nodelay {
            if let Err(e) = socket.set_tcp_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY");
            }
        }
        if let Some(k) = self.keepalive {
            let mut params = TcpKeepalive::new()
                .with_time(k.idle)
                .with_interval(k.interval);
            if self.user_timeout.is_none() {
                params = params.with_retries(k.retries);
            }
            if let Err(e) = socket.set_tcp_keepalive(&params) {
                tracing::debug!(error = %e, "cannot set TCP keepalive");
            }
        }
        if let Some(timeout) = self.user_timeout {
            if let Err(e) = socket.set_tcp_user_timeout(Some(timeout)) {
                tracing::debug!(error = %e, "cannot set TCP_USER_TIMEOUT");
            }
        }
    }
}
