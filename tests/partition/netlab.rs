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
use std::io::{BufRead, BufReader, Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, Once};
use std::time::Duration;

use tokio::time::Instant;

/// Set to `1` (CI) to make a lab that cannot be built a test failure instead of a skip.
pub const REQUIRE_ENV: &str = "READYPRISM_REQUIRE_NETNS";
/// The chain of the fault rules in every host's namespace (jumped to first from INPUT).
const FAULT_CHAIN: &str = "RP-FAULT";
/// TCP port of the probe echo listener that [`NetLab::measure`] starts on demand.
pub const PROBE_PORT: u16 = 7900;

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

/// A fault in force: the iptables rules it added, so that it can be undone.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Human description, e.g. `cut dc-a <-> dc-b`.
    pub what: String,
    rules: Vec<Rule>,
}

#[derive(Clone, Debug)]
struct Rule {
    ns: String,
    spec: Vec<String>,
}

/// A running process inside the lab, stdout and stderr in a log file; killed on drop.
pub struct LabProcess {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl LabProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed so far (stdout and stderr interleaved).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends a signal by name (`TERM`, `INT`, `HUP`, `KILL`, `STOP`, `CONT`) with kill(1).
    pub fn signal(&self, sig: &str) -> Result<(), String> {
        let out = output_within(
            Command::new("kill")
                .arg("-s")
                .arg(sig)
                .arg(self.pid().to_string()),
            Duration::from_secs(5),
        )?;
        check("kill", &out).map(|_| ())
    }

    /// `Some(status)` once it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LabProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Measured figures for one direction of one host pair.
#[derive(Clone, Debug)]
pub struct LinkFigures {
    pub from: Host,
    pub to: Host,
    /// The round trip the lab is configured to add.
    pub target: Duration,
    pub ping_ms: Vec<f64>,
    pub ping_lost: usize,
    /// TCP connect (SYN → SYN-ACK) times.
    pub connect_ms: Vec<f64>,
    pub connect_errors: Vec<String>,
}

impl LinkFigures {
    pub fn ping_median(&self) -> f64 {
        median(&self.ping_ms)
    }

    pub fn connect_median(&self) -> f64 {
        median(&self.connect_ms)
    }

    /// One line: `node -> dc-a  target 43.0 ms  ping min/med/max 43.1/43.3/44.0 ms (0 lost) ...`.
    pub fn line(&self) -> String {
        let (pmin, pmax) = min_max(&self.ping_ms);
        let (cmin, cmax) = min_max(&self.connect_ms);
        format!(
            "{:>7} -> {:<7} target {:>5.1} ms | ping min/med/max {:>5.1}/{:>5.1}/{:>5.1} ms ({} lost) | connect min/med/max {:>5.1}/{:>5.1}/{:>5.1} ms ({} failed)",
            self.from.name(),
            self.to.name(),
            self.target.as_secs_f64() * 1000.0,
            pmin,
            self.ping_median(),
            pmax,
            self.ping_lost,
            cmin,
            self.connect_median(),
            cmax,
            self.connect_errors.len(),
        )
    }
}

/// The median of some samples (NaN if there are none).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::NAN, f64::NAN), |(lo, hi), &x| (lo.min(x), hi.max(x)))
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

/// Runs a command to completion with a deadline, capturing stdout and stderr; kills it on timeout.
pub fn output_within(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {:?}: {e}", cmd.get_program()))?;
    // Readers on threads; after the exit they get a moment to finish, not forever: a grandchild
    // that inherited the pipes (a daemon) must not hang the caller.
    let reader = |mut r: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
        rx
    };
    let out = reader(Box::new(child.stdout.take().expect("stdout")));
    let err = reader(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} {:?}: no exit within {timeout:?}",
                    cmd.get_program(),
                    cmd.get_args().collect::<Vec<_>>()
                ));
            }
        }
    };
    let grace = Duration::from_secs(2);
    Ok(Output {
        status,
        stdout: out.recv_timeout(grace).unwrap_or_default(),
        stderr: err.recv_timeout(grace).unwrap_or_default(),
    })
}

fn check(what: &str, out: &Output) -> Result<String, String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn run(args: &[&str]) -> Result<String, String> {
    let (program, rest) = args.split_first().expect("program");
    let out = output_within(Command::new(program).args(rest), Duration::from_secs(20))?;
    check(&args.join(" "), &out)
}

/// Whether a program is on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
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

    /// Runs `tests/lab/netprobe.py ARGS` in a host's namespace and parses its JSON line.
    pub fn netprobe(
        &self,
        host: Host,
        args: &[&str],
        timeout: Duration,
    ) -> Result<serde_json::Value, String> {
        let script = lab_dir().join("netprobe.py");
        let mut cmd = self.command(host, "python3");
        cmd.arg(script).args(args);
        let out = output_within(&mut cmd, timeout)?;
        let text = check(&format!("netprobe {args:?} in {}", host.name()), &out)?;
        serde_json::from_str(text.trim()).map_err(|e| format!("netprobe output {text:?}: {e}"))
    }

    /// ICMP echo RTTs from one host to another, 20 ms apart, each reply awaited up to `timeout`:
    /// (samples in ms, number lost).
    pub fn ping(&self, from: Host, to: Host, count: usize, timeout: Duration) -> (Vec<f64>, usize) {
        let budget = Duration::from_secs(5) + (timeout + Duration::from_millis(50)) * count as u32;
        let args = [
            "ping".to_string(),
            to.ip().to_string(),
            count.to_string(),
            "0.02".to_string(),
            timeout.as_secs_f64().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = self
            .netprobe(from, &args, budget)
            .unwrap_or_else(|e| panic!("ping {} -> {}: {e}", from.name(), to.name()));
        let samples = v["rtt_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        (samples, v["lost"].as_u64().unwrap_or(0) as usize)
    }

    /// TCP connect times from a host to `ip:port`: (samples in ms, errors).
    pub fn connect_times(
        &self,
        from: Host,
        ip: Ipv4Addr,
        port: u16,
        count: usize,
        timeout: Duration,
    ) -> (Vec<f64>, Vec<String>) {
        let budget = Duration::from_secs(5) + timeout * count as u32 * 2;
        let v = self
            .netprobe(
                from,
                &[
                    "connect",
                    &ip.to_string(),
                    &port.to_string(),
                    &count.to_string(),
                    &timeout.as_secs_f64().to_string(),
                ],
                budget,
            )
            .unwrap_or_else(|e| panic!("connect {} -> {ip}:{port}: {e}", from.name()));
        let samples = v["connect_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        let errors = v["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        (samples, errors)
    }

    /// Starts (once) a TCP echo listener on `host:PROBE_PORT` and waits until it accepts.
    pub fn ensure_probe_listener(&self, host: Host) {
        let mut listeners = self.listeners.lock().expect("listeners");
        if listeners.contains_key(&host) {
            return;
        }
        let mut cmd = self.command(host, "python3");
        cmd.arg("-u")
            .arg(lab_dir().join("netprobe.py"))
            .arg("listen")
            .arg(host.ip().to_string())
            .arg(PROBE_PORT.to_string());
        let proc = self
            .spawn(&format!("listen-{}", host.name()), cmd)
            .expect("spawn probe listener");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !proc.log_text().contains("ready") {
            assert!(
                Instant::now() < deadline,
                "probe listener in {} did not start: {}",
                host.name(),
                proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        listeners.insert(host, proc);
    }

    /// Pings and TCP-connects (to the probe listener) from one host to another, `count` each.
    pub fn measure(&self, from: Host, to: Host, count: usize) -> LinkFigures {
        self.ensure_probe_listener(to);
        let (ping_ms, ping_lost) = self.ping(from, to, count, Duration::from_secs(1));
        let (connect_ms, connect_errors) =
            self.connect_times(from, to.ip(), PROBE_PORT, count, Duration::from_secs(2));
        LinkFigures {
            from,
            to,
            target: self.rtts.between(from, to),
            ping_ms,
            ping_lost,
            connect_ms,
            connect_errors,
        }
    }

    /// ICMP echo requests a host has received so far (`/proc/net/snmp` `Icmp: InEchos`), to see a
    /// one-way path work when the replies cannot come back.
    pub fn icmp_echos_received(&self, host: Host) -> u64 {
        let out = self
            .output(
                host,
                "cat",
                &["/proc/net/snmp"],
                &[],
                Duration::from_secs(5),
            )
            .expect("read /proc/net/snmp");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut icmp = text.lines().filter(|l| l.starts_with("Icmp:"));
        let (names, values) = (icmp.next().unwrap_or(""), icmp.next().unwrap_or(""));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "InEchos")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
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
        let fault = Fault { what, rules };
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
