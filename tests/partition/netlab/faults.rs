//! The lab's faults: DROP rules in each host's `RP-FAULT` chain (see the module above for why on
//! arrival), each returned as a [`Fault`] that [`NetLab::heal`] undoes.

use std::sync::atomic::Ordering;

use super::{Host, NetLab};
use crate::support::netns::run;

/// The chain of the fault rules in every host's namespace (jumped to first from INPUT).
const FAULT_CHAIN: &str = "RP-FAULT";

/// A fault in force: the iptables rules it added and the processes it stopped, so that it can be
/// undone.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Human description, e.g. `cut dc-a <-> dc-b`.
    pub what: String,
    rules: Vec<Rule>,
    /// Processes stopped with SIGSTOP (`signals.rs`), continued on heal.
    pub(super) stopped: Vec<u32>,
}

#[derive(Clone, Debug)]
struct Rule {
    ns: String,
    spec: Vec<String>,
}

impl NetLab {
    /// A fault of no iptables rule (a signal: `signals.rs`).
    pub(super) fn fault_without_rules(&self, what: String) -> Fault {
        Fault {
            what,
            rules: Vec::new(),
            stopped: Vec::new(),
        }
    }

    fn add_fault(&self, what: String, rules: Vec<Rule>) -> Fault {
        let id = self.next_fault.fetch_add(1, Ordering::SeqCst);
        let mut rules = rules;
        for rule in &mut rules {
            rule.spec
                .extend(["-m", "comment", "--comment"].map(String::from));
            rule.spec.push(format!("rpf{id}"));
            rule.spec.extend(["-j", "DROP"].map(String::from));
        }
        let fault = Fault {
            what,
            rules,
            stopped: Vec::new(),
        };
        for rule in &fault.rules {
            self.iptables(&rule.ns, "-I", FAULT_CHAIN, &rule.spec)
                .unwrap_or_else(|e| panic!("{}: {e}", fault.what));
        }
        fault
    }

    fn iptables(&self, ns: &str, op: &str, chain: &str, spec: &[String]) -> Result<String, String> {
        let mut args = vec!["ip", "netns", "exec", ns, "iptables", "-w", op, chain];
        args.extend(spec.iter().map(String::as_str));
        run(&args)
    }

    fn rule(&self, host: Host, spec: &[&str]) -> Rule {
        Rule {
            ns: self.ns(host),
            spec: spec.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// A rule in `at`'s namespace matching packets from `from` (plus `extra`).
    fn drop_from(&self, at: Host, from: Host, extra: &[&str]) -> Rule {
        let ip = from.ip().to_string();
        let mut spec = vec!["-i", "eth0", "-s", &ip];
        spec.extend_from_slice(extra);
        self.rule(at, &spec)
    }

    /// Cuts a host pair both ways: all IP traffic between them dropped on arrival.
    pub fn cut(&self, a: Host, b: Host) -> Fault {
        let rules = vec![self.drop_from(a, b, &[]), self.drop_from(b, a, &[])];
        self.add_fault(format!("cut {} <-> {}", a.name(), b.name()), rules)
    }

    /// Drops packets from `from` to `to` only; `to` → `from` still arrives.
    pub fn drop_one_way(&self, from: Host, to: Host) -> Fault {
        let rules = vec![self.drop_from(to, from, &[])];
        self.add_fault(format!("drop {} -> {}", from.name(), to.name()), rules)
    }

    /// Silently drops TCP SYNs to `to.ip():port` arriving over the network: new connections hang,
    /// established ones keep working.
    pub fn drop_syns(&self, to: Host, port: u16) -> Fault {
        let (ip, port_s) = (to.ip().to_string(), port.to_string());
        let spec = [
            "-i", "eth0", "-p", "tcp", "-d", &ip, "--dport", &port_s, "--syn",
        ];
        let rules = vec![self.rule(to, &spec)];
        self.add_fault(format!("drop SYNs to {}:{port}", to.ip()), rules)
    }

    /// Random loss of `percent` % of the packets in each direction between two hosts.
    pub fn loss(&self, a: Host, b: Host, percent: f64) -> Fault {
        assert!((0.0..=100.0).contains(&percent), "loss percent {percent}");
        let p = format!("{:.4}", percent / 100.0);
        let stat = ["-m", "statistic", "--mode", "random", "--probability", &p];
        let rules = vec![self.drop_from(a, b, &stat), self.drop_from(b, a, &stat)];
        self.add_fault(
            format!("{percent}% loss {} <-> {}", a.name(), b.name()),
            rules,
        )
    }

    /// Drops all TCP from and to `port` of a host, both directions, on arrival at either end
    /// (e.g. 2380: that etcd member's peer traffic, while its clients still reach it).
    pub fn block_tcp_port(&self, host: Host, port: u16) -> Fault {
        let p = port.to_string();
        let mut rules = Vec::new();
        for dir in ["--sport", "--dport"] {
            rules.push(self.rule(host, &["-i", "eth0", "-p", "tcp", dir, &p]));
            for other in Host::ALL.into_iter().filter(|&o| o != host) {
                rules.push(self.drop_from(other, host, &["-p", "tcp", dir, &p]));
            }
        }
        self.add_fault(format!("block tcp port {port} on {}", host.name()), rules)
    }

    /// Undoes one fault.
    pub fn heal(&self, fault: &Fault) {
        for rule in &fault.rules {
            self.iptables(&rule.ns, "-D", FAULT_CHAIN, &rule.spec)
                .unwrap_or_else(|e| panic!("heal {}: {e}", fault.what));
        }
        for pid in &fault.stopped {
            super::signals::send(*pid, "CONT")
                .unwrap_or_else(|e| panic!("heal {}: {e}", fault.what));
        }
    }

    /// Undoes every fault on every host.
    pub fn heal_all(&self) {
        for host in Host::ALL {
            self.iptables(&self.ns(host), "-F", FAULT_CHAIN, &[])
                .unwrap_or_else(|e| panic!("heal all: {e}"));
        }
    }

    /// The `iptables -S` of a host (for diagnostics).
    pub fn rules(&self, host: Host) -> String {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.ns(host),
            "iptables",
            "-w",
            "-S",
        ])
        .unwrap_or_else(|e| e)
    }
}
