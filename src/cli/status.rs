//! `readyprism status`: fetches the admin `/status` document and renders it for an operator.
//!
//! Owns the human table and the exit-code decision. Does not own the document's shape
//! (`admin::status`), the HTTP exchange (`cli::http`) or escaping (`cell`).

mod cell;

use std::fmt::Write as _;

use super::http::{self, GetError};
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
/// BACKEND, ZONE, SOURCE, STATE, LATENCY, ACTIVE, RANK, LAST ERROR. RANK is the `/status` document's,
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
        "LATENCY",
        "ACTIVE",
        "RANK",
        "LAST ERROR",
    ];
    let mut rows: Vec<[String; 8]> = vec![header.map(String::from)];
    rows.extend(doc.backends.iter().map(backend_cells));
    let mut widths = [0usize; 8];
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
    out
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
    [
        cut(&b.address),
        b.zone.as_deref().map_or_else(dash, cut),
        b.source.as_str().to_string(),
        b.state.as_str().to_string(),
        b.latency_ms.map(format_ms).unwrap_or_else(dash),
        b.active_connections.to_string(),
        b.rank.map(|r| r.to_string()).unwrap_or_else(dash),
        error
            .filter(|e| !e.is_empty())
            .map_or_else(dash, |e| cell::cell(&e, MAX_ERROR)),
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
        backends: vec![
            b(
                "10.0.1.10:6443",
                Some("dc-a"),
                State::Unready,
                Some(0.31),
                Some("HTTP 500: [+]ping ok\n[-]etcd failed"),
                0,
                None,
            ),
            b(
                "10.0.2.10:6443",
                Some("dc-b"),
                State::Ready,
                Some(23.26),
                None,
                12,
                Some(0),
            ),
            BackendStatus {
                source: crate::backend::BackendSource::Discovered,
                ..b("[fd00::3]:6443", None, State::Unknown, None, None, 0, None)
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::http::tests::answer_once;

    #[test]
    fn table_shows_summary_and_one_aligned_row_per_backend() {
        let want = "\
node zone dc-a (address 10.0.1.5)  ready yes  mode normal  client cert loaded
BACKEND         ZONE  SOURCE      STATE    LATENCY  ACTIVE  RANK  LAST ERROR
10.0.1.10:6443  dc-a  config      unready  0.31ms   0       -     HTTP 500: [+]ping ok; [-]etcd failed
10.0.2.10:6443  dc-b  config      ready    23.3ms   12      0     -
[fd00::3]:6443  -     discovered  unknown  -        0       -     -
";
        assert_eq!(render_table(&sample()), want);
    }

    #[test]
    fn the_summary_says_when_our_client_certificate_expires() {
        for expiry in ["expires in 6d", "EXPIRED 1h ago"] {
            let doc = StatusDoc {
                client_cert_expiry: Some(expiry.to_string()),
                ..sample()
            };
            let table = render_table(&doc);
            let want = format!("mode normal  client cert {expiry}\n");
            assert!(
                table
                    .lines()
                    .next()
                    .is_some_and(|l| format!("{l}\n").ends_with(&want)),
                "{table}"
            );
        }
    }

    #[test]
    fn table_flags_not_ready_and_shutting_down() {
        let doc = StatusDoc {
            zone: None,
            zone_source: None,
            ready: false,
            mode: Mode::FailOpen,
            shutting_down: true,
            client_cert: CertStatus::Absent,
            backends: vec![],
            ..sample()
        };
        let table = render_table(&doc);
        assert!(
            table.starts_with(
                "node zone -  ready NO  mode fail_open  client cert absent  SHUTTING DOWN\n"
            ),
            "{table}"
        );
        assert!(table.ends_with("(no backends configured)\n"), "{table}");
    }

    #[test]
    fn exit_code_is_ready_only_with_a_ready_backend_to_route_to() {
        assert_eq!(exit_code(&sample()), EXIT_READY);
        let not_ready = StatusDoc {
            ready: false,
            ..sample()
        };
        assert_eq!(exit_code(&not_ready), EXIT_NOT_READY);
        // Ready with nothing ready to route to (no backends, or none ready) is not ready.
        let nothing = StatusDoc {
            backends: vec![],
            ..sample()
        };
        assert_eq!(exit_code(&nothing), EXIT_NOT_READY);
        assert!(render_table(&nothing).starts_with("node zone dc-a (address 10.0.1.5)  ready NO"));
        let mut none_ready = sample();
        none_ready.backends.retain(|b| b.state != State::Ready);
        assert_eq!(exit_code(&none_ready), EXIT_NOT_READY);
    }

    #[test]
    fn cells_show_controls_as_escapes_and_are_cut() {
        let mut doc = sample();
        doc.zone = Some("z\x1b[2J".to_string());
        let b = &mut doc.backends[0];
        b.last_error = Some("HTTP 500: \x1b]0;owned\x07\x1b[2J".to_string());
        b.latency_ms = Some(1e308);
        b.address = "a".repeat(300);
        let table = render_table(&doc);
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        assert!(
            table.contains("HTTP 500: \\x1b]0;owned\\x07\\x1b[2J"),
            "{table}"
        );
        assert!(table.contains(">100s"), "{table}");
        assert!(
            table.contains(&format!("{}…", "a".repeat(MAX_CELL - 1))),
            "{table}"
        );
        assert!(
            table
                .lines()
                .all(|l| l.chars().count() < 2 * MAX_CELL + MAX_ERROR),
            "{table}"
        );
    }

    #[tokio::test]
    async fn any_json_that_is_not_a_status_document_is_rejected() {
        for body in ["hello", "{\"ready\": true}"] {
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let addr = answer_once(response.into_bytes()).await;
            let err = fetch(&addr).await.expect_err("not a document");
            assert!(
                matches!(err, StatusError::NotAStatusDocument { .. }),
                "{err}"
            );
        }
    }
}
