//! The rule of `dead_path_timeout`: the `TCP_USER_TIMEOUT` of new backend legs, 0 (off) or
//! between [`MIN`] and [`MAX`]. Why those bounds and the 10 s default: `docs/config.md`,
//! "Dead paths".
//!
//! Does not own how the option is set on a socket (`dial::SocketOptions`) nor what a cut
//! connection is called (`proxy`).

use std::time::Duration;

use super::Resolver;
use crate::backend::DEFAULT_DEAD_PATH_TIMEOUT;
use crate::config::raw::DurationValue;
use crate::config::ConfigError;

/// Below 2 s a flight of data gets 3 transmissions (at 0.2, 0.6 and 1.4 s with a 200 ms RTO):
/// one lossy second cuts a working connection.
const MIN: Duration = Duration::from_secs(2);
/// Above 2 minutes a dead path holds its client longer than any client waits for an answer; the
/// probe path has turned the backend unready and cut the connection long before.
const MAX: Duration = Duration::from_secs(120);

impl Resolver<'_> {
    /// `dead_path_timeout`: [`DEFAULT_DEAD_PATH_TIMEOUT`] when absent, `None` for `0s` (not set),
    /// else a duration in `[MIN, MAX]`.
    pub(super) fn dead_path_timeout(
        &self,
        raw: Option<DurationValue>,
    ) -> Result<Option<Duration>, ConfigError> {
        let d = raw.map_or(DEFAULT_DEAD_PATH_TIMEOUT, |d| d.0);
        if d.is_zero() {
            return Ok(None);
        }
        if d < MIN || d > MAX {
            return Err(self.invalid(
                self.key("dead_path_timeout"),
                "dead_path_timeout",
                format!(
                    "{} is outside {}..{}: use 0s to leave TCP_USER_TIMEOUT unset, or a value in that range",
                    DurationValue(d),
                    DurationValue(MIN),
                    DurationValue(MAX)
                ),
            ));
        }
        Ok(Some(d))
    }
}
