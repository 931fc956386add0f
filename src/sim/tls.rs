//! The simulated apiserver's TLS: a server certificate, and client certificates verified against
//! a CA (optional or required), from in-memory PKI or from PEM files (the lab's processes).

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::sim::pki::{Ca, Issued};

/// Building a fake's TLS config failed (bad PEM).
pub type TlsSetupError = Box<dyn std::error::Error + Send + Sync>;

/// Server TLS config presenting `server`, accepting (but not requiring) clients signed by `ca`.
pub fn server_tls(ca: &Ca, server: &Issued) -> Result<Arc<ServerConfig>, TlsSetupError> {
    from_pem(&ca.cert_pem, &server.cert_pem, &server.key_pem, false)
}

/// Like [`server_tls`] but refusing clients without a certificate from `ca`, as an apiserver
/// that does not know our CA: the rejection reaches the client after the TLS 1.3 handshake.
pub fn strict_server_tls(ca: &Ca, server: &Issued) -> Result<Arc<ServerConfig>, TlsSetupError> {
    from_pem(&ca.cert_pem, &server.cert_pem, &server.key_pem, true)
}

/// Server TLS config from PEM text: the client CA, the server certificate and its key.
pub fn from_pem(
    client_ca: &str,
    cert: &str,
    key: &str,
    require_client: bool,
) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
        roots.add(ca?)?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let verifier = if require_client {
        verifier.build()?
    } else {
        verifier.allow_unauthenticated().build()?
    };
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes())?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}
