//! A plain HTTPS client for tests that talk to a fake apiserver directly (its `/readyz` bodies, its
//! graceful shutdown): one kept-alive HTTP/1 connection, the cluster's CA trusted, the kubelet-style
//! client certificate presented.
//!
//! Owns nothing the balancer uses: the probe has its own client (`https`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::Cluster;

/// One HTTPS connection to a fake apiserver.
pub struct HttpsConn {
    sender: SendRequest<Empty<Bytes>>,
}

impl std::fmt::Debug for HttpsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsConn").finish_non_exhaustive()
    }
}

impl Cluster {
    /// A client TLS config trusting the cluster's CA, presenting its client certificate.
    pub fn client_tls(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.ca.cert_pem.as_bytes()) {
            roots.add(c.expect("CA PEM")).expect("CA certificate");
        }
        let chain = CertificateDer::pem_slice_iter(self.client.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("client PEM");
        let key = PrivateKeyDer::from_pem_slice(self.client.key_pem.as_bytes()).expect("key PEM");
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("client config");
        Arc::new(config)
    }

    /// Dials `addr` (a fake of this cluster) and completes TLS and the HTTP/1 handshake.
    pub async fn connect(&self, addr: SocketAddr) -> std::io::Result<HttpsConn> {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::from(addr.ip());
        let tls = TlsConnector::from(self.client_tls())
            .connect(name, tcp)
            .await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let _ = conn.await; // ends with the connection
        });
        Ok(HttpsConn { sender })
    }
}

impl HttpsConn {
    /// `GET path` (with its query) on this connection: the status and the body as text.
    pub async fn get(&mut self, path: &str) -> Result<(u16, String), hyper::Error> {
        let (status, _, body) = self.get_with_headers(path).await?;
        Ok((status, body))
    }

    /// [`HttpsConn::get`] with the answer's headers too (`Retry-After`, `Connection`).
    pub async fn get_with_headers(
        &mut self,
        path: &str,
    ) -> Result<(u16, hyper::HeaderMap, String), hyper::Error> {
        self.sender.ready().await?;
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, "kubernetes")
            .body(Empty::new())
            .expect("a valid request");
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, headers, String::from_utf8_lossy(&body).into_owned()))
    }
}
