//! The classification on samples as Linux reports the two cases, and the query on real sockets.

use super::*;

#[test]
fn a_zero_window_without_retransmissions_is_a_stopped_reader() {
    let zero = Sample {
        probe_timer: true,
        probes: 3,
        ..Sample::default()
    };
    assert_eq!(classify(&zero), Stall::StoppedReading);
    // The probes answered (probes 0 again) or the timer not yet armed: the window says it.
    let answered = Sample {
        probe_timer: false,
        ..zero
    };
    assert_eq!(classify(&answered), Stall::StoppedReading);
}

#[test]
fn retransmissions_are_a_dead_path_whatever_the_window() {
    let dead = Sample {
        retransmits: 4,
        snd_wnd: 65_535,
        ..Sample::default()
    };
    assert_eq!(classify(&dead), Stall::Unacknowledged);
    let closed_then_dead = Sample {
        snd_wnd: 0,
        probe_timer: true,
        ..dead
    };
    assert_eq!(classify(&closed_then_dead), Stall::Unacknowledged);
}

#[test]
fn an_open_window_without_retransmissions_is_moving() {
    let slow = Sample {
        snd_wnd: 1024,
        ..Sample::default()
    };
    assert_eq!(classify(&slow), Stall::Moving);
}

#[tokio::test]
async fn a_connected_socket_can_be_sampled_by_its_addresses() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let s = tokio::net::TcpStream::connect(l.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (_accepted, _) = l.accept().await.expect("accept");
    let (local, peer) = (s.local_addr().expect("local"), s.peer_addr().expect("peer"));
    let sample = diag::query(local, peer).expect("sock_diag answers for an open connection");
    assert_eq!(sample.retransmits, 0);
    assert!(
        sample.snd_wnd > 0,
        "a fresh connection's window is open: {sample:?}"
    );
    assert_eq!(classify(&sample), Stall::Moving);
    let unknown = SocketAddr::new(peer.ip(), 1);
    assert!(
        diag::query(local, unknown).is_err(),
        "no such connection: an error, not a sample"
    );
}
