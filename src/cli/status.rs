//! `readyprism status`: fetches the admin `/status` document (or reads the status file a balancer
//! keeps, `--file`) and renders it for an operator.
//!
//! Owns the human table and the exit-code decision. Does not own the document's shape
//! (`admin::status`), the HTTP exchange (`cli::http`), reading a status file (`file`) or escaping
//! (`cell`).

use crate::admin::status::cell;

mod file;

pub use file::{read_file, FILE_TIMEOUT, MAX_FILE};

use std::fmt::Write as _;

use super::http::{self, GetError};
use crate::admin::config_view::ReloadResult;
use crate::admin::status::{BackendStatus, CertStatus, Mode, StatusDoc};
use crate::verdict::State;
use cell::{MAX_CELL, MAX_ERROR};

/// Exit code: at least one backend is ready.
pub const EXIT_READY: u8 = 0;
/// Exit code: the balancer answered but no backend is ready (none configured, or it is shutting
/// down): nothing to route to.
pub const EXIT_NOT_READY: u8 = 1;
/// Exit code: the admin endpoint could not be reached or did not answer with a status document.
pub const EXIT_UNREACHABLE: u8 = 2;

/// Why the status document could not be fetched. Every variant maps to [`EXIT_UNREACHABLE`].
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// No answer.
    #[error(transparent)]
    Get(#[from] GetError),
    /// The endpoint answered, but not with 200.
    #[error("admin endpoint {addr} answered HTTP {status} on /status")]
    Http {
        /// The address as given.
        addr: String,
        /// The HTTP status.
        status: u16,
    },
    /// The body is not a readyprism status document.
    #[error("admin endpoint {addr} answered /status with something other than a readyprism status document: {reason}")]
    NotAStatusDocument {
        /// The address as given.
        addr: String,
        /// What is wrong.
        reason: String,
    },
    /// The status file (or standard input) could not be read.
    #[error("{path}: cannot read the status file: {cause}")]
    File {
        /// The path as given (`-`: standard input).
        path: String,
        /// Why.
        cause: std::io::Error,
    },
    /// Nothing, or not all of it, was read within [`FILE_TIMEOUT`]: a FIFO or pipe that nobody
    /// writes to or that stalled. A CLI must not hang.
    #[error("{path}: cannot read the status file: it did not end within {}s (a FIFO or pipe that nobody writes to, or that stalled)", FILE_TIMEOUT.as_secs())]
    FileTimeout {
        /// The path as given (`-`: standard input).
        path: String,
    },
    /// The status file does not hold a readyprism status document.
    #[error("{path}: not a readyprism status file: {reason}")]
    NotAStatusFile {
        /// The path as given (`-`: standard input).
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// A fetched status document.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The body as received, with DEL and C1 controls written as JSON `\u` escapes (printed by
    /// `--json`): the same document, with nothing in it a terminal acts on.
    pub body: String,
    /// The parsed document.
    pub doc: StatusDoc,
}

/// GETs `http://{admin}/status` and parses it as a [`StatusDoc`].
pub async fn fetch(admin: &str) -> Result<Fetched, StatusError> {
    let answer = http::get(admin, "/status").await?;
    if answer.status != 200 {
        return Err(StatusError::Http {
            addr: admin.to_string(),
            status: answer.status,
        });
    }
    // serde's reasons quote what they met (`unknown variant `…``): escaped like a table cell.
    let doc = serde_json::from_str(&answer.body).map_err(|e| StatusError::NotAStatusDocument {
        addr: admin.to_string(),
        reason: cell::cell(&e.to_string(), MAX_ERROR),
    })?;
    Ok(Fetched {
        body: cell::json_escaped(&answer.body),
        doc,
    })
}

/// [`EXIT_READY`] if the document says ready and a backend is ready (something to route to),
/// else [`EXIT_NOT_READY`].
pub fn exit_code(doc: &StatusDoc) -> u8 {
    if routable(doc) {
        EXIT_READY
    } else {
        EXIT_NOT_READY
    }
}

/// The document says ready and names a ready backend: what `ready yes` and exit 0 mean.
fn routable(doc: &StatusDoc) -> bool {
    doc.ready && doc.backends.iter().any(|b| b.state == State::Ready)
}

/// The human view of a status document: a summary line, then one row per backend with columns
/// BACKEND, ZONE, SOURCE, STATE, SINCE, PENDING, LATENCY, ACTIVE, RANK, FAILS (probes failed in
/// a row), CHECKED (the last probe's time), LAST ERROR, then a line with the document's time and
/// the config's file, load time and last reload (when the document has them). RANK is the `/status` document's,
/// 0-based (0 = dialed first), so the table and the JSON never disagree; `-` marks a missing
/// value. Multi-line errors are folded onto one line. Every cell shows control characters as
/// visible escapes and is cut (with `…`) at 80 characters (`cell::MAX_CELL`), LAST ERROR at 220
/// (`cell::MAX_ERROR`).
pub fn render_table(doc: &StatusDoc) -> String {
    let mut out = String::new();
    let mode = match doc.mode {
        Mode::Normal => "normal",
        Mode::FailOpen => "fail_open",
        Mode::Refuse => "refuse",
        Mode::Starting => "starting",
    };
    let cert = match (doc.client_cert, &doc.client_cert_expiry) {
        (CertStatus::None, _) => "none".to_string(),
        (CertStatus::Absent, _) => "absent".to_string(),
        // `expires in 6d`, `EXPIRED 1h ago`: an apiserver's refusal is then ours to fix.
        (CertStatus::Loaded, Some(expiry)) => cell::cell(expiry, MAX_CELL),
        (CertStatus::Loaded, None) => "loaded".to_string(),
    };
    // The zone's source in brackets: `dc-a (address 10.0.1.5)`, `dc-b (flag)`.
    let zone = match (&doc.zone, &doc.zone_source) {
        (None, _) => "-".to_string(),
        (Some(z), None) => cell::cell(z, MAX_CELL),
        (Some(z), Some(from)) => format!("{} ({from})", cell::cell(z, MAX_CELL)),
    };
    let _ = write!(
        out,
        "node zone {zone}  ready {}  mode {mode}  client cert {cert}",
        if routable(doc) { "yes" } else { "NO" },
    );
    if doc.shutting_down {
        out.push_str("  SHUTTING DOWN");
    }
    out.push('\n');

    let header = [
        "BACKEND",
        "ZONE",
        "SOURCE",
        "STATE",
        "SINCE",
        "PENDING",
        "LATENCY",
        "ACTIVE",
        "RANK",
        "FAILS",
        "CHECKED",
        "LAST ERROR",
    ];
    let mut rows: Vec<[String; 12]> = vec![header.map(String::from)];
    rows.extend(doc.backends.iter().map(|b| {
        let [address, zone, source, state, latency, active, rank, error] = backend_cells(b);
        let [since, pending, fails, checked] = timing_cells(b);
        [
            address, zone, source, state, since, pending, latency, active, rank, fails, checked,
            error,
        ]
    }));
    let mut widths = [0usize; 12];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if doc.backends.is_empty() {
        out.push_str("(no backends configured)\n");
    }
    out.push_str(&config_line(doc));
    out
}

/// The document's time and the config's file, load time and last reload, as one line; empty
/// for a document without them (an older balancer's).
fn config_line(doc: &StatusDoc) -> String {
    let cut = |s: &str| cell::cell(s, MAX_CELL);
    let mut parts = Vec::new();
    if let Some(at) = &doc.at {
        parts.push(format!("status at {}", cut(at)));
    }
    if let Some(c) = &doc.config {
        let file = c.file.as_deref().map_or_else(|| "(built in)".into(), cut);
        parts.push(format!("config {file} loaded {}", cut(&c.loaded_at)));
        parts.push(match &c.last_reload {
            None => "last reload -".to_string(),
            Some(r) => match (r.result, &r.error) {
                (ReloadResult::Applied, _) => format!("last reload applied {}", cut(&r.at)),
                (ReloadResult::Rejected, e) => format!(
                    "last reload REJECTED {}: {}",
                    cut(&r.at),
                    cell::cell(e.as_deref().unwrap_or("-"), MAX_ERROR)
                ),
            },
        });
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{}\n", parts.join("  "))
    }
}

/// A backend's SINCE, PENDING, FAILS and CHECKED cells (`-` for missing), escaped and cut.
pub fn timing_cells(b: &BackendStatus) -> [String; 4] {
    let dash = || "-".to_string();
    let cut = |s: &str| cell::cell(s, MAX_CELL);
    [
        b.since.as_deref().map_or_else(dash, cut),
        b.pending.map_or_else(dash, |p| p.to_string()),
        b.consecutive_failures.to_string(),
        b.last_check.as_deref().map_or_else(dash, cut),
    ]
}

/// One backend as the table's cells, in column order (`-` for missing), escaped and cut.
pub fn backend_cells(b: &BackendStatus) -> [String; 8] {
    let dash = || "-".to_string();
    let cut = |s: &str| cell::cell(s, MAX_CELL);
    let error = b.last_error.as_deref().map(|e| {
        e.split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    });
    // A degraded backend says so where its error would be (its checks pass).
    let degraded = b.degraded.as_deref().map(|d| format!("degraded: {d}"));
    let error = match (error.filter(|e| !e.is_empty()), degraded) {
        (Some(e), Some(d)) => Some(format!("{d}; {e}")),
        (e, d) => e.or(d),
    };
    [
        cut(&b.address),
        b.zone.as_deref().map_or_else(dash, cut),
        b.source.as_str().to_string(),
        b.state.as_str().to_string(),
        b.latency_ms.map(format_ms).unwrap_or_else(dash),
        b.active_connections.to_string(),
        b.rank.map(|r| r.to_string()).unwrap_or_else(dash),
        error.map_or_else(dash, |e| cell::cell(&e, MAX_ERROR)),
    ]
}

/// Latencies from this long on show as `>100s`: no probe waits that long, and the document may
/// come from anything listening on the admin address (a `1e308` is 309 digits).
const LATENCY_SHOWN_UP_TO_MS: f64 = 100_000.0;

/// `0.25ms` below a millisecond (LAN), `12.3ms` above, `>100s` from 100 s, `?` below zero.
fn format_ms(ms: f64) -> String {
    if ms < 0.0 || ms.is_nan() {
        "?".to_string()
    } else if ms < 1.0 {
        // `-0.0` is not below zero, and would print as `-0.00ms`.
        format!("{:.2}ms", ms.abs())
    } else if ms < LATENCY_SHOWN_UP_TO_MS {
        format!("{ms:.1}ms")
    } else {
        ">100s".to_string()
    }
}

/// A document with three backends (unready local, ready remote, unchecked) for tests of readers.
#[cfg(test)]
pub(crate) fn sample() -> StatusDoc {
    use crate::admin::config_view::ConfigStatus;
    use crate::admin::status::{Direction, PendingStatus};
    use crate::verdict::State;
    let b = |address: &str,
             zone: Option<&str>,
             state,
             latency_ms,
             last_error: Option<&str>,
             active,
             rank| {
        BackendStatus {
            address: address.to_string(),
            zone: zone.map(str::to_string),
            source: crate::backend::BackendSource::Config,
            state,
            latency_ms,
            last_error: last_error.map(str::to_string),
            answering: state != State::Unknown,
            active_connections: active,
            rank,
            since: Some("2026-12-05T12:40:00Z".to_string()),
            pending: None,
            last_check: Some("2026-12-05T12:48:01Z".to_string()),
            consecutive_failures: u64::from(state == State::Unready) * 3,
            failing_checks: Vec::new(),
            failing_checks_more: 0,
            shutdown_window_s: None,
            reentry_window_left_s: None,
            degraded: None,
        }
    };
    StatusDoc {
        zone: Some("dc-a".to_string()),
        zone_source: Some(crate::config::ZoneSource::Address([10, 0, 1, 5].into())),
        ready: true,
        mode: Mode::Normal,
        shutting_down: false,
        client_cert: CertStatus::Loaded,
        client_cert_not_after: None,
        client_cert_expiry: None,
        generation: 7,
        at: Some("2026-12-05T12:48:04Z".to_string()),
        config: Some(ConfigStatus {
            file: Some("/etc/readyprism.yaml".to_string()),
            loaded_at: "2026-12-05T12:00:00Z".to_string(),
            last_reload: None,
        }),
        backends: vec![
            BackendStatus {
                failing_checks: vec!["etcd".to_string()],
                ..b(
                    "10.0.1.10:6443",
                    Some("dc-a"),
                    State::Unready,
                    Some(0.31),
                    Some("readyz 500: etcd failed"),
                    0,
                    None,
                )
            },
            BackendStatus {
                pending: Some(PendingStatus {
                    direction: Direction::Falling,
                    count: 1,
                    needed: 2,
                }),
                ..b(
                    "10.0.2.10:6443",
                    Some("dc-b"),
                    State::Ready,
                    Some(23.26),
                    None,
                    12,
                    Some(0),
                )
            },
            BackendStatus {
                source: crate::backend::BackendSource::Discovered,
                last_check: None,
                ..b("[fd00::3]:6443", None, State::Unknown, None, None, 0, None)
            },
        ],
    }
}

#[cfg(test)]
mod tests;
