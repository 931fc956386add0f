//! The last few backend state transitions, kept for people (the admin page): a small bounded
//! ring written by the table's single writer and read whole by the admin server.
//!
//! Owns the ring and its record type. Does not own deciding what a transition means
//! (`transitions`) or logging it (`health`). The accept path never touches it.

use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::verdict::State;

/// How many transitions are kept: enough to show the last incident on one screen.
pub const KEPT: usize = 20;

/// One backend's change of state, as the table published it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Wall-clock time the snapshot holding it was published.
    pub at: SystemTime,
    /// The backend's id (its configured address).
    pub backend: String,
    /// The state before (`unknown` for a backend just added).
    pub from: State,
    /// The state after.
    pub to: State,
    /// The latest check's failure reason; `None` after a pass.
    pub reason: Option<String>,
}

/// The ring: newest last, at most [`KEPT`]. Single writer (the table's), lock-free readers.
#[derive(Debug, Default)]
pub struct Recent {
    ring: ArcSwap<Vec<Transition>>,
}

impl Recent {
    /// The kept transitions, oldest first.
    pub fn load(&self) -> Arc<Vec<Transition>> {
        self.ring.load_full()
    }

    /// Appends `new` (oldest first), dropping the oldest beyond [`KEPT`]. Only the table's
    /// writer calls this, so a load-modify-store cannot lose an entry.
    pub(crate) fn push(&self, new: impl IntoIterator<Item = Transition>) {
        let mut ring = (*self.ring.load_full()).clone();
        let before = ring.len();
        ring.extend(new);
        if ring.len() == before {
            return;
        }
        let excess = ring.len().saturating_sub(KEPT);
        ring.drain(..excess);
        self.ring.store(Arc::new(ring));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: usize) -> Transition {
        Transition {
            at: SystemTime::UNIX_EPOCH,
            backend: format!("b{n}"),
            from: State::Ready,
            to: State::Unready,
            reason: None,
        }
    }

    #[test]
    fn keeps_at_most_the_newest_transitions_oldest_first() {
        let r = Recent::default();
        assert!(r.load().is_empty());
        r.push((0..5).map(t));
        assert_eq!(r.load().len(), 5);
        r.push((5..KEPT + 3).map(t));
        let kept = r.load();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].backend, "b3");
        assert_eq!(kept[KEPT - 1].backend, format!("b{}", KEPT + 2));
    }
}
