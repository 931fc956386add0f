//! The config-derived settings that decide routing (this node's zone and where it came from,
//! the behaviour with no ready backend, the dial bound, failback, the
//! dead-path timeout of new backend legs), carried by every snapshot.
//!
//! Does not own the backends or their health (`backend`), nor how the zone is found (`config`).

use std::fmt;
use std::time::Duration;

use crate::pick::WhenNoneReady;

/// The config-derived settings that decide routing, declared once: the config holds them, the
/// snapshot carries them to the accept path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// This node's zone, with where it came from: backends in it are picked first.
    pub zone: Option<NodeZone>,
    /// Behaviour with no ready backend.
    pub when_none_ready: WhenNoneReady,
    /// Bound on one dial attempt; on expiry the next candidate is tried.
    pub connect_timeout: Duration,
    /// Once a backend in this node's zone has been ready this long, connections relayed to other
    /// zones are closed so their clients come home; `None`: never.
    pub failback_after: Option<Duration>,
    /// `TCP_USER_TIMEOUT` on every new backend leg (`dead_path_timeout`): data relayed to the
    /// backend and unacknowledged this long ends the connection as a dead path; `None`: not set
    /// (the kernel's retransmission limit, about 15 minutes).
    pub dead_path_timeout: Option<Duration>,
    /// A draining backend's connections (its only failing check is `shutdown`) are closed each at
    /// a random point of this window.
    pub handoff_window: Duration,
    /// The health checks' steady interval: after a spell with no backend ready, connections on a
    /// backend still unready (and not rising) this long after the first turned ready are moved.
    pub probe_interval: Duration,
    /// A backend that turns ready again takes this node's new connections paced over this
    /// window ([`crate::pacing`]); zero: not paced.
    pub reentry_window: Duration,
}

/// `reentry_window` unless the config says otherwise: off. Why, and why 5 s when on:
/// `docs/config.md`, "Paced re-entry".
pub const DEFAULT_REENTRY_WINDOW: Duration = Duration::ZERO;

/// `dead_path_timeout` unless the config says otherwise. Why 10 s: `docs/config.md`, "Dead paths".
pub const DEFAULT_DEAD_PATH_TIMEOUT: Duration = Duration::from_secs(10);

impl Routing {
    /// The default routing of a node in zone `name`, as a config's `zone:` sets it.
    pub fn in_zone(name: &str) -> Routing {
        let zone = NodeZone {
            name: name.to_string(),
            source: ZoneSource::Config,
        };
        Routing {
            zone: Some(zone),
            ..Routing::default()
        }
    }

    /// The name of this node's zone; `None` when unknown.
    pub fn zone_name(&self) -> Option<&str> {
        self.zone.as_ref().map(|z| z.name.as_str())
    }
}

/// This node's zone, with the setting it came from (shown in `/status` and the start-up log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeZone {
    /// The zone's name, compared with each backend's zone.
    pub name: String,
    /// Where the name came from.
    pub source: ZoneSource,
}

/// Where this node's zone came from, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneSource {
    /// `--zone`.
    Flag,
    /// `READYPRISM_ZONE`.
    Env,
    /// The config's `zone:`.
    Config,
    /// The `zones:` network that holds this interface address of the node.
    Address(std::net::IpAddr),
}

impl fmt::Display for ZoneSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZoneSource::Flag => f.write_str("flag"),
            ZoneSource::Env => f.write_str("env"),
            ZoneSource::Config => f.write_str("config"),
            ZoneSource::Address(ip) => write!(f, "address {ip}"),
        }
    }
}

impl std::str::FromStr for ZoneSource {
    type Err = String;

    /// The [`fmt::Display`] form back: `flag`, `env`, `config`, `address 10.0.1.5`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "flag" => Ok(ZoneSource::Flag),
            "env" => Ok(ZoneSource::Env),
            "config" => Ok(ZoneSource::Config),
            _ => text
                .strip_prefix("address ")
                .and_then(|ip| ip.parse().ok())
                .map(ZoneSource::Address)
                .ok_or_else(|| format!("{text:?} is not a zone source")),
        }
    }
}

impl Default for Routing {
    fn default() -> Self {
        Routing {
            zone: None,
            when_none_ready: WhenNoneReady::FailOpen,
            connect_timeout: Duration::from_secs(1),
            failback_after: Some(Duration::from_secs(60)),
            dead_path_timeout: Some(DEFAULT_DEAD_PATH_TIMEOUT),
            handoff_window: Duration::from_secs(5),
            probe_interval: Duration::from_secs(5),
            reentry_window: DEFAULT_REENTRY_WINDOW,
        }
    }
}
