//! [`Observed`]: a balancer seen from outside, whether it runs in process ([`super::Running`]) or
//! as a process ([`super::process::Proc`]): its bound listeners, its JSON log lines and what its
//! admin listener answers. Both hold one and deref to it, so a helper shared by tests of both
//! takes `&impl Balancer` and reads the same fields and methods.

use std::net::SocketAddr;
use std::ops::Deref;

use super::logs::Logs;

/// What a test reads of a started balancer.
pub struct Observed {
    /// Its log lines, as JSON.
    pub logs: Logs,
    /// The first bound client listener.
    pub listen: SocketAddr,
    /// Bound admin listener.
    pub admin: SocketAddr,
}

/// A started balancer, in process or as a process.
pub trait Balancer: Deref<Target = Observed> {}

impl<T: Deref<Target = Observed>> Balancer for T {}

impl Observed {
    /// Listening on `listens` (the first is [`Observed::listen`]) and `admin`, logging into
    /// `logs`.
    pub fn new(logs: Logs, listens: &[SocketAddr], admin: SocketAddr) -> Observed {
        let listen = *listens.first().expect("at least one client listener");
        Observed {
            logs,
            listen,
            admin,
        }
    }

    /// Every JSON log line so far.
    pub fn logs(&self) -> Vec<serde_json::Value> {
        self.logs.logs()
    }

    /// Waits for a log line with `message` for which `pred` holds; returns it.
    pub fn wait_log(
        &self,
        message: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.logs.wait_log(message, pred)
    }

    /// Whether a log line with `message` for which `pred` holds was written so far.
    pub fn logged(&self, message: &str, pred: impl Fn(&serde_json::Value) -> bool) -> bool {
        self.logs.logged(message, pred)
    }

    /// The `/status` document.
    pub fn status(&self) -> readyprism::admin::StatusDoc {
        super::admin_status(self.admin)
    }

    /// Every backend's state, in config order, from `/status`.
    pub fn states(&self) -> Vec<readyprism::verdict::State> {
        super::admin_states(self.admin)
    }

    /// One sample from `/metrics` (`labels` matched as a substring), 0 when absent.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        super::admin_metric(self.admin, name, labels)
    }

    /// Connections to the backend at `address` closed for `reason`, from `/metrics`.
    pub fn closes(&self, address: &str, reason: &str) -> u64 {
        super::admin_closes(self.admin, address, reason)
    }
}
