//! The `discovery:` block validated: whether the backend list follows the cluster's
//! `default/kubernetes` Endpoints object, how often it is polled, where the last known list is
//! cached, and the TLS name discovered backends are verified against.
//!
//! Owns the defaults and limits of these keys and where their errors point. Does not own the YAML
//! shape (`raw`) nor the polling itself (`crate::discovery`).

use std::path::PathBuf;
use std::time::Duration;

use rustls_pki_types::ServerName;

use super::locate;
use super::raw::{DurationValue, RawDiscovery};
use super::resolve::files::written_file;
use super::resolve::Resolver;
use super::{server_name_text, ConfigError};

/// `discovery.interval` by default: 30 s. Each node costs the apiservers one GET per interval, so
/// a 1000-node cluster sends ~33 requests/s, a small share of what its kubelets already send.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// The shortest `discovery.interval`: 1 s (a node polling faster would load the apiservers for
/// nothing: control-plane nodes change in minutes, not seconds).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest `discovery.interval`: 1 hour.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// The `discovery:` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// Poll the `default/kubernetes` Endpoints object (off: the backend list is the config's).
    pub endpoints: bool,
    /// Time between polls (±10 % jitter).
    pub interval: Duration,
    /// Where the last known list is written after each change and read at start-up.
    pub cache: Option<PathBuf>,
    /// The TLS name discovered backends are verified against; `None`: each one's IP.
    pub server_name: Option<ServerName<'static>>,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            endpoints: false,
            interval: DEFAULT_INTERVAL,
            cache: None,
            server_name: None,
        }
    }
}

impl DiscoveryConfig {
    /// The resolved form with every default written out (what `check` prints).
    pub(super) fn to_raw(&self) -> RawDiscovery {
        RawDiscovery {
            endpoints: Some(self.endpoints),
            interval: Some(DurationValue(self.interval)),
            cache: self.cache.as_ref().map(|p| p.display().to_string()),
            server_name: self.server_name.as_ref().map(server_name_text),
        }
    }
}

impl Resolver<'_> {
    /// The `discovery:` block; absent: discovery off.
    pub(super) fn discovery(
        &self,
        raw: Option<RawDiscovery>,
    ) -> Result<DiscoveryConfig, ConfigError> {
        let Some(raw) = raw else {
            return Ok(DiscoveryConfig::default());
        };
        // Keys are looked for below `discovery:`, so `health.interval` is never the one named.
        let block = locate::key_line(self.src, "discovery", 1);
        let line = |key: &str| {
            block
                .and_then(|at| locate::key_line(self.src, key, at))
                .or(block)
        };
        let interval = raw.interval.map_or(DEFAULT_INTERVAL, |d| d.0);
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            return Err(self.invalid(
                line("interval"),
                "discovery.interval",
                format!(
                    "{} must be between {} and {}",
                    DurationValue(interval),
                    DurationValue(MIN_INTERVAL),
                    DurationValue(MAX_INTERVAL)
                ),
            ));
        }
        let cache = match raw.cache {
            None => None,
            Some(p) => Some(
                written_file(&p, "/var/lib/readyprism/backends.json").map_err(|m| {
                    self.invalid(line("cache"), "discovery.cache", format!("{p:?} {m}"))
                })?,
            ),
        };
        let server_name = match raw.server_name.filter(|n| !n.is_empty()) {
            None => None,
            Some(n) => Some(ServerName::try_from(n.clone()).map_err(|_| {
                self.invalid(
                    line("server_name"),
                    "discovery.server_name",
                    format!("{n:?} is not a valid TLS server name"),
                )
            })?),
        };
        Ok(DiscoveryConfig {
            endpoints: raw.endpoints.unwrap_or(false),
            interval,
            cache,
            server_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str =
        "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\nhealth:\n  interval: 5s\n";

    #[test]
    fn discovery_is_off_by_default() {
        let c = Config::parse(BASE, "node.yaml").expect("valid");
        assert!(!c.discovery.endpoints);
        assert_eq!(c.discovery.interval.as_secs(), 30);
    }

    #[test]
    fn discovery_takes_its_keys() {
        let src = format!("{BASE}discovery:\n  endpoints: true\n  interval: 2s\n  cache: /var/lib/readyprism/backends.json\n  server_name: \"\"\n");
        let c = Config::parse(&src, "node.yaml").expect("valid");
        assert!(c.discovery.endpoints);
        assert_eq!(c.discovery.interval.as_secs(), 2);
        assert!(
            c.discovery.server_name.is_none(),
            "empty means each backend's IP"
        );
        let back = Config::parse(&c.to_yaml().expect("printable"), "printed")
            .expect("the printed form parses");
        assert_eq!(back.discovery, c.discovery);
    }

    #[test]
    fn bad_discovery_values_name_their_own_line() {
        for (block, line, want) in [
            (
                "  interval: 500ms\n",
                9,
                "discovery.interval: 500ms must be between 1s and 60m",
            ),
            ("  interval: 61m\n", 9, "discovery.interval"),
            (
                "  cache: backends.json\n",
                9,
                "discovery.cache: \"backends.json\" must be an absolute path",
            ),
            ("  cache: /var/lib/readyprism/\n", 9, "must name a file"),
            ("  server_name: \"a b\"\n", 9, "discovery.server_name"),
        ] {
            let src = format!("{BASE}discovery:\n  endpoints: true\n{block}");
            let e = Config::parse(&src, "node.yaml")
                .expect_err(block)
                .to_string();
            assert!(e.starts_with(&format!("node.yaml:{line}: ")), "{e}");
            assert!(e.contains(want), "{e}");
        }
    }
}
