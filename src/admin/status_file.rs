//! The status file: what `/status` says, kept on disk (`status_file`) so that a node cut off from
//! Kubernetes can still be asked why (`talosctl read`, then `readyprism status --file -`).
//!
//! Owns when it is written ([`decide`], pure: on every change of the document's content
//! (`content`: not its generation or times), at most once a second, and every [`REFRESH`] so
//! its check times stay fresh), its bounds (reasons cut at
//! [`MAX_REASON`] characters; the backends are the table's, at most 64 discovered ones besides the
//! static ones), never writing over a file that is not a status document, and saying a failed
//! write once (a WARN, retried at most once a second; the service runs on). Does not own the
//! document (`status`) nor the atomic write (`atomic_write`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Admin, StatusDoc};
use crate::atomic_write;

/// Writes are at least this far apart: a flapping backend cannot turn the file into a disk load.
pub const MIN_GAP: Duration = Duration::from_secs(1);

/// The file is rewritten at least this often while the document's content is unchanged, so its
/// `at` and the backends' `last_check` say how fresh it is (one small write per 30 s).
pub const REFRESH: Duration = Duration::from_secs(30);

/// A failure reason longer than this many characters is cut (with `…`) in the file.
pub const MAX_REASON: usize = 512;

/// Why the status file could not be written. Names the file, never its temporary file.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Writing failed (a missing or read-only directory, a full disk): tried again.
    #[error("{}: cannot write the status file: {cause}", path.display())]
    Io {
        /// The status file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// Something that is not a readyprism status document is there (a mistyped path): left alone.
    #[error("{}: not a readyprism status file ({why}); it is left alone and not written", path.display())]
    NotOurs {
        /// The status file's path.
        path: PathBuf,
        /// What is there instead.
        why: String,
    },
}

/// What the writer knows when it wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// Now.
    pub now: Instant,
    /// The document's content differs from the last one written (or none was).
    pub changed: bool,
    /// When the last write was attempted (done or failed).
    pub last_attempt: Option<Instant>,
    /// When the last write succeeded.
    pub last_written: Option<Instant>,
}

/// What to do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Write now.
    Write,
    /// Nothing before then (the gap since the last attempt, or the next refresh).
    Wait(Instant),
}

/// Write when the content changed or the refresh is due, but never within [`MIN_GAP`] of the
/// last attempt; a failed write leaves the content changed, so it is retried once a second.
pub fn decide(look: Look) -> Decision {
    let refresh_at = look.last_written.map(|w| w + REFRESH);
    let wanted = look.changed || refresh_at.is_none_or(|at| look.now >= at);
    let earliest = look.last_attempt.map(|a| a + MIN_GAP);
    match (wanted, earliest) {
        (true, Some(at)) if look.now < at => Decision::Wait(at),
        (true, _) => Decision::Write,
        (false, _) => Decision::Wait(refresh_at.unwrap_or(look.now + REFRESH)),
    }
}

/// The document as the file keeps it: reasons cut at [`MAX_REASON`].
fn bounded(mut doc: StatusDoc) -> StatusDoc {
    let cut = |s: &mut String| {
        if s.chars().count() > MAX_REASON {
            *s = s.chars().take(MAX_REASON - 1).chain(['…']).collect();
        }
    };
    for b in &mut doc.backends {
        b.last_error.iter_mut().for_each(cut);
    }
    if let Some(r) = doc.config.as_mut().and_then(|c| c.last_reload.as_mut()) {
        r.error.iter_mut().for_each(cut);
    }
    doc
}

/// The parts of a document that make it a change: all but what moves with every probe in steady
/// state (the snapshot's generation, the document's time, the check times, the failures in a row
/// of a backend that stays unready, the live connection counts and latencies), which the refresh
/// keeps fresh enough. A state, a pending change, a reason, a backend added or removed, a reload
/// is a change.
fn content(doc: &StatusDoc) -> StatusDoc {
    let mut d = doc.clone();
    d.generation = 0;
    d.at = None;
    for b in &mut d.backends {
        b.last_check = None;
        b.consecutive_failures = 0;
        b.active_connections = 0;
        b.latency_ms = None;
    }
    d
}

/// Keeps the status file until `stop`: wakes on a new snapshot, a config change, and the
/// decision's deadlines.
pub(crate) async fn keep(admin: Arc<Admin>, stop: CancellationToken) {
    let mut generations = admin.table.subscribe();
    let mut configs = admin.config.subscribe();
    let mut last_content: Option<(PathBuf, StatusDoc)> = None;
    let (mut last_attempt, mut last_written) = (None, None);
    let mut failing = false;
    loop {
        let path = admin.config.get().status_file;
        let wake = match &path {
            None => None,
            Some(path) => {
                let doc = bounded(admin.status());
                let now_content = content(&doc);
                let changed = last_content
                    .as_ref()
                    .is_none_or(|(p, c)| p != path || *c != now_content);
                let look = Look {
                    now: Instant::now(),
                    changed,
                    last_attempt,
                    last_written,
                };
                match decide(look) {
                    Decision::Wait(at) => Some(at),
                    Decision::Write => {
                        last_attempt = Some(look.now);
                        let written = tokio::select! {
                            _ = stop.cancelled() => return,
                            w = write_off_thread(path.clone(), doc) => w,
                        };
                        match written {
                            Ok(()) => {
                                if std::mem::take(&mut failing) {
                                    tracing::info!(file = %path.display(), "the status file is written again");
                                }
                                last_written = Some(look.now);
                                last_content = Some((path.clone(), now_content));
                            }
                            Err(e) => {
                                if !std::mem::replace(&mut failing, true) {
                                    tracing::warn!(error = %e, retry_every = ?MIN_GAP, "the status file cannot be written; the balancer runs on without it");
                                }
                                last_content = None;
                            }
                        }
                        Some(look.now + MIN_GAP)
                    }
                }
            }
        };
        let sleep = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = sleep => {}
            r = generations.changed() => if r.is_err() { return },
            r = configs.changed() => if r.is_err() { return },
        }
    }
}

/// Serialises and writes `doc` to `path` on the blocking pool.
async fn write_off_thread(path: PathBuf, doc: StatusDoc) -> Result<(), WriteError> {
    let p = path.clone();
    tokio::task::spawn_blocking(move || store(&p, &doc))
        .await
        .unwrap_or_else(|e| {
            Err(WriteError::Io {
                path,
                cause: std::io::Error::other(e),
            })
        })
}

/// Replaces the status file at `path` with `doc`, atomically (blocks), mode 0644: nothing in it
/// is secret, and an operator reads it without privileges. Never replaces a file that is not a
/// readyprism status document.
pub fn store(path: &Path, doc: &StatusDoc) -> Result<(), WriteError> {
    if let Some(why) = not_ours(path) {
        return Err(WriteError::NotOurs {
            path: path.to_path_buf(),
            why,
        });
    }
    let io = |cause| WriteError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let mut text = serde_json::to_string_pretty(doc).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    atomic_write::replace(path, text.as_bytes(), 0o644).map_err(io)
}

/// What is at `path` if it is neither missing nor a readyprism status document.
fn not_ours(path: &Path) -> Option<String> {
    atomic_write::not_ours(path, is_status, "a status document")
}

/// Whether `path` can hold the status file (blocks), for `readyprism check`: see
/// [`atomic_write::preflight`].
pub fn preflight(path: &Path) -> Result<(), atomic_write::Unfit> {
    atomic_write::preflight(path, is_status, "a status document", "status file")
}

fn is_status(bytes: &[u8]) -> bool {
    serde_json::from_slice::<StatusDoc>(bytes).is_ok()
}

/// Reads a status document from `bytes` (a status file, or its copy on stdin).
pub fn parse(bytes: &[u8]) -> Result<StatusDoc, serde_json::Error> {
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests;
