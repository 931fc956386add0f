//! Which discovered backends are members: good answers add addresses at once and remove them
//! only after [`MISSES_TO_REMOVE`] consecutive good answers without them; static seeds are never
//! members here (never added twice, never removed); never more than [`MAX_ADDRESSES`] members,
//! also across answers that each list fewer (those an answer listed are kept first).
//!
//! Pure: no clock, no I/O. A bad answer is never shown to it, so it changes nothing. Does not
//! own reading answers (`answer`) nor applying the list (`App::set_discovered`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::answer::MAX_ADDRESSES;
use crate::backend::BackendSource;

/// Good answers in a row that must miss a discovered backend before it is removed: one answer
/// written while a control-plane node restarts (the apiserver's endpoint reconciler drops it for
/// its lease time) must not cut its connections.
pub const MISSES_TO_REMOVE: u32 = 3;

/// One discovered backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// What to dial.
    pub addr: SocketAddr,
    /// [`BackendSource::Discovered`] once an answer listed it; [`BackendSource::Cache`] until then.
    pub source: BackendSource,
}

/// The discovered backends and how many good answers in a row each has been missing from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    members: BTreeMap<SocketAddr, (BackendSource, u32)>,
}

impl Membership {
    /// Starts from `known` (the cache read at start-up, or the list a restarted poll had): its
    /// first [`MAX_ADDRESSES`] distinct addresses.
    pub fn new(known: &[Member]) -> Membership {
        let mut members = BTreeMap::new();
        for m in known {
            if members.len() == MAX_ADDRESSES {
                break;
            }
            members.entry(m.addr).or_insert((m.source, 0));
        }
        Membership { members }
    }

    /// Folds in a good answer listing `listed`; `seeds` are the static backends' addresses, which
    /// are never members. Returns whether the member list (or a member's source) changed.
    pub fn observe(&mut self, listed: &[SocketAddr], seeds: &[SocketAddr]) -> bool {
        let before = self.members();
        self.members.retain(|a, _| !seeds.contains(a));
        for (addr, (source, misses)) in self.members.iter_mut() {
            if listed.contains(addr) {
                (*source, *misses) = (BackendSource::Discovered, 0);
            } else {
                *misses += 1;
            }
        }
        self.members
            .retain(|_, (_, misses)| *misses < MISSES_TO_REMOVE);
        for addr in listed.iter().filter(|a| !seeds.contains(a)) {
            self.members
                .entry(*addr)
                .or_insert((BackendSource::Discovered, 0));
        }
        self.cap();
        self.members() != before
    }

    /// Folds in an answer from a backend that is not ready (asked while none is: discovery fails
    /// open as connections do). It adds and keeps what it lists, and never counts toward a
    /// removal: an apiserver without quorum may answer from a stale cache. Returns whether the
    /// member list (or a member's source) changed.
    pub fn observe_unready(&mut self, listed: &[SocketAddr], seeds: &[SocketAddr]) -> bool {
        let before = self.members();
        self.members.retain(|a, _| !seeds.contains(a));
        for addr in listed.iter().filter(|a| !seeds.contains(a)) {
            let entry = self
                .members
                .entry(*addr)
                .or_insert((BackendSource::Discovered, 0));
            *entry = (BackendSource::Discovered, 0);
        }
        self.cap();
        self.members() != before
    }

    /// Over [`MAX_ADDRESSES`] (answers that alternate between lists): the members missing from
    /// the most answers go first, so what this answer listed (at most the cap) stays.
    fn cap(&mut self) {
        let over = self.members.len().saturating_sub(MAX_ADDRESSES);
        if over == 0 {
            return;
        }
        let mut missing: Vec<(u32, SocketAddr)> = self
            .members
            .iter()
            .filter(|(_, (_, misses))| *misses > 0)
            .map(|(addr, (_, misses))| (*misses, *addr))
            .collect();
        missing.sort_by(|a, b| b.cmp(a));
        for (_, addr) in missing.into_iter().take(over) {
            self.members.remove(&addr);
        }
    }

    /// The members in address order.
    pub fn members(&self) -> Vec<Member> {
        self.members
            .iter()
            .map(|(addr, (source, _))| Member {
                addr: *addr,
                source: *source,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("literal")
    }

    fn addrs(m: &Membership) -> Vec<SocketAddr> {
        m.members().iter().map(|m| m.addr).collect()
    }

    #[test]
    fn an_answer_from_an_unready_backend_adds_and_keeps_but_never_removes() {
        let (a, b, c) = (
            sa("10.0.1.10:6443"),
            sa("10.0.2.10:6443"),
            sa("10.0.3.10:6443"),
        );
        let mut m = Membership::default();
        assert!(m.observe(&[a, b], &[]));
        for _ in 0..2 * MISSES_TO_REMOVE {
            m.observe_unready(&[c], &[]);
        }
        assert_eq!(addrs(&m), vec![a, b, c], "added, none removed");
        // It resets the misses of what it lists; a good answer without them counts from there.
        m.observe(&[a, c], &[]);
        m.observe_unready(&[b], &[]);
        m.observe(&[a, c], &[]);
        m.observe(&[a, c], &[]);
        assert_eq!(addrs(&m), vec![a, b, c]);
        m.observe(&[a, c], &[]);
        assert_eq!(
            addrs(&m),
            vec![a, c],
            "three good answers in a row without it"
        );
        // Seeds are never members, from either kind of answer.
        assert!(m.observe_unready(&[a], &[a]));
        assert_eq!(addrs(&m), vec![c]);
    }

    #[test]
    fn a_listed_address_joins_at_once_but_leaves_only_after_three_good_answers_without_it() {
        let (a, b) = (sa("10.0.1.10:6443"), sa("10.0.2.10:6443"));
        let mut m = Membership::default();
        assert!(m.observe(&[a, b], &[]));
        assert_eq!(addrs(&m), [a, b]);
        assert!(!m.observe(&[a, b], &[]), "the same answer changes nothing");
        assert!(!m.observe(&[a], &[]), "one miss");
        assert!(!m.observe(&[a], &[]), "two misses");
        assert!(m.observe(&[a], &[]), "the third miss removes it");
        assert_eq!(addrs(&m), [a]);
    }

    #[test]
    fn an_answer_listing_it_again_resets_the_count() {
        let (a, b) = (sa("10.0.1.10:6443"), sa("10.0.2.10:6443"));
        let mut m = Membership::new(&[Member {
            addr: b,
            source: BackendSource::Discovered,
        }]);
        m.observe(&[a], &[]);
        m.observe(&[a], &[]);
        m.observe(&[a, b], &[]);
        m.observe(&[a], &[]);
        m.observe(&[a], &[]);
        assert_eq!(addrs(&m), [a, b], "two misses since it was last listed");
    }

    #[test]
    fn seeds_are_never_members() {
        let (seed, b) = (sa("10.0.1.10:6443"), sa("10.0.2.10:6443"));
        let mut m = Membership::default();
        m.observe(&[seed, b], &[seed]);
        assert_eq!(addrs(&m), [b], "the static backend is not added twice");
        // A discovered backend that a reload made static leaves the members at once.
        assert!(m.observe(&[seed, b], &[seed, b]));
        assert!(addrs(&m).is_empty());
    }

    #[test]
    fn a_cached_member_becomes_discovered_when_listed() {
        let b = sa("10.0.2.10:6443");
        let mut m = Membership::new(&[Member {
            addr: b,
            source: BackendSource::Cache,
        }]);
        assert!(m.observe(&[b], &[]), "the source changed");
        assert_eq!(m.members()[0].source, BackendSource::Discovered);
    }

    #[test]
    fn alternating_answers_never_hold_more_than_the_cap() {
        let half = |base: u8| -> Vec<SocketAddr> {
            (0..63u16)
                .map(|p| SocketAddr::from(([10, 0, base, 1], 6000 + p)))
                .collect()
        };
        let (one, two) = (half(1), half(2));
        let mut m = Membership::default();
        m.observe(&one, &[]);
        m.observe(&two, &[]);
        assert_eq!(
            m.members().len(),
            MAX_ADDRESSES,
            "63 listed + 1 kept, not 126"
        );
        assert!(
            two.iter().all(|a| addrs(&m).contains(a)),
            "what the answer listed stays"
        );
        m.observe(&one, &[]);
        assert_eq!(m.members().len(), MAX_ADDRESSES);
        assert!(one.iter().all(|a| addrs(&m).contains(a)));
    }

    #[test]
    fn a_cache_with_duplicates_or_too_many_entries_starts_as_a_capped_set() {
        let b = sa("10.0.2.10:6443");
        let cached = |addr| Member {
            addr,
            source: BackendSource::Cache,
        };
        let m = Membership::new(&[cached(b), cached(b)]);
        assert_eq!(addrs(&m), [b], "one backend per address");
        let many: Vec<Member> = (0..5000u16)
            .map(|p| cached(SocketAddr::from(([10, 0, 0, 1], 1000 + p))))
            .collect();
        assert_eq!(Membership::new(&many).members().len(), MAX_ADDRESSES);
    }

    proptest! {
        /// Whatever the answers, a member listed in one of the last three good answers stays,
        /// and a member is always something some answer (or the start) listed.
        #[test]
        fn members_are_exactly_those_listed_in_the_last_three_answers(
            answers in proptest::collection::vec(proptest::collection::vec(0u16..6, 1..4), 1..12)
        ) {
            let to_addr = |p: &u16| SocketAddr::from(([10, 0, 0, 1], 6000 + p));
            let mut m = Membership::default();
            for (i, answer) in answers.iter().enumerate() {
                let listed: Vec<SocketAddr> = answer.iter().map(to_addr).collect();
                m.observe(&listed, &[]);
                let recent = &answers[i.saturating_sub(MISSES_TO_REMOVE as usize - 1)..=i];
                let mut want: Vec<SocketAddr> = recent.iter().flatten().map(to_addr).collect();
                want.sort();
                want.dedup();
                prop_assert_eq!(addrs(&m), want);
            }
        }
    }
}
