//! The soak's discovery answers: the `default/kubernetes` Endpoints object that every simulated
//! apiserver serves (as every apiserver of a cluster does) changes every [`ANSWER_EVERY`]: simulated apiservers of a pool join and leave,
//! and every fourth answer is a bad one (cut off mid-body, HTTP 500, not JSON) that must change
//! nothing. After the last answer, the balancer's list must settle on the static backends plus
//! the last good answer's.
//!
//! Owns the pool, the answers and their counts. Does not own the config (`edits`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::admin::StatusDoc;
use readyprism::sim::apiserver::{Control, FakeApiserver};

use crate::admin::get;

/// How many simulated apiservers discovery can add.
pub const POOL: usize = 6;
/// One new answer this often (the balancer polls every second).
const ANSWER_EVERY: Duration = Duration::from_secs(2);
/// After the last answer the list must settle within this: a backend leaves after 3 good answers
/// without it (3 polls of 1 s ± 10 %), with room for a loaded machine.
const SETTLE_DEADLINE: Duration = Duration::from_secs(20);
/// One `/status` or `/metrics` read (they compete with the admin flood).
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What the answers were.
#[derive(Debug, Default)]
pub struct Answers {
    /// Good answers served (each a new subset of the pool).
    pub good: AtomicU64,
    /// Bad answers served.
    pub bad: AtomicU64,
    /// The most backends `/status` listed at once (read at each answer).
    pub most_listed: AtomicU64,
}

/// Serves a new Endpoints answer on every simulated apiserver (`servers`) until `end`; answers the
/// pool addresses of the last good answer.
pub async fn run(
    servers: Vec<Arc<Control>>,
    pool: Vec<SocketAddr>,
    admin: SocketAddr,
    end: Instant,
    a: Arc<Answers>,
) -> BTreeSet<SocketAddr> {
    let mut last_good = BTreeSet::new();
    let mut n: usize = 0;
    while Instant::now() < end {
        n += 1;
        let bad = n % 4 == 0;
        for c in &servers {
            c.set_endpoints_cut(false);
        }
        if bad {
            a.bad.fetch_add(1, Ordering::Relaxed);
            for c in &servers {
                match n / 4 % 3 {
                    0 => c.set_endpoints_cut(true),
                    1 => c.set_endpoints_answer(500, "etcdserver: request timed out".into()),
                    _ => c.set_endpoints_answer(200, "<html>not an Endpoints object".into()),
                }
            }
        } else {
            a.good.fetch_add(1, Ordering::Relaxed);
            // A window of 1..=POOL members sliding over the pool: some join, some leave.
            let size = 1 + n % POOL;
            let members: Vec<SocketAddr> = (0..size).map(|i| pool[(n + i) % pool.len()]).collect();
            for c in &servers {
                c.set_endpoints(&members);
            }
            last_good = members.into_iter().collect();
        }
        if let Some(listed) = listed(admin).await {
            a.most_listed
                .fetch_max(listed.len() as u64, Ordering::Relaxed);
        }
        tokio::time::sleep(ANSWER_EVERY).await;
    }
    last_good
}

/// Waits until the balancer lists exactly `statics` and `last_good`; answers what it listed last.
pub async fn settled(
    admin: SocketAddr,
    statics: &[SocketAddr],
    last_good: &BTreeSet<SocketAddr>,
) -> Result<(), String> {
    let want: BTreeSet<String> = statics
        .iter()
        .chain(last_good)
        .map(|a| a.to_string())
        .collect();
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < SETTLE_DEADLINE {
        last = listed(admin).await;
        if last.as_ref() == Some(&want) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "the list did not settle within {SETTLE_DEADLINE:?}: {last:?}, want {want:?}"
    ))
}

/// The backends `/status` lists now, by address.
async fn listed(admin: SocketAddr) -> Option<BTreeSet<String>> {
    let (code, body) = get(admin, "/status", READ_TIMEOUT).await?;
    if code != 200 {
        return None;
    }
    let doc = serde_json::from_str::<StatusDoc>(&body).ok()?;
    Some(doc.backends.into_iter().map(|b| b.address).collect())
}

/// `readyprism_discovery_polls_total` by result, from `/metrics` (results never seen left out).
pub async fn polls(admin: SocketAddr) -> Vec<(String, u64)> {
    let Some((_, body)) = get(admin, "/metrics", READ_TIMEOUT).await else {
        return Vec::new();
    };
    body.lines()
        .filter_map(|l| l.strip_prefix("readyprism_discovery_polls_total{result=\""))
        .filter_map(|l| {
            let (result, v) = l.split_once("\"} ")?;
            let v = v.trim().parse::<f64>().ok()? as u64;
            (v > 0).then(|| (result.to_string(), v))
        })
        .collect()
}

/// Starts the pool of simulated apiservers discovery can add.
pub fn pool(tls: Arc<rustls::ServerConfig>) -> std::io::Result<Vec<FakeApiserver>> {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("a literal address");
    (0..POOL)
        .map(|i| FakeApiserver::bind(&format!("pool-{i}"), any, tls.clone()))
        .collect()
}
