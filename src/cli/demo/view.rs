//! The demo's live view: a full screen for a terminal, one line per refresh for pipes and logs.
//!
//! Pure text from a status document and the demo clients' record; no I/O, no clock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::{Traffic, JOINER, RECENT, SITES};
use crate::admin::StatusDoc;
use crate::cli::status;

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
    /// What the demo's clients saw.
    pub traffic: &'a Traffic,
    /// Whether dc-a currently has quorum.
    pub dc_a_ready: bool,
    /// Time to dc-a's next flip.
    pub next_flip_in: Duration,
    /// Time until the fourth apiserver joins the Endpoints object; `None` once it has.
    pub join_in: Option<Duration>,
}

impl Frame<'_> {
    /// One plain line per refresh.
    pub fn line(&self) -> String {
        let per: Vec<String> = self
            .status
            .backends
            .iter()
            .map(|b| {
                let [_, zone, source, state, latency, active, rank, _] = status::backend_cells(b);
                format!("{zone} {source} {state} {latency} active {active} rank {rank}")
            })
            .collect();
        format!(
            "[{:>3}s] {} | last: {} | long-lived: {} | {} | {}",
            self.elapsed.as_secs(),
            per.join(" | "),
            self.recent(),
            self.long_lived(),
            self.flip(),
            self.join()
        )
    }

    /// The full-screen view for a terminal (the caller clears the screen first).
    pub fn screen(&self) -> String {
        let status_cmd = if self.admin.to_string() == crate::config::DEFAULT_ADMIN {
            "readyprism status".to_string()
        } else {
            format!("readyprism status --admin {}", self.admin)
        };
        let clock = match self.remaining {
            Some(r) => format!("{}s left", r.as_secs_f64().ceil()),
            None => "Ctrl-C to stop".to_string(),
        };
        format!(
            "readyprism demo: balancer on {listen}, admin on {admin}, three simulated apiservers \
             with mutual TLS and a fourth joining later ({secs}s, {clock})\n\
             try from another shell:  curl -k https://{listen}/version   {status_cmd}\n\n\
             readyprism's view (STATE follows an apiserver after 2 checks that agree: rise/fall):\n\
             {table}\n\
             {flip}\n\
             {join}\n\
             new connections go to ready apiservers only: this node's zone first, then the lowest \
             /readyz latency.\n\
             an apiserver that turns unready has its connections closed, so clients re-dial; \
             failback moves nothing.\n\n\
             last {RECENT} connections (newest last): {recent}\n\
             connections so far: {counts}   failed: {failed}\n\
             long-lived connection: {long}\n",
            listen = self.listen,
            admin = self.admin,
            secs = self.elapsed.as_secs(),
            table = status::render_table(self.status),
            flip = self.flip(),
            join = self.join(),
            recent = self.recent(),
            counts = counts(&self.traffic.per_backend),
            failed = self.traffic.failed,
            long = self.long_lived(),
        )
    }

    fn flip(&self) -> String {
        let (name, secs) = (SITES[0].0, self.next_flip_in.as_secs_f64().ceil());
        // The simulated apiserver's own truth; readyprism's view is the STATE column, which
        // follows it after `rise`/`fall` checks.
        if self.dc_a_ready {
            format!("simulated apiserver {name}: has quorum (/readyz 200); loses it in {secs}s")
        } else {
            format!("simulated apiserver {name}: LOST QUORUM (/readyz 500); regains it in {secs}s")
        }
    }

    fn join(&self) -> String {
        let name = JOINER.0;
        match self.join_in {
            Some(d) => format!(
                "simulated cluster: {name} joins the Endpoints object in {}s (discovery adds it)",
                d.as_secs_f64().ceil()
            ),
            None => format!(
                "simulated cluster: {name} has joined the Endpoints object (SOURCE discovered)"
            ),
        }
    }

    fn long_lived(&self) -> String {
        let t = self.traffic;
        let on = match (&t.long_on, &t.long_closed_on) {
            (Some(on), _) => format!("on {on}"),
            (None, Some(from)) => format!("closed on {from}, re-dialing"),
            (None, None) => "not open yet (opens once dc-a has quorum)".to_string(),
        };
        let last = match &t.long_last_move {
            Some((from, to)) => format!(", last {from} -> {to}"),
            None => String::new(),
        };
        format!("{on}, moved {} time(s){last}", t.long_moves)
    }

    fn recent(&self) -> String {
        if self.traffic.recent.is_empty() {
            return "none yet".to_string();
        }
        let names: Vec<&str> = self.traffic.recent.iter().map(String::as_str).collect();
        names.join(" ")
    }
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
mod tests {
    use super::*;
    use crate::cli::status::sample;

    fn traffic() -> Traffic {
        let mut t = Traffic::default();
        for name in ["dc-a", "dc-a", "dc-b"] {
            t.landed(name);
        }
        t.failed();
        t.long_on = Some("dc-b".to_string());
        t.long_moves = 1;
        t.long_last_move = Some(("dc-a".to_string(), "dc-b".to_string()));
        t
    }

    fn frame<'a>(status: &'a StatusDoc, traffic: &'a Traffic) -> Frame<'a> {
        Frame {
            elapsed: Duration::from_secs(12),
            remaining: Some(Duration::from_millis(17_400)),
            listen: "127.0.0.1:7445".parse().expect("literal"),
            admin: "127.0.0.1:7446".parse().expect("literal"),
            status,
            traffic,
            dc_a_ready: false,
            next_flip_in: Duration::from_millis(3_200),
            join_in: Some(Duration::from_millis(1_500)),
        }
    }

    #[test]
    fn line_says_where_traffic_went_and_when_dc_a_flips() {
        let (s, t) = (sample(), traffic());
        assert_eq!(
            frame(&s, &t).line(),
            "[ 12s] dc-a config unready 0.31ms active 0 rank - | dc-b config ready 23.3ms active 12 rank 0 | \
             - discovered unknown - active 0 rank - | last: dc-a dc-a dc-b FAILED | \
             long-lived: on dc-b, moved 1 time(s), last dc-a -> dc-b | \
             simulated apiserver dc-a: LOST QUORUM (/readyz 500); regains it in 4s | \
             simulated cluster: new-cp joins the Endpoints object in 2s (discovery adds it)"
        );
    }

    #[test]
    fn screen_has_the_table_the_try_commands_and_the_traffic() {
        let (s, t) = (sample(), traffic());
        let screen = frame(&s, &t).screen();
        for want in [
            "(12s, 18s left)",
            "curl -k https://127.0.0.1:7445/version   readyprism status\n",
            "BACKEND",
            "[-]etcd failed",
            "last 10 connections (newest last): dc-a dc-a dc-b FAILED\n",
            "connections so far: dc-a 2, dc-b 1   failed: 1\n",
            "long-lived connection: on dc-b, moved 1 time(s), last dc-a -> dc-b\n",
        ] {
            assert!(screen.contains(want), "missing {want:?} in:\n{screen}");
        }
    }

    #[test]
    fn recent_keeps_only_the_last_ten() {
        let mut t = Traffic::default();
        for i in 0..15 {
            t.landed(if i < 5 { "dc-a" } else { "dc-b" });
        }
        assert_eq!(t.recent.len(), RECENT);
        assert!(t.recent.iter().all(|n| n == "dc-b"));
        assert_eq!(counts(&t.per_backend), "dc-a 5, dc-b 10");
    }
}
