//! A cluster for tests: an in-memory CA, a kubelet-style client certificate, and fake apiservers on
//! 127.0.0.1 serving the CA's certificate with mutual TLS, each a one-liner. It writes no file and
//! starts no balancer (the integration tests' `support/lab.rs` does).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::net::TcpListener;

use crate::sim::apiserver::{server_tls, FakeApiserver};
use crate::sim::pki::{Ca, Issued};

/// A CA, its client certificate for a node, and the TLS its fake apiservers serve (a certificate
/// for 127.0.0.1, ::1 and localhost; client certificates from the CA verified when presented).
pub struct Cluster {
    /// The cluster's CA, which the balancer trusts.
    pub ca: Ca,
    /// A kubelet-style client certificate (`test-node`) issued by the CA.
    pub client: Issued,
    /// What every fake of [`Cluster::fake`] serves.
    server_tls: Arc<ServerConfig>,
}

impl Cluster {
    /// A new CA named `ca_name` with its client and server certificates; installs the ring
    /// crypto provider if none is.
    pub fn new(ca_name: &str) -> Cluster {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = Ca::new(ca_name).expect("ca");
        let server = ca
            .server(&["127.0.0.1", "::1", "localhost"])
            .expect("server cert");
        let client = ca.client("test-node").expect("client cert");
        let server_tls = server_tls(&ca, &server).expect("server tls");
        Cluster {
            ca,
            client,
            server_tls,
        }
    }

    /// A fake apiserver named `name` on 127.0.0.1:0. Once stopped, its port refuses (stays bound).
    pub fn fake(&self, name: &str) -> FakeApiserver {
        fake_serving(name, self.server_tls.clone())
    }

    /// A fake apiserver on `listener` (one the test made: a short accept queue, say) with the
    /// cluster's TLS.
    pub fn fake_on(&self, name: &str, listener: TcpListener) -> FakeApiserver {
        FakeApiserver::start(name, listener, self.server_tls.clone()).expect("start fake")
    }
}

/// A fake apiserver on 127.0.0.1:0 with TLS of its own (`sim::apiserver::server_tls` or
/// `strict_server_tls` with another CA): a certificate the balancer does not trust, a client CA
/// that refuses the kubelet's. Once stopped, its port refuses (stays bound).
pub fn fake_serving(name: &str, tls: Arc<ServerConfig>) -> FakeApiserver {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    FakeApiserver::bind(name, any, tls).expect("start fake")
}
