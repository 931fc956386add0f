//! A network namespace of a test's own, for tests outside the partition lab (which has its own
//! `netlab`): made with `ip netns add`, `lo` up, addresses on `lo` or on one end of a veth pair,
//! commands run inside it, and deleted on drop with the processes started in it — also when the
//! test panics. Needs root and `ip`; [`or_skip`] says why a test is skipped without them, unless
//! `READYPRISM_REQUIRE_NETNS=1`, which makes that a failure.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::stderr;

/// One namespace; deleted on drop.
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
        run("ip", &["netns", "add", &name])?;
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
        self.run(
            "ip",
            &["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
        )?;
        for a in addrs {
            self.run("ip", &["addr", "add", a, "dev", "v0"])?;
        }
        self.run("ip", &["link", "set", "v0", "up"])?;
        self.run("ip", &["link", "set", "v1", "up"])?;
        Ok(self)
    }

    /// `program args...` inside the namespace, to completion: its stdout, or why it failed.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["netns", "exec", &self.name, program];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// The command prefix that runs a program inside the namespace. (No `--`: this machine's
    /// `ip netns exec` takes the program right after the name.)
    pub fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let [ip, args @ ..] = self.exec();
        let mut c = Command::new(ip);
        c.args(args).arg(program);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = run("ip", &["netns", "delete", &self.name]);
    }
}

/// `program args...` to completion: its stdout, or the command and its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            stderr(&o).trim()
        ))
    }
}

/// The namespace `made` gives, or `None` after saying why `test` is skipped (a failure with
/// `READYPRISM_REQUIRE_NETNS=1`).
pub fn or_skip(test: &str, made: Result<Netns, String>) -> Option<Netns> {
    match made {
        Ok(ns) => Some(ns),
        Err(why) => {
            assert!(
                std::env::var("READYPRISM_REQUIRE_NETNS").as_deref() != Ok("1"),
                "{test}: network namespaces are required (READYPRISM_REQUIRE_NETNS=1): {why}"
            );
            eprintln!("SKIPPED {test}: no network namespace here: {why}");
            None
        }
    }
}
