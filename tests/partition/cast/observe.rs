//! Reading a cast's balancer: its `/status` and `/metrics` (fetched from inside the node's
//! namespace) and the state changes in its JSON log. It does not parse that log
//! (`partition/balancer_log.rs`) or start anything.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{poll, Cast, ADMIN};
use crate::partition::balancer_log::{Change, Ended};
use crate::partition::balancers::Balancer;
use crate::partition::netlab::{Host, NetLab};

impl<'a> Cast<'a> {
    /// The balancer's `/status` document.
    pub fn status(&self) -> Result<serde_json::Value, String> {
        let script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
        let url = format!("http://{ADMIN}/status");
        let out = self.lab.output(
            Host::Node,
            "python3",
            &["-c", script, &url],
            &[],
            Duration::from_secs(10),
        )?;
        serde_json::from_slice(&out.stdout).map_err(|e| format!("/status: {e}"))
    }

    /// Every backend state change the balancer has logged so far, in order (across restarts).
    pub fn changes(&self) -> Vec<Change> {
        crate::partition::balancer_log::changes(&self.balancer_log())
    }

    /// Each site's state after the latest logged change (`ready`, `unready`; absent: unknown).
    pub fn states(&self) -> BTreeMap<Host, String> {
        self.changes().into_iter().map(|c| (c.site, c.to)).collect()
    }

    /// Whether every `(site, state)` in `want` holds now; always for the other balancers, which
    /// log no states.
    pub fn states_are(&self, want: &[(Host, &str)]) -> bool {
        if self.kind != Balancer::Readyprism {
            return true;
        }
        let now = self.states();
        want.iter()
            .all(|(s, st)| now.get(s).map(String::as_str) == Some(*st))
    }

    /// Waits until every `(site, state)` in `want` holds; panics with the log after `timeout`.
    pub fn wait_states(&self, want: &[(Host, &str)], timeout: Duration) {
        if !poll(timeout, || self.states_are(want)) {
            panic!(
                "balancer states {:?} never became {want:?} within {timeout:?}:\n{}",
                self.states(),
                self.balancer.log_text()
            );
        }
    }

    /// The balancer's `/metrics` lines that mention `needle`.
    pub fn metrics(&self, needle: &str) -> Vec<String> {
        lab_metrics(self.lab, needle)
    }

    /// Every client connection's end record the balancer has logged so far, in order.
    pub fn connections_ended(&self) -> Vec<Ended> {
        crate::partition::balancer_log::ended(&self.balancer.log_text())
    }

    /// The connections the balancer itself closed (`ended_by` balancer), in order.
    pub fn closed_by_balancer(&self) -> Vec<Ended> {
        self.connections_ended()
            .into_iter()
            .filter(|e| e.ended_by == "balancer")
            .collect()
    }

    /// The balancer's log (for failure messages), the logs of restarted ones first.
    pub fn balancer_log(&self) -> String {
        let mut text: String = self.retired.iter().map(|p| p.log_text()).collect();
        text.push_str(&self.balancer.log_text());
        text
    }

    /// The log of the balancer running now only.
    pub fn current_balancer_log(&self) -> String {
        self.balancer.log_text()
    }
}

/// A balancer's `/metrics` lines that mention `needle`, fetched from inside the node's namespace.
pub fn lab_metrics(lab: &NetLab, needle: &str) -> Vec<String> {
    let script = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())";
    let url = format!("http://{ADMIN}/metrics");
    match lab.output(
        Host::Node,
        "python3",
        &["-c", script, &url],
        &[],
        Duration::from_secs(10),
    ) {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(needle) && !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
        Err(e) => vec![format!("metrics: {e}")],
    }
}
