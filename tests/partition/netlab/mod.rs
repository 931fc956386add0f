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

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, Once};
use std::time::Duration;

mod faults;
mod measure;
mod process;

pub use faults::Fault;
pub use measure::{LinkFigures, PROBE_PORT};
use process::{check, run};
pub use process::{on_path, output_within, LabProcess};

/// Set to `1` (CI) to make a lab that cannot be built a test failure instead of a skip.
pub const REQUIRE_ENV: &str = "READYPRISM_REQUIRE_NETNS";

/// One of the lab's four hosts, each in its own network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// The worker node running the balancer; it sits in dc-b.
    Node,
    DcA,
    DcB,
    Witness,
}

impl Host {
    pub const ALL: [Host; 4] = [Host::Node, Host::DcA, Host::DcB, Host::Witness];
    pub const SITES: [Host; 3] = [Host::DcA, Host::DcB, Host::Witness];

    /// `node`, `dc-a`, `dc-b`, `witness` (also the zone names and the etcd member names).
    pub fn name(self) -> &'static str {
        match self {
            Host::Node => "node",
            Host::DcA => "dc-a",
            Host::DcB => "dc-b",
            Host::Witness => "witness",
        }
    }

    /// The site a host is in: the node is in dc-b.
    pub fn site(self) -> Host {
        match self {
            Host::Node => Host::DcB,
            other => other,
        }
    }

    /// The host's address; it exists only inside the lab's namespaces (the same in every lab).
    pub fn ip(self) -> Ipv4Addr {
        match self {
            Host::Node => Ipv4Addr::new(10, 77, 2, 10),
            Host::DcA => Ipv4Addr::new(10, 77, 1, 1),
            Host::DcB => Ipv4Addr::new(10, 77, 2, 1),
            Host::Witness => Ipv4Addr::new(10, 77, 3, 1),
        }
    }
}

/// Round-trip times between the sites; hosts in the same site get no added delay.
#[derive(Clone, Copy, Debug)]
pub struct Rtts {
    pub dca_dcb: Duration,
    pub dca_witness: Duration,
    pub dcb_witness: Duration,
}

impl Rtts {
    /// The field report: dc-b↔witness 23 ms, dc-a↔witness 43 ms, dc-a↔dc-b 43 ms.
    pub const FIELD: Rtts = Rtts {
        dca_dcb: Duration::from_millis(43),
        dca_witness: Duration::from_millis(43),
        dcb_witness: Duration::from_millis(23),
    };

    /// The added round trip between two hosts (zero within a site).
    pub fn between(&self, a: Host, b: Host) -> Duration {
        let mut pair = [a.site(), b.site()];
        pair.sort();
        match pair {
            [Host::DcA, Host::DcB] => self.dca_dcb,
            [Host::DcA, Host::Witness] => self.dca_witness,
            [Host::DcB, Host::Witness] => self.dcb_witness,
            _ => Duration::ZERO,
        }
    }
}

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

enum StartError {
    /// The machine cannot host the lab (not root, no netns): skip unless required.
    Skip(String),
    /// The machine should host it but building it failed: always a failure.
    Fail(String),
}

static LAB_COUNTER: AtomicU32 = AtomicU32::new(1);
static SWEEP: Once = Once::new();

/// Prints straight to the test process's stderr, past libtest's output capture, so that figures
/// and skip notices show in a plain `cargo test` run.
pub fn lab_print(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = err.write_all(b"\n");
    }
}

/// Skips (prints why and returns) or, with `READYPRISM_REQUIRE_NETNS=1`, fails the test.
pub fn skip(test: &str, reason: &str) {
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{test}: the partition lab cannot run and {REQUIRE_ENV}=1: {reason}");
    }
    lab_print(&format!(
        "SKIPPED {test}: {reason} (set {REQUIRE_ENV}=1 to make this a failure)"
    ));
}

/// Directory of the lab's helper scripts (`tests/lab`).
pub fn lab_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("lab")
}

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Removes what labs of dead test processes left (killed with SIGKILL, say, together with their
/// watchdog): namespaces and scratch directories named `rplab-<pid>-<n>-*` whose pid is gone.
fn sweep_stale() {
    let mut names: Vec<String> = run(&["ip", "netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    for dir in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            names.extend(
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    let mut stale = std::collections::BTreeSet::new();
    for name in names {
        let parts: Vec<&str> = name.splitn(4, '-').collect();
        if parts.len() == 4 && parts[0] == "rplab" {
            if let (Ok(pid), Ok(_)) = (parts[1].parse::<u32>(), parts[2].parse::<u32>()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    stale.insert(format!("rplab-{}-{}", parts[1], parts[2]));
                }
            }
        }
    }
    for prefix in stale {
        lab_print(&format!(
            "partition lab: removing what a dead test process left: {prefix}-*"
        ));
        let _ = output_within(
            Command::new("sh")
                .arg(lab_dir().join("cleanup.sh"))
                .arg(&prefix),
            Duration::from_secs(30),
        );
    }
}

impl NetLab {
    /// Builds the lab with the field report's delays, or returns `None` after printing why it is
    /// skipped (not root, no network namespaces, a tool missing). With `READYPRISM_REQUIRE_NETNS=1`
    /// a skip panics instead. A lab that should build but does not always panics.
    pub fn start(test: &str) -> Option<NetLab> {
        NetLab::start_with(test, Rtts::FIELD)
    }

    /// [`NetLab::start`] with other round-trip times.
    pub fn start_with(test: &str, rtts: Rtts) -> Option<NetLab> {
        match NetLab::try_start(rtts) {
            Ok(lab) => Some(lab),
            Err(StartError::Skip(reason)) => {
                skip(test, &reason);
                None
            }
            Err(StartError::Fail(reason)) => panic!("{test}: building the partition lab: {reason}"),
        }
    }

    fn try_start(rtts: Rtts) -> Result<NetLab, StartError> {
        match effective_uid() {
            Some(0) => {}
            Some(uid) => {
                return Err(StartError::Skip(format!(
                    "needs root for network namespaces (euid {uid})"
                )))
            }
            None => return Err(StartError::Skip("cannot read the euid".into())),
        }
        for tool in [
            "ip",
            "iptables",
            "iptables-restore",
            "python3",
            "sh",
            "kill",
        ] {
            if !on_path(tool) {
                return Err(StartError::Skip(format!(
                    "`{tool}` is not installed (see tests/lab/README.md)"
                )));
            }
        }
        SWEEP.call_once(sweep_stale);

        let prefix = format!(
            "rplab-{}-{}",
            std::process::id(),
            LAB_COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let dir = tempfile::Builder::new()
            .prefix(&format!("{prefix}-"))
            .tempdir()
            .map_err(|e| StartError::Fail(format!("tempdir: {e}")))?;

        // The watchdog first, so that whatever happens from here on is cleaned up.
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(r#"while read -r _; do :; done; exec sh "$0" "$1""#)
            .arg(lab_dir().join("cleanup.sh"))
            .arg(&prefix)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| StartError::Fail(format!("spawn watchdog: {e}")))?;
        let watchdog_pipe = watchdog.stdin.take();

        let mut lab = NetLab {
            prefix,
            rtts,
            dir: Some(dir),
            watchdog: Some(watchdog),
            watchdog_pipe,
            delayers: Vec::new(),
            listeners: Mutex::new(BTreeMap::new()),
            next_fault: AtomicU32::new(1),
        };

        let br = lab.bridge_ns();
        run(&["ip", "netns", "add", &br])
            .map_err(|e| StartError::Skip(format!("`ip netns add` failed: {e}")))?;
        lab.build().map_err(StartError::Fail)?;
        Ok(lab)
    }

    fn build(&mut self) -> Result<(), String> {
        let br = self.bridge_ns();
        for host in Host::ALL {
            run(&["ip", "netns", "add", &self.ns(host)])?;
        }
        run(&["ip", "-n", &br, "link", "set", "lo", "up"])?;
        run(&["ip", "-n", &br, "link", "add", "br0", "type", "bridge"])?;
        run(&["ip", "-n", &br, "link", "set", "br0", "up"])?;
        for host in Host::ALL {
            let ns = self.ns(host);
            let port = format!("v-{}", host.name());
            let addr = format!("{}/16", host.ip());
            run(&[
                "ip", "-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ])?;
            run(&["ip", "-n", &br, "link", "set", &port, "master", "br0", "up"])?;
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        for host in Host::ALL {
            self.install_delay(host)?;
        }
        Ok(())
    }

    /// Base rules of one host (fault chain, delay queues) and its delay helper.
    fn install_delay(&mut self, host: Host) -> Result<(), String> {
        // Distinct one-way delays (µs) from this host's far peers: one queue each.
        let mut queues: BTreeMap<u128, (u16, Vec<Host>)> = BTreeMap::new();
        for peer in Host::ALL.into_iter().filter(|&p| p != host) {
            let one_way = self.rtts.between(host, peer).as_micros() / 2;
            if one_way > 0 {
                let next = queues.len() as u16 + 1;
                queues
                    .entry(one_way)
                    .or_insert((next, Vec::new()))
                    .1
                    .push(peer);
            }
        }
        let mut rules = String::from("*filter\n:RP-FAULT - [0:0]\n-A INPUT -j RP-FAULT\n");
        for (num, peers) in queues.values() {
            for peer in peers {
                rules.push_str(&format!(
                    "-A INPUT -i eth0 -s {}/32 -j NFQUEUE --queue-num {num} --queue-bypass\n",
                    peer.ip()
                ));
            }
        }
        rules.push_str("COMMIT\n");

        if !queues.is_empty() {
            // Bind the queues before any packet is sent to them (bypass would let it through).
            let mut cmd = self.command(host, "python3");
            cmd.arg("-u").arg(lab_dir().join("nfq_delay.py"));
            for (one_way, (num, _)) in &queues {
                cmd.arg("--queue")
                    .arg(format!("{num}:{:.3}", *one_way as f64 / 1000.0));
            }
            let log = self.path(&format!("delay-{}.log", host.name()));
            let log_file = std::fs::File::create(&log).map_err(|e| format!("{log:?}: {e}"))?;
            let mut child = cmd
                .stdin(Stdio::piped()) // EOF when this process dies: the helper exits
                .stdout(Stdio::piped())
                .stderr(log_file)
                .spawn()
                .map_err(|e| format!("spawn nfq_delay.py: {e}"))?;
            let stdout = child.stdout.take().expect("stdout");
            let proc = LabProcess {
                name: format!("delay-{}", host.name()),
                child,
                log: log.clone(),
            };
            self.delayers.push(proc);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(stdout).read_line(&mut line);
                let _ = tx.send(line);
            });
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(line) if line.trim() == "ready" => {}
                other => {
                    return Err(format!(
                        "nfq_delay.py in {} did not start ({other:?}): {}",
                        host.name(),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    ))
                }
            }
        }
        let mut restore = self.command(host, "iptables-restore");
        restore
            .arg("-w")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = restore
            .spawn()
            .map_err(|e| format!("iptables-restore: {e}"))?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .map_err(|e| format!("iptables-restore: {e}"))?;
        let out = child
            .wait_with_output()
            .map_err(|e| format!("iptables-restore: {e}"))?;
        check(&format!("iptables-restore in {}", host.name()), &out)?;
        Ok(())
    }

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

    /// The configured round-trip times.
    pub fn rtts(&self) -> Rtts {
        self.rtts
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
        let mut cmd = Command::new("ip");
        cmd.arg("netns").arg("exec").arg(self.ns(host)).arg(program);
        cmd
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
        Ok(LabProcess {
            name: name.to_string(),
            child,
            log,
        })
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // Our own children first (SIGKILL and reap), then whatever else runs in the namespaces.
        if let Ok(mut l) = self.listeners.lock() {
            l.clear();
        }
        self.delayers.clear();
        let panicking = std::thread::panicking();
        let mut cleanup = Command::new("sh");
        cleanup.arg(lab_dir().join("cleanup.sh")).arg(&self.prefix);
        if panicking {
            cleanup.arg("keep-logs");
        }
        let _ = output_within(&mut cleanup, Duration::from_secs(30));
        // Done: the watchdog is not needed (and must not remove the logs kept after a panic).
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        drop(self.watchdog_pipe.take());
        if let Some(dir) = self.dir.take() {
            if panicking {
                lab_print(&format!(
                    "partition lab: logs kept in {}",
                    dir.keep().display()
                ));
            }
        }
    }
}
