//! One `sock_diag` query (`NETLINK_SOCK_DIAG`, `SOCK_DIAG_BY_FAMILY` for exactly one TCP socket,
//! by its two addresses) answered with its `tcp_info`: the kernel's own view of a connection, read
//! without `getsockopt(TCP_INFO)` (which no safe wrapper this crate uses offers; the crate forbids
//! `unsafe`). The rust-netlink crates build and parse the messages; `ss` asks the same way.
//!
//! A query is a socket, a bind, a send and one non-blocking receive (the kernel answers an exact
//! lookup within the send), then the close: tens of microseconds, made at most once a second per
//! stuck connection. Needs no privilege; the `tcp_info` must hold `tcpi_snd_wnd` (Linux 5.4 on).
//! Owns the query; does not own what its numbers mean (`super::classify`).

use std::io;
use std::net::SocketAddr;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{
    nlas::Nla, ExtensionFlags, InetRequest, SocketId, StateFlags, Timer,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr as NetlinkAddr};

use super::Sample;

/// Room for one answer: its header (72 B) and the `tcp_info` attribute (about 250 B on 6.x).
const ANSWER: usize = 4096;

/// Why a connection's TCP state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    /// The netlink socket could not be made, bound, or sent or received on.
    #[error("sock_diag socket: {0}")]
    Socket(io::Error),
    /// The kernel refused the query (`ENOENT`: no such connection, it is gone).
    #[error("sock_diag: {0}")]
    Refused(io::Error),
    /// The answer could not be parsed, or lacked the `tcp_info`.
    #[error("sock_diag answer: {0}")]
    Answer(String),
}

/// The `tcp_info` of the TCP connection from `local` to `peer`.
pub fn query(local: SocketAddr, peer: SocketAddr) -> Result<Sample, DiagError> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).map_err(DiagError::Socket)?;
    socket.bind_auto().map_err(DiagError::Socket)?;
    socket
        .connect(&NetlinkAddr::new(0, 0))
        .map_err(DiagError::Socket)?;
    socket.set_non_blocking(true).map_err(DiagError::Socket)?;
    let request = request(local, peer);
    socket.send(&request, 0).map_err(DiagError::Socket)?;
    let mut answer = vec![0u8; ANSWER];
    let n = socket
        .recv(&mut &mut answer[..], 0)
        .map_err(DiagError::Socket)?;
    parse(&answer[..n.min(answer.len())])
}

/// The request for exactly the socket `local` → `peer` (no dump), asking for its `tcp_info`.
fn request(local: SocketAddr, peer: SocketAddr) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let family = if local.is_ipv4() { AF_INET } else { AF_INET6 };
    let socket_id = SocketId {
        source_port: local.port(),
        destination_port: peer.port(),
        source_address: local.ip(),
        destination_address: peer.ip(),
        interface_id: 0,
        cookie: [0xff; 8], // INET_DIAG_NOCOOKIE: found by its addresses alone
    };
    let mut message = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::INFO,
            states: StateFlags::all(),
            socket_id,
        })
        .into(),
    );
    message.finalize();
    let mut bytes = vec![0u8; message.buffer_len()];
    message.serialize(&mut bytes);
    bytes
}

/// The sample in one answer.
fn parse(bytes: &[u8]) -> Result<Sample, DiagError> {
    let message = NetlinkMessage::<SockDiagMessage>::deserialize(bytes)
        .map_err(|e| DiagError::Answer(e.to_string()))?;
    let response = match message.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => r,
        NetlinkPayload::Error(e) => return Err(DiagError::Refused(e.to_io())),
        other => {
            return Err(DiagError::Answer(format!(
                "unexpected message type {}",
                other.message_type()
            )))
        }
    };
    let probe_timer = matches!(response.header.timer, Some(Timer::Probe(_)));
    response
        .nlas
        .iter()
        .find_map(|nla| match nla {
            Nla::TcpInfo(info) => Some(Sample {
                probe_timer,
                retransmits: info.retransmits,
                probes: info.probes,
                snd_wnd: info.snd_wnd,
            }),
            _ => None,
        })
        .ok_or_else(|| DiagError::Answer("no tcp_info".to_string()))
}
