//! The demo's live view: a screen that fits an 80×24 terminal, and one short plain line per
//! refresh for pipes and logs. Apiservers are called by their names everywhere (the table, the
//! traffic and the log lines), never by their ports.
//!
//! Pure text from a status document, the demo clients' record and the kept log lines; no I/O, no
//! clock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::{Traffic, FAILBACK_AFTER, JOINER, RECENT, SITES};
use crate::admin::status::cell::cell;
use crate::admin::StatusDoc;
use crate::cli::status;

/// The screen fits this many columns ...
pub(super) const COLS: usize = 80;
/// ... and this many rows (the last one without a newline, so the terminal never scrolls).
pub(super) const ROWS: usize = 24;

/// One refresh of the live view.
pub(super) struct Frame<'a> {
    /// Time since traffic started.
    pub elapsed: Duration,
    /// Time left with `--duration`.
    pub remaining: Option<Duration>,
    /// The balancer's bound client address.
    pub listen: SocketAddr,
    /// The balancer's bound admin address.
    pub admin: SocketAddr,
    /// The balancer's view: its `/status` document now.
    pub status: &'a StatusDoc,
    /// Each simulated apiserver's address (as `/status` and the log name it) and its name.
    pub names: &'a [(String, String)],
    /// What the demo's clients saw.
    pub traffic: &'a Traffic,
    /// Whether dc-a currently has quorum.
    pub dc_a_ready: bool,
    /// While dc-a has quorum: for how long it has had it.
    pub dc_a_ready_for: Option<Duration>,
    /// Time to dc-a's next flip.
    pub next_flip_in: Duration,
    /// Time until the fourth apiserver joins the Endpoints object; `None` once it has.
    pub join_in: Option<Duration>,
    /// The latest log lines, oldest first (the region below the traffic).
    pub logs: &'a [String],
}

impl Frame<'_> {
    /// One short plain line per refresh: the time, each apiserver's state, where the latest
    /// connection went and where the long-lived one is.
    pub fn line(&self) -> String {
        let states: Vec<String> = self
            .status
            .backends
            .iter()
            .map(|b| format!("{} {}", self.name(&b.address), b.state.as_str()))
            .collect();
        let last = self.traffic.recent.back().map_or("-", String::as_str);
        let long = self.traffic.long_on.as_deref().unwrap_or("-");
        format!(
            "[{:>3}s] {} | last {last} | long-lived {long}",
            self.elapsed.as_secs(),
            states.join(", "),
        )
    }

    /// The full-screen view (the caller clears the screen first): at most [`ROWS`] lines of at
    /// most [`COLS`] columns, no trailing newline.
    pub fn screen(&self) -> String {
        let clock = match self.remaining {
            Some(r) => format!("{}s left", r.as_secs_f64().ceil()),
            None => "Ctrl-C stops it".to_string(),
        };
        let status_cmd = if self.admin.to_string() == crate::config::DEFAULT_ADMIN {
            "readyprism status".to_string()
        } else {
            format!("readyprism status --admin {}", self.admin)
        };
        let zone = self.status.zone.as_deref().unwrap_or("unknown");
        let mode = match self.status.mode {
            crate::admin::status::Mode::Normal => "normal",
            crate::admin::status::Mode::FailOpen => "FAIL OPEN",
            crate::admin::status::Mode::Refuse => "REFUSE",
            crate::admin::status::Mode::Starting => "starting",
        };
        let mut rows = vec![
            format!(
                "readyprism demo: 3 simulated apiservers, a 4th joins ({}s, {clock})",
                self.elapsed.as_secs()
            ),
            format!(
                "balancer {}  node zone {}  mode {mode}",
                self.listen,
                cell(zone, 20)
            ),
            format!("try: curl -k https://{}/version", self.listen),
            format!("     {status_cmd}"),
            String::new(),
            format!(
                "{:<8} {:<8} {:<10} {:<8} {:>8} {:>6} {:>4}  LAST ERROR",
                "NAME", "ZONE", "SOURCE", "STATE", "LATENCY", "ACTIVE", "RANK"
            ),
        ];
        for b in &self.status.backends {
            let [_, zone, source, state, latency, active, rank, error] = status::backend_cells(b);
            rows.push(format!(
                "{:<8} {:<8} {:<10} {:<8} {:>8} {:>6} {:>4}  {}",
                self.name(&b.address),
                zone,
                source,
                state,
                latency,
                active,
                rank,
                self.named(&error)
            ));
        }
        rows.extend([
            String::new(),
            self.flip(),
            self.join(),
            format!("long-lived connection: {}", self.long_lived()),
            self.failback(),
            format!(
                "connections: {}  failed {}",
                counts(&self.traffic.per_backend),
                self.traffic.failed
            ),
            format!("last {RECENT}: {}", self.recent()),
            "picks: ready apiservers only, own zone first, then lowest /readyz latency".to_string(),
        ]);
        let room = ROWS.saturating_sub(rows.len() + 1);
        rows.push("log (newest last):".to_string());
        let skip = self.logs.len().saturating_sub(room);
        rows.extend(self.logs[skip..].iter().map(|l| compact(&self.named(l))));
        rows.truncate(ROWS);
        let fitted: Vec<String> = rows.iter().map(|r| fit(r, COLS)).collect();
        fitted.join("\n")
    }

    /// The name of the apiserver at `address`, or the address when it is not one of the demo's.
    fn name(&self, address: &str) -> String {
        self.names
            .iter()
            .find(|(a, _)| a == address)
            .map_or_else(|| address.to_string(), |(_, n)| n.clone())
    }

    /// `text` with every simulated apiserver's address replaced by its name.
    fn named(&self, text: &str) -> String {
        self.names
            .iter()
            .fold(text.to_string(), |t, (a, n)| t.replace(a.as_str(), n))
    }

    fn flip(&self) -> String {
        let (name, secs) = (SITES[0].0, self.next_flip_in.as_secs_f64().ceil());
        // The simulated apiserver's own truth; readyprism's view is the STATE column, which
        // follows it after `rise`/`fall` checks.
        if self.dc_a_ready {
            format!("{name}: has etcd quorum (/readyz 200); loses it in {secs}s")
        } else {
            format!("{name}: LOST etcd QUORUM (/readyz 500); regains it in {secs}s")
        }
    }

    fn join(&self) -> String {
        let name = JOINER.0;
        match self.join_in {
            Some(d) => format!(
                "{name}: joins the Endpoints object in {}s (discovery adds it)",
                d.as_secs_f64().ceil()
            ),
            None => format!("{name}: has joined the Endpoints object (SOURCE discovered)"),
        }
    }

    fn long_lived(&self) -> String {
        let t = self.traffic;
        let on = match (&t.long_on, &t.long_closed_on) {
            (Some(on), _) => format!("on {on}"),
            (None, Some(from)) => format!("closed on {from}, re-dialing"),
            (None, None) => "opens once dc-a has quorum".to_string(),
        };
        let last = match &t.long_last_move {
            Some((from, to)) => format!(", last {from} -> {to}"),
            None => String::new(),
        };
        format!("{on}, moved {} time(s){last}", t.long_moves)
    }

    /// When the long-lived connection comes home to dc-a: failback closes connections on other
    /// zones once a same-zone apiserver has been ready for `failback_after`.
    fn failback(&self) -> String {
        let (home, after) = (SITES[0].0, FAILBACK_AFTER.as_secs());
        let away = match self.traffic.long_on.as_deref() {
            None => {
                return format!(
                    "failback: once back, it returns to {home} after {home} is ready {after}s"
                )
            }
            Some(on) if on == home => {
                return format!("failback: nothing to do, it is home on {home}")
            }
            Some(on) => on,
        };
        match self.dc_a_ready_for {
            None => format!("failback: it stays on {away} until {home} has been ready {after}s"),
            Some(ready) => {
                let wait = FAILBACK_AFTER.saturating_sub(ready);
                if wait < self.next_flip_in {
                    format!(
                        "failback: it comes home to {home} in {}s",
                        wait.as_secs_f64().ceil()
                    )
                } else {
                    format!(
                        "failback: it stays on {away}: {home} loses quorum before its {after}s of ready"
                    )
                }
            }
        }
    }

    fn recent(&self) -> String {
        if self.traffic.recent.is_empty() {
            return "none yet".to_string();
        }
        let names: Vec<&str> = self.traffic.recent.iter().map(String::as_str).collect();
        names.join(" ")
    }
}

/// A log line made to fit more in a row: field values without their quotes, empty fields
/// (`zone=""`) left out.
fn compact(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').filter(|w| !w.ends_with("=\"\"")).collect();
    words
        .join(" ")
        .replace("=\"", "=")
        .replace("\" ", " ")
        .trim_end_matches('"')
        .to_string()
}

/// `line` cut to `cols` characters, the last one `…` when cut.
fn fit(line: &str, cols: usize) -> String {
    if line.chars().count() <= cols {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(cols.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `dc-a 7, dc-b 5`.
pub(super) fn counts(per: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = per.iter().map(|(k, v)| format!("{k} {v}")).collect();
    if parts.is_empty() {
        "none yet".to_string()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests;
