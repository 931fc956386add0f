//! `readyprism check`: a config validated as `run` would load it, then printed with every default
//! written out, followed by the NotReady budget and this node's zone as YAML comments (so the
//! output stays a config). The certificate files are read too, and the paths of the discovery
//! cache and the status file looked at, unless told the config is for another node.
//!
//! Owns the report; does not own validation (`config`), the files' loading (`tls`), what makes a
//! path unfit (`atomic_write::preflight`) or the budget's arithmetic (`budget`).

pub mod budget;
pub mod fleet;
pub mod handoff;

use std::time::Duration;

use crate::admin::status_file;
use crate::app::{check_files, Placed};
use crate::config::{Config, ConfigError, Node, Source};
use crate::discovery::cache;
use budget::Budget;

/// What `check` prints: the report on stdout, and warnings on stderr: the budget is tight, this
/// node's addresses leave its zone unknown, or the discovery cache or the status file cannot be
/// kept where it is.
#[derive(Debug)]
pub struct Checked {
    /// The config, the budget and this node's zone.
    pub report: String,
    /// The zone tie (two zones, neither network more specific), the discovery cache's and the
    /// status file's paths that cannot hold them, then the budget's worst case over half of the
    /// node grace period.
    pub warnings: Vec<String>,
}

/// Why `check` failed: the config was rejected, or (never seen) could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The config file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A CA, certificate or key file it names is unusable (the line names file, line and field).
    #[error(transparent)]
    Files(Placed),
    /// The resolved config could not be serialised.
    #[error("cannot print the config: {0}")]
    Print(#[from] yaml_serde::Error),
}

impl CheckError {
    /// The config was rejected (not a failure of `check` itself).
    pub fn is_rejection(&self) -> bool {
        !matches!(self, CheckError::Print(_))
    }
}

/// Checks the config from `source` for `node`, with the budget measured against `node_grace`,
/// and with `fleet_size`, the control plane's load from that many nodes ([`fleet`]).
pub fn check(
    source: &Source,
    node: Node,
    node_grace: Duration,
    fleet_size: Option<u64>,
) -> Result<Checked, CheckError> {
    let config = source.load_for(node)?.config;
    let here = matches!(node, Node::Here);
    if here {
        check_files(&config).map_err(|e| CheckError::Files(e.placed(source, &config)))?;
    }
    let budget = Budget::of(&config.health, &config.routing);
    let mut report = config.to_yaml()?;
    report.push_str(&budget.render(node_grace));
    report.push_str(&handoff::render(&config.health, &config.routing));
    if let Some(nodes) = fleet_size {
        report.push_str(&fleet::render(&config, nodes));
    }
    if here {
        let zone = match (config.routing.zone.clone(), &config.zone_ambiguous) {
            (Some(z), _) => format!("{} (from {})", z.name, z.source),
            (None, Some(_)) => "unknown (this node's addresses are in two zones)".to_string(),
            (None, None) if config.zones.is_empty() => "unknown".to_string(),
            (None, None) => "unknown (no zone matches this node's addresses)".to_string(),
        };
        report.push_str(&format!("# this node's zone: {zone}\n"));
    }
    // Set only when the node's addresses were read (`here`).
    let mut warnings: Vec<String> = config
        .zone_ambiguous
        .iter()
        .map(|tie| format!("{tie}; the zone is unknown"))
        .collect();
    if here {
        warnings.extend(cache_warning(source, &config));
        warnings.extend(status_file_warning(source, &config));
    }
    warnings.extend(handoff::warning(&config.health, &config.routing));
    if budget.over_half_of(node_grace) {
        warnings.push(budget.warning(node_grace));
    }
    Ok(Checked { report, warnings })
}

/// The discovery cache's path cannot hold the cache (a directory there, a missing or unwritable
/// directory): one line placed at `discovery.cache`. Nothing while discovery is off, as then the
/// cache is neither read nor written. A warning, not a rejection: the balancer runs without it.
fn cache_warning(source: &Source, config: &Config) -> Option<String> {
    let path = config.discovery.cache.as_ref()?;
    if !config.discovery.endpoints {
        return None;
    }
    let unfit = cache::preflight(path).err()?;
    Some(format!("{}: {unfit}", source.place("discovery.cache")))
}

/// The status file's path cannot hold it: one line placed at `status_file`. A warning, not a
/// rejection: the balancer runs without it (and says so once).
fn status_file_warning(source: &Source, config: &Config) -> Option<String> {
    let unfit = status_file::preflight(config.status_file.as_ref()?).err()?;
    Some(format!("{}: {unfit}", source.place("status_file")))
}
