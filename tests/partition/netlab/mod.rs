//! The partition lab's network: a "node" namespace and three site namespaces joined by a bridge,
//! with the field report's round-trip delays added in userspace, and faults as iptables rules.
//!
//! Topology (all of it inside namespaces named `rplab-<pid>-<n>-*`; nothing in the host's):
//!
//! ```text
//!   node 10.77.2.10 ─┐                       one L2 segment, 10.77.0.0/16, bridge `br0` in
//!   dc-b 10.77.2.1  ─┼── br0 (ns "-br") ──   its own namespace; every host's link is `eth0`
//!   dc-a 10.77.1.1  ─┤
//!   witness 10.77.3.1┘
//! ```
//!
//! Delay: every host's INPUT chain sends packets arriving from a far host to an NFQUEUE
//! (`--queue-bypass`), and one `tests/lab/nfq_delay.py` per namespace holds each packet for half
//! the round trip of that pair, then accepts it; the other direction gets the other half in the
//! peer's namespace. TCP handshakes are delayed too. The node is in dc-b: node↔dc-b is not delayed.
//! On arrival, not on departure: a packet held in the sender's OUTPUT still belongs to its socket,
//! and TCP Small Queues then allow only about two packets in flight per socket (0.3 MB/s over
//! 43 ms, measured); held on arrival the same link carries about 40 MB/s.
//!
//! Faults: DROP rules in the chain `RP-FAULT`, jumped to first from INPUT, so a packet is lost
//! on arrival, as if in the network: the sender sees silence (a DROP in OUTPUT would make its
//! send fail at once with EPERM instead). Only on `eth0`, never on loopback. Each fault returns a
//! [`Fault`] that [`NetLab::heal`] undoes; [`NetLab::heal_all`] flushes them all.
//!
//! Cleanup: see `tests/lab/cleanup.sh`: Drop runs it; a watchdog per lab (own process group, so a
//! terminal's Ctrl-C does not reach it) runs it when the test process dies; the first lab of a test
//! process sweeps namespaces left by dead test processes.
//!
//! Files: `hosts.rs` (the hosts and their round trips), `lifecycle.rs` (start, skip or fail, the
//! sweep, the watchdog, cleanup on drop), `topology.rs` (namespaces, bridge, veths, base rules and
//! delay helpers), `faults.rs`, `signals.rs` (faults made with signals), `measure.rs` (link figures), `process.rs` (lab processes); namespaces,
//! commands in them and veths are `support::netns`'s, shared with the other tests. This file is the front door: the [`NetLab`] handle and its accessors, and the lab's
//! printing and skipping.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use std::time::Duration;

mod faults;
mod hosts;
mod lifecycle;
mod measure;
mod process;
mod signals;
mod topology;

use crate::support::netns::{command_in, run};
pub use crate::support::netns::{on_path, output_within, skip};
pub use faults::Fault;
pub use hosts::{Host, Rtts};
pub use measure::{LinkFigures, PROBE_PORT};
pub use process::LabProcess;

/// The lab: namespaces, bridge, delay helpers and watchdog. Everything is removed on drop.
pub struct NetLab {
    prefix: String,
    rtts: Rtts,
    dir: Option<tempfile::TempDir>,
    watchdog: Option<Child>,
    watchdog_pipe: Option<ChildStdin>,
    delayers: Vec<LabProcess>,
    listeners: Mutex<BTreeMap<Host, LabProcess>>,
    next_fault: AtomicU32,
}

/// Prints straight to the test process's stderr, past libtest's output capture, so that figures
/// and skip notices show in a plain `cargo test` run.
pub fn lab_print(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = err.write_all(b"\n");
    }
}

/// Directory of the lab's helper scripts (`tests/lab`).
pub fn lab_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("lab")
}

impl NetLab {
    /// The lab's name prefix, `rplab-<pid>-<n>`: namespaces and scratch directories start with it.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The namespace of a host, e.g. `rplab-4242-1-dc-a`.
    pub fn ns(&self, host: Host) -> String {
        format!("{}-{}", self.prefix, host.name())
    }

    fn bridge_ns(&self) -> String {
        format!("{}-br", self.prefix)
    }

    /// The lab's scratch directory (logs, etcd data); kept if the test panics.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("lab dir").path()
    }

    /// A path in the lab's scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir().join(name)
    }

    /// `ip netns exec <ns of host> <program>`: add args, env and stdio, then run or spawn it. The
    /// environment passes through. Whatever it starts is killed when the lab goes away.
    pub fn command(&self, host: Host, program: impl AsRef<OsStr>) -> Command {
        command_in(&self.ns(host), program)
    }

    /// Gives a host's link a second address in the lab's segment (a control-plane node that joins
    /// in that site: no added delay from the site's own hosts, the site's from the others').
    pub fn add_address(&self, host: Host, ip: Ipv4Addr) -> Result<(), String> {
        let addr = format!("{ip}/16");
        run(&[
            "ip",
            "-n",
            &self.ns(host),
            "addr",
            "add",
            &addr,
            "dev",
            "eth0",
        ])
        .map(|_| ())
    }

    /// Runs a program in a host's namespace to completion and captures its output.
    pub fn output(
        &self,
        host: Host,
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Output, String> {
        let mut cmd = self.command(host, program);
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        output_within(&mut cmd, timeout)
    }

    /// Spawns a command made by [`NetLab::command`], stdin from /dev/null, stdout and stderr into
    /// `<lab dir>/<name>.log`. Killed when the handle is dropped (and with the lab anyway).
    pub fn spawn(&self, name: &str, mut cmd: Command) -> Result<LabProcess, String> {
        let log = self.path(&format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|e| format!("{log:?}: {e}"))?;
        let err = file.try_clone().map_err(|e| format!("{log:?}: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {name}: {e}"))?;
        Ok(LabProcess { child, log })
    }
}
