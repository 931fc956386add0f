//! The probe's TLS client config, built from the CA and the (optional) client certificate files, and
//! rebuilt when any of those files changes — kubelet rotates its client certificate in place.
//!
//! Owns file loading and change detection. Does not own the probe's connections (`health::probe`),
//! which redial when they see a new [`TlsState::generation`].

mod expiry;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::config::TlsFiles;
use crate::metrics::Metrics;

/// A load that failed (unreadable, garbage, a key that does not match) is retried this often,
/// whether or not the files changed: a `chmod` or a fixed mount changes no content.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// How often certificate files are checked for changes. Kubelet rotates well before expiry, so a
/// second of delay costs nothing; stat() of three files per second costs nothing either.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// A certificate file could not be used. Each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{path}: cannot read: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// The file holds no usable PEM of the expected kind.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The key file holds no usable private key.
    #[error("{path}: no usable private key: {what}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The client certificate file disappeared after one was loaded (the previous one stays).
    #[error("{path}: the client certificate file disappeared; keeping the one loaded before")]
    Gone {
        /// The file.
        path: PathBuf,
    },
    /// rustls refused the material (e.g. key does not match certificate).
    #[error("{path}: {cause}")]
    Rustls {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: rustls::Error,
    },
}

impl TlsError {
    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            TlsError::Read { path, .. }
            | TlsError::Pem { path, .. }
            | TlsError::Key { path, .. }
            | TlsError::Gone { path }
            | TlsError::Rustls { path, .. } => path,
        }
    }

    /// Whether the error is about the client key (unusable, or not matching the certificate)
    /// rather than a certificate.
    pub fn is_about_key(&self) -> bool {
        matches!(self, TlsError::Key { .. } | TlsError::Rustls { .. })
    }
}

/// The client certificate the probes present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientCert {
    /// No `tls.client_cert` configured: anonymous by choice.
    NotConfigured,
    /// Configured but the file does not exist (yet): anonymous while kubelet bootstraps.
    Absent(PathBuf),
    /// Presented; `not_after` in Unix seconds when readable.
    Loaded {
        /// The certificate file.
        path: PathBuf,
        /// The leaf certificate's notAfter.
        not_after: Option<i64>,
    },
}

impl ClientCert {
    /// Short word for status: `none`, `absent` (anonymous) or `loaded`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClientCert::NotConfigured => "none",
            ClientCert::Absent(_) => "absent",
            ClientCert::Loaded { .. } => "loaded",
        }
    }
}

/// One loaded generation of TLS material.
#[derive(Debug)]
pub struct TlsState {
    /// Bumped on every successful reload; probe connections made with an older one are redialled.
    pub generation: u64,
    /// The rustls config for probes.
    pub client: Arc<ClientConfig>,
    /// What client certificate `client` presents.
    pub client_cert: ClientCert,
    fingerprint: Fingerprint,
}

/// The current TLS material plus the files it came from; one watcher task keeps it fresh.
#[derive(Debug)]
pub struct TlsSource {
    files: ArcSwap<TlsFiles>,
    current: ArcSwap<TlsState>,
    /// Source of unique generation numbers for the watcher and reloads alike.
    generations: AtomicU64,
}

type FileStamp = Option<(SystemTime, u64, u64)>;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint([FileStamp; 3]);

impl Fingerprint {
    fn of(files: &TlsFiles) -> Fingerprint {
        let stamp = |p: Option<&PathBuf>| -> FileStamp {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(p?).ok()?;
            Some((m.modified().ok()?, m.len(), m.ino()))
        };
        Fingerprint([
            stamp(Some(&files.ca)),
            stamp(files.client_cert.as_ref()),
            stamp(files.client_key.as_ref()),
        ])
    }
}

impl TlsSource {
    /// Loads the files once; errors here stop start-up (or reject a reload).
    pub fn load(files: &TlsFiles) -> Result<TlsState, TlsError> {
        let fingerprint = Fingerprint::of(files);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|cause| TlsError::Rustls {
                path: files.ca.clone(),
                cause,
            })?
            .with_root_certificates(load_roots(&files.ca)?);
        let (client, client_cert) = match (&files.client_cert, &files.client_key) {
            (Some(cert_path), Some(key_path)) if cert_path.exists() => {
                let chain = load_certs(cert_path)?;
                let not_after = chain.first().and_then(|c| expiry::not_after(c));
                let key = load_key(key_path)?;
                let config = builder.with_client_auth_cert(chain, key).map_err(|cause| {
                    TlsError::Rustls {
                        path: key_path.clone(),
                        cause,
                    }
                })?;
                (
                    config,
                    ClientCert::Loaded {
                        path: cert_path.clone(),
                        not_after,
                    },
                )
            }
            (Some(cert_path), _) => (
                builder.with_no_client_auth(),
                ClientCert::Absent(cert_path.clone()),
            ),
            (None, _) => (builder.with_no_client_auth(), ClientCert::NotConfigured),
        };
        Ok(TlsState {
            generation: 0,
            client: Arc::new(client),
            client_cert,
            fingerprint,
        })
    }

    /// A source starting from already loaded material.
    pub fn new(files: TlsFiles, state: TlsState) -> Arc<TlsSource> {
        Arc::new(TlsSource {
            files: ArcSwap::from_pointee(files),
            current: ArcSwap::from_pointee(state),
            generations: AtomicU64::new(0),
        })
    }

    /// The material to use for the next probe connection.
    pub fn current(&self) -> Arc<TlsState> {
        self.current.load_full()
    }

    /// Switches to new files (config reload) with material the caller loaded from them. Returns
    /// false, changing nothing, when neither the paths nor the files changed: probe connections
    /// are then kept.
    pub fn replace(&self, files: TlsFiles, mut state: TlsState) -> bool {
        if *self.files.load_full() == files && self.current.load().fingerprint == state.fingerprint
        {
            return false;
        }
        state.generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        self.files.store(Arc::new(files));
        self.current.store(Arc::new(state));
        true
    }

    /// Re-reads the files whenever their metadata changes, until cancelled. A load that fails
    /// keeps the previous material in use (WARN) and is retried every [`RETRY_INTERVAL`]; so is a
    /// client certificate file that disappeared after one was loaded: only a node that never had
    /// one probes anonymously.
    pub async fn watch(self: Arc<Self>, metrics: Arc<Metrics>, cancel: CancellationToken) {
        let mut retry = Retry::default();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(WATCH_INTERVAL) => {}
            }
            // Material first, then paths: a reload in between makes the swap below fail instead of
            // storing material from the old paths over the reload's.
            let current = self.current();
            let files = self.files.load_full();
            let now = Fingerprint::of(&files);
            let changed = now != current.fingerprint;
            if !retry.due(changed, &now, tokio::time::Instant::now()) {
                continue;
            }
            let loaded = TlsSource::load(&files).and_then(|state| {
                match (&current.client_cert, &state.client_cert) {
                    (ClientCert::Loaded { .. }, ClientCert::Absent(path)) => {
                        Err(TlsError::Gone { path: path.clone() })
                    }
                    _ => Ok(state),
                }
            });
            match loaded {
                Ok(mut state) => {
                    retry = Retry::default();
                    state.generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
                    let (generation, cert) = (state.generation, state.client_cert.clone());
                    let prev = self.current.compare_and_swap(&current, Arc::new(state));
                    if !Arc::ptr_eq(&*prev, &current) {
                        continue; // a reload replaced the material meanwhile; it wins
                    }
                    tracing::info!(
                        client_cert = cert.as_str(),
                        generation,
                        "TLS files changed; reloaded"
                    );
                    publish_expiry(&metrics, &cert);
                }
                Err(e) => {
                    if retry.failed_since.is_none() {
                        tracing::warn!(error = %e, "TLS files cannot be loaded; keeping the previous ones, retrying every 5s");
                    }
                    retry.failed(now, tokio::time::Instant::now());
                }
            }
        }
    }
}

/// When the watcher loads the files again: on a change, and while loads fail, every
/// [`RETRY_INTERVAL`] even without one.
#[derive(Debug, Default)]
struct Retry {
    /// The files as they were at the last failed load, and when that was.
    failed_since: Option<(Fingerprint, tokio::time::Instant)>,
}

impl Retry {
    fn due(&self, changed: bool, now: &Fingerprint, at: tokio::time::Instant) -> bool {
        match &self.failed_since {
            None => changed,
            Some((seen, when)) => seen != now || at.duration_since(*when) >= RETRY_INTERVAL,
        }
    }

    fn failed(&mut self, files: Fingerprint, at: tokio::time::Instant) {
        self.failed_since = Some((files, at));
    }
}

/// Warns when the client key file can be read by anyone but its owner: kubelet writes it 0600,
/// and readyprism never needs it looser.
pub fn warn_if_key_exposed(files: &TlsFiles) {
    use std::os::unix::fs::PermissionsExt;
    let Some(key) = &files.client_key else {
        return;
    };
    if let Ok(meta) = std::fs::metadata(key) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(key = %key.display(), mode = format!("{mode:o}"), "the client key is readable by group or others; it should be 0600");
        }
    }
}

/// Exports the client certificate's expiry (or removes the metric when none is presented).
pub fn publish_expiry(metrics: &Metrics, cert: &ClientCert) {
    let not_after = match cert {
        ClientCert::Loaded { not_after, .. } => *not_after,
        _ => None,
    };
    metrics.set_client_cert_expiry(not_after);
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|cause| TlsError::Read {
        path: path.to_path_buf(),
        cause,
    })
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |what: String| TlsError::Pem {
        path: path.to_path_buf(),
        what,
    };
    let certs = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error("no CERTIFICATE block found".to_string()));
    }
    Ok(certs)
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read(path)?).map_err(|e| TlsError::Key {
        path: path.to_path_buf(),
        what: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_load_is_retried_on_a_change_or_every_retry_interval() {
        let t0 = tokio::time::Instant::now();
        let files = Fingerprint([None, None, None]);
        let other = Fingerprint([Some((SystemTime::UNIX_EPOCH, 1, 1)), None, None]);
        let mut r = Retry::default();
        assert!(!r.due(false, &files, t0), "nothing changed, nothing failed");
        assert!(r.due(true, &files, t0));
        r.failed(files.clone(), t0);
        assert!(!r.due(false, &files, t0 + Duration::from_secs(1)));
        assert!(
            r.due(false, &files, t0 + RETRY_INTERVAL),
            "retried though nothing changed"
        );
        assert!(
            r.due(false, &other, t0 + Duration::from_secs(1)),
            "and at once on a change"
        );
    }
}
