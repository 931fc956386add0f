//! The admin port answers only requests that name it, on the app run from its config file: a `Host` of another
//! DNS name (a web page rebound to 127.0.0.1, reaching the admin port through an operator's
//! browser on an `ssh -L` tunnel) cannot read `/status`, `/config`, `/metrics` or the page, while
//! loopback names and addresses, `readyprism status` and kubelet's probes keep working.
//!
//! Blocking code on OS threads beside the app's own thread: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::support::Running;
use crate::support::*;

/// A GET of `path` with `Host: host` on a fresh admin connection: status code and body.
fn get_naming(admin: SocketAddr, path: &str, host: &str) -> (u16, String) {
    let mut s = TcpStream::connect(admin).expect("connect");
    s.set_read_timeout(Some(patience())).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("no whole answer to {path} for {host} in time: {e}"));
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (code, body)
}

#[test]
fn the_admin_port_answers_only_requests_naming_it() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "host.yaml", "");
    let p = Running::start(&file);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    let port = p.admin.port();
    for path in ["/status", "/config", "/metrics", "/"] {
        for host in ["evil.example".to_string(), format!("evil.example:{port}")] {
            let (code, body) = get_naming(p.admin, path, &host);
            assert_eq!(code, 403, "{path} for Host {host}: {body}");
            assert!(
                body.contains("\"evil.example\"") && body.contains("DNS name"),
                "the refusal says why: {body}"
            );
        }
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            // A tunnel's port: `ssh -L 8080:127.0.0.1:7446`.
            "localhost:8080".to_string(),
        ] {
            let (code, body) = get_naming(p.admin, path, &host);
            assert_eq!(code, 200, "{path} for Host {host}: {body}");
        }
    }
    // Liveness and readiness say one bit, to probes with whatever Host they were given.
    for path in ["/livez", "/readyz"] {
        assert_eq!(get_naming(p.admin, path, "evil.example").0, 200, "{path}");
    }
    for admin in [p.admin.to_string(), format!("localhost:{port}")] {
        let o = readyprism(&["status", "--admin", &admin]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "status --admin {admin}: {}",
            stderr(&o)
        );
    }
}
