//! Processes of the lab: [`LabProcess`], one running in a namespace with its output in a log
//! file, killed on drop. Commands run to completion with a deadline are `support::netns`'s, as
//! for every namespace of the tests.

use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::Duration;

use tokio::time::Instant;

/// A running process inside the lab, stdout and stderr in a log file; killed on drop.
pub struct LabProcess {
    pub(super) child: Child,
    pub(super) log: PathBuf,
}

impl LabProcess {
    /// Everything it printed so far (stdout and stderr interleaved).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
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

    /// Its process id (`ip netns exec` execs the program: the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`STOP`, `CONT`, `HUP`, `TERM`) with kill(1).
    pub fn signal(&self, signal: &str) -> Result<(), String> {
        signal_pid(self.pid(), signal)
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

/// Sends `signal` to `pid` with kill(1).
pub fn signal_pid(pid: u32, signal: &str) -> Result<(), String> {
    let out = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .output()
        .map_err(|e| format!("kill: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kill -{signal} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
