//! `readyprism sim-apiserver`: one simulated apiserver as a process of its own, so a lab can put
//! each site's apiserver in that site's network namespace, next to its etcd member.
//!
//! Owns the command's options and its lifetime: on SIGTERM/SIGINT a graceful shutdown
//! (`--shutdown-delay`, `--shutdown-grace`; at once with both 0), a second signal stops at once;
//! exit 0 either way. The behaviour is the in-process [`FakeApiserver`]'s.

use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::apiserver::{Control, FakeApiserver};
use crate::config::DurationValue;
use crate::signals::Termination;

/// What to serve (also the command line of `readyprism sim-apiserver`).
#[derive(Debug, Clone, clap::Args)]
pub struct ApiserverOptions {
    /// The site's name: `/whoami`, `/name`, the `/watch` events and the raw greeting.
    #[arg(long)]
    pub name: String,
    /// Where to listen.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Server certificate (PEM).
    #[arg(long)]
    pub cert: PathBuf,
    /// Its key (PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// CA that signs the client certificates it accepts (PEM).
    #[arg(long)]
    pub client_ca: PathBuf,
    /// Refuse clients without a certificate (as a real apiserver does for kubelet's identity).
    #[arg(long)]
    pub require_client_cert: bool,
    /// etcd client URL (http://host:port) whose linearizable reads decide `/readyz`; without it
    /// `/readyz` passes.
    #[arg(long)]
    pub etcd: Option<String>,
    /// A file holding the `kubernetes` Endpoints object to serve (JSON, as an apiserver answers
    /// it); re-read when it changes, so a lab can change the cluster's list while this runs.
    /// Without it (and until the file exists) the object is not found (404).
    #[arg(long)]
    pub endpoints_file: Option<PathBuf>,
    /// On SIGTERM, how long `/readyz` fails only its `shutdown` check while everything else is
    /// still served and new connections accepted (kube-apiserver's `--shutdown-delay-duration`).
    #[arg(long, value_parser = DurationValue::parse, default_value = "0s")]
    pub shutdown_delay: DurationValue,
    /// On SIGTERM, after the delay and the listener's close, how long open connections are still
    /// served before they are closed.
    #[arg(long, value_parser = DurationValue::parse, default_value = "0s")]
    pub shutdown_grace: DurationValue,
    /// On SIGTERM, after the delay, keep listening while requests in flight drain and answer new
    /// ones (but `/readyz`, `/healthz`, `/livez`) `429` with `Retry-After: 5` and
    /// `Connection: close` (kube-apiserver's `--shutdown-send-retry-after`).
    #[arg(long)]
    pub shutdown_send_retry_after: bool,
}

/// How often `--endpoints-file` is looked at.
const ENDPOINTS_FILE_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Serves the contents of `path` as the Endpoints object from the first read on, and again each
/// time they change; until cancelled.
async fn follow_endpoints_file(path: PathBuf, control: Arc<Control>, stop: CancellationToken) {
    let mut served: Option<String> = None;
    loop {
        if let Ok(text) = tokio::fs::read_to_string(&path).await {
            if served.as_deref() != Some(text.as_str()) {
                tracing::info!(file = %path.display(), "serving the Endpoints object from the file");
                control.set_endpoints_answer(200, text.clone());
                served = Some(text);
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ENDPOINTS_FILE_CHECK) => {}
        }
    }
}

/// Why the simulated apiserver could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A certificate or key file could not be read.
    #[error("{path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The PEM did not make a TLS config.
    #[error("TLS: {0}")]
    Tls(super::tls::TlsSetupError),
    /// The address could not be bound, or the signal handlers installed.
    #[error("{what}: {cause}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        cause: std::io::Error,
    },
}

/// Serves until SIGTERM or SIGINT, then shuts down gracefully (a second signal: at once).
pub async fn run_until_signalled(opts: ApiserverOptions) -> Result<(), SimError> {
    let mut signals = Termination::install().map_err(|cause| SimError::Io {
        what: "signal handling".to_string(),
        cause,
    })?;
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|cause| SimError::Read {
            path: path.clone(),
            cause,
        })
    };
    let tls = super::tls::from_pem(
        &read(&opts.client_ca)?,
        &read(&opts.cert)?,
        &read(&opts.key)?,
        opts.require_client_cert,
    )
    .map_err(SimError::Tls)?;
    let fake = FakeApiserver::bind(&opts.name, opts.listen, tls).map_err(|cause| SimError::Io {
        what: format!("cannot listen on {}", opts.listen),
        cause,
    })?;
    if let Some(url) = &opts.etcd {
        fake.control.set_etcd(url);
    }
    let follow = CancellationToken::new();
    if let Some(path) = &opts.endpoints_file {
        tokio::spawn(follow_endpoints_file(
            path.clone(),
            fake.control.clone(),
            follow.clone(),
        ));
    }
    tracing::info!(name = %opts.name, listen = %fake.addr, etcd = opts.etcd.as_deref().unwrap_or(""), "simulated apiserver listening");
    let name = signals.recv().await;
    let (delay, grace) = (opts.shutdown_delay.0, opts.shutdown_grace.0);
    tracing::info!(delay = %opts.shutdown_delay, grace = %opts.shutdown_grace, "{name}: shutting down");
    tokio::select! {
        () = fake.shut_down(super::shutdown::Plan { delay, grace, send_retry_after: opts.shutdown_send_retry_after }) => {}
        name = signals.recv() => {
            tracing::info!("{name} again: stopping at once");
            fake.stop().await;
        }
    }
    follow.cancel();
    Ok(())
}
