//! The probe's TLS client config, built from the CA and the (optional) client certificate files, and
//! rebuilt when any of those files changes — kubelet rotates its client certificate in place.
//!
//! Owns the one cell holding the files and the material loaded from them, and the rule for
//! replacing it ([`TlsSource::apply`]: a client certificate that vanished stays in use). `files`
//! reads a file safely, `load` builds the rustls config from the files, `watch` notices changes. Does not own the probe's connections
//! (`health::probe`), which redial when they see a new [`TlsState::generation`].

mod expiry;
mod files;
mod load;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ClientConfig;

use crate::config::TlsFiles;
use crate::metrics::Metrics;
use crate::watched_file::{Digest, FileError};
pub use expiry::{unix_now, Left};
use files::Stamps;

/// A certificate file could not be used. Each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read, is not a regular file or is larger than 1 MiB.
    #[error(transparent)]
    File(#[from] FileError),
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
            TlsError::File(e) => &e.path,
            TlsError::Pem { path, .. }
            | TlsError::Key { path, .. }
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

    /// Time left at `now` (Unix seconds) of the certificate presented, when its `notAfter` was
    /// readable.
    pub fn left(&self, now: i64) -> Option<Left> {
        match self {
            ClientCert::Loaded {
                not_after: Some(t), ..
            } => Some(Left::at(*t, now)),
            _ => None,
        }
    }
}

/// One loaded generation of TLS material, with the files it came from. Cheap to clone (the
/// rustls config is shared).
#[derive(Debug, Clone)]
pub struct TlsState {
    /// Bumped on every replacement; probe connections made with an older one are redialled.
    pub generation: u64,
    /// The rustls config for probes.
    pub client: Arc<ClientConfig>,
    /// What client certificate `client` presents.
    pub client_cert: ClientCert,
    /// The paths it was loaded from.
    files: TlsFiles,
    /// The files' stat stamps, taken before reading them: the watcher reads again when they move.
    stamps: Stamps,
    /// Hashes of the CA, certificate and key content (`None`: absent): same paths and hashes
    /// mean the same material, so probe connections are kept.
    content: [Option<Digest>; 3],
}

/// What [`TlsSource::apply`] did with freshly loaded material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The new material is in use from now on.
    Replaced {
        /// Its generation.
        generation: u64,
        /// What client certificate it presents.
        client_cert: ClientCert,
    },
    /// The client certificate file vanished after one was loaded: the material loaded before
    /// stays in use, so that only a node that never had a certificate probes anonymously.
    Kept {
        /// The certificate file that is gone.
        gone: PathBuf,
    },
    /// Same paths, same content: nothing changed, probe connections are kept.
    Unchanged,
}

/// The current TLS material and the files it came from, in one cell; the watcher and reloads
/// replace it through [`TlsSource::apply`].
#[derive(Debug)]
pub struct TlsSource {
    current: ArcSwap<TlsState>,
}

impl TlsSource {
    /// A source starting from already loaded material.
    pub fn new(state: TlsState) -> Arc<TlsSource> {
        Arc::new(TlsSource {
            current: ArcSwap::from_pointee(state),
        })
    }

    /// The material to use for the next probe connection.
    pub fn current(&self) -> Arc<TlsState> {
        self.current.load_full()
    }

    /// Offers material just loaded (a config reload, or the watcher) in place of whatever is in
    /// use, and says what became of it: see [`decide`].
    pub fn apply(&self, new: TlsState) -> Applied {
        loop {
            // None: replaced meanwhile; decide again against that.
            if let Some(applied) = self.apply_over(&self.current(), &new) {
                return applied;
            }
        }
    }

    /// Like [`TlsSource::apply`], but only over `base`: when the cell holds something else by
    /// now (a reload stored material from other paths meanwhile), changes nothing: `None`.
    fn apply_over(&self, base: &Arc<TlsState>, new: &TlsState) -> Option<Applied> {
        match decide(base, new) {
            Decision::Same => return Some(Applied::Unchanged),
            Decision::Keep { gone } => return Some(Applied::Kept { gone }),
            Decision::Replace => {}
        }
        let next = Arc::new(TlsState {
            generation: base.generation + 1,
            ..new.clone()
        });
        let applied = Applied::Replaced {
            generation: next.generation,
            client_cert: next.client_cert.clone(),
        };
        let prev = self.current.compare_and_swap(base, next);
        Arc::ptr_eq(&*prev, base).then_some(applied)
    }
}

/// What to do with `new` material given `current`.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Replace,
    Keep { gone: PathBuf },
    Same,
}

/// The one rule for replacing TLS material: a client certificate file that vanished after one
/// was loaded keeps the loaded one in use (kubelet replaces its file by rename; a moment without
/// it must not make the probes anonymous and fail); otherwise new paths or new content replace
/// it, and the same paths with the same content change nothing.
fn decide(current: &TlsState, new: &TlsState) -> Decision {
    if let (ClientCert::Loaded { path, .. }, ClientCert::Absent(gone)) =
        (&current.client_cert, &new.client_cert)
    {
        if path == gone {
            return Decision::Keep { gone: gone.clone() };
        }
    }
    if current.files == new.files && current.content == new.content {
        Decision::Same
    } else {
        Decision::Replace
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

/// Says what a client certificate just loaded (start-up, a reload, kubelet's rotation) means:
/// exports its expiry (or removes the metric when none is presented), and WARNs, naming it as
/// ours, when it has expired or expires within [`WARN_WITHIN`] — else the first sign would be an
/// apiserver refusing the handshake.
pub fn publish_client_cert(metrics: &Metrics, cert: &ClientCert) {
    let not_after = match cert {
        ClientCert::Loaded { not_after, .. } => *not_after,
        _ => None,
    };
    metrics.set_client_cert_expiry(not_after);
    let (ClientCert::Loaded { path, .. }, Some(left)) = (cert, cert.left(unix_now())) else {
        return;
    };
    let client_cert = path.display();
    match left {
        Left::Expired(_) => {
            tracing::warn!(%client_cert, expiry = %left, "our client certificate has expired: the apiservers will refuse it; is kubelet's certificate rotation working?");
        }
        Left::Soon(_) => {
            tracing::warn!(%client_cert, expiry = %left, "our client certificate expires within 7 days; is kubelet's certificate rotation working?");
        }
        Left::Valid(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::RootCertStore;

    fn files(cert: &str) -> TlsFiles {
        TlsFiles {
            ca: "/ca.crt".into(),
            client_cert: Some(cert.into()),
            client_key: None,
        }
    }

    /// Material as if loaded from `files`, presenting `cert`, with content `content` (one byte
    /// standing for each file's content).
    fn state(files: TlsFiles, cert: ClientCert, content: [Option<u8>; 3]) -> TlsState {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        TlsState {
            generation: 0,
            client: Arc::new(client),
            client_cert: cert,
            files,
            stamps: Stamps::none(),
            content: content.map(|c| c.map(|b| Digest::of(&[b]))),
        }
    }

    fn loaded(path: &str) -> ClientCert {
        ClientCert::Loaded {
            path: path.into(),
            not_after: None,
        }
    }

    #[test]
    fn new_tls_material_replaces_the_old_unless_the_client_certificate_vanished() {
        let with = [Some(1), Some(2), Some(2)];
        let cert = "/kubelet.pem";
        let had = state(files(cert), loaded(cert), with);
        let gone = state(
            files(cert),
            ClientCert::Absent(cert.into()),
            [Some(1), None, None],
        );
        assert_eq!(decide(&had, &gone), Decision::Keep { gone: cert.into() });
        let same = state(files(cert), loaded(cert), with);
        assert_eq!(decide(&had, &same), Decision::Same);
        let rotated = state(files(cert), loaded(cert), [Some(1), Some(3), Some(3)]);
        assert_eq!(decide(&had, &rotated), Decision::Replace);
        // Pointed at another file that does not exist: the config says so, it is not a vanishing.
        let elsewhere = state(
            files("/new.pem"),
            ClientCert::Absent("/new.pem".into()),
            with,
        );
        assert_eq!(decide(&had, &elsewhere), Decision::Replace);
        // Never had one: the certificate appearing replaces, and it staying absent changes nothing.
        let never = state(
            files(cert),
            ClientCert::Absent(cert.into()),
            [Some(1), None, None],
        );
        assert_eq!(decide(&never, &had), Decision::Replace);
        assert_eq!(decide(&never, &gone), Decision::Same);
    }

    /// The client certificate the `apply` tests load.
    const CERT: &str = "/kubelet.pem";
    /// The contents of the files `CERT` was loaded from.
    const WITH: [Option<u8>; 3] = [Some(1), Some(2), Some(2)];

    /// A source holding `CERT`, loaded from the files at `WITH`.
    fn source_with_a_cert() -> Arc<TlsSource> {
        TlsSource::new(state(files(CERT), loaded(CERT), WITH))
    }

    #[test]
    fn apply_keeps_the_loaded_certificate_when_its_file_is_gone() {
        let (cert, source) = (CERT, source_with_a_cert());
        let gone = state(
            files(cert),
            ClientCert::Absent(cert.into()),
            [Some(1), None, None],
        );
        assert_eq!(source.apply(gone), Applied::Kept { gone: cert.into() });
        assert_eq!(source.current().client_cert, loaded(cert));
        assert_eq!(source.current().generation, 0);
    }

    #[test]
    fn only_a_replacement_bumps_the_generation() {
        let (cert, with, source) = (CERT, WITH, source_with_a_cert());
        let same = state(files(cert), loaded(cert), with);
        assert_eq!(source.apply(same), Applied::Unchanged);
        assert_eq!(source.current().generation, 0);
        let rotated = state(files(cert), loaded(cert), [Some(1), Some(3), Some(3)]);
        assert_eq!(
            source.apply(rotated),
            Applied::Replaced {
                generation: 1,
                client_cert: loaded(cert)
            }
        );
        assert_eq!(source.current().generation, 1);
    }

    #[test]
    fn the_watcher_loses_to_a_reload_that_came_first() {
        let cert = "/kubelet.pem";
        let source = TlsSource::new(state(files(cert), loaded(cert), [Some(1), None, None]));
        let base = source.current();
        let reload = state(
            files("/other.pem"),
            loaded("/other.pem"),
            [Some(9), None, None],
        );
        assert!(matches!(source.apply(reload), Applied::Replaced { .. }));
        let watcher = state(files(cert), loaded(cert), [Some(2), None, None]);
        assert_eq!(source.apply_over(&base, &watcher), None);
        assert_eq!(source.current().files, files("/other.pem"));
    }
}
