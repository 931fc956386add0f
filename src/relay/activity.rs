//! Which way a connection's latest relayed bytes went: set by the relay as it writes them (one
//! relaxed store per write, beside the byte counts), read by the proxy when a hand-off's turn
//! comes, to close the connection between a request and its answer's end, not inside.
//!
//! Does not own the byte counts ([`super::Moved`]) nor what the proxy decides from it
//! (`proxy::quiet`).

use std::sync::atomic::{AtomicU8, Ordering};

/// One way through a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Way {
    /// Client → backend: a request (or a part of one) went out; its answer is outstanding.
    ToBackend = 1,
    /// Backend → client: an answer (or a part of one, or a watch event) came back.
    ToClient = 2,
}

/// The way of a connection's latest bytes written on, kept in one byte of the connection's
/// tally (which an idle connection holds: its three words had room for it).
#[derive(Debug, Default)]
pub struct Latest(AtomicU8);

impl Latest {
    /// Bytes were written on `way` (by the relay; tests of its readers too). Relaxed: the proxy
    /// reads it from the same task, between polls of the relay.
    pub(crate) fn wrote(&self, way: Way) {
        self.0.store(way as u8, Ordering::Relaxed);
    }

    /// The way the latest bytes went; `None` before any was written.
    pub fn way(&self) -> Option<Way> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(Way::ToBackend),
            2 => Some(Way::ToClient),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_write_names_the_way() {
        let latest = Latest::default();
        assert_eq!(latest.way(), None, "nothing written yet");
        for way in [Way::ToBackend, Way::ToClient, Way::ToBackend] {
            latest.wrote(way);
            assert_eq!(latest.way(), Some(way));
        }
    }

    #[test]
    fn the_way_takes_no_room_of_its_own_in_the_tally() {
        // Two counts and the way: three words, as the two counts and the spliced count took
        // before (which only the backend's totals keep now).
        assert_eq!(std::mem::size_of::<super::super::Moved>(), 24);
    }
}
