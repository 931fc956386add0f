//! A reload from the config file, counted and logged: on a hang-up (whatever the file holds), or
//! as the config watch decided (each distinct failure counted and logged once). An invalid config
//! is logged with its file, field and line, and the running config stays.
//!
//! Owns turning a look at the file into a reload, a count and a log line. Does not own what the
//! watch decides (`config::watch`) or applying a config (`App::reload`).

use std::io;

use tokio::time::Instant;

use super::error::Placed;
use super::App;
use crate::config::watch::{self, Action, Attempt, ConfigWatch, Decision, Look, Rejection};
use crate::config::{Config, ConfigError, Source};
use crate::watched_file::{Digest, FileError, ReadError, Stamp, LOAD_RETRY_INTERVAL};

/// [`watch::look`] on the blocking pool.
pub(super) async fn look_off_thread(source: &Source, seen: Option<Stamp>, force: bool) -> Look {
    let s = source.clone();
    tokio::task::spawn_blocking(move || watch::look(&s, seen, force, std::time::SystemTime::now()))
        .await
        .unwrap_or_else(|e| {
            Look::Unusable(FileError::new(
                &source.path,
                ReadError::Io(io::Error::other(e)),
            ))
        })
}

impl App {
    /// Reloads from `source` as a hang-up does: whatever the file holds (and so the
    /// certificates); an invalid config is logged (file, field, line), counted, and ignored.
    pub async fn reload_from(&mut self, source: &Source) {
        let look = look_off_thread(source, None, true).await;
        hup(self, source, look).await;
    }
}

/// A hang-up in the run loop: [`hup`], and the watch learns what now runs or was rejected (so it
/// neither reloads it again nor counts its failure a second time).
pub(super) async fn on_hup(app: &mut App, source: &Source, watch: &mut ConfigWatch, look: Look) {
    match hup(app, source, look).await {
        Some((digest, true)) => watch.applied(digest),
        Some((digest, false)) => {
            watch.rejected(digest, Instant::now());
        }
        None => {}
    }
}

/// A reload that is counted and logged whatever it holds; answers the content's digest (when
/// read) and whether it now runs.
async fn hup(app: &mut App, source: &Source, look: Look) -> Option<(Digest, bool)> {
    let (loaded, digest) = match look {
        Look::Read { loaded, digest, .. } => (loaded.map_err(Rejected::from), Some(digest)),
        Look::Unusable(e) => (Err(ConfigError::from(e).into()), None),
        Look::Unchanged => return None,
    };
    let result = match loaded {
        Ok(config) => apply(app, source, config).await,
        Err(e) => Err(e),
    };
    app.metrics.reload(result.is_ok());
    match &result {
        Ok(()) => {
            app.admin.config.applied(&app.config);
            tracing::info!(file = %source.path.display(), "config reloaded");
        }
        Err(e) => {
            app.admin.config.rejected(&e.to_string());
            tracing::error!(error = %e, "config reload rejected; the running config stays");
        }
    }
    digest.map(|d| (d, result.is_ok()))
}

/// A watch tick's decision carried out: each distinct failure counted and logged once, a retry
/// that succeeds logged.
pub(super) async fn on_decision(
    app: &mut App,
    source: &Source,
    watch: &mut ConfigWatch,
    step: Decision,
) {
    let file = source.path.display();
    if step.recovered {
        tracing::info!(file = %file, "the config file is readable again");
    }
    let (loaded, digest, attempt) = match step.action {
        Action::Stay => return,
        Action::Warn(why) => {
            tracing::warn!(error = %why, "the config file cannot be used; the running config stays");
            return;
        }
        Action::Load {
            loaded,
            digest,
            attempt,
        } => (loaded, digest, attempt),
    };
    let retried = attempt == Attempt::Retry;
    if retried {
        tracing::debug!(file = %file, "retrying the rejected config");
    } else {
        tracing::info!(file = %file, "config file changed; reloading");
    }
    let result = match loaded {
        Ok(config) => apply(app, source, config).await,
        Err(e) => Err(Rejected::from(e)),
    };
    match result {
        Ok(()) => {
            watch.applied(digest);
            app.metrics.reload(true);
            app.admin.config.applied(&app.config);
            tracing::info!(file = %file, retried, "config reloaded");
        }
        Err(e) => match watch.rejected(digest, Instant::now()) {
            Rejection::New => {
                app.metrics.reload(false);
                app.admin.config.rejected(&e.to_string());
                tracing::error!(
                    error = %e,
                    retry_every = ?LOAD_RETRY_INTERVAL,
                    "config reload rejected; the running config stays"
                );
            }
            Rejection::Again => {
                tracing::debug!(error = %e, "the rejected config is still rejected");
            }
        },
    }
}

/// Why a reload did not take, in one line naming the file (and the field, when one is to blame).
#[derive(Debug, thiserror::Error)]
enum Rejected {
    /// The file cannot be used, or what it holds is not a valid config.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A valid config that could not be applied (a port in use, an unusable certificate file).
    #[error(transparent)]
    Apply(#[from] Placed),
}

/// Applies a parsed config; an error is placed at its field (the file is re-read for the line,
/// off the runtime thread; if that read's task fails, the error goes unplaced).
async fn apply(app: &mut App, source: &Source, config: Config) -> Result<(), Rejected> {
    let Err(error) = app.reload(config.clone()).await else {
        return Ok(());
    };
    let field = error.field(&config);
    let s = source.clone();
    let at = match field {
        Some(field) => tokio::task::spawn_blocking(move || s.place(&field))
            .await
            .ok(),
        None => None,
    };
    Err(Placed { at, error }.into())
}
