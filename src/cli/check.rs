//! `readyprism check`: a config validated as `run` would load it, then printed with every default
//! written out, followed by the NotReady budget and this node's zone as YAML comments (so the
//! output stays a config). The certificate files are read too, unless told the config is for
//! another node.
//!
//! Owns the report; does not own validation (`config`), the files' loading (`tls`) or the
//! budget's arithmetic (`budget`).

pub mod budget;

use std::time::Duration;

use crate::app::check_files;
use crate::config::{ConfigError, Node, Source};
use budget::Budget;

/// What `check` prints: the report on stdout, and a warning on stderr when the budget is tight.
#[derive(Debug)]
pub struct Checked {
    /// The config, the budget and this node's zone.
    pub report: String,
    /// Set when the worst case is over half of the node grace period.
    pub warning: Option<String>,
}

/// Why `check` failed: the config was rejected, or (never seen) could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The config file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A CA, certificate or key file it names is unusable (the line names file, line and field).
    #[error("{0}")]
    Files(String),
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

/// Checks the config from `source` for `node`, with the budget measured against `node_grace`.
pub fn check(source: &Source, node: Node, node_grace: Duration) -> Result<Checked, CheckError> {
    let config = source.load_for(node)?.config;
    let here = matches!(node, Node::Here);
    if here {
        check_files(&config).map_err(|e| CheckError::Files(e.placed(source, &config)))?;
    }
    let budget = Budget::of(&config.health, &config.routing);
    let mut report = config.to_yaml()?;
    report.push_str(&budget.render(node_grace));
    if here {
        let zone = match config.routing.zone.clone() {
            Some(z) => format!("{} (from {})", z.name, z.source),
            None if config.zones.is_empty() => "unknown".to_string(),
            None => "unknown (no zone matches this node's addresses)".to_string(),
        };
        report.push_str(&format!("# this node's zone: {zone}\n"));
    }
    let warning = budget
        .over_half_of(node_grace)
        .then(|| budget.warning(node_grace));
    Ok(Checked { report, warning })
}
