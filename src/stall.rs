//! Why a backend leg's writes are stuck, told from its TCP state: the backend stopped reading (its
//! receive window is zero; the kernel sends window probes) or the path stopped acknowledging (the
//! kernel retransmits). Both end the same way once `dead_path_timeout` passes (Linux aborts a
//! zero-window connection after `TCP_USER_TIMEOUT` too, since 5.x), with `ETIMEDOUT`; only the
//! second is a dead path, a fault of the backend's health.
//!
//! Owns the classification, a pure function of the sampled numbers ([`classify`]). Does not own
//! reading them (`diag`: one `sock_diag` query) nor when they are read (the relay, while a write
//! to the backend is stuck).

mod diag;

use std::net::SocketAddr;

/// What one `sock_diag` answer says of a connection, of the fields the classification reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// The connection's pending timer is the zero-window probe timer (`idiag_timer` 4).
    pub probe_timer: bool,
    /// `tcpi_retransmits`: retransmissions by timeout of the oldest unacknowledged segment.
    pub retransmits: u8,
    /// `tcpi_probes`: zero-window (or keepalive) probes sent without an answer.
    pub probes: u8,
    /// `tcpi_snd_wnd`: the peer's last advertised receive window, in bytes.
    pub snd_wnd: u32,
}

/// Why writes to a connection are stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// The peer advertises a zero window and nothing of ours waits for retransmission: it is
    /// alive and acknowledging, and does not read.
    StoppedReading,
    /// Data of ours is being retransmitted: the path (or the peer) stopped acknowledging.
    Unacknowledged,
    /// Neither: the window is open and nothing is retransmitted (a slow reader, a full buffer).
    Moving,
}

/// Tells a stuck connection's case from its sample. A retransmission says data went
/// unacknowledged, whatever the window: a dead path wins. Else a zero window (or the probe timer
/// running) says the peer stopped reading.
pub fn classify(s: &Sample) -> Stall {
    if s.retransmits > 0 {
        Stall::Unacknowledged
    } else if s.snd_wnd == 0 || s.probe_timer {
        Stall::StoppedReading
    } else {
        Stall::Moving
    }
}

/// Samples the TCP connection `local` → `peer` of this process's network namespace and
/// classifies it; `None` (and a `debug` event) if it cannot be read.
pub fn sample(local: SocketAddr, peer: SocketAddr) -> Option<Stall> {
    match diag::query(local, peer) {
        Ok(s) => Some(classify(&s)),
        Err(e) => {
            tracing::debug!(%local, %peer, error = %e, "cannot read the connection's TCP state");
            None
        }
    }
}

#[cfg(test)]
mod tests;
