//! Fixed schedules: a chaos run of a given event list rather than a seed's draw (the shrunk
//! schedule of a violation found, or a schedule that shows an invariant firing).

use crate::partition::netlab::Host::{DcA, DcB, Witness};

use super::schedule::{Event, Fault, Kind};

/// dc-b's member without quorum for 40 s, then stopped for 12 s (overlapping its last 4 s):
/// dc-a and the witness keep quorum throughout, so a balancer that keeps routing to dc-b fails
/// every lease renewal for about 48 s.
pub fn long_local_outage() -> Vec<Event> {
    vec![
        Event {
            at: 2.0,
            len: 40.0,
            kind: Kind::Fault(Fault::NoQuorum(DcB)),
        },
        Event {
            at: 38.0,
            len: 12.0,
            kind: Kind::Fault(Fault::EtcdStopped(DcB)),
        },
    ]
}

/// Seed 18's violation of invariant 3 (300 s), shrunk to the faults around it, shifted 140 s
/// earlier: the stream driven to dc-a (dc-b's member stopped, the witness's SYNs dropped),
/// dc-b back, then dc-a's member stopped while dc-b's failback is due.
pub fn seed_18_unready_during_failback() -> Vec<Event> {
    let fault = |at: f64, len: f64, f: Fault| Event {
        at,
        len,
        kind: Kind::Fault(f),
    };
    vec![
        fault(3.1, 22.4, Fault::EtcdStopped(DcB)),
        fault(5.3, 50.1, Fault::SynBlackHole(Witness)),
        fault(29.6, 23.9, Fault::EtcdStopped(DcA)),
    ]
}

/// Not yet reproduced (one shrunk run clean): run by hand until it is, then in CI.
#[test]
#[ignore = "seed 18's violation, not yet reproduced in its shrunk form"]
fn partition_chaos_unready_during_failback_keeps_the_invariants() {
    let events = seed_18_unready_during_failback();
    let Some(violations) = super::run::run("chaos-unready-during-failback", 18, &events) else {
        return;
    };
    assert!(
        violations.is_empty(),
        "violations: {violations:?} (see above)"
    );
}

#[test]
fn partition_chaos_long_local_outage_keeps_the_invariants() {
    let events = long_local_outage();
    let Some(violations) = super::run::run("chaos-long-local-outage", 0, &events) else {
        return;
    };
    assert!(
        violations.is_empty(),
        "violations: {violations:?} (see above)"
    );
}
