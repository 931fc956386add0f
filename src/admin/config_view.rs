//! What the admin port says of the running config: its file, when it was loaded, the last
//! reload's result (in `/status` and the status file), and its resolved form (`/config`, as
//! `readyprism check` prints it: paths of key material, never the material).
//!
//! Owns the types and the one cell the app updates at start-up and at every reload. Does not own
//! reloading (`app::reload`) nor the resolved form's printing (`config`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::timestamp;
use crate::config::Config;

/// The config as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigStatus {
    /// The file it was read from; null for a config built in memory (the demo, tests).
    pub file: Option<String>,
    /// When the running config was loaded (start-up or the last applied reload), RFC 3339 UTC.
    pub loaded_at: String,
    /// The latest reload attempt; null before any.
    pub last_reload: Option<ReloadStatus>,
}

/// One reload attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadStatus {
    /// When, RFC 3339 UTC.
    pub at: String,
    /// Applied, or rejected (the running config stayed).
    pub result: ReloadResult,
    /// Why it was rejected, as the log says it (file, field, line); null when applied.
    pub error: Option<String>,
}

/// A reload's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadResult {
    /// The new config runs.
    Applied,
    /// The new config was refused; the running one stays.
    Rejected,
}

/// What the admin endpoints and the status file read of the running config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigView {
    /// For `/status`.
    pub status: ConfigStatus,
    /// For `/config`: the resolved YAML, or why it could not be printed.
    pub resolved: Result<String, String>,
    /// Where the status file is kept; `None`: not kept.
    pub status_file: Option<PathBuf>,
}

/// The one cell holding the [`ConfigView`]; its receivers (the status file's writer) wake on a
/// change.
#[derive(Debug)]
pub struct ConfigCell(watch::Sender<ConfigView>);

impl ConfigCell {
    /// A cell for `config`, loaded now, from no file yet.
    pub fn new(config: &Config) -> ConfigCell {
        ConfigCell(watch::Sender::new(ConfigView {
            status: ConfigStatus {
                file: None,
                loaded_at: timestamp::now(),
                last_reload: None,
            },
            resolved: resolved(config),
            status_file: config.status_file.clone(),
        }))
    }

    /// The view as of now.
    pub fn get(&self) -> ConfigView {
        self.0.borrow().clone()
    }

    /// Notified at every change.
    pub fn subscribe(&self) -> watch::Receiver<ConfigView> {
        self.0.subscribe()
    }

    /// The running config was read from `file`.
    pub fn from_file(&self, file: &std::path::Path) {
        let file = file.display().to_string();
        self.0.send_modify(|v| v.status.file = Some(file));
    }

    /// A reload applied `config` (now).
    pub fn applied(&self, config: &Config) {
        let at = timestamp::now();
        self.0.send_modify(|v| {
            v.status.loaded_at = at.clone();
            v.status.last_reload = Some(ReloadStatus {
                at,
                result: ReloadResult::Applied,
                error: None,
            });
            v.resolved = resolved(config);
            v.status_file = config.status_file.clone();
        });
    }

    /// A reload was rejected (now) for `error`; the running config stays.
    pub fn rejected(&self, error: &str) {
        let error = error.to_string();
        self.0.send_modify(|v| {
            v.status.last_reload = Some(ReloadStatus {
                at: timestamp::now(),
                result: ReloadResult::Rejected,
                error: Some(error),
            });
        });
    }
}

fn resolved(config: &Config) -> Result<String, String> {
    config.to_yaml().map_err(|e| e.to_string())
}
