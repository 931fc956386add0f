//! Signals and what they do: SIGHUP (or a change of the config file's content) reloads the
//! config, SIGTERM/SIGINT shut down within `shutdown_grace` + 1 s. The same loop applies each
//! backend list discovery finds, so the app has one caller that changes it.
//!
//! Handlers are installed before anything is served ([`Signals::install`] comes before
//! `App::start`), so a signal right after start never takes its default action and kills the
//! process. Owns turning signals and the config watch's decisions into actions (reload, count,
//! log); what the watch decides is `config::watch`, the ordered drain itself is `App::shutdown`.

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use crate::app::App;
use crate::config::file::ReadError;
use crate::config::watch::{self, Action, Attempt, ConfigWatch, Look, Rejection, Step};
use crate::config::{Config, Source};
use crate::watched_file::{Digest, Stamp, CHECK_INTERVAL, LOAD_RETRY_INTERVAL};

/// SIGTERM and SIGINT, installed together: the signals that end a run.
#[derive(Debug)]
pub struct Termination {
    term: Signal,
    int: Signal,
}

impl Termination {
    /// Installs the handlers; from now on these signals are delivered here, not fatal.
    pub fn install() -> io::Result<Termination> {
        Ok(Termination {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for either; answers its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Every signal `run` acts on.
#[derive(Debug)]
pub struct Signals {
    hup: Signal,
    end: Termination,
}

impl Signals {
    /// Installs every handler; call before anything binds or serves.
    pub fn install() -> io::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            end: Termination::install()?,
        })
    }

    /// Runs `app` until SIGTERM or SIGINT, reloading from `source` on SIGHUP and whenever the
    /// file's content changes (a static pod's process cannot be signalled), then shuts it down.
    /// `running` is the digest of the bytes the running config was parsed from.
    pub async fn run(mut self, mut app: App, source: Source, running: Digest) {
        let mut watch = ConfigWatch::new(running);
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            let trigger = tokio::select! {
                _ = self.hup.recv() => Trigger::Hup,
                _ = tick.tick() => Trigger::Tick,
                name = self.end.recv() => break name,
                list = app.next_discovered() => {
                    if let Err(e) = app.set_discovered(list).await {
                        tracing::warn!(error = %e, "discovered backends not applied");
                    }
                    continue;
                }
            };
            // SIGHUP reads whatever the file holds; a tick reads when the stamp changed or a retry
            // is due.
            let (seen, force) = match trigger {
                Trigger::Hup => (None, true),
                Trigger::Tick => (watch.seen(), watch.retry_due(Instant::now())),
            };
            // File I/O runs on the blocking pool; a hung filesystem does not delay shutdown.
            let look = tokio::select! {
                look = look_off_thread(&source, seen, force) => look,
                name = self.end.recv() => break name,
            };
            match trigger {
                Trigger::Hup => on_hup(&mut app, &source, &mut watch, look).await,
                Trigger::Tick => {
                    let step = watch.decide(look, Instant::now());
                    on_step(&mut app, &source, &mut watch, step).await;
                }
            }
        };
        tracing::info!("{ended}: shutting down");
        let bound = crate::app::shutdown_bound(app.config());
        if tokio::time::timeout(bound, app.shutdown()).await.is_err() {
            tracing::error!(
                ?bound,
                "shutdown took longer than its bound; exiting anyway"
            );
        }
    }
}

/// What woke the run loop.
enum Trigger {
    Hup,
    Tick,
}

/// [`watch::look`] on the blocking pool.
async fn look_off_thread(source: &Source, seen: Option<Stamp>, force: bool) -> Look {
    let s = source.clone();
    tokio::task::spawn_blocking(move || watch::look(&s, seen, force, std::time::SystemTime::now()))
        .await
        .unwrap_or_else(|e| {
            Look::Unusable(ReadError::Io {
                file: source.path.display().to_string(),
                cause: io::Error::other(e),
            })
        })
}

/// Reloads from `source` as SIGHUP does: whatever the file holds (and so the certificates); an
/// invalid config is logged (file, field, line), counted, and ignored.
pub async fn reload(app: &mut App, source: &Source) {
    let look = look_off_thread(source, None, true).await;
    hup(app, source, look).await;
}

/// SIGHUP in the run loop: [`hup`], and the watch learns what now runs or was rejected (so it
/// neither reloads it again nor counts its failure a second time).
async fn on_hup(app: &mut App, source: &Source, watch: &mut ConfigWatch, look: Look) {
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
    let metrics = app.metrics();
    let (loaded, digest) = match look {
        Look::Read { loaded, digest, .. } => (loaded.map_err(|e| e.to_string()), Some(digest)),
        Look::Unusable(e) => (Err(e.to_string()), None),
        Look::Unchanged => return None,
    };
    let result = match loaded {
        Ok(config) => apply(app, source, config).await,
        Err(e) => Err(e),
    };
    match &result {
        Ok(()) => {
            metrics.reload(true);
            tracing::info!(file = %source.path.display(), "config reloaded");
        }
        Err(e) => {
            metrics.reload(false);
            tracing::error!(error = %e, "config reload rejected; the running config stays");
        }
    }
    digest.map(|d| (d, result.is_ok()))
}

/// A watch tick's decision carried out: each distinct failure counted and logged once, a retry
/// that succeeds logged.
async fn on_step(app: &mut App, source: &Source, watch: &mut ConfigWatch, step: Step) {
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
        Err(e) => Err(e.to_string()),
    };
    let metrics = app.metrics();
    match result {
        Ok(()) => {
            watch.applied(digest);
            metrics.reload(true);
            tracing::info!(file = %file, retried, "config reloaded");
        }
        Err(e) => match watch.rejected(digest, Instant::now()) {
            Rejection::New => {
                metrics.reload(false);
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

/// Applies a parsed config; an error is placed at its field (the file is re-read for the line,
/// off the runtime thread).
async fn apply(app: &mut App, source: &Source, config: Config) -> Result<(), String> {
    let Err(e) = app.reload(config.clone()).await else {
        return Ok(());
    };
    let s = source.clone();
    tokio::task::spawn_blocking(move || e.placed(&s, &config))
        .await
        .map_err(|j| j.to_string())
        .and_then(Err)
}
