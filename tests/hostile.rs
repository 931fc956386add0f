//! Hostile peers and faults: the balancer keeps serving, says why, and holds its resources.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use readyprism::health::state::State::Ready;

use crate::support::*;

/// An HTTP exchange on a fresh admin connection; `None` if the server closed it unanswered.
async fn admin_answer(admin: std::net::SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect(admin).await.ok()?;
    s.write_all(b"GET /livez HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .ok()?;
    let mut out = String::new();
    tokio::time::timeout(patience(), s.read_to_string(&mut out))
        .await
        .ok()?
        .ok()?;
    (!out.is_empty()).then_some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_server_caps_connections_and_cuts_clients_that_never_finish_a_request() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    let app = lab
        .start(&lab.yaml("dc-a", &[(addr(&a), "dc-a")], ""))
        .await;
    wait_states(&app, &[Ready]).await;
    let admin = app.admin_addr();
    // 100 half-sent requests (a slowloris): the head never ends.
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut s = TcpStream::connect(admin).await.expect("connect");
        s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        slow.push(s);
    }
    // Every slot is held: a complete request is closed unanswered, not queued forever.
    eventually("the cap turns new admin connections away", || async {
        admin_answer(admin).await.is_none().then_some(())
    })
    .await;
    // The relay is untouched by the admin server's trouble.
    assert_eq!(landed(app.listen_addrs()[0]).await, "a");
    // The header-read timeout closes every half-sent request...
    for s in &mut slow {
        let mut buf = Vec::new();
        let closed = tokio::time::timeout(patience(), s.read_to_end(&mut buf)).await;
        assert!(
            closed.is_ok(),
            "a half-sent request was held past the patience"
        );
    }
    // ... and the admin server answers again.
    let answer = eventually("admin answers again", || admin_answer(admin)).await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    app.shutdown().await;
}
