//! The things measured: direct to the backend, the real `readyprism` binary, HAProxy and nginx,
//! each started as its own process with its config in the run directory, and what `/proc` says
//! about them (CPU, RSS, descriptors).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::process::{self, free_port};

/// One way to reach the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Straight to the backend: the baseline "added latency" is measured against.
    Direct,
    /// The `readyprism` binary of this tree.
    Readyprism,
    /// HAProxy `mode tcp`, `nbthread 1`.
    Haproxy,
    /// nginx `stream`, one process.
    Nginx,
}

impl Kind {
    /// Name in the output and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Readyprism => "readyprism",
            Kind::Haproxy => "haproxy",
            Kind::Nginx => "nginx",
        }
    }
}

/// A running proxy (or the backend itself for [`Kind::Direct`]).
pub struct Target {
    /// Which one.
    pub kind: Kind,
    /// Where clients connect.
    pub addr: SocketAddr,
    /// The process to read `/proc` of; `None` for direct.
    child: Option<Child>,
    /// exec → the listener accepts a TCP connection.
    pub start_listen: Option<Duration>,
    /// readyprism's admin listener (for `/readyz`).
    pub admin: Option<SocketAddr>,
}

impl Target {
    /// The backend itself.
    pub fn direct(addr: SocketAddr) -> Target {
        Target {
            kind: Kind::Direct,
            addr,
            child: None,
            start_listen: None,
            admin: None,
        }
    }

    /// The proxy process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts `kind` in `dir` relaying to `backend`, and waits until it accepts.
    pub fn start(kind: Kind, dir: &Path, backend: SocketAddr, env: &Env) -> Target {
        let listen = free_port();
        let mut admin_addr = None;
        let (mut cmd, log) = match kind {
            Kind::Direct => return Target::direct(backend),
            Kind::Readyprism => {
                let admin = free_port();
                admin_addr = Some(admin);
                let cfg = dir.join("readyprism.yaml");
                std::fs::write(
                    &cfg,
                    format!(
                        "listen: [\"{listen}\"]\nadmin: \"{admin}\"\ntls:\n  ca: {}\n  client_cert: {}\nbackends:\n  - address: \"{backend}\"\n",
                        env.ca.display(),
                        env.client.display()
                    ),
                )
                .expect("write readyprism config");
                let mut c = match env.wrap.split_first() {
                    Some((prog, args)) => {
                        let mut c = Command::new(prog);
                        c.args(args).arg(&env.readyprism);
                        c
                    }
                    None => Command::new(&env.readyprism),
                };
                c.args(["--log-level", "warn", "run", "--config"]).arg(&cfg);
                (c, dir.join("readyprism.log"))
            }
            Kind::Haproxy => {
                let cfg = dir.join("haproxy.cfg");
                std::fs::write(
                    &cfg,
                    format!(
                        "global\n  nbthread 1\n  maxconn 9000\n\
                         defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 10m\n  timeout server 10m\n\
                         frontend fe\n  bind {listen}\n  backlog 1024\n  default_backend be\n\
                         backend be\n  server s1 {backend}\n"
                    ),
                )
                .expect("write haproxy config");
                let mut c = Command::new("haproxy");
                c.args(["-db", "-f"]).arg(&cfg);
                (c, dir.join("haproxy.log"))
            }
            Kind::Nginx => {
                let cfg = dir.join("nginx.conf");
                let module = env
                    .nginx_stream_module
                    .as_ref()
                    .map(|m| format!("load_module {};\n", m.display()))
                    .unwrap_or_default();
                std::fs::write(
                    &cfg,
                    format!(
                        "{module}daemon off;\nmaster_process off;\nworker_processes 1;\n\
                         worker_rlimit_nofile 19000;\npid {dir}/nginx.pid;\nerror_log {dir}/nginx.log warn;\n\
                         events {{ worker_connections 12000; }}\n\
                         stream {{ server {{ listen {listen} backlog=1024; proxy_pass {backend}; \
                         proxy_connect_timeout 1s; proxy_timeout 10m; }} }}\n",
                        dir = dir.display()
                    ),
                )
                .expect("write nginx config");
                let mut c = Command::new("nginx");
                c.args(["-e", "stderr", "-p"]).arg(dir).arg("-c").arg(&cfg);
                (c, dir.join("nginx.log"))
            }
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open log");
        let t0 = Instant::now();
        let child = process::spawn_logged(&mut cmd, log, kind.name());
        let mut t = Target {
            kind,
            addr: listen,
            child: Some(child),
            start_listen: None,
            admin: admin_addr,
        };
        t.start_listen = Some(wait_accepting(&mut t, t0));
        t
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// CPU time of every thread, from `/proc/<pid>/task/*/schedstat` (nanoseconds).
    pub fn cpu(&self) -> Duration {
        self.pid().map(cpu_of).unwrap_or_default()
    }

    /// [`Sched`] now: run time, run-queue wait and times run.
    pub fn sched(&self) -> Sched {
        self.pid().map(sched_of).unwrap_or_default()
    }

    /// utime + stime in 10 ms ticks (a cross-check of [`Target::cpu`]).
    pub fn ticks(&self) -> u64 {
        self.pid().map(ticks_of).unwrap_or_default()
    }

    /// Runs `work` and returns what it made with the CPU time ([`Target::cpu`]) and ticks
    /// ([`Target::ticks`]) this target spent meanwhile.
    pub fn spending<R>(&self, work: impl FnOnce() -> R) -> (R, Duration, u64) {
        let (c0, k0) = (self.cpu(), self.ticks());
        let r = work();
        let (c, k) = (self.cpu(), self.ticks());
        (r, c.saturating_sub(c0), k.saturating_sub(k0))
    }

    /// Resident memory (VmRSS) in bytes.
    pub fn rss(&self) -> u64 {
        let Some(pid) = self.pid() else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status_field(&status, "VmRSS:").map_or(0, |kb| kb * 1024)
    }

    /// Open descriptors.
    pub fn fds(&self) -> u64 {
        let Some(pid) = self.pid() else { return 0 };
        std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
    }
}

impl Drop for Target {
    /// SIGTERM first (a profiler wrapping readyprism writes its output on exit), SIGKILL after 5 s.
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            process::stop(c);
        }
    }
}

/// Sum of `/proc/<pid>/task/*/schedstat` run times: nanosecond resolution, where utime+stime in
/// `/proc/<pid>/stat` only has 10 ms ticks (a 64 MiB transfer takes well under 100 ms).
pub fn cpu_of(pid: u32) -> Duration {
    let run_ns = threads(pid).map(|t| schedstat(&t).0).sum();
    Duration::from_nanos(run_ns)
}

/// What the scheduler did for a process, summed over its threads (`/proc/<pid>/task/*/schedstat`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sched {
    /// Time on a CPU.
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU (woken, not yet running).
    pub wait_ns: u64,
    /// Times it was put on a CPU: after a sleep or after a preemption.
    pub runs: u64,
    /// Times it went to sleep (`voluntary_ctxt_switches` in `/proc/<pid>/task/*/status`): the
    /// rest of `runs` are preemptions.
    pub sleeps: u64,
}

impl std::ops::Add for Sched {
    type Output = Sched;

    fn add(self, o: Sched) -> Sched {
        Sched {
            run_ns: self.run_ns + o.run_ns,
            wait_ns: self.wait_ns + o.wait_ns,
            runs: self.runs + o.runs,
            sleeps: self.sleeps + o.sleeps,
        }
    }
}

impl Sched {
    /// What was spent from `earlier` to `self`.
    pub fn since(self, earlier: Sched) -> Sched {
        Sched {
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
            runs: self.runs.saturating_sub(earlier.runs),
            sleeps: self.sleeps.saturating_sub(earlier.sleeps),
        }
    }
}

/// [`Sched`] of `pid` now; zero if it is gone.
pub fn sched_of(pid: u32) -> Sched {
    threads(pid).fold(Sched::default(), |sum, t| {
        let (run_ns, wait_ns, runs) = schedstat(&t);
        let status = std::fs::read_to_string(t.join("status")).unwrap_or_default();
        let sleeps = status_field(&status, "voluntary_ctxt_switches:").unwrap_or(0);
        sum + Sched {
            run_ns,
            wait_ns,
            runs,
            sleeps,
        }
    })
}

/// The `/proc/<pid>/task/<tid>` directory of each of `pid`'s threads; none if it is gone.
fn threads(pid: u32) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|t| t.path())
}

/// A thread's `schedstat`: time on a CPU (ns), time waiting for one (ns), times put on one.
fn schedstat(task: &Path) -> (u64, u64, u64) {
    let stat = std::fs::read_to_string(task.join("schedstat")).unwrap_or_default();
    let mut f = stat
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(0));
    let mut next = || f.next().unwrap_or(0);
    (next(), next(), next())
}

/// The number after `key` in a `/proc` `status` file (a trailing unit such as `kB` dropped).
fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
}

/// utime + stime from `/proc/<pid>/stat`, in clock ticks of 10 ms (cross-check of [`cpu_of`]).
pub fn ticks_of(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the `(comm)`, which may hold spaces: utime and stime are 14th and 15th overall.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let p = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    p(11) + p(12)
}

/// What the proxies need from the run: binaries, certificate files.
pub struct Env {
    /// The `readyprism` binary.
    pub readyprism: PathBuf,
    /// A command (and arguments) to run it under, e.g. a profiler; empty for none.
    pub wrap: Vec<String>,
    /// Cluster CA for the probes.
    pub ca: PathBuf,
    /// Client certificate and key (one PEM) for the probes.
    pub client: PathBuf,
    /// `load_module` path if nginx has `stream` as a dynamic module.
    pub nginx_stream_module: Option<PathBuf>,
}

/// Polls with TCP connects until the listener accepts one that relays a byte; returns the time
/// from `t0` to the first accepted connect.
fn wait_accepting(t: &mut Target, t0: Instant) -> Duration {
    let deadline = t0 + Duration::from_secs(60);
    let listen = loop {
        if TcpStream::connect(t.addr).is_ok() {
            break t0.elapsed();
        }
        assert!(
            t.alive(),
            "{} exited at start (see its log in the run directory)",
            t.kind.name()
        );
        assert!(
            Instant::now() < deadline,
            "{} never listened",
            t.kind.name()
        );
        std::thread::sleep(Duration::from_micros(100));
    };
    // Then until a byte goes through (readyprism: its backend is not probed yet at first).
    loop {
        if echo_once(t.addr).is_ok() {
            return listen;
        }
        assert!(Instant::now() < deadline, "{} never relayed", t.kind.name());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One connection, one echoed byte, closed by the backend.
pub fn echo_once(addr: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"Ex")?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b)?;
    s.write_all(b"Q")?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)?;
    Ok(())
}

/// TCP segments this host has sent (`OutSegs` of `/proc/net/snmp`; 0 if unreadable).
pub fn tcp_out_segments() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "OutSegs")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}
