//! What a connection attempt says about the path: a dial that connected is reported to the
//! backend's passive health (a new connection worked), and one that got no connection is told
//! apart from a failure after connecting.

use std::net::SocketAddr;

use super::*;
use crate::config::TlsFiles;
use crate::testing::{answers, refusing};
use crate::tls::TlsSource;

/// TLS material trusting a CA nobody serves (the handshakes here fail or never start).
fn tls(dir: &tempfile::TempDir) -> TlsState {
    let ca = crate::sim::pki::Ca::new("test").expect("ca");
    let path = dir.path().join("ca.crt");
    std::fs::write(&path, &ca.cert_pem).expect("write the CA");
    let files = TlsFiles {
        ca: path,
        client_cert: None,
        client_key: None,
    };
    TlsSource::load(&files).expect("load")
}

fn spec(addr: SocketAddr) -> BackendSpec {
    (*crate::testing::fixtures::spec(&addr.to_string(), None)).clone()
}

#[tokio::test]
async fn a_dial_that_connects_is_reported_and_one_that_does_not_is_unreached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = tls(&dir);
    let budget = Duration::from_secs(2);

    // Accepts, reads the ClientHello and closes: connected, then the handshake fails.
    let plain = spec(answers(Vec::new()));
    let live = BackendLive::default();
    live.inbox.set_suspect(true);
    match connect(&plain, &live, &tls, budget).await {
        Err(ConnectError::Backend(_)) => {}
        other => panic!("want a failure after connecting, got {other:?}"),
    }
    assert!(live.inbox.take_connected(), "the TCP connect is reported");

    // Refused: no connection; nothing reported as connected.
    let (_held, addr) = refusing().expect("a refusing address");
    let closed = spec(addr);
    let live = BackendLive::default();
    live.inbox.set_suspect(true);
    match connect(&closed, &live, &tls, budget).await {
        Err(ConnectError::Unreached(reason)) => {
            assert!(reason.text.starts_with("dial:"), "{}", reason.text)
        }
        other => panic!("want unreached, got {other:?}"),
    }
    assert!(!live.inbox.take_connected());
}
