//! `readyprism sim-apiserver`: one simulated apiserver as a process of its own, so a lab can put
//! each site's apiserver in that site's network namespace, next to its etcd member.
//!
//! Owns the command's options and its lifetime (until SIGTERM/SIGINT). The behaviour is the
//! in-process [`FakeApiserver`]'s.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::apiserver::FakeApiserver;
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

/// Serves until SIGTERM or SIGINT.
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
    tracing::info!(name = %opts.name, listen = %fake.addr, etcd = opts.etcd.as_deref().unwrap_or(""), "simulated apiserver listening");
    let name = signals.recv().await;
    tracing::info!("{name}: stopping");
    fake.stop().await;
    Ok(())
}
