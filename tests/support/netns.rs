//! Network namespaces for tests, one way for all of them: made and deleted with `ip netns`, a
//! command run inside one, a veth pair, programs run to completion with a deadline, and the rule
//! that a test skips without them unless `READYPRISM_REQUIRE_NETNS=1`. The partition lab
//! (`partition/netlab`) builds its network from these; [`Netns`] is a test's own namespace
//! outside it: `lo` up, addresses on `lo` or on one end of a veth pair, deleted on drop with the
//! processes started in it — also when the test panics. Needs root and `ip`.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use tokio::time::Instant;

/// Set to `1` (CI) to make a test that cannot have its namespaces a failure instead of a skip.
pub const REQUIRE_ENV: &str = "READYPRISM_REQUIRE_NETNS";

/// Skips (says why on stderr, past libtest's capture, and returns) or, with
/// `READYPRISM_REQUIRE_NETNS=1`, fails `test`.
pub fn skip(test: &str, reason: &str) {
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{test}: network namespaces cannot be had here and {REQUIRE_ENV}=1: {reason}");
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test}: {reason} (set {REQUIRE_ENV}=1 to make this a failure)"
    );
}

/// `ip netns add NAME`.
pub fn add(name: &str) -> Result<(), String> {
    run(&["ip", "netns", "add", name]).map(drop)
}

/// `ip netns delete NAME`.
pub fn delete(name: &str) -> Result<(), String> {
    run(&["ip", "netns", "delete", name]).map(drop)
}

/// The command prefix that runs a program inside namespace `ns`. (No `--`: this machine's
/// `ip netns exec` takes the program right after the name.)
pub fn exec_prefix(ns: &str) -> [&str; 4] {
    ["ip", "netns", "exec", ns]
}

/// A command that runs `program` inside namespace `ns`: add args, env and stdio, then run or
/// spawn it. The environment passes through.
pub fn command_in(ns: &str, program: impl AsRef<OsStr>) -> Command {
    let [ip, args @ ..] = exec_prefix(ns);
    let mut c = Command::new(ip);
    c.args(args).arg(program);
    c
}

/// `program args...` inside namespace `ns`, to completion within 20 s: its stdout, or why not.
pub fn run_in(ns: &str, program: &str, args: &[&str]) -> Result<String, String> {
    let mut all = exec_prefix(ns).to_vec();
    all.push(program);
    all.extend_from_slice(args);
    run(&all)
}

/// A veth pair: `name` in namespace `ns`, its peer `peer` in namespace `peer_ns` (may be `ns`).
pub fn veth(ns: &str, name: &str, peer: &str, peer_ns: &str) -> Result<(), String> {
    run(&[
        "ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer, "netns", peer_ns,
    ])
    .map(drop)
}

/// One namespace of a test's own; deleted on drop.
pub struct Netns {
    /// Its name, `<prefix>-<pid>-<n>`.
    pub name: String,
    /// Processes started in it, killed on drop.
    pub children: Vec<Child>,
}

impl Netns {
    /// A namespace named after `prefix` with `lo` up, or why it cannot be made here.
    pub fn new(prefix: &str) -> Result<Netns, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        add(&name)?;
        let ns = Netns {
            name,
            children: Vec::new(),
        };
        ns.run("ip", &["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Adds each of `addrs` (`a.b.c.d/len`) to `lo`.
    pub fn on_lo(self, addrs: &[&str]) -> Result<Netns, String> {
        for a in addrs {
            self.run("ip", &["addr", "add", a, "dev", "lo"])?;
        }
        Ok(self)
    }

    /// Adds a veth pair `v0`/`v1`, both up, `v0` holding `addrs` (`a.b.c.d/len`): addresses of
    /// this "node" on a real interface, not on `lo`.
    pub fn on_veth(self, addrs: &[&str]) -> Result<Netns, String> {
        veth(&self.name, "v0", "v1", &self.name)?;
        for a in addrs {
            self.run("ip", &["addr", "add", a, "dev", "v0"])?;
        }
        self.run("ip", &["link", "set", "v0", "up"])?;
        self.run("ip", &["link", "set", "v1", "up"])?;
        Ok(self)
    }

    /// `program args...` inside the namespace, to completion: its stdout, or why it failed.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        run_in(&self.name, program, args)
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn exec(&self) -> [&str; 4] {
        exec_prefix(&self.name)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        command_in(&self.name, program)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = delete(&self.name);
    }
}

/// The namespace `made` gives, or `None` after saying why `test` is skipped (a failure with
/// `READYPRISM_REQUIRE_NETNS=1`).
pub fn or_skip(test: &str, made: Result<Netns, String>) -> Option<Netns> {
    match made {
        Ok(ns) => Some(ns),
        Err(why) => {
            skip(test, &format!("no network namespace here: {why}"));
            None
        }
    }
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

/// A finished command's stdout, or `what` failed with its status and stderr.
pub fn check(what: &str, out: &Output) -> Result<String, String> {
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

/// `args[0] args[1..]` to completion within 20 s: its stdout, or the command and why it failed.
pub fn run(args: &[&str]) -> Result<String, String> {
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
