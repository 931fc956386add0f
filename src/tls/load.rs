//! Building the probes' rustls client config from the CA, client certificate and key files, and
//! recording what it was built from (stamps, content hashes) for the watcher and the keep rule.
//!
//! Does not decide whether the new material replaces the old (`tls`'s `apply`), nor when to
//! load (`watch`).

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::files::{self, Stamps};
use super::{expiry, ClientCert, TlsError, TlsSource, TlsState};
use crate::config::TlsFiles;

impl TlsSource {
    /// Loads the files once (synchronously: start-up, `check`, and the watcher's blocking task).
    /// Errors here stop start-up, reject a reload, or keep the watcher retrying.
    pub fn load(files: &TlsFiles) -> Result<TlsState, TlsError> {
        let stamps = Stamps::of(files);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|cause| TlsError::Rustls {
                path: files.ca.clone(),
                cause,
            })?;
        let ca = files::read(&files.ca)?;
        let builder = builder.with_root_certificates(roots(&files.ca, &ca.bytes)?);
        let mut content = [Some(ca.digest), None, None];
        let (client, client_cert) = match (&files.client_cert, &files.client_key) {
            (Some(cert_path), Some(key_path)) if cert_path.exists() => {
                let cert_pem = files::read(cert_path)?;
                let chain = certs(cert_path, &cert_pem.bytes)?;
                let not_after = chain.first().and_then(|c| expiry::not_after(c));
                let key_pem = files::read(key_path)?;
                let key = key(key_path, &key_pem.bytes)?;
                content[1] = Some(cert_pem.digest);
                content[2] = Some(key_pem.digest);
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
            files: files.clone(),
            stamps,
            content,
        })
    }
}

fn certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |what: String| TlsError::Pem {
        path: path.to_path_buf(),
        what,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem_error("no CERTIFICATE block found".to_string()));
    }
    Ok(certs)
}

fn roots(path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs(path, pem)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| TlsError::Key {
        path: path.to_path_buf(),
        what: e.to_string(),
    })
}
