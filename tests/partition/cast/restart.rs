//! The running balancer as a process: its id, signals, its config file, and a restart (SIGTERM,
//! then the same command again, its log in a new file). Reading what it reports is `observe.rs`'s.

use std::path::Path;
use std::time::Duration;

use super::{poll, readyprism_command, Cast};

/// How long a stopped balancer may take to exit (its shutdown grace) before it is killed.
const EXIT_LIMIT: Duration = Duration::from_secs(20);

impl<'a> Cast<'a> {
    /// The balancer's process id.
    pub fn balancer_pid(&self) -> u32 {
        self.balancer.pid()
    }

    /// Sends `signal` (`HUP`, ...) to the balancer.
    pub fn signal_balancer(&self, signal: &str) -> Result<(), String> {
        self.balancer.signal(signal)
    }

    /// Whether the balancer has exited (its status if so).
    pub fn balancer_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.balancer.exited()
    }

    /// The balancer's config file.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Stops the balancer (SIGTERM, SIGKILL after [`EXIT_LIMIT`]) and starts it again with the
    /// same config; waits until it has started. Its old log is kept ([`Cast::balancer_log`]).
    pub fn restart_balancer(&mut self) -> Result<(), String> {
        self.balancer.signal("TERM")?;
        if self.balancer.wait_timeout(EXIT_LIMIT).is_none() {
            self.balancer.kill();
        }
        let n = self.retired.len() + 1;
        let cmd = readyprism_command(self.lab, &self.config, self.log_level.as_deref());
        let next = self.lab.spawn(&format!("readyprism-{n}"), cmd)?;
        let old = std::mem::replace(&mut self.balancer, next);
        self.retired.push(old);
        let up = poll(Duration::from_secs(10), || {
            self.balancer.log_text().contains("readyprism started")
        });
        if up {
            Ok(())
        } else {
            Err(format!(
                "readyprism did not start again: {}",
                self.balancer.log_text()
            ))
        }
    }
}
