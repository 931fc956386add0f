//! The config file: YAML text → validated, typed [`Config`]. Downstream code never sees YAML.
//!
//! Every error names the file, the field and the line (and column when the YAML parser knows it).
//! `raw` owns the serde shape and scalar parsing, `parse_error` puts a parser error at its field,
//! `locate` finds lines for cross-field errors, `watch` notices when
//! its content changes (the read itself is `watched_file`'s), `zones` matches addresses against the `zones:` map, `discovery` resolves
//! the `discovery:` block, `own` says which addresses are this balancer's own.

mod discovery;
mod locate;
pub mod own;
mod parse_error;
mod place;
mod raw;
mod resolve;
pub mod watch;
pub mod zones;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::ServerName;

use crate::backend::{BackendSpec, Routing};
pub use crate::backend::{NodeZone, ZoneSource};
use crate::watched_file::{self, Digest, FileError, ReadError};
pub use discovery::DiscoveryConfig;
use parse_error::parse_error;
pub use place::ListenField;
pub use raw::DurationValue;
use raw::{CidrValue, Networks, RawBackend, RawConfig, RawHealth, RawTls, ZoneName};
pub use resolve::DEFAULT_STATUS_FILE;
use zones::{Placement, ZoneMap};

/// Default client listener: KubePrism's port, so kubelet config needs no change beyond the switch.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7445";
/// Default admin listener.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:7446";

/// A config error, already formatted for the operator: `file:line[:column]: field: message`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read, is not a regular file or is larger than 1 MiB.
    #[error("{0}; not loaded")]
    File(FileError),
    /// YAML syntax, an unknown key, a wrong type or a bad scalar; position from the parser.
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        /// Config file path.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// Parser message, prefixed with the field path.
        message: String,
    },
    /// `--zone` or `READYPRISM_ZONE` is set but empty.
    #[error("--zone / READYPRISM_ZONE must not be empty")]
    EmptyZoneOverride,
    /// A rule across fields or a value the parser accepted but we do not.
    #[error("{file}:{line}: {field}: {message}")]
    Invalid {
        /// Config file path.
        file: String,
        /// 1-based line of the offending key or value (1 when the key is absent).
        line: usize,
        /// Dotted field path, e.g. `health.timeout` or `backends[1].address`.
        field: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

// Not `#[from]`: that would make the file error this one's source too, and the top level's
// `{:#}` would print it twice.
impl From<FileError> for ConfigError {
    fn from(e: FileError) -> Self {
        ConfigError::File(e)
    }
}

/// The `health:` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// HTTP path probed on every backend.
    pub path: String,
    /// Time between probes in steady state (±10 % jitter).
    pub interval: Duration,
    /// Bound on one probe: connect + TLS + response.
    pub timeout: Duration,
    /// Time between probes while a state change is pending.
    pub fast_interval: Duration,
    /// Time between probes of a ready backend in another zone that carries none of this node's
    /// connections while a backend of the node's own zone is ready (±10 % jitter): no pick would
    /// choose it (`table::cadence`). `interval` by default: off.
    pub remote_interval: Duration,
    /// Time between request checks of a ready backend (±10 %; `crate::overload`); zero: off.
    pub request_check_interval: Duration,
    /// The path a request check `GET`s, through priority and fairness with the kubelet's
    /// identity (`/version` by default).
    pub request_check_path: String,
    /// Consecutive passes to turn unready → ready.
    pub rise: u32,
    /// Consecutive failures to turn ready → unready.
    pub fall: u32,
}

/// The `tls:` block: file paths; `tls` loads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Cluster CA bundle that verifies the apiservers.
    pub ca: PathBuf,
    /// Client certificate (may also hold the key, as kubelet's file does).
    pub client_cert: Option<PathBuf>,
    /// Client key; defaults to `client_cert`.
    pub client_key: Option<PathBuf>,
}

/// A validated config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Client listeners.
    pub listen: Vec<SocketAddr>,
    /// Admin listener.
    pub admin: SocketAddr,
    /// Zone (after `--zone` / `READYPRISM_ZONE` overrides, or from the node's addresses), no-ready
    /// policy, dial timeout.
    pub routing: Routing,
    /// Which networks are which zone (empty when not configured).
    pub zones: ZoneMap,
    /// Backends in config order.
    pub backends: Vec<BackendSpec>,
    /// Probe settings.
    pub health: HealthConfig,
    /// Certificate files.
    pub tls: TlsFiles,
    /// How long established connections may finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// The admin server may listen on a non-loopback address (off: only loopback).
    pub allow_remote_admin: bool,
    /// Whether and how the backend list follows the cluster's Endpoints object.
    pub discovery: DiscoveryConfig,
    /// Why this node's addresses gave no zone although they match `zones:` (two zones, neither
    /// network more specific): the zone is unknown and this is said with a WARN.
    pub zone_ambiguous: Option<String>,
    /// Where the status (what `/status` says) is kept for reading without the admin port
    /// (`talosctl read`); `None`: not kept.
    pub status_file: Option<PathBuf>,
}

impl Config {
    /// Reads and validates a config file (blocks: see [`watched_file::read`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::parse_bytes(&watched_file::read(path)?.bytes, path, &[])
    }

    /// Validates the bytes of the config file at `path` (UTF-8 YAML); `host` as for
    /// [`Config::parse_on`].
    fn parse_bytes(bytes: &[u8], path: &Path, host: &[IpAddr]) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let src = std::str::from_utf8(bytes).map_err(|e| {
            let invalid = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            FileError::new(path, ReadError::Io(invalid))
        })?;
        Config::parse_on(src, &file, host)
    }

    /// Validates config text; `file` is only used to name the source in errors. A static backend
    /// is refused as this balancer's own when [`own::own`] says so without this host's interface
    /// addresses (loopback, unspecified, a listener's IP): [`Config::parse_on`] also knows them.
    pub fn parse(src: &str, file: &str) -> Result<Config, ConfigError> {
        Config::parse_on(src, file, &[])
    }

    /// [`Config::parse`] on a host with the interface addresses `host`: a static backend at one
    /// of them on a listen or admin port is refused too.
    pub fn parse_on(src: &str, file: &str, host: &[IpAddr]) -> Result<Config, ConfigError> {
        let raw: RawConfig = if src.trim().is_empty() {
            RawConfig::default()
        } else {
            let de = yaml_serde::Deserializer::from_str(src);
            serde_path_to_error::deserialize(de).map_err(|e| parse_error(src, file, e))?
        };
        resolve::Resolver { src, file, host }.resolve(raw)
    }

    /// Whether this node's zone follows its interface addresses: a `zones:` map, and no zone set
    /// by hand (`--zone`, `READYPRISM_ZONE`, `zone:`), which always wins.
    pub fn zone_follows_addresses(&self) -> bool {
        !self.zones.is_empty()
            && self
                .routing
                .zone
                .as_ref()
                .is_none_or(|z| matches!(z.source, ZoneSource::Address(_)))
    }

    /// Takes this node's zone from where its addresses place it. The addresses are run-time
    /// facts, not config: a tie is a WARN and an unknown zone, never a refusal (a VIP or a CNI
    /// bridge address must not cost the node its API path).
    pub fn place(&mut self, placement: &Placement) {
        self.routing.zone = placement.zone();
        self.zone_ambiguous = placement.tie();
    }

    /// The resolved config as YAML, with every default written out (what `check` prints).
    pub fn to_yaml(&self) -> Result<String, yaml_serde::Error> {
        let d = |d: Duration| Some(DurationValue(d));
        let raw = RawConfig {
            listen: Some(self.listen.iter().map(|a| a.to_string()).collect()),
            admin: Some(self.admin.to_string()),
            // This node's zone from its addresses holds for this node only: not printed as `zone:`.
            zone: self
                .routing
                .zone
                .clone()
                .filter(|z| !matches!(z.source, ZoneSource::Address(_)))
                .map(|z| z.name),
            zones: (!self.zones.is_empty()).then(|| {
                self.zones
                    .iter()
                    .map(|(z, nets)| {
                        let nets = nets.iter().copied().map(CidrValue).collect();
                        (ZoneName(z.to_string()), Networks(nets))
                    })
                    .collect()
            }),
            backends: Some(
                self.backends
                    .iter()
                    .map(|b| RawBackend {
                        address: b.id.to_string(),
                        zone: b.zone.clone(),
                        server_name: Some(server_name_text(&b.server_name)),
                    })
                    .collect(),
            ),
            health: Some(RawHealth {
                path: Some(self.health.path.clone()),
                interval: d(self.health.interval),
                timeout: d(self.health.timeout),
                fast_interval: d(self.health.fast_interval),
                remote_interval: d(self.health.remote_interval),
                request_check_interval: Some(DurationValue(self.health.request_check_interval)),
                request_check_path: Some(self.health.request_check_path.clone()),
                rise: Some(self.health.rise),
                fall: Some(self.health.fall),
            }),
            tls: Some(RawTls {
                ca: Some(self.tls.ca.display().to_string()),
                client_cert: self
                    .tls
                    .client_cert
                    .as_ref()
                    .map(|p| p.display().to_string()),
                client_key: self
                    .tls
                    .client_key
                    .as_ref()
                    .map(|p| p.display().to_string()),
            }),
            connect_timeout: d(self.routing.connect_timeout),
            when_none_ready: Some(self.routing.when_none_ready),
            shutdown_grace: d(self.shutdown_grace),
            failback_after: Some(DurationValue(
                self.routing.failback_after.unwrap_or_default(),
            )),
            dead_path_timeout: Some(DurationValue(
                self.routing.dead_path_timeout.unwrap_or_default(),
            )),
            handoff_window: d(self.routing.handoff_window),
            reentry_window: d(self.routing.reentry_window),
            discovery: Some(self.discovery.to_raw()),
            allow_remote_admin: self.allow_remote_admin.then_some(true),
            status_file: Some(
                self.status_file
                    .as_ref()
                    .map_or_else(String::new, |p| p.display().to_string()),
            ),
        };
        yaml_serde::to_string(&raw)
    }
}

/// Where the config comes from: a file, and the command line's zone override that applies to it
/// at start-up and at every reload alike.
#[derive(Debug, Clone)]
pub struct Source {
    /// The config file.
    pub path: PathBuf,
    /// `--zone` / `READYPRISM_ZONE` (with which of the two it was), replacing the file's `zone`.
    pub zone: Option<NodeZone>,
}

/// A config as loaded, with the digest of the exact bytes it was parsed from: the baseline the
/// watch compares the file with, so an edit made after the load is never taken as already running.
#[derive(Debug)]
pub struct Loaded {
    /// The validated config.
    pub config: Config,
    /// Digest of the bytes `config` came from.
    pub digest: Digest,
}

/// Whether the node's zone may come from this machine's interface addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// The config is for this node: match its addresses against `zones:`.
    Here,
    /// The config is checked away from its node (`check --skip-node-files`): do not.
    Elsewhere,
}

impl Source {
    /// Reads and validates the file, then applies the zone precedence (blocks: see [`watched_file::read`]).
    pub fn load(&self) -> Result<Loaded, ConfigError> {
        self.load_for(Node::Here)
    }

    /// [`Source::load`], with the node's addresses consulted or not.
    pub fn load_for(&self, node: Node) -> Result<Loaded, ConfigError> {
        let contents = watched_file::read(&self.path)?;
        Ok(Loaded {
            config: self.parse_for(&contents.bytes, node)?,
            digest: contents.digest,
        })
    }

    /// Validates `bytes` read from the file, then applies the zone precedence.
    pub fn parse(&self, bytes: &[u8]) -> Result<Config, ConfigError> {
        self.parse_for(bytes, Node::Here)
    }

    /// The node's zone, first found of: `--zone`, `READYPRISM_ZONE`, the config's `zone:`, the
    /// `zones:` network holding one of this node's interface addresses (with [`Node::Here`]).
    /// With [`Node::Here`] a static backend at one of those addresses on a listen or admin port
    /// is refused as this balancer's own ([`own::own`]).
    fn parse_for(&self, bytes: &[u8], node: Node) -> Result<Config, ConfigError> {
        let host = match node {
            Node::Here => own::host_addresses(),
            Node::Elsewhere => Vec::new(),
        };
        let mut config = Config::parse_bytes(bytes, &self.path, &host)?;
        if let Some(z) = &self.zone {
            if z.name.trim().is_empty() {
                return Err(ConfigError::EmptyZoneOverride);
            }
            config.routing.zone = Some(z.clone());
        }
        if config.routing.zone.is_none() && !config.zones.is_empty() && node == Node::Here {
            let placement = config.zones.place(&zones::interface_addresses());
            config.place(&placement);
        }
        Ok(config)
    }

    /// Where `field` (a dotted path: `tls.ca`, `listen[1]`) is set in the file, as
    /// `file:line:column: field`, for an error found after loading (a file it names, an address it
    /// binds); `file: field` when the file does not set it (a default).
    pub fn place(&self, field: &str) -> String {
        let file = self.path.display();
        // The same careful read as a load: the path may have become a FIFO since.
        let at = watched_file::read(&self.path)
            .ok()
            .and_then(|c| String::from_utf8(c.bytes).ok())
            .and_then(|src| locate::path_line(&src, field));
        match at {
            Some((line, column)) => format!("{file}:{line}:{column}: {field}"),
            None => format!("{file}: {field}"),
        }
    }
}

/// The text form of a TLS server name.
pub fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests;
