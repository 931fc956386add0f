//! The real binary as a child process: JSON logs collected from stderr, signals sent with `kill`.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::patience;

/// A running `readyprism run`.
pub struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// Bound client listeners, in config order.
    pub listens: Vec<SocketAddr>,
    /// The first bound client listener.
    pub listen: SocketAddr,
    /// Bound admin listener.
    pub admin: SocketAddr,
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
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("lines").push(line);
            }
        });
        let mut p = Proc {
            child,
            lines,
            listens: Vec::new(),
            listen: "0.0.0.0:0".parse().expect("addr"),
            admin: "0.0.0.0:0".parse().expect("addr"),
        };
        let started = p.wait_log("readyprism started", |_| true);
        let field = |k: &str| {
            started["fields"][k]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        // `listen` is the bound addresses joined by commas, e.g. `127.0.0.1:41234,[::1]:41235`.
        p.listens = field("listen")
            .split(',')
            .map(|a| a.parse().expect("listen addr in log"))
            .collect();
        p.listen = p.listens[0];
        p.admin = field("admin").parse().expect("admin addr in log");
        p
    }

    /// Every JSON log line so far.
    pub fn logs(&self) -> Vec<serde_json::Value> {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits for a log line with `message` for which `pred` holds; returns it.
    pub fn wait_log(
        &self,
        message: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + patience();
        loop {
            if let Some(v) = self
                .logs()
                .into_iter()
                .find(|v| v["fields"]["message"] == message && pred(v))
            {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no log {message:?}; logs:\n{}",
                self.lines.lock().expect("lines").join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every backend's state, in config order, from `/status`.
    pub fn states(&self) -> Vec<readyprism::verdict::State> {
        self.status().backends.iter().map(|b| b.state).collect()
    }

    /// The `/status` document.
    pub fn status(&self) -> readyprism::admin::StatusDoc {
        serde_json::from_str(&super::blocking_get(self.admin, "/status").1).expect("status")
    }

    /// One sample from `/metrics` (`labels` matched as a substring), 0 when absent.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        let text = super::blocking_get(self.admin, "/metrics").1;
        super::metric(&text, name, labels).unwrap_or(0.0)
    }

    /// Connections to the backend at `address` closed for `reason`, from `/metrics`.
    pub fn closes(&self, address: &str, reason: &str) -> u64 {
        let labels = format!("backend=\"{address}\",reason=\"{reason}\"");
        self.metric("readyprism_connections_closed_total", &labels) as u64
    }

    /// Whether a log line with `message` for which `pred` holds was written so far.
    pub fn logged(&self, message: &str, pred: impl Fn(&serde_json::Value) -> bool) -> bool {
        self.logs()
            .iter()
            .any(|v| v["fields"]["message"] == message && pred(v))
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
