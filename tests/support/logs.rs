//! [`Logs`]: one balancer's JSON log lines, as the binary writes them with `--log-format json
//! --log-level debug`, and the waits and reads on them. Filled from a child's stderr
//! (`process.rs`) or by a subscriber of its own on an in-process app's threads (`running.rs`).
//! It does not start anything.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::patience;

/// The lines one balancer logged, in order; a clone shares them.
#[derive(Clone, Default)]
pub struct Logs {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logs {
    /// Appends one line (from a child's stderr).
    pub fn push(&self, line: String) {
        self.lines.lock().expect("lines").push(line);
    }

    /// A subscriber writing every event at debug and above as one JSON line here: the binary's
    /// `--log-format json --log-level debug` format (main's `init_tracing`), without colour as
    /// into a pipe.
    pub fn dispatch(&self) -> tracing::Dispatch {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_ansi(false)
            .with_writer(move || Line {
                sink: sink.clone(),
                bytes: Vec::new(),
            })
            .json()
            .finish();
        tracing::Dispatch::new(subscriber)
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

    /// Whether a log line with `message` for which `pred` holds was written so far.
    pub fn logged(&self, message: &str, pred: impl Fn(&serde_json::Value) -> bool) -> bool {
        self.logs()
            .iter()
            .any(|v| v["fields"]["message"] == message && pred(v))
    }
}

/// One event's formatted bytes, pushed as lines when the formatter drops it.
struct Line {
    sink: Logs,
    bytes: Vec<u8>,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        for line in String::from_utf8_lossy(&self.bytes).lines() {
            self.sink.push(line.to_string());
        }
    }
}
