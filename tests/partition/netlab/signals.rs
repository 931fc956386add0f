//! Faults made with signals: a program in a host's namespace stopped (SIGSTOP, continued on
//! heal: an etcd member frozen, as a stalled disk or a long GC pause leaves it) or sent a signal
//! it acts on (SIGTERM: a planned restart). Processes are found by the namespace they run in and
//! their name, so a scenario needs no handle on them.

use std::time::Duration;

use tokio::time::Instant;

use super::{Fault, Host, NetLab};
use crate::support::netns::run;

/// `kill -<sig> <pid>`.
pub(super) fn send(pid: u32, sig: &str) -> Result<String, String> {
    run(&["kill", &format!("-{sig}"), &pid.to_string()])
}

/// A process's state letter (`/proc/<pid>/stat`'s third field: `T` stopped, `S` sleeping).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

impl NetLab {
    /// The processes in `host`'s namespace named `comm` (as `/proc/<pid>/comm` has it).
    pub fn pids_of(&self, host: Host, comm: &str) -> Vec<u32> {
        let ns = self.ns(host);
        run(&["ip", "netns", "pids", &ns])
            .unwrap_or_else(|e| panic!("ip netns pids {ns}: {e}"))
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim_end() == comm)
            })
            .collect()
    }

    /// Sends `sig` (`TERM`, `STOP`, ...) to the one process named `comm` in `host`'s namespace;
    /// its pid.
    fn signal_one(&self, host: Host, comm: &str, sig: &str) -> u32 {
        let pids = self.pids_of(host, comm);
        let [pid] = pids[..] else {
            panic!("one `{comm}` expected in {}, found {pids:?}", self.ns(host));
        };
        send(pid, sig).unwrap_or_else(|e| panic!("SIG{sig} to {comm} in {}: {e}", host.name()));
        pid
    }

    /// Stops the program named `comm` in `host`'s namespace (SIGSTOP) until healed (SIGCONT);
    /// panics unless the kernel shows it stopped within 2 s.
    pub fn stop_program(&self, host: Host, comm: &str) -> Fault {
        let pid = self.signal_one(host, comm, "STOP");
        let deadline = Instant::now() + Duration::from_secs(2);
        while state(pid) != Some('T') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            state(pid) == Some('T'),
            "{comm} in {} not stopped: state {:?}",
            host.name(),
            state(pid)
        );
        let mut fault = self.fault_without_rules(format!("SIGSTOP {comm} in {}", host.name()));
        fault.stopped.push(pid);
        fault
    }

    /// Sends `sig` to the program named `comm` in `host`'s namespace; nothing to heal.
    pub fn signal_program(&self, host: Host, comm: &str, sig: &str) -> Fault {
        self.signal_one(host, comm, sig);
        self.fault_without_rules(format!("SIG{sig} {comm} in {}", host.name()))
    }
}
