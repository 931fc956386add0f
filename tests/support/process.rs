//! The real binary as a child process: JSON logs collected from stderr, signals sent with `kill`.
//! What only the process shows; the app in process with its logs is `running.rs`.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::logs::Logs;
use super::observed::Observed;
use super::patience;

/// A running `readyprism run`; what it logs and answers is [`Observed`], which it derefs to.
pub struct Proc {
    child: Child,
    observed: Observed,
}

impl std::ops::Deref for Proc {
    type Target = Observed;
    fn deref(&self) -> &Observed {
        &self.observed
    }
}

impl Proc {
    /// Starts `readyprism --log-format json run --config <config>` and waits until it listens.
    pub fn start(config: &std::path::Path) -> Proc {
        Proc::start_under(&[], config)
    }

    /// Like [`Proc::start`], with `env` set for the process.
    pub fn start_with_env(config: &std::path::Path, env: &[(&str, &str)]) -> Proc {
        Proc::spawn(&[], config, env)
    }

    /// Like [`Proc::start`], run under a wrapper command (e.g. `prlimit --nofile=64 --`).
    pub fn start_under(wrapper: &[&str], config: &std::path::Path) -> Proc {
        Proc::spawn(wrapper, config, &[])
    }

    fn spawn(wrapper: &[&str], config: &std::path::Path, env: &[(&str, &str)]) -> Proc {
        let bin = env!("CARGO_BIN_EXE_readyprism");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = command
            .args([
                "--log-format",
                "json",
                "--log-level",
                "debug",
                "run",
                "--config",
            ])
            .arg(config)
            .env_remove("READYPRISM_ZONE")
            .envs(env.iter().copied())
            // A group of its own, which drop kills whole: under a wrapper the child is the
            // wrapper, and killing it alone leaves readyprism running (strace detaches it).
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn readyprism");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Logs::default();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.push(line);
            }
        });
        let started = logs.wait_log("readyprism started", |_| true);
        let field = |k: &str| {
            started["fields"][k]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        // `listen` is the bound addresses joined by commas, e.g. `127.0.0.1:41234,[::1]:41235`.
        let listens: Vec<_> = field("listen")
            .split(',')
            .map(|a| a.parse().expect("listen addr in log"))
            .collect();
        let admin = field("admin").parse().expect("admin addr in log");
        Proc {
            child,
            observed: Observed::new(logs, &listens, admin),
        }
    }

    /// The process id (to read `/proc/<pid>/`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`HUP`, `TERM`, `INT`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Waits for exit; returns the status and how long it took from the call.
    pub fn wait_exit(&mut self) -> (ExitStatus, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, start.elapsed());
            }
            assert!(start.elapsed() < patience(), "did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
