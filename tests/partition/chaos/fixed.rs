//! Fixed schedules: a chaos run of a given event list rather than a seed's draw (the shrunk
//! schedule of a violation found, or a schedule that shows an invariant firing).

use crate::partition::netlab::Host::DcB;

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
