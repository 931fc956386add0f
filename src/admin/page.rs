//! `GET /`: one self-contained HTML page for people — the node's zone and mode, every backend,
//! and the last state transitions — that refreshes itself every few seconds.
//!
//! Owns the page's rendering (pure: a status document and the kept transitions in, HTML out) and
//! HTML escaping. Does not own the data (`status`, `table::recent`) or serving it (`super`).
//! No external assets and no script: a `<meta http-equiv="refresh">` reloads it.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::status::cell::{cell, MAX_CELL, MAX_ERROR};
use super::status::{BackendStatus, Mode, StatusDoc};
use crate::table::recent::Transition;
use crate::verdict::State;

/// The page reloads itself this often, in seconds: as often as a probe interval.
pub const REFRESH_SECONDS: u32 = 5;

/// `text` safe inside HTML text and double- or single-quoted attributes. Control characters are
/// shown as visible escapes first (as `readyprism status` does), then cut to `max` characters.
pub fn escape(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for c in cell(text, max).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `at` as `HH:MM:SS UTC` (the page shows times of today's incident; the date is the log's job).
pub fn clock(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// What the mode means for new connections, in words.
fn mode_text(mode: Mode) -> &'static str {
    match mode {
        Mode::Normal => "normal: ready backends only",
        Mode::FailOpen => "fail open: nothing is ready, routing to every backend",
        Mode::Refuse => "refuse: nothing is ready, clients are closed",
        Mode::Starting => "starting: nothing checked yet, trying every backend",
    }
}

const STYLE: &str = "body{font:15px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
table{border-collapse:collapse;background:#fff}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#eee}td{white-space:nowrap}td.num{text-align:right}.reason{white-space:normal;font-family:monospace;max-width:40em;word-break:break-word}\
.ready{background:#d8f5d8}.unready{background:#f9d6d6}.unknown{background:#eee}\
.mode{padding:.15em .5em;border-radius:.3em}.m-normal{background:#d8f5d8}.m-bad{background:#f9d6d6}\
.m-starting{background:#eee}p{margin:.2em 0}.muted{color:#666}";

/// The whole page for `doc` and the kept transitions (`recent`, oldest first).
pub fn render(doc: &StatusDoc, recent: &[Transition]) -> String {
    let mut h = String::with_capacity(4096);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>readyprism</title><style>{STYLE}</style></head><body>\n"
    );
    h.push_str("<h1>readyprism on this node</h1>\n");
    let zone = match (&doc.zone, &doc.zone_source) {
        (Some(z), Some(src)) => format!(
            "{} (from {})",
            escape(z, MAX_CELL),
            escape(&src.to_string(), MAX_CELL)
        ),
        (Some(z), None) => escape(z, MAX_CELL),
        (None, _) => "unknown".to_string(),
    };
    let mode_class = match doc.mode {
        Mode::Normal => "m-normal",
        Mode::Starting => "m-starting",
        Mode::FailOpen | Mode::Refuse => "m-bad",
    };
    let _ = writeln!(h, "<p>Zone: <b id=\"zone\">{zone}</b></p>");
    let _ = writeln!(
        h,
        "<p>Mode: <span id=\"mode\" class=\"mode {mode_class}\">{}</span></p>",
        mode_text(doc.mode)
    );
    let _ = writeln!(
        h,
        "<p>Ready: {}{} &middot; client certificate: {} &middot; snapshot {}</p>",
        if doc.ready { "yes" } else { "no" },
        if doc.shutting_down {
            " (shutting down)"
        } else {
            ""
        },
        cert_text(doc),
        doc.generation
    );
    backends(&mut h, doc, recent);
    transitions(&mut h, recent);
    let _ = writeln!(
        h,
        "<p class=\"muted\">Refreshes every {REFRESH_SECONDS} s. The same data: \
         <a href=\"/status\">/status</a> (JSON), <a href=\"/metrics\">/metrics</a>.</p>\n</body></html>"
    );
    h
}

fn cert_text(doc: &StatusDoc) -> &'static str {
    use super::status::CertStatus;
    match doc.client_cert {
        CertStatus::None => "none (anonymous probes)",
        CertStatus::Absent => "absent (anonymous probes until kubelet writes it)",
        CertStatus::Loaded => "loaded",
    }
}

fn backends(h: &mut String, doc: &StatusDoc, recent: &[Transition]) {
    h.push_str("<h2>Backends</h2>\n");
    if doc.backends.is_empty() {
        h.push_str("<p>No backends.</p>\n");
        return;
    }
    h.push_str(
        "<table id=\"backends\"><tr><th>backend</th><th>state</th><th>since</th><th>zone</th>\
         <th>source</th><th>latency</th><th>active</th><th>rank</th><th>last reason</th></tr>\n",
    );
    for b in &doc.backends {
        let _ =
            writeln!(
            h,
            "<tr><td>{}</td><td class=\"{state}\">{state}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"reason\">{}</td></tr>",
            escape(&b.address, MAX_CELL),
            since(b, recent),
            b.zone.as_deref().map_or("-".to_string(), |z| escape(z, MAX_CELL)),
            b.source.as_str(),
            b.latency_ms.map_or("-".to_string(), |l| format!("{l:.2} ms")),
            b.active_connections,
            b.rank.map_or("-".to_string(), |r| r.to_string()),
            b.last_error.as_deref().map_or("-".to_string(), |e| escape(e, MAX_ERROR)),
            state = b.state.as_str(),
        );
    }
    h.push_str("</table>\n");
}

/// When the backend entered its present state, if that transition is still kept.
fn since(b: &BackendStatus, recent: &[Transition]) -> String {
    recent
        .iter()
        .rev()
        .find(|t| t.backend == b.address)
        .filter(|t| t.to == b.state)
        .map_or("-".to_string(), |t| clock(t.at))
}

fn transitions(h: &mut String, recent: &[Transition]) {
    h.push_str("<h2>Last state transitions</h2>\n");
    if recent.is_empty() {
        h.push_str("<p>None since start-up.</p>\n");
        return;
    }
    h.push_str(
        "<table id=\"transitions\"><tr><th>time</th><th>backend</th><th>from</th><th>to</th>\
         <th>reason</th></tr>\n",
    );
    for t in recent.iter().rev() {
        let reason = match (&t.reason, t.to) {
            (Some(r), _) => escape(r, MAX_ERROR),
            (None, State::Ready) => "passed".to_string(),
            (None, _) => "-".to_string(),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"{from}\">{from}</td><td class=\"{to}\">{to}</td>\
             <td class=\"reason\">{reason}</td></tr>",
            clock(t.at),
            escape(&t.backend, MAX_CELL),
            from = t.from.as_str(),
            to = t.to.as_str(),
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests;
