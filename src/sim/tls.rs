//! The simulated apiserver's TLS: a server certificate, and client certificates verified against
//! a CA (optional or required) or, as kube-apiserver does, requested and left to the HTTP layer
//! to judge; from in-memory PKI or from PEM files (the lab's processes).

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

/// Like [`server_tls`] but, as kube-apiserver does (Go's `RequestClientCert`), asking for a
/// client certificate and accepting whatever is presented, expired or not: kube-apiserver judges
/// it after the handshake and answers `401` to one it does not accept.
pub fn lenient_server_tls(ca: &Ca, server: &Issued) -> Result<Arc<ServerConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()?;
    let chain = CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes())?;
    let verifier = Arc::new(AnyClientCert(inner));
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}

/// Accepts any client certificate (its signatures still checked, as the verifier it wraps does).
#[derive(Debug)]
struct AnyClientCert(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
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
