//! The admin server's connection cap: at most [`super::MAX_CONNECTIONS`] slots, and a newcomer at
//! the cap sheds the connection that has gone longest without starting a request, so connections
//! that stall before (or between) request heads cannot lock kubelet's `/livez` and `/readyz` out.
//!
//! Owns who holds a slot and who is shed. Does not own serving a connection (`super`).
//!
//! The accept loop alone owns [`Slots`] (no lock); a connection task shares only its stamp (an
//! atomic) and the channel that sheds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;

/// The stamp of a connection that has ended: its slot is free.
const ENDED: u64 = u64::MAX;

/// The slots, owned by the accept loop. At most `cap` entries: memory is bounded whatever the
/// peers do.
#[derive(Debug)]
pub(crate) struct Slots {
    /// Most connections held at once.
    cap: usize,
    /// Source of stamps, ticked at every accept and every request head: a smaller stamp means
    /// longer without starting a request. Shared with every [`Activity`].
    clock: Arc<AtomicU64>,
    /// One entry per connection holding a slot (ended ones are swept at the next admission).
    held: Vec<Held>,
}

#[derive(Debug)]
struct Held {
    stamp: Arc<AtomicU64>,
    /// Dropping it sheds the connection (its [`Slot::shed`] resolves).
    _shed: oneshot::Sender<()>,
}

/// A connection's slot, held by its task for as long as it runs; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct Slot {
    activity: Activity,
    shed: oneshot::Receiver<()>,
}

/// What the request handler stamps when a request head arrives.
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    stamp: Arc<AtomicU64>,
    clock: Arc<AtomicU64>,
}

impl Slots {
    /// No slot held yet; at most `cap` (at least 1) at once.
    pub fn new(cap: usize) -> Slots {
        Slots {
            cap: cap.max(1),
            clock: Arc::new(AtomicU64::new(0)),
            held: Vec::with_capacity(cap.max(1)),
        }
    }

    /// A slot for a connection just accepted. At the cap, first sheds the connection that has
    /// gone longest without starting a request (one that never sent a whole head, or an idle
    /// keep-alive), and says so: the newcomer is never the one turned away.
    pub fn admit(&mut self) -> (Slot, Option<Shed>) {
        self.held
            .retain(|h| h.stamp.load(Ordering::Relaxed) != ENDED);
        let shed = if self.held.len() >= self.cap {
            let oldest = (0..self.held.len())
                .min_by_key(|&i| self.held[i].stamp.load(Ordering::Relaxed))
                .expect("the cap is at least 1, so a full table has an entry");
            drop(self.held.swap_remove(oldest)); // dropping its sender sheds it
            Some(Shed)
        } else {
            None
        };
        let stamp = Arc::new(AtomicU64::new(self.clock.fetch_add(1, Ordering::Relaxed)));
        let (tx, rx) = oneshot::channel();
        self.held.push(Held {
            stamp: stamp.clone(),
            _shed: tx,
        });
        let activity = Activity {
            stamp,
            clock: self.clock.clone(),
        };
        (Slot { activity, shed: rx }, shed)
    }

    /// Connections holding a slot, as of the latest admission (ended ones may still count).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.len()
    }
}

/// An older connection was shed to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shed;

impl Slot {
    /// What the request handler stamps.
    pub fn activity(&self) -> Activity {
        self.activity.clone()
    }

    /// Resolves once a newcomer has shed this connection.
    pub async fn shed(&mut self) {
        let _ = (&mut self.shed).await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.activity.stamp.store(ENDED, Ordering::Relaxed);
    }
}

impl Activity {
    /// A request head arrived: the connection moves to the back of the shedding order.
    pub fn request_started(&self) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        // Never revive an ended slot (the handler cannot run after its connection ended, but the
        // order of the two stores is not worth relying on).
        let _ = self
            .stamp
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                (s != ENDED).then_some(now)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_shed(slot: &mut Slot) -> bool {
        matches!(
            slot.shed.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        )
    }

    #[test]
    fn below_the_cap_nobody_is_shed() {
        let mut slots = Slots::new(3);
        let mut held: Vec<Slot> = (0..3)
            .map(|_| slots.admit())
            .map(|(s, shed)| {
                assert_eq!(shed, None);
                s
            })
            .collect();
        assert!(held.iter_mut().all(|s| !is_shed(s)));
        assert_eq!(slots.held(), 3);
    }

    #[test]
    fn at_the_cap_the_connection_longest_without_a_request_is_shed_not_the_newcomer() {
        let mut slots = Slots::new(3);
        let (mut first, _) = slots.admit();
        let (mut second, _) = slots.admit();
        let (mut third, _) = slots.admit();
        // The first sends a request: now the second has waited longest.
        first.activity().request_started();
        let (mut newcomer, shed) = slots.admit();
        assert_eq!(shed, Some(Shed));
        assert!(is_shed(&mut second));
        assert!(!is_shed(&mut first) && !is_shed(&mut third) && !is_shed(&mut newcomer));
        assert_eq!(slots.held(), 3, "the cap holds");
        // Next in line: the third (never sent anything), then the first.
        let (_, shed) = slots.admit();
        assert_eq!(shed, Some(Shed));
        assert!(is_shed(&mut third));
        assert!(!is_shed(&mut first) && !is_shed(&mut newcomer));
    }

    #[test]
    fn an_ended_connection_frees_its_slot_without_shedding_anyone() {
        let mut slots = Slots::new(2);
        let (first, _) = slots.admit();
        let (mut second, _) = slots.admit();
        let late = first.activity();
        drop(first);
        late.request_started(); // a stamp after the end does not revive the slot
        let (mut third, shed) = slots.admit();
        assert_eq!(shed, None);
        assert!(!is_shed(&mut second) && !is_shed(&mut third));
        assert_eq!(slots.held(), 2);
    }
}
