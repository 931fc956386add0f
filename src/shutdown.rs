//! Signals and the process lifecycle: SIGHUP reloads, SIGTERM/SIGINT shut down within
//! `shutdown_grace` + 1 s.
//!
//! Owns turning signals into actions. The ordered drain itself is `App::shutdown`.

use std::path::PathBuf;

use tokio::signal::unix::{signal, SignalKind};

use crate::app::App;
use crate::config::Config;
use crate::metrics::Metrics;

/// Applies the command-line zone override (if any) to a freshly loaded config.
pub type Override = Box<dyn Fn(&mut Config) + Send>;

/// Runs `app` until SIGTERM or SIGINT, reloading `config_path` on SIGHUP.
pub async fn run_until_signalled(
    mut app: App,
    config_path: PathBuf,
    apply: Override,
) -> std::io::Result<()> {
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            _ = hup.recv() => reload(&mut app, &config_path, &apply).await,
            _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break }
            _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break }
        }
    }
    let bound = crate::app::shutdown_bound(app.config());
    if tokio::time::timeout(bound, app.shutdown()).await.is_err() {
        tracing::error!(
            ?bound,
            "shutdown took longer than its bound; exiting anyway"
        );
    }
    Ok(())
}

/// Reloads the config file; an invalid one is logged (file, field, line), counted, and ignored.
pub async fn reload(app: &mut App, path: &std::path::Path, apply: &Override) {
    let metrics: std::sync::Arc<Metrics> = app.metrics();
    let result = match Config::load(path) {
        Ok(mut config) => {
            apply(&mut config);
            app.reload(config).await.map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => {
            metrics.reload(true);
            tracing::info!(file = %path.display(), "config reloaded");
        }
        Err(e) => {
            metrics.reload(false);
            tracing::error!(error = %e, "config reload rejected; the running config stays");
        }
    }
}
