//! kube-apiserver's etcd health checks as the simulated apiserver runs them: `etcd` (on `/readyz`,
//! `/healthz` and `/livez`) and `etcd-readiness` (on `/readyz` only), each its own linearizable
//! read under a 2 s deadline behind its own rate limiter: one real read per second (half the
//! deadline, burst 1); a call in between gets the last read's result (k8s.io/apiserver v0.37.2
//! `pkg/storage/storagebackend/factory/etcd3.go` `newETCD3Check`: `rate.NewLimiter(rate.Every(
//! timeout/2), 1)`, `atomicLastError`, first "etcd client connection not yet established").
//! `/readyz` runs its checks one after another (`pkg/server/healthz/healthz.go`
//! `handleRootHealth`), so an apiserver whose member lost quorum answers after about 4 s.
//!
//! Owns the limiter and the last result. Does not own the read (`etcd`) or the rendering (`readyz`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// One real read per this long (half kube-apiserver's 2 s check deadline).
pub const READ_EVERY: Duration = Duration::from_secs(1);

/// The result a check gives before its first read has ended (the real one's client is not yet
/// connected).
const NOT_YET: &str = "etcd client connection not yet established";

/// One rate-limited etcd check.
#[derive(Debug)]
pub struct EtcdCheck {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the limiter last let a read through.
    allowed_at: Option<Instant>,
    /// The latest-started read's result, and when it started.
    last: (Option<Instant>, Result<(), String>),
}

impl Default for EtcdCheck {
    fn default() -> Self {
        EtcdCheck {
            state: Mutex::new(State {
                allowed_at: None,
                last: (None, Err(NOT_YET.to_string())),
            }),
        }
    }
}

/// Whether a token bucket of one, refilled every [`READ_EVERY`], lets a call at `now` through
/// when it last let one through at `allowed_at`.
pub fn admits(allowed_at: Option<Instant>, now: Instant) -> bool {
    allowed_at.is_none_or(|at| now.duration_since(at) >= READ_EVERY)
}

impl EtcdCheck {
    /// The check's result now: a real linearizable read of `client_url` if the limiter admits
    /// it, else the last read's result.
    pub async fn run(&self, client_url: &str) -> Result<(), String> {
        let now = Instant::now();
        {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if !admits(s.allowed_at, now) {
                return s.last.1.clone();
            }
            s.allowed_at = Some(now);
        }
        let result = super::etcd::linearizable_read(client_url).await;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // As `atomicLastError.Store`: only a read that started later replaces the result.
        if s.last.0.is_none_or(|started| started <= now) {
            s.last = (Some(now), result.clone());
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_read_per_second_and_the_last_result_in_between() {
        let t0 = Instant::now();
        assert!(admits(None, t0));
        assert!(!admits(Some(t0), t0 + Duration::from_millis(999)));
        assert!(admits(Some(t0), t0 + READ_EVERY));
    }

    #[tokio::test]
    async fn a_limited_call_gets_the_last_result_without_reading() {
        let check = EtcdCheck::default();
        // Nothing listens on port 1: the read fails at once.
        let first = check.run("http://127.0.0.1:1").await;
        assert!(first.is_err(), "{first:?}");
        // Within the second: the same error, even for a URL that would answer differently.
        let second = check.run("http://not-even-a-url").await;
        assert_eq!(second, first);
    }
}
