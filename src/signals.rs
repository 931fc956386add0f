//! Signals and what they do: SIGHUP (or a change of the config file's content) reloads the
//! config, SIGTERM/SIGINT shut down within `shutdown_grace` + 1 s.
//!
//! Handlers are installed before anything is served ([`Signals::install`] comes before
//! `App::start`), so a signal right after start never takes its default action and kills the
//! process. Owns turning signals into actions; the ordered drain itself is `App::shutdown`.

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::app::App;
use crate::config::watch::{ConfigWatch, WATCH_INTERVAL};
use crate::config::Source;

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
    pub async fn run(mut self, mut app: App, source: Source) {
        let mut watch = ConfigWatch::new(&source.path);
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.hup.recv() => {
                    watch.sync();
                    reload(&mut app, &source).await;
                }
                _ = tick.tick() => if watch.changed() {
                    tracing::info!(file = %source.path.display(), "config file changed; reloading");
                    reload(&mut app, &source).await;
                },
                name = self.end.recv() => { tracing::info!("{name}: shutting down"); break }
            }
        }
        let bound = crate::app::shutdown_bound(app.config());
        if tokio::time::timeout(bound, app.shutdown()).await.is_err() {
            tracing::error!(
                ?bound,
                "shutdown took longer than its bound; exiting anyway"
            );
        }
    }
}

/// Reloads from `source`; an invalid config is logged (file, field, line), counted, and ignored.
pub async fn reload(app: &mut App, source: &Source) {
    let metrics = app.metrics();
    let result = match source.load() {
        Ok(config) => app
            .reload(config.clone())
            .await
            .map_err(|e| e.placed(source, &config)),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => {
            metrics.reload(true);
            tracing::info!(file = %source.path.display(), "config reloaded");
        }
        Err(e) => {
            metrics.reload(false);
            tracing::error!(error = %e, "config reload rejected; the running config stays");
        }
    }
}
