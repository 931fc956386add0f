//! The soak's config edits: the balancer's config file changed every few seconds the ways an
//! operator, Talos or a ConfigMap does it, each edit carrying a marker (the node's `zone`) that
//! `/status` must show within [`APPLY_DEADLINE`], or the edit counts as lost.
//!
//! Owns the config's text, the edits and their counts. Does not own the admin flood (`admin`).

use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::admin::StatusDoc;

use crate::admin::get;

/// One edit every this long (the watch looks once a second).
const EDIT_EVERY: Duration = Duration::from_millis(2500);
/// An edit must show in `/status` within this: the watch's 1 s tick plus a rejected config's
/// 5 s retry (after a missing CA file lands), with room for a loaded machine.
const APPLY_DEADLINE: Duration = Duration::from_secs(12);
/// How long a config naming a CA file that does not exist yet stays so before the file lands:
/// long enough for the watch to see and reject it, which it does only once the file has been
/// still for `watched_file::RACY` (2 s), at its next 1 s tick.
const CA_LANDS_AFTER: Duration = Duration::from_millis(4000);
/// How often `/status` is read while waiting for an edit.
const POLL_EVERY: Duration = Duration::from_millis(100);
/// One `/status` or `/metrics` read (they compete with the admin flood).
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How an edit reaches the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Truncate and write at the same path (an editor, `kubectl cp`, `echo >`).
    InPlace,
    /// Write a sibling, rename it over the path (Talos, atomic writers).
    Rename,
    /// Same size, written in place, the old mtime restored (`cp --preserve=timestamps`,
    /// `rsync --inplace -t`): only the ctime tells.
    SameSizeOldMtime,
    /// Names a CA file that lands a moment later (a ConfigMap and a secret in separate steps):
    /// rejected first, applied by the retry once the file exists.
    CaLandsLater,
}

/// The cycle of edits. Each `SameSizeOldMtime` follows an edit of the same length.
const CYCLE: [Kind; 7] = [
    Kind::InPlace,
    Kind::Rename,
    Kind::SameSizeOldMtime,
    Kind::InPlace,
    Kind::Rename,
    Kind::SameSizeOldMtime,
    Kind::CaLandsLater,
];

/// What the edits saw.
#[derive(Debug, Default)]
pub struct Edits {
    /// Edits written (each a new marker).
    pub made: AtomicU64,
    /// Edits whose marker `/status` showed within [`APPLY_DEADLINE`].
    pub applied: AtomicU64,
    /// Edits not shown within the deadline.
    pub lost: AtomicU64,
    /// Of the edits, how many named a missing CA file first.
    pub ca_later: AtomicU64,
    /// A config naming a missing CA file showed in `/status` before the file existed.
    pub applied_too_early: AtomicU64,
    /// Slowest edit written whole to show, in milliseconds.
    pub slowest_ms: AtomicU64,
    /// Slowest CA-later edit to show, in milliseconds from when its CA file landed (the retry
    /// of a rejected config runs every 5 s).
    pub slowest_ca_ms: AtomicU64,
}

/// The files and addresses the config names.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The config file the balancer watches.
    pub config: PathBuf,
    /// The directory with the CA, the client certificate and the config.
    pub dir: PathBuf,
    /// The backend in the node's zone, which flaps.
    pub flapping: SocketAddr,
    /// The other backend.
    pub steady: SocketAddr,
}

impl Layout {
    /// The config with `marker` as the node's zone (fixed width, so two configs naming the same
    /// CA file have the same length) and `ca` as the CA file's name in `dir`.
    pub fn render(&self, marker: u64, ca: &str) -> String {
        format!(
            "listen: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\nzone: {}\nbackends:\n  - {{ address: \"{}\", zone: a }}\n  - {{ address: \"{}\", zone: b }}\nhealth: {{ interval: 1s, timeout: 500ms, fast_interval: 250ms }}\ntls:\n  ca: {}\n  client_cert: {}\nshutdown_grace: 1s\ndiscovery: {{ endpoints: true, interval: 1s, cache: {} }}\n",
            zone(marker), self.flapping, self.steady,
            self.dir.join(ca).display(), self.dir.join("client.pem").display(),
            self.dir.join("backends.json").display()
        )
    }
}

/// The node zone that marks edit `n`.
pub fn zone(n: u64) -> String {
    format!("edit-{n:06}")
}

/// Edits the config until `end`, starting from the one marked 0.
pub async fn run(layout: Layout, admin: SocketAddr, end: Instant, e: Arc<Edits>) {
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let started = Instant::now();
        let kind = CYCLE[(n as usize - 1) % CYCLE.len()];
        e.made.fetch_add(1, Ordering::Relaxed);
        let result = edit(&layout, admin, n, kind, &e).await;
        match result {
            Ok(since) => {
                e.applied.fetch_add(1, Ordering::Relaxed);
                let ms = since.elapsed().as_millis() as u64;
                let slowest = match kind {
                    Kind::CaLandsLater => &e.slowest_ca_ms,
                    _ => &e.slowest_ms,
                };
                slowest.fetch_max(ms, Ordering::Relaxed);
            }
            Err(why) => {
                e.lost.fetch_add(1, Ordering::Relaxed);
                eprintln!("EDIT {n} ({kind:?}) NOT APPLIED: {why}");
            }
        }
        tokio::time::sleep(EDIT_EVERY.saturating_sub(started.elapsed())).await;
    }
}

/// Makes edit `n` of `kind`; answers when the file held what must show (to time the apply), or
/// why it did not show.
async fn edit(
    l: &Layout,
    admin: SocketAddr,
    n: u64,
    kind: Kind,
    e: &Edits,
) -> Result<Instant, String> {
    let io = |r: std::io::Result<()>| r.map_err(|x| format!("writing the edit: {x}"));
    match kind {
        Kind::InPlace => io(std::fs::write(&l.config, l.render(n, "ca.crt")))?,
        Kind::Rename => {
            let tmp = l.dir.join(".soak.yaml.tmp");
            io(std::fs::write(&tmp, l.render(n, "ca.crt")))?;
            io(std::fs::rename(&tmp, &l.config))?;
        }
        Kind::SameSizeOldMtime => io(same_size_old_mtime(&l.config, &l.render(n, "ca.crt")))?,
        Kind::CaLandsLater => {
            e.ca_later.fetch_add(1, Ordering::Relaxed);
            let ca = format!("ca-{n:06}.crt");
            io(std::fs::write(&l.config, l.render(n, &ca)))?;
            tokio::time::sleep(CA_LANDS_AFTER).await;
            if shown(admin).await.as_deref() == Some(zone(n).as_str()) {
                e.applied_too_early.fetch_add(1, Ordering::Relaxed);
            }
            io(std::fs::copy(l.dir.join("ca.crt"), l.dir.join(&ca)).map(drop))?;
        }
    }
    let landed = Instant::now();
    let want = zone(n);
    let mut last = None;
    while landed.elapsed() < APPLY_DEADLINE {
        last = shown(admin).await;
        if last.as_deref() == Some(want.as_str()) {
            return Ok(landed);
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    Err(format!(
        "/status still shows zone {last:?} after {APPLY_DEADLINE:?}, want {want}"
    ))
}

/// Writes `text` over the file's bytes without truncating it (it has the same length) and puts
/// the old mtime back.
fn same_size_old_mtime(path: &Path, text: &str) -> std::io::Result<()> {
    let old = std::fs::metadata(path)?;
    if old.len() != text.len() as u64 {
        return Err(std::io::Error::other(format!(
            "not a same-size edit: {} bytes over {}",
            text.len(),
            old.len()
        )));
    }
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(text.as_bytes())?;
    f.set_modified(old.modified()?)?;
    f.sync_all()
}

/// The node zone `/status` shows now.
async fn shown(admin: SocketAddr) -> Option<String> {
    let (code, body) = get(admin, "/status", READ_TIMEOUT).await?;
    if code != 200 {
        return None;
    }
    serde_json::from_str::<StatusDoc>(&body).ok()?.zone
}

/// `readyprism_config_reloads_total{result}` from `/metrics`.
pub async fn reloads(admin: SocketAddr, result: &str) -> Option<u64> {
    let (_, body) = get(admin, "/metrics", READ_TIMEOUT).await?;
    let key = format!("readyprism_config_reloads_total{{result=\"{result}\"}}");
    body.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}
