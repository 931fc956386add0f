//! One record per client connection, logged once when it ends (as HAProxy's and Envoy's access
//! logs do): who it was, where it went, what it cost to get there, what it moved, and who ended
//! it and why. Nothing is logged per packet.
//!
//! Evictions and failures are logged at `info`, ordinary ends at `debug`, so a node's log is
//! not flooded by kubelet's short requests. The field names are stable (the README lists them).
//! Does not own the connection's lifecycle (`proxy`).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use crate::backend::BackendSpec;
use crate::eviction::CloseReason;
use crate::relay::{Ended, Moved};

/// How a client connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The client closed first (both ways then ended).
    ClientClosed,
    /// The backend closed first (both ways then ended).
    BackendClosed,
    /// One way ended and the other stayed silent for 60 s.
    HalfClosedIdle,
    /// The relay failed (a reset, a broken pipe) on `leg`: the error as the kernel said it.
    Error {
        /// The socket that failed: its peer ended the connection.
        leg: Leg,
        /// The error, prefixed with the leg (`client: …`).
        error: String,
    },
    /// TCP gave up on the backend leg (data unacknowledged for the user timeout, or keepalive
    /// unanswered): a dead path, counted as a failed check of the backend. The error as said.
    DeadPath(String),
    /// TCP gave up on the backend leg while the backend stopped reading (a zero window for the
    /// user timeout): alive, so not a failed check. The error as said.
    StalledReader(String),
    /// Closed by us because its backend was evicted, with why.
    Evicted(CloseReason),
    /// Cut at shutdown after the grace period.
    Shutdown,
    /// Never relayed: no backend was ready and the policy is `refuse`.
    NoReadyBackend,
    /// Never relayed: every candidate's dial failed.
    AllDialsFailed,
    /// Never relayed: this node could not dial (out of descriptors, ports or memory).
    ThisNodeShort,
    /// The connection's task was dropped before it ended (the runtime shut down, or the task
    /// panicked): written by the record's `Drop`, with the bytes it cannot see as 0.
    Dropped,
}

/// One side of a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// The client's socket.
    Client,
    /// The backend's socket.
    Backend,
}

impl Leg {
    /// `client` or `backend`.
    pub fn as_str(self) -> &'static str {
        match self {
            Leg::Client => "client",
            Leg::Backend => "backend",
        }
    }
}

impl End {
    /// Who ended it: `client` or `backend` when that side closed or its socket failed (a reset
    /// comes from the peer), else `balancer`.
    pub fn ended_by(&self) -> &'static str {
        match self {
            End::ClientClosed => "client",
            End::BackendClosed => "backend",
            End::Error { leg, .. } => leg.as_str(),
            _ => "balancer",
        }
    }

    /// Why, as one stable word (an eviction's reason is its [`CloseReason`] name).
    pub fn reason(&self) -> &'static str {
        match self {
            End::ClientClosed | End::BackendClosed => "closed",
            End::HalfClosedIdle => "half_closed_idle",
            End::Error { .. } => "error",
            End::DeadPath(_) => CloseReason::DeadPath.as_str(),
            End::StalledReader(_) => CloseReason::StalledReader.as_str(),
            End::Evicted(r) => r.as_str(),
            End::Shutdown => "shutdown",
            End::NoReadyBackend => "no_ready_backend",
            End::AllDialsFailed => "all_dials_failed",
            End::ThisNodeShort => "this_node_short",
            End::Dropped => "dropped",
        }
    }

    /// Whether the record is worth `info`: evictions and failures are, ordinary ends are not.
    fn notable(&self) -> bool {
        !matches!(self, End::ClientClosed | End::BackendClosed)
    }
}

impl From<Ended> for End {
    fn from(e: Ended) -> Self {
        match e {
            Ended::ClientFirst => End::ClientClosed,
            Ended::BackendFirst => End::BackendClosed,
            Ended::HalfClosedIdle => End::HalfClosedIdle,
        }
    }
}

/// What is known of one client connection so far. It lives as long as the connection, idle
/// ones included, so it is kept to a few words.
#[derive(Debug)]
pub struct Record {
    /// The accept, in [`clock_us`] (8 B, where an `Instant` takes 16).
    started_us: u64,
    /// The backend relayed to, once connected.
    backend: Option<Arc<BackendSpec>>,
    /// TCP connection attempts over all dials (each a SYN, retransmissions aside; saturating).
    attempts: u16,
    /// The connection's sequence number (wrapping), which spreads its close when evicted.
    seq: u32,
    /// Candidates dialed (1 when the first pick connected; saturating).
    dials: u16,
    /// The relayed backend's candidate number (0: the first pick; saturating at 255, far past
    /// any cluster's count of apiservers).
    rank: u8,
    /// The client's address and port, without an IPv6 address's flow label and scope (a
    /// `SocketAddr` takes 32 B; these 19 make the record 48 B, not 64).
    client_ip: IpAddr,
    client_port: u16,
    /// From the accept to the connected dial, in microseconds (saturating after 71 minutes, far
    /// beyond any dial budget).
    connect_us: u32,
}

impl Record {
    /// The client's address.
    pub fn client(&self) -> SocketAddr {
        SocketAddr::new(self.client_ip, self.client_port)
    }

    /// A connection accepted now from `client`.
    pub fn new(client: SocketAddr) -> Self {
        Record {
            client_ip: client.ip(),
            client_port: client.port(),
            started_us: clock_us(),
            backend: None,
            dials: 0,
            attempts: 0,
            seq: 0,
            rank: 0,
            connect_us: 0,
        }
    }

    /// The connection's sequence number is `seq` (only its low 32 bits are kept: they spread).
    pub fn number(&mut self, seq: usize) {
        self.seq = seq as u32;
    }

    /// The connection's sequence number.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// One more candidate dialed.
    pub fn dialing(&mut self) {
        self.dials = self.dials.saturating_add(1);
    }

    /// A dial made `n` connection attempts.
    pub fn attempted(&mut self, n: u32) {
        let n = u16::try_from(n).unwrap_or(u16::MAX);
        self.attempts = self.attempts.saturating_add(n);
    }

    /// Microseconds since the accept.
    fn elapsed_us(&self) -> u64 {
        clock_us().saturating_sub(self.started_us)
    }

    /// Connected to `backend`, candidate number `rank` (0: the first pick), now.
    pub fn connected(&mut self, backend: Arc<BackendSpec>, rank: usize) {
        self.backend = Some(backend);
        self.rank = u8::try_from(rank).unwrap_or(u8::MAX);
        self.connect_us = u32::try_from(self.elapsed_us()).unwrap_or(u32::MAX);
    }

    /// Logs the record: once, at the connection's end. A record dropped unlogged logs itself
    /// as [`End::Dropped`].
    pub fn log(mut self, end: &End, moved: &Moved) {
        self.write(end, moved);
        self.started_us = LOGGED;
    }

    fn write(&self, end: &End, moved: &Moved) {
        let relayed = self.backend.as_deref();
        let backend = relayed.map_or("", |b| b.id.as_str());
        let zone = relayed.and_then(|b| b.zone.as_deref()).unwrap_or("");
        let rank = relayed.map_or(-1, |_| i64::from(self.rank));
        let connect_ms = relayed.map_or(0.0, |_| f64::from(self.connect_us) / 1000.0);
        let duration_ms = self.elapsed_us() as f64 / 1000.0;
        let to_backend_bytes = moved.to_backend.load(Ordering::Relaxed);
        let to_client_bytes = moved.to_client.load(Ordering::Relaxed);
        let error = match end {
            End::Error { error: e, .. } | End::DeadPath(e) | End::StalledReader(e) => e.as_str(),
            _ => "",
        };
        let (client, dials, attempts) = (self.client(), self.dials, self.attempts);
        let (ended_by, reason) = (end.ended_by(), end.reason());
        macro_rules! emit {
            ($level:ident) => {
                tracing::$level!(
                    // Formatted only when the event is enabled: no allocation per connection.
                    client = %client,
                    backend,
                    zone,
                    rank,
                    dials,
                    attempts,
                    connect_ms,
                    to_backend_bytes,
                    to_client_bytes,
                    duration_ms,
                    ended_by,
                    reason,
                    error,
                    "connection ended"
                )
            };
        }
        if end.notable() {
            emit!(info);
        } else {
            emit!(debug);
        }
    }
}

/// `started_us` of a record already logged (a clock reaches it after 584 000 years): a marker
/// that keeps the record at 48 B, where a flag would make it 56.
const LOGGED: u64 = u64::MAX;

impl Drop for Record {
    /// A connection whose task is dropped before its end (the runtime shutting down, a panic)
    /// still leaves its record.
    fn drop(&mut self) {
        if self.started_us != LOGGED {
            self.write(&End::Dropped, &Moved::default());
        }
    }
}

/// Microseconds since the first record of this process: a record's clock, 8 B where an
/// `Instant` takes 16, in a record that every idle connection holds.
fn clock_us() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(Instant::now().saturating_duration_since(base).as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_keeps_the_client_as_accepted() {
        for client in ["10.0.0.7:40000", "[::1]:7445", "[fe80::1%2]:1"] {
            let client: SocketAddr = client.parse().expect("address");
            let r = Record::new(client);
            assert_eq!(
                (r.client().ip(), r.client().port()),
                (client.ip(), client.port())
            );
        }
    }

    #[test]
    fn the_records_counters_saturate() {
        let mut r = Record::new("127.0.0.1:1".parse().expect("address"));
        r.attempted(3);
        r.attempted(70_000);
        for _ in 0..70_000 {
            r.dialing();
        }
        let spec = crate::testing::fixtures::spec("10.0.0.1:6443", None);
        r.connected(spec, 300);
        r.number(usize::MAX);
        assert_eq!(
            (r.attempts, r.dials, r.rank, r.seq()),
            (u16::MAX, u16::MAX, u8::MAX, u32::MAX)
        );
        assert!(r.backend.is_some());
    }

    /// The JSON lines `f` logs at `debug` and above.
    fn logged(f: impl FnOnce()) -> Vec<serde_json::Value> {
        #[derive(Clone, Default)]
        struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lines").extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // Another test thread may have hit these callsites first, with no subscriber, and
            // cached their interest as "never" while this one was being installed (tracing's
            // interest cache races with a thread-local dispatcher): computed again now that it is.
            tracing::callsite::rebuild_interest_cache();
            f()
        });
        let text = String::from_utf8(lines.0.lock().expect("lines").clone()).expect("utf-8");
        text.lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    }

    #[test]
    fn a_record_logs_exactly_once_as_dropped_if_dropped_unlogged() {
        let client: SocketAddr = "10.0.0.7:40000".parse().expect("address");
        let dropped = logged(|| drop(Record::new(client)));
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        let f = &dropped[0]["fields"];
        assert_eq!(
            (&f["message"], &f["reason"], &f["ended_by"], &f["client"]),
            (
                &serde_json::json!("connection ended"),
                &serde_json::json!("dropped"),
                &serde_json::json!("balancer"),
                &serde_json::json!("10.0.0.7:40000")
            )
        );
        assert_eq!(dropped[0]["level"], "INFO");
        let ended = logged(|| Record::new(client).log(&End::ClientClosed, &Moved::default()));
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(ended[0]["fields"]["reason"], "closed");
    }

    #[test]
    fn every_end_says_who_ended_it_why_how_loudly() {
        let cases = [
            (End::ClientClosed, "client", "closed", false),
            (End::BackendClosed, "backend", "closed", false),
            (End::HalfClosedIdle, "balancer", "half_closed_idle", true),
            (
                End::Error {
                    leg: Leg::Client,
                    error: "client: reset".into(),
                },
                "client",
                "error",
                true,
            ),
            (
                End::Error {
                    leg: Leg::Backend,
                    error: "backend: reset".into(),
                },
                "backend",
                "error",
                true,
            ),
            (End::Dropped, "balancer", "dropped", true),
            (
                End::DeadPath("backend: connection timed out".into()),
                "balancer",
                "dead_path",
                true,
            ),
            (
                End::Evicted(CloseReason::TurnedUnready),
                "balancer",
                "turned_unready",
                true,
            ),
            (
                End::Evicted(CloseReason::Removed),
                "balancer",
                "removed",
                true,
            ),
            (End::Shutdown, "balancer", "shutdown", true),
            (End::NoReadyBackend, "balancer", "no_ready_backend", true),
            (End::AllDialsFailed, "balancer", "all_dials_failed", true),
            (End::ThisNodeShort, "balancer", "this_node_short", true),
        ];
        for (end, by, why, notable) in cases {
            assert_eq!(
                (end.ended_by(), end.reason(), end.notable()),
                (by, why, notable),
                "{end:?}"
            );
        }
    }
}
