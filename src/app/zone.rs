//! This node's zone while it runs, when it comes from its addresses (`zones:`, nothing set by
//! hand): the address poll task, which reads the interface addresses every
//! [`ADDRESS_POLL_INTERVAL`] and hands a changed list to the run loop, and the pure decision of
//! what a list means for the zone ([`decide`]). An address that arrives late (slow DHCP) or is
//! renumbered so moves the zone within one poll, without a hang-up.
//!
//! Owns when the addresses are read again and what counts as a change. Does not own the matching
//! (`config::zones`), the precedence of `--zone` / `READYPRISM_ZONE` / `zone:` (`config`), nor
//! the table (`App` configures it, one writer as for a reload).

use std::net::IpAddr;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{warn_zone_tie, App};
use crate::config::zones::{self, Placement};
use crate::config::Config;

/// How often the addresses are read while the zone follows them: 5 s, the probe interval, so a
/// late or renumbered address moves the zone about as fast as a backend's health moves. Each
/// poll is one `getifaddrs(3)` on the blocking pool, a netlink dump of links and addresses whose
/// cost grows with them: measured at about 15 µs with a handful of interfaces and 2.2 ms with 300
/// (a busy node's pod veths) on a loaded 2-core machine, so at most 0.05 % of one core.
pub const ADDRESS_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// What a reading of this node's `addrs` means for the running `config`: where they place it,
/// when that changes its zone, the address holding it, or the tie; `None` when nothing changed
/// or the zone does not follow the addresses (set by hand, or no `zones:` map).
pub(crate) fn decide(config: &Config, addrs: &[IpAddr]) -> Option<Placement> {
    if !config.zone_follows_addresses() {
        return None;
    }
    let placement = config.zones.place(addrs);
    let same = placement.zone() == config.routing.zone && placement.tie() == config.zone_ambiguous;
    (!same).then_some(placement)
}

/// The address poll as the app holds it: the task while the zone follows the addresses, and the
/// lists it found.
pub(super) struct AddressPoll {
    /// Stops the running task; `None` while the zone does not follow the addresses.
    running: Option<CancellationToken>,
    updates: mpsc::Sender<Vec<IpAddr>>,
    incoming: mpsc::Receiver<Vec<IpAddr>>,
}

impl AddressPoll {
    /// No task yet: [`AddressPoll::follow`] starts it.
    pub(super) fn new() -> AddressPoll {
        let (updates, incoming) = mpsc::channel(1);
        AddressPoll {
            running: None,
            updates,
            incoming,
        }
    }

    /// Starts the task when `config`'s zone follows the addresses, stops it when not (start-up
    /// and every reload: a `zone:` added by a reload stops it). A task already running goes on.
    pub(super) fn follow(
        &mut self,
        config: &Config,
        tasks: &TaskTracker,
        background: &CancellationToken,
    ) {
        match (&self.running, config.zone_follows_addresses()) {
            (None, true) => {
                let stop = background.child_token();
                tasks.spawn(poll(self.updates.clone(), stop.clone()));
                self.running = Some(stop);
            }
            (Some(stop), false) => {
                stop.cancel();
                self.running = None;
            }
            _ => {}
        }
    }

    /// The next changed list of addresses (pending while there is no task or nothing changes).
    pub(super) async fn next(&mut self) -> Vec<IpAddr> {
        match self.incoming.recv().await {
            Some(addrs) => addrs,
            None => std::future::pending().await, // never: `self.updates` keeps it open
        }
    }
}

/// Every [`ADDRESS_POLL_INTERVAL`] until `stop`: reads the addresses and sends them when they
/// differ from the last list sent (the first read always). A failure to read keeps the zone as
/// it is: one WARN per spell, an INFO when reading works again.
async fn poll(updates: mpsc::Sender<Vec<IpAddr>>, stop: CancellationToken) {
    let mut sent: Option<Vec<IpAddr>> = None;
    let mut failing = false;
    let mut due = Instant::now() + ADDRESS_POLL_INTERVAL;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(due) => {}
        }
        due += ADDRESS_POLL_INTERVAL;
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            read = tokio::task::spawn_blocking(zones::list_interface_addresses) => read,
        };
        let addrs = match read.map_err(std::io::Error::other).and_then(|r| r) {
            Ok(addrs) => addrs,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot list this node's interface addresses; its zone stays as it is");
                    failing = true;
                }
                continue;
            }
        };
        if failing {
            tracing::info!("this node's interface addresses can be listed again");
            failing = false;
        }
        if sent.as_ref() == Some(&addrs) {
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            sending = updates.send(addrs.clone()) => {
                if sending.is_err() {
                    return; // the app is gone
                }
            }
        }
        sent = Some(addrs);
    }
}

impl App {
    /// Re-derives this node's zone from a fresh list of its addresses; a change is published
    /// through the table's writer (as a reload is, so picking uses it) and logged once: INFO with
    /// the old zone, the new one and why, and the tie's WARN when two zones hold the node.
    pub(super) async fn rezone(&mut self, addrs: Vec<IpAddr>) {
        let Some(placement) = decide(&self.config, &addrs) else {
            return;
        };
        let mut next = self.config.clone();
        next.place(&placement);
        if let Err(e) = self.configure_table(&next).await {
            tracing::warn!(error = %e, "this node's new zone not applied");
            return;
        }
        let old = self.config.routing.zone_name().unwrap_or_default();
        let new = next.routing.zone_name().unwrap_or_default();
        let source = next.routing.zone.as_ref().map(|z| z.source.to_string());
        let source = source.unwrap_or_default();
        if old != new {
            tracing::info!(
                old_zone = old,
                new_zone = new,
                zone_source = source,
                reason = placement.why(),
                "this node's zone changed"
            );
        } else {
            tracing::debug!(
                zone = new,
                zone_source = source,
                reason = placement.why(),
                "this node's zone is held by another of its addresses"
            );
        }
        if let Some(tie) = next.zone_ambiguous.as_deref() {
            if next.zone_ambiguous != self.config.zone_ambiguous {
                warn_zone_tie(tie);
            }
        }
        self.config = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONES: &str = "zones:\n  dc-a: [\"10.0.1.0/24\"]\n  dc-b: [\"10.0.2.0/24\"]\nbackends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\n";

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().expect("ip")).collect()
    }

    /// A config as `run` holds it after reading `addrs` at start-up.
    fn running(extra: &str, addrs: &[&str]) -> Config {
        let mut c = Config::parse(&format!("{extra}{ZONES}"), "node.yaml").expect("valid");
        if c.zone_follows_addresses() {
            c.place(&c.zones.place(&ips(addrs)));
        }
        c
    }

    #[test]
    fn a_new_list_changes_the_zone_only_when_it_places_the_node_elsewhere() {
        /// (the zone set by hand, the addresses at start-up, the addresses now, the zone now
        /// with its source when it changed, or "" for unknown; `None`: no change)
        type Case<'a> = (
            &'a str,
            &'a [&'a str],
            &'a [&'a str],
            Option<(&'a str, &'a str)>,
        );
        let cases: &[Case] = &[
            // Slow DHCP: no address at start-up, then one.
            ("", &[], &["10.0.1.5"], Some(("dc-a", "address 10.0.1.5"))),
            (
                "",
                &["192.168.9.9"],
                &["192.168.9.9", "10.0.2.5"],
                Some(("dc-b", "address 10.0.2.5")),
            ),
            // Renumbered into another zone, out of every zone, within one zone.
            (
                "",
                &["10.0.1.5"],
                &["10.0.2.5"],
                Some(("dc-b", "address 10.0.2.5")),
            ),
            ("", &["10.0.1.5"], &["192.168.9.9"], Some(("", ""))),
            (
                "",
                &["10.0.1.5"],
                &["10.0.1.6"],
                Some(("dc-a", "address 10.0.1.6")),
            ),
            // A tie leaves it unknown; a tie resolved gives it back.
            ("", &["10.0.1.5"], &["10.0.1.5", "10.0.2.5"], Some(("", ""))),
            (
                "",
                &["10.0.1.5", "10.0.2.5"],
                &["10.0.2.5"],
                Some(("dc-b", "address 10.0.2.5")),
            ),
            // Nothing changed: the same addresses, another address outside every zone.
            ("", &["10.0.1.5"], &["10.0.1.5"], None),
            ("", &["10.0.1.5"], &["10.0.1.5", "192.168.9.9"], None),
            ("", &[], &["192.168.9.9"], None),
            (
                "",
                &["10.0.1.5", "10.0.2.5"],
                &["10.0.2.5", "10.0.1.5"],
                None,
            ),
            // A zone set by hand never follows the addresses.
            ("zone: dc-z\n", &[], &["10.0.1.5"], None),
        ];
        for (extra, before, now, want) in cases {
            let config = running(extra, before);
            let got = decide(&config, &ips(now)).map(|p| {
                let z = p.zone();
                let name = z.as_ref().map_or(String::new(), |z| z.name.clone());
                (name, z.map_or(String::new(), |z| z.source.to_string()))
            });
            let want = want.map(|(z, s)| (z.to_string(), s.to_string()));
            assert_eq!(got, want, "{extra:?} {before:?} → {now:?}");
        }
    }

    #[tokio::test]
    async fn the_poll_runs_only_while_the_zone_follows_the_addresses() {
        let (tasks, background) = (TaskTracker::new(), CancellationToken::new());
        // A deadline, not a measure: a stopped poll ends at once, one left running never.
        let ended = |tasks: TaskTracker| async move {
            tasks.close();
            let wait = tokio::time::timeout(Duration::from_secs(10), tasks.wait());
            wait.await.expect("the poll stopped");
        };
        let mut poll = AddressPoll::new();
        let following = running("", &[]);
        let by_hand = running("zone: dc-z\n", &[]);
        poll.follow(&by_hand, &tasks, &background);
        assert_eq!(tasks.len(), 0, "a zone set by hand: no poll");
        poll.follow(&following, &tasks, &background);
        poll.follow(&following, &tasks, &background);
        assert_eq!(tasks.len(), 1, "one poll, kept across a reload");
        // A reload that sets `zone:` stops it; so does the app's end.
        poll.follow(&by_hand, &tasks, &background);
        ended(tasks).await;
        let mut poll = AddressPoll::new();
        let tasks = TaskTracker::new();
        poll.follow(&following, &tasks, &background);
        background.cancel();
        ended(tasks).await;
    }

    #[test]
    fn a_tie_that_appears_is_a_change_naming_both_zones() {
        let config = running("", &["10.0.1.5"]);
        let tie = decide(&config, &ips(&["10.0.1.5", "10.0.2.5"])).expect("a change");
        let why = tie.why();
        for part in ["10.0.1.5", "dc-a", "10.0.2.5", "dc-b"] {
            assert!(why.contains(part), "{part} in {why}");
        }
        assert!(tie.tie().is_some());
    }
}
