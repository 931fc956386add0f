//! The one control loop of a running balancer: hang-ups, the config file's watch, discovery's
//! lists, this node's changed addresses and the end of the run, each applied in turn by the one
//! owner of the [`App`], then the ordered shutdown.
//!
//! Owns when the app changes. Does not own how a reload is counted and logged (`reload`), what
//! the config watch decides (`config::watch`), or installing signal handlers (`signals`).

use std::future::Future;
use std::pin::Pin;

use tokio::signal::unix::Signal;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reload::{look_off_thread, on_decision, on_hup};
use super::App;
use crate::config::watch::ConfigWatch;
use crate::config::Source;
use crate::signals::Signals;
use crate::watched_file::{Digest, CHECK_INTERVAL};

/// The config file a run reloads from: on a hang-up, and whenever its content changes (a static
/// pod's process cannot be signalled).
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Where it is, and the zone override given on the command line.
    pub source: Source,
    /// The digest of the bytes the running config was parsed from.
    pub running: Digest,
}

/// What ends a run; answers why (the signal's name, or the caller's word).
pub type End = Pin<Box<dyn Future<Output = &'static str> + Send>>;

/// What [`App::run`] listens to besides discovery, which the app drives itself.
pub struct Control {
    /// Reloaded from on a hang-up and watched for changes; `None`: a config built in memory,
    /// never reloaded.
    pub config: Option<ConfigFile>,
    /// SIGHUP; `None`: no hang-ups.
    pub hangup: Option<Signal>,
    /// Ends the run.
    pub end: End,
}

impl Control {
    /// The daemon's: SIGHUP reloads `config`, SIGTERM or SIGINT end the run.
    pub fn daemon(signals: Signals, config: ConfigFile) -> Control {
        let (hangup, mut termination) = signals.split();
        Control {
            config: Some(config),
            hangup: Some(hangup),
            end: Box::pin(async move { termination.recv().await }),
        }
    }

    /// No file and no signals: the run ends when `stop` is cancelled (the demo, in-process
    /// tests).
    pub fn until(stop: CancellationToken) -> Control {
        Control {
            config: None,
            hangup: None,
            end: Box::pin(async move {
                stop.cancelled().await;
                "stopped"
            }),
        }
    }
}

/// What woke the loop.
enum Wake {
    Hangup,
    Tick,
    Discovered(Vec<crate::discovery::membership::Member>),
    Addresses(Vec<std::net::IpAddr>),
}

/// A hang-up, or never when there is no handler.
async fn hangup(signal: &mut Option<Signal>) {
    match signal {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

impl App {
    /// Runs until `control.end`: applies every list discovery finds and every change of this
    /// node's addresses (when its zone follows them), reloads on a hang-up and
    /// when the config file's content changes, then shuts down within
    /// [`super::shutdown_bound`].
    pub async fn run(mut self, control: Control) {
        let Control {
            config,
            hangup: mut hup,
            mut end,
        } = control;
        let mut watch = config.as_ref().map(|c| ConfigWatch::new(c.running));
        if let Some(file) = &config {
            self.admin.config.from_file(&file.source.path);
        }
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ended = loop {
            let wake = tokio::select! {
                why = &mut end => break why,
                _ = hangup(&mut hup) => Wake::Hangup,
                _ = tick.tick(), if config.is_some() => Wake::Tick,
                list = self.discovered.next() => Wake::Discovered(list),
                addrs = self.addresses.next() => Wake::Addresses(addrs),
            };
            let (source, watch) = match (wake, &config, watch.as_mut()) {
                (Wake::Discovered(list), _, _) => {
                    if let Err(e) = self.set_discovered(list).await {
                        tracing::warn!(error = %e, "discovered backends not applied");
                    }
                    continue;
                }
                (Wake::Addresses(addrs), _, _) => {
                    self.rezone(addrs).await;
                    continue;
                }
                (wake, Some(file), Some(watch)) => ((wake, &file.source), watch),
                (Wake::Hangup, None, _) => {
                    tracing::info!(
                        "hang-up: this config was not read from a file; nothing to reload"
                    );
                    continue;
                }
                _ => continue,
            };
            let (wake, source) = source;
            // SIGHUP reads whatever the file holds; a tick reads when the stamp changed or a retry
            // is due.
            let (seen, force) = match wake {
                Wake::Hangup => (None, true),
                _ => (watch.seen(), watch.retry_due(Instant::now())),
            };
            // File I/O runs on the blocking pool; a hung filesystem does not delay the end.
            let look = tokio::select! {
                look = look_off_thread(source, seen, force) => look,
                why = &mut end => break why,
            };
            match wake {
                Wake::Hangup => on_hup(&mut self, source, watch, look).await,
                _ => {
                    let step = watch.decide(look, Instant::now());
                    on_decision(&mut self, source, watch, step).await;
                }
            }
        };
        tracing::info!("{ended}: shutting down");
        let bound = super::shutdown_bound(self.config());
        if tokio::time::timeout(bound, self.shutdown()).await.is_err() {
            tracing::error!(
                ?bound,
                "shutdown took longer than its bound; exiting anyway"
            );
        }
    }
}
