//! `/readyz` (or any path) probed as the balancer probes it: a new TLS connection with the kubelet's
//! client certificate, one GET, the answer's status, failing checks and `Retry-After`, and how long
//! it took; a refused dial is its own outcome (the listener is closed). A [`Prober`] repeats that
//! on one address and keeps every result with its time from the test's start.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use readyprism::testing::Cluster;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What one probe saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The dial was refused: nothing listens.
    Refused,
    /// No answer within the probe's deadline.
    Timeout,
    /// Some other failure before an answer (TLS, reset, EOF), in its words.
    Failed(String),
    /// An answer.
    Answer {
        status: u16,
        /// The `[-]NAME failed` lines' names, in order.
        failing: Vec<String>,
        /// The `Retry-After` header, if any.
        retry_after: Option<String>,
    },
}

/// One probe: when it started (seconds from the test's start), how long it took, what it saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: f64,
    pub took: f64,
    pub outcome: Outcome,
}

impl Seen {
    pub fn status(&self) -> Option<u16> {
        match &self.outcome {
            Outcome::Answer { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn failing(&self) -> Vec<String> {
        match &self.outcome {
            Outcome::Answer { failing, .. } => failing.clone(),
            _ => Vec::new(),
        }
    }
}

/// The names of the `[-]NAME failed…` lines of a health answer.
pub fn failing_checks(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("[-]"))
        .filter_map(|l| l.split_once(' ').map(|(name, _)| name.to_string()))
        .collect()
}

/// One GET of `path` on a new connection to `addr`, within `deadline`.
pub async fn probe(cluster: &Cluster, addr: SocketAddr, path: &str, deadline: Duration) -> Outcome {
    let attempt = async {
        let mut conn = match cluster.connect(addr).await {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Outcome::Refused,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        match conn.get_with_headers(path).await {
            Ok((status, headers, body)) => Outcome::Answer {
                status,
                failing: failing_checks(&body),
                retry_after: headers
                    .get(hyper::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            },
            Err(e) => Outcome::Failed(e.to_string()),
        }
    };
    tokio::time::timeout(deadline, attempt)
        .await
        .unwrap_or(Outcome::Timeout)
}

/// Probes of one address, one after another, `every` apart (or back to back when one took
/// longer), each bounded by `deadline`, until stopped.
pub struct Prober {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    pub fn start(
        cluster: Arc<Cluster>,
        addr: SocketAddr,
        path: &'static str,
        t0: Instant,
        (every, deadline): (Duration, Duration),
    ) -> Prober {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let (sink, halt) = (seen.clone(), stop.clone());
        let task = tokio::spawn(async move {
            while !halt.is_cancelled() {
                let start = Instant::now();
                let outcome = probe(&cluster, addr, path, deadline).await;
                sink.lock().expect("seen").push(Seen {
                    at: (start - t0).as_secs_f64(),
                    took: start.elapsed().as_secs_f64(),
                    outcome,
                });
                tokio::select! {
                    () = halt.cancelled() => {}
                    () = tokio::time::sleep_until(start + every) => {}
                }
            }
        });
        Prober { seen, stop, task }
    }

    /// Every probe so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// Stops it (a probe under way is abandoned); returns every probe.
    pub async fn finish(self) -> Vec<Seen> {
        self.stop.cancel();
        let Prober { seen, task, .. } = self;
        let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        let all = seen.lock().expect("seen").clone();
        all
    }
}
