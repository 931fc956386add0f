//! The rules of the `health:` block: the probe path, the probe interval, timeout and fast
//! interval (defaults, bounds, and how they relate), the request check's interval and path, rise
//! and fall.
//!
//! Does not own the other blocks' rules (`super`), nor how a duration is parsed (`raw`).

use std::time::Duration;

use super::Resolver;
use crate::config::raw::{DurationValue, RawHealth};
use crate::config::{ConfigError, HealthConfig};

/// `health.interval`: 5 s, at most 10 minutes (a backend change unnoticed for longer is a fault).
const INTERVAL: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(600));
/// `health.timeout`: 3 s, at most 5 minutes (and less than the interval).
const TIMEOUT: (Duration, Duration) = (Duration::from_secs(3), Duration::from_secs(300));
/// `health.fast_interval`: 1 s, at most 10 minutes (and at most the interval).
const FAST_INTERVAL: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));

/// `health.remote_interval`: `interval` by default (the remote cadence off), at least the
/// interval and at most 10 minutes (the interval's maximum). Off by default: in the partition
/// lab's scenario 2 a remote apiserver that died unseen in the same event as the home one is
/// picked after the home one falls, and new connections pay a dial timeout until it falls too
/// (docs/config.md "Probe cadence").
const REMOTE_INTERVAL_MAX: Duration = INTERVAL.1;

/// `health.request_check_interval`: 30 s by default; zero turns the checks off, otherwise at least
/// 30 s (at most one request check per backend per 30 s, on the probe's kept connection: at
/// 100,000 nodes, 3,333 `GET`s/s on each apiserver, a sixth of the `/readyz` load) and at most 10
/// minutes.
const REQUEST_CHECK_INTERVAL: (Duration, Duration) =
    (Duration::from_secs(30), Duration::from_secs(600));

/// `health.request_check_path`'s default: answered by every apiserver to every authenticated
/// client, through priority and fairness (it is not one of the exempt probe paths), with no
/// storage read.
pub const REQUEST_CHECK_PATH: &str = "/version";

/// `health.rise` and `health.fall`: at most 10 checks in a row. Ten failed checks at the longest
/// interval already leave a dead backend in the pick for over an hour.
const MAX_COUNT: u32 = 10;

impl Resolver<'_> {
    /// The `health:` block: a sendable path, the three intervals within their bounds and
    /// ordered (timeout < interval, fast_interval ≤ interval), rise and fall from 1 to 10.
    pub(super) fn health(&self, raw: RawHealth) -> Result<HealthConfig, ConfigError> {
        let path = self.path("health.path", raw.path, "/readyz")?;
        let interval = self.positive("health.interval", raw.interval, INTERVAL)?;
        let timeout = self.positive("health.timeout", raw.timeout, TIMEOUT)?;
        let fast_interval =
            self.positive("health.fast_interval", raw.fast_interval, FAST_INTERVAL)?;
        if timeout >= interval {
            let line = self.key("timeout").or_else(|| self.key("interval"));
            return Err(self.invalid(
                line,
                "health.timeout",
                format!(
                    "{}{} must be less than health.interval ({})",
                    if raw.timeout.is_none() {
                        "the default "
                    } else {
                        ""
                    },
                    DurationValue(timeout),
                    DurationValue(interval)
                ),
            ));
        }
        if fast_interval > interval {
            let line = self.key("fast_interval").or_else(|| self.key("interval"));
            return Err(self.invalid(
                line,
                "health.fast_interval",
                format!(
                    "{} must not exceed health.interval ({})",
                    DurationValue(fast_interval),
                    DurationValue(interval)
                ),
            ));
        }
        let remote_interval = self.remote_interval(raw.remote_interval, interval)?;
        let request_check_interval = self.request_check_interval(raw.request_check_interval)?;
        let request_check_path = self.path(
            "health.request_check_path",
            raw.request_check_path,
            REQUEST_CHECK_PATH,
        )?;
        let count = |field: &str, key: &str, v: Option<u32>| match v {
            Some(0) => Err(self.invalid(self.key(key), field, "must be at least 1")),
            Some(n) if n > MAX_COUNT => Err(self.invalid(
                self.key(key),
                field,
                format!("{n} is more than the maximum of {MAX_COUNT}"),
            )),
            v => Ok(v.unwrap_or(2)),
        };
        Ok(HealthConfig {
            path,
            interval,
            timeout,
            fast_interval,
            remote_interval,
            request_check_interval,
            request_check_path,
            rise: count("health.rise", "rise", raw.rise)?,
            fall: count("health.fall", "fall", raw.fall)?,
        })
    }

    /// A path to `GET` (`field`, `default` when not set): it starts with `/` and a request line
    /// can carry it.
    fn path(&self, field: &str, raw: Option<String>, default: &str) -> Result<String, ConfigError> {
        let path = raw.unwrap_or_else(|| default.to_string());
        let sendable = path.parse::<hyper::http::uri::PathAndQuery>().is_ok();
        if !path.starts_with('/') || !sendable {
            let key = field.rsplit('.').next().unwrap_or(field);
            return Err(self.invalid(
                self.key(key),
                field,
                format!(
                    "{path:?} must start with '/' and hold only characters a URI path may hold"
                ),
            ));
        }
        Ok(path)
    }

    /// `health.request_check_interval`: `0s` (off), or from 30 s up to 10 minutes; 30 s by
    /// default.
    fn request_check_interval(&self, raw: Option<DurationValue>) -> Result<Duration, ConfigError> {
        let field = "health.request_check_interval";
        let every = self.duration(field, raw, REQUEST_CHECK_INTERVAL, true)?;
        if !every.is_zero() && every < REQUEST_CHECK_INTERVAL.0 {
            return Err(self.invalid(
                self.key("request_check_interval"),
                field,
                format!(
                    "{} is less than the minimum of {} (0s turns the checks off)",
                    DurationValue(every),
                    DurationValue(REQUEST_CHECK_INTERVAL.0)
                ),
            ));
        }
        Ok(every)
    }

    /// `health.remote_interval`, from `interval` up to 10 minutes; by default `interval`.
    fn remote_interval(
        &self,
        raw: Option<DurationValue>,
        interval: Duration,
    ) -> Result<Duration, ConfigError> {
        let remote = self.positive(
            "health.remote_interval",
            raw,
            (interval, REMOTE_INTERVAL_MAX),
        )?;
        if remote < interval {
            return Err(self.invalid(
                self.key("remote_interval"),
                "health.remote_interval",
                format!(
                    "{} must not be less than health.interval ({})",
                    DurationValue(remote),
                    DurationValue(interval)
                ),
            ));
        }
        Ok(remote)
    }
}
