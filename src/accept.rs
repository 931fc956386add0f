//! Accepting connections, shared by the proxy listeners, the admin server and the simulated
//! apiserver: one loop that stops on cancellation and backs off on errors.
//!
//! An accept error (EMFILE, ENFILE, ENOBUFS) is logged once per burst, not once per attempt, and
//! the loop pauses before trying again, so a descriptor shortage neither spins a core nor floods
//! the log. Does not own what happens to an accepted connection.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Pause after a failed accept before trying again: long enough for descriptors to free up, short
/// enough that clients barely notice.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A listener and the token that stops it.
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    stop: CancellationToken,
    /// Names the listener in logs (`listen`, `admin`, …).
    what: &'static str,
    /// Consecutive failed accepts; the first of a burst is logged, the end of it too.
    failures: u64,
}

impl Acceptor {
    /// Accepts on `listener` until `stop` is cancelled.
    pub fn new(what: &'static str, listener: TcpListener, stop: CancellationToken) -> Self {
        Acceptor {
            listener,
            stop,
            what,
            failures: 0,
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
                    if self.failures > 0 {
                        tracing::info!(
                            listener = self.what,
                            failures = self.failures,
                            "accepting again"
                        );
                        self.failures = 0;
                    }
                    return Some(conn);
                }
                Err(e) => {
                    if self.failures == 0 {
                        tracing::warn!(listener = self.what, error = %e, "accept failed; backing off");
                    }
                    self.failures += 1;
                    tokio::select! {
                        _ = self.stop.cancelled() => return None,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            }
        }
    }
}
