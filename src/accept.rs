//! Accepting connections, shared by the proxy listeners, the admin server and the simulated
//! apiserver: one loop that stops on cancellation and backs off on errors.
//!
//! An accept error (EMFILE, ENFILE, ENOBUFS) is logged once per burst — at most once per
//! [`LOG_EVERY`], with the count of failures since — not once per attempt, and the loop pauses
//! before trying again, so a descriptor shortage neither spins a core nor floods the log. Does not
//! own what happens to an accepted connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Pause after a failed accept before trying again: long enough for descriptors to free up, short
/// enough that clients barely notice.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accept failures are logged at most this often: a descriptor shortage comes and goes many
/// times a second while connections close and open, and that is one incident.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// An incident is over when a connection is accepted this long after the last failure.
pub const QUIET_AFTER: Duration = Duration::from_secs(1);

/// Dropping an acceptor stops its socket listening at once (`shutdown(SHUT_RD)` on a listening
/// socket disconnects it), even while another copy of the descriptor exists — a child process
/// between fork and exec holds one — so no connection is queued that nobody will accept.
impl Drop for Acceptor {
    fn drop(&mut self) {
        let _ = socket2::SockRef::from(&self.listener).shutdown(std::net::Shutdown::Read);
    }
}

/// A listener and the token that stops it.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    stop: CancellationToken,
    /// Names the listener in logs (`listen`, `admin`, …).
    what: &'static str,
    /// Failed accepts since the last log line about them.
    failures: u64,
    /// When failures were last logged; `Some` until "accepting again" is said.
    warned: Option<Instant>,
    /// The latest failed accept.
    last_failure: Option<Instant>,
}

impl Acceptor {
    /// Accepts on `listener` until `stop` is cancelled.
    pub fn new(what: &'static str, listener: TcpListener, stop: CancellationToken) -> Self {
        Acceptor {
            listener,
            stop,
            what,
            failures: 0,
            warned: None,
            last_failure: None,
        }
    }

    /// The next connection, or `None` once stopped. Errors are logged and waited out here.
    pub async fn next(&mut self) -> Option<(TcpStream, SocketAddr)> {
        loop {
            let accepted = tokio::select! {
                _ = self.stop.cancelled() => return None,
                a = self.listener.accept() => a,
            };
            match accepted {
                Ok(conn) => {
                    // Over once a connection is accepted a while after the last failure.
                    let over = self.warned.is_some()
                        && self
                            .last_failure
                            .is_some_and(|t| t.elapsed() >= QUIET_AFTER);
                    if over {
                        tracing::info!(
                            listener = self.what,
                            failures = self.failures,
                            "accepting again"
                        );
                        (self.failures, self.warned) = (0, None);
                    }
                    return Some(conn);
                }
                Err(e) => {
                    self.failures += 1;
                    self.last_failure = Some(Instant::now());
                    if self.warned.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                        tracing::warn!(listener = self.what, error = %e, failures = self.failures, "accept failed; backing off");
                        (self.failures, self.warned) = (0, Some(Instant::now()));
                    }
                    tokio::select! {
                        _ = self.stop.cancelled() => return None,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_acceptor_stops_listening_even_while_a_copy_of_its_descriptor_lives() {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = std_listener.local_addr().expect("addr");
        // As a child process between fork and exec holds one.
        let copy = std_listener.try_clone().expect("dup");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let listener = TcpListener::from_std(std_listener).expect("tokio listener");
        let acceptor = Acceptor::new("test", listener, CancellationToken::new());
        assert!(TcpStream::connect(addr).await.is_ok(), "listening");
        drop(acceptor);
        let after = TcpStream::connect(addr).await;
        assert!(after.is_err(), "still accepting after the drop: {after:?}");
        drop(copy);
    }
}
