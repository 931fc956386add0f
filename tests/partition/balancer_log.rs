//! What the balancer's JSON log (`readyprism --log-format json run`) says about its backends: every
//! `backend state changed` line as a [`Change`] and every `connection ended` record as an
//! [`Ended`], with their wall-clock times.

use serde::Deserialize;

use super::cast::site_of;
use super::netlab::Host;

/// A backend state change the balancer logged (`backend state changed`), wall-clock time.
#[derive(Clone, Debug)]
pub struct Change {
    pub t: f64,
    pub site: Host,
    pub from: String,
    pub to: String,
    pub reason: String,
}

impl Change {
    /// `site` turned `to` at `t`, with no `from` and no reason: what the checks' tests feed them.
    pub fn to(t: f64, site: Host, to: &str) -> Change {
        Change {
            t,
            site,
            from: String::new(),
            to: to.to_string(),
            reason: String::new(),
        }
    }
}

/// The state changes in a log's text, in order.
pub fn changes(log: &str) -> Vec<Change> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<LogLine>(l).ok())
        .filter(|l| l.fields.message == "backend state changed")
        .filter_map(|l| {
            Some(Change {
                t: parse_timestamp(&l.timestamp)?,
                site: site_of(l.fields.backend.as_deref()?)?,
                from: l.fields.from?,
                to: l.fields.to?,
                reason: l.fields.reason.unwrap_or_default(),
            })
        })
        .collect()
}

/// Every backend the balancer removed (`backend removed; closing its connections`: gone from
/// the config or from discovery) as a [`Change`] to `removed`, wall-clock time: a removed backend
/// is neither ready nor unready until it is added again (then its first state change is logged
/// from `unknown`).
pub fn removals(log: &str) -> Vec<Change> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<LogLine>(l).ok())
        .filter(|l| l.fields.message.starts_with("backend removed"))
        .filter_map(|l| {
            Some(Change {
                t: parse_timestamp(&l.timestamp)?,
                site: site_of(l.fields.backend.as_deref()?)?,
                from: String::new(),
                to: "removed".to_string(),
                reason: l.fields.reason.unwrap_or_default(),
            })
        })
        .collect()
}

/// One client connection's end record (`connection ended`), wall-clock time.
#[derive(Clone, Debug)]
pub struct Ended {
    /// When it ended.
    pub t: f64,
    /// The backend it was relayed to (`10.77.2.1:6443`; empty if none).
    pub backend: String,
    /// `balancer`, `client`, `backend`, ...
    pub ended_by: String,
    /// Why (for the balancer's closes: `unready`, `removed`, `failback`, ...).
    pub reason: String,
}

/// The connection end records in a log's text, in order.
pub fn ended(log: &str) -> Vec<Ended> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "connection ended")
        .filter_map(|l| {
            let f = &l["fields"];
            let text = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            Some(Ended {
                t: parse_timestamp(l["timestamp"].as_str()?)?,
                backend: text("backend"),
                ended_by: text("ended_by"),
                reason: text("reason"),
            })
        })
        .collect()
}

/// One health probe's result, as the balancer logs it at debug (`probe`), wall-clock time.
#[derive(Clone, Debug)]
pub struct Probe {
    pub t: f64,
    pub site: Host,
    pub passed: bool,
    /// The failing checks the answer named (`shutdown`; empty without an answer).
    pub checks: String,
}

/// The probe results in a log's text, in order (with `readyprism::health=debug`).
pub fn probes(log: &str) -> Vec<Probe> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "probe")
        .filter_map(|l| {
            let f = &l["fields"];
            Some(Probe {
                t: parse_timestamp(l["timestamp"].as_str()?)?,
                site: site_of(f["backend"].as_str()?)?,
                passed: f["passed"].as_bool()?,
                checks: f["checks"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct LogLine {
    timestamp: String,
    fields: LogFields,
}

#[derive(Deserialize)]
struct LogFields {
    message: String,
    backend: Option<String>,
    from: Option<String>,
    to: Option<String>,
    reason: Option<String>,
}

/// `2026-01-02T03:04:05.123456Z` (tracing-subscriber's JSON timestamps, UTC) as Unix seconds.
pub fn parse_timestamp(ts: &str) -> Option<f64> {
    let ts = ts.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (hh, mm) = (
        t.next()?.parse::<i64>().ok()?,
        t.next()?.parse::<i64>().ok()?,
    );
    let ss = t.next()?.parse::<f64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60) as f64 + ss)
}

#[test]
fn log_timestamps_parse_as_unix_seconds() {
    assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0.0));
    assert_eq!(
        parse_timestamp("2024-02-29T12:00:01.5Z"),
        Some(1_709_208_001.5)
    );
}
