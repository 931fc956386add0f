//! The six partition scenarios of the field report, one test each, on the lab's namespaces with the field
//! report's delays: the real balancer on the node (zone dc-b, default health settings), one
//! simulated apiserver per site, a kubelet-like client holding a stream and making a request
//! every 200 ms, and kubectl. Each prints its figures and writes its record to
//! `target/partition-lab/<test>.json` (drawn by `examples/partition_timeline.rs`, tabulated by
//! `tests/lab/scenario_table.py`); the summary is in `docs/partition-lab.md`, the runs and
//! KubePrism's expected behaviour in `docs/results/scenarios.md`.

use super::cast::{Readyz, CONNECT_TIMEOUT, FAILBACK_AFTER, FAILBACK_SPREAD, FALL};
use super::etcd::PEER_PORT;
use super::netlab::Host::{self, DcA, DcB, Node, Witness};
use super::runner::{run, Heal, Outcome, Spec, States};
use super::timeline::Phase;

use std::time::Duration;

/// The target: every request and the stream on a good backend within 7 s of the fault.
const TARGET: f64 = 7.0;
/// Seconds a loaded 2-core machine may add to a bound (process wake-ups, the Python delay
/// helpers and client, TLS handshakes in a debug build).
pub const SLACK: f64 = 1.5;
/// The balancer's defaults (docs/config.md): probe every 5 s ±10 %, connections of an unready backend
/// closed spread over 0.5 s.
const INTERVAL_MAX: f64 = 5.5;
pub const EVICT_SPREAD: f64 = 0.5;
/// kube-apiserver's deadline for one etcd check's linearizable read.
const READ_BUDGET: f64 = 2.0;
/// The probe timeout: a probe of a silent apiserver takes this long.
pub const PROBE_TIMEOUT: f64 = 3.0;
/// What one failing probe of an apiserver whose member lost quorum costs: its `/readyz` runs the
/// `etcd` and `etcd-readiness` checks one after another, each waiting out [`READ_BUDGET`]
/// (about 4 s, as a real kube-apiserver), so the probe ends at its own timeout first.
const NO_QUORUM_PROBE: f64 = if 2.0 * READ_BUDGET < PROBE_TIMEOUT {
    2.0 * READ_BUDGET
} else {
    PROBE_TIMEOUT
};

/// The design's worst case when the fault is seen only by probes that each take `check` seconds
/// to fail: the fault lands just after a probe started (the next is up to 5.5 s away), `fall`
/// failing probes back to back (the fast re-probe is due before the failing one ends), the
/// eviction spread, then `redials` seconds of dial timeouts on the way to a good backend. Where
/// this exceeds the 7 s target, the target cannot hold for every phase of the probe schedule.
pub fn probe_bound(check: f64, redials: f64) -> f64 {
    INTERVAL_MAX + FALL as f64 * check + EVICT_SPREAD + redials + SLACK
}

/// Prints whether the 7 s target was met in this run (asserted where the design
/// guarantees it; see `docs/partition-lab.md`).
fn report_target(p: &Phase, name: &str) {
    let met = |v: Option<f64>| v.is_some_and(|v| v <= TARGET);
    super::netlab::lab_print(&format!(
        "{name}: 7 s target {} (requests {:?} s, stream {:?} s)",
        if met(p.all_good) && met(p.stream_good) {
            "met"
        } else {
            "MISSED"
        },
        p.all_good,
        p.stream_good
    ));
}

pub const DCB_UNREADY: States = &[(DcA, "ready"), (DcB, "unready"), (Witness, "ready")];
/// Every site's `/readyz` follows its own etcd member.
pub const ETCD: [(Host, Readyz); 3] = [
    (DcA, Readyz::Etcd),
    (DcB, Readyz::Etcd),
    (Witness, Readyz::Etcd),
];
/// dc-b's etcd is down (its apiserver answers unready throughout); the others pass.
pub const DCB_ETCD_DOWN: [(Host, Readyz); 3] = [
    (DcA, Readyz::Pass),
    (DcB, Readyz::EtcdDown),
    (Witness, Readyz::Pass),
];

fn within(p: &Phase, limit: f64, what: &str) {
    let ok = |v: Option<f64>| v.is_some_and(|v| v <= limit);
    assert!(
        ok(p.all_good) && ok(p.stream_good),
        "{what}: requests all on {:?} after {:?} s, stream after {:?} s; limit {limit} s",
        p.good,
        p.all_good,
        p.stream_good
    );
}

/// The goal: the node lease renewed at least every 15 s (kubelet renews every 10 s).
pub const LEASE_GOAL: f64 = 15.0;
/// The node grace period (40 s; 50 s from Kubernetes 1.32): a longer gap turns the node NotReady.
pub const NODE_GRACE: f64 = 40.0;

/// The longest gap between lease renewals in the phase stays under the node grace period
/// (asserted), and whether it met the 15 s failover goal (printed: not guaranteed in every phase of
/// the renewal and probe cycles — a fault just before a renewal adds up to one renewal period to
/// the time the design needs to move the lease's kept-alive connection).
pub fn lease_within(p: &Phase, what: &str) {
    super::netlab::lab_print(&format!(
        "{what}: {} phase: longest lease gap {:.2} s, {LEASE_GOAL} s goal {} ({} failed attempts)",
        p.name,
        p.lease_gap,
        if p.lease_gap <= LEASE_GOAL {
            "met"
        } else {
            "MISSED"
        },
        p.lease_failures
    ));
    assert!(
        p.lease_gap < NODE_GRACE,
        "{what}: {} phase: longest gap between lease renewals {:.2} s: the node would go NotReady \
         ({NODE_GRACE} s grace; {} failed attempts)",
        p.name,
        p.lease_gap,
        p.lease_failures
    );
}

fn no_errors(p: &Phase, what: &str) {
    assert_eq!(
        p.errors, 0,
        "{what}: client-visible errors: {:?}",
        p.error_samples
    );
}

/// The fault phase of a scenario in which a ready apiserver stays reachable: kubectl answers
/// before and during the fault, no client sees an error, and whether 7 s was met is printed.
fn served_throughout<'a>(o: &'a Outcome, name: &str) -> &'a Phase {
    let p = o.phase("fault");
    kubectl_ok(o, "before the fault");
    kubectl_ok(o, "during the fault");
    no_errors(p, name);
    report_target(p, name);
    lease_within(p, name);
    p
}

/// kubectl's `/readyz` through the balancer at `when` said `ok` (unless kubectl is not installed:
/// the run said it skips this).
fn kubectl_ok(o: &Outcome, when: &str) {
    if let Some(r) = o.kubectl(when) {
        assert!(
            r.as_deref() == Ok("ok"),
            "kubectl get --raw /readyz {when}: {r:?}"
        );
    }
}

#[test]
fn partition_1_no_quorum_local_apiserver_is_left_for_a_ready_one_and_the_stream_comes_home() {
    let spec = Spec {
        etcd: true,
        readyz: ETCD,
        good: &[DcA, Witness],
        settled: &[(DcB, "unready")],
        heal: Some(Heal {
            good: &[DcB],
            settled: &[(DcA, "ready"), (DcB, "ready"), (Witness, "ready")],
            longer: Duration::from_secs_f64(FAILBACK_AFTER + FAILBACK_SPREAD),
        }),
        ..Spec::new(
            "partition_1_no_quorum_local_apiserver_is_left_for_a_ready_one_and_the_stream_comes_home",
            "1. no-quorum local apiserver (real etcd): dc-b's etcd peer traffic cut; then heal",
        )
    };
    run(
        &spec,
        |lab| vec![lab.block_tcp_port(DcB, PEER_PORT)],
        |o| {
            let p = served_throughout(o, spec.name);
            within(p, probe_bound(NO_QUORUM_PROBE, 0.0), spec.name);
            // Healed: dc-b's etcd member catches up and its apiserver turns ready. New
            // connections go home at once (same zone first); the stream, relayed to another
            // zone during the fault, is closed once dc-b has been ready for `failback_after`,
            // within the failback spread, and its client re-dials home.
            let heal = o.phase("heal");
            kubectl_ok(o, "after healing");
            no_errors(heal, "healed");
            lease_within(heal, spec.name);
            let home = o
                .timeline
                .states
                .iter()
                .find(|c| c.t > heal.from && c.site == "dc-b" && c.to == "ready")
                .map(|c| c.t - heal.from)
                .expect("dc-b turns ready after healing");
            let stream = heal.stream_good.expect("the stream comes back to dc-b");
            super::netlab::lab_print(&format!(
                "{}: dc-b ready {home:.1} s after healing, the stream back on it {:.1} s after that \
                 (failback_after {FAILBACK_AFTER} s + spread {FAILBACK_SPREAD} s)",
                spec.name,
                stream - home
            ));
            assert!(
                stream - home <= FAILBACK_AFTER + FAILBACK_SPREAD + SLACK,
                "the stream came home {:.1} s after dc-b turned ready",
                stream - home
            );
            // Latency alone never moves it: not before failback_after.
            assert!(
                stream - home >= FAILBACK_AFTER,
                "the stream came home {:.1} s after dc-b turned ready, before failback_after",
                stream - home
            );
            let away: Vec<_> = o
                .timeline
                .requests
                .iter()
                .filter(|r| r.start > heal.from + home + 0.1 && r.end <= heal.to)
                .filter(|r| r.site.as_deref() != Some("dc-b"))
                .collect();
            assert!(away.is_empty(), "after dc-b is ready again: {away:?}");
        },
    );
}

#[test]
fn partition_2_cut_between_the_datacenters_ends_on_the_witness() {
    let spec = Spec {
        etcd: true,
        readyz: ETCD,
        good: &[Witness],
        settled: &[(DcA, "unready"), (DcB, "unready"), (Witness, "ready")],
        ..Spec::new(
            "partition_2_cut_between_the_datacenters_ends_on_the_witness",
            "2. dc-a <-> dc-b cut both ways (real etcd, leader in dc-a); node cannot reach dc-a",
        )
    };
    run(
        &spec,
        |lab| vec![lab.cut(DcA, DcB), lab.cut(DcA, Node)],
        |o| {
            let p = served_throughout(o, spec.name);
            // The stream's re-dial may first wait out a dial to dc-a (ranked before the witness
            // by /readyz latency until its own probes fail).
            within(p, probe_bound(NO_QUORUM_PROBE, 1.0), spec.name);
        },
    );
}

#[test]
fn partition_3_one_way_block_to_a_remote_site_costs_the_node_nothing() {
    let spec = Spec {
        good: &[DcB, Witness],
        settled: &[(DcA, "unready"), (DcB, "ready"), (Witness, "ready")],
        ..Spec::new(
            "partition_3_one_way_block_to_a_remote_site_costs_the_node_nothing",
            "3. one-way block: packets node -> dc-a dropped, dc-a -> node fine",
        )
    };
    run(
        &spec,
        |lab| vec![lab.drop_one_way(Node, DcA)],
        |o| {
            let p = served_throughout(o, spec.name);
            within(p, TARGET, spec.name);
            let dca = o
                .timeline
                .states
                .iter()
                .find(|c| c.t > 0.0 && c.site == "dc-a");
            assert!(
                dca.is_some_and(|c| c.to == "unready"),
                "dc-a must turn unready: {:?}",
                o.timeline.states
            );
        },
    );
}

#[test]
fn partition_4_site_isolation_fails_open_to_the_local_apiserver_while_it_lasts() {
    let spec = Spec {
        readyz: DCB_ETCD_DOWN,
        before: DCB_UNREADY,
        good: &[DcB],
        settled: &[(DcA, "unready"), (DcB, "unready"), (Witness, "unready")],
        heal: Some(Heal {
            good: &[Witness, DcA],
            settled: DCB_UNREADY,
            longer: Duration::ZERO,
        }),
        ..Spec::new(
            "partition_4_site_isolation_fails_open_to_the_local_apiserver_while_it_lasts",
            "4. site isolation: the node sees only dc-b, whose apiserver is unready; then heal",
        )
    };
    run(
        &spec,
        |lab| vec![lab.cut(Node, DcA), lab.cut(Node, Witness)],
        |o| {
            let (fault, heal) = (o.phase("fault"), o.phase("heal"));
            kubectl_ok(o, "before the fault");
            kubectl_ok(o, "after healing");
            // Failing open to dc-b: every request succeeds there, the stream re-establishes there.
            // When the client's one request is in flight at the cut, it hangs with the stream and
            // no new dial reveals the cut: probes that time out do. Then the retried request (after
            // client-go's 1 s) and the stream may wait out dials to the witness and dc-a (1 s
            // each) before failing open.
            report_target(fault, spec.name);
            within(
                fault,
                probe_bound(PROBE_TIMEOUT, 3.0),
                "isolated: fail open to dc-b",
            );
            if let Some(r) = o.kubectl("during the fault") {
                assert!(
                    r.is_err(),
                    "no ready apiserver is reachable: kubectl's /readyz must say so"
                );
            }
            // The lease: no apiserver with quorum is reachable, so no renewal can succeed while
            // the node is isolated (dc-b answers the PUT 500, as a kube-apiserver whose etcd is
            // gone): the gap is the isolation's length by design, and the next round after the
            // heal may come up to 10 s later, past the heal window. No bound to assert; the
            // report prints both phases' gaps.
            // Healed: within a probe interval and a fast re-probe (rise 2) the remote apiservers
            // are ready again and take every request and the stream ...
            within(heal, INTERVAL_MAX + 1.0 + EVICT_SPREAD + SLACK, "healed");
            // ... and once the witness is ready, new connections follow the normal order: it
            // is first (dc-b is unready; the witness answers /readyz faster than dc-a).
            let at = heal.from;
            let witness_ready = o
                .timeline
                .states
                .iter()
                .find(|c| c.t > at && c.site == "witness" && c.to == "ready")
                .map(|c| c.t)
                .expect("the witness turns ready after healing");
            let off: Vec<_> = o
                .timeline
                .requests
                .iter()
                .filter(|r| r.start > witness_ready + 0.1 && r.end <= heal.to)
                .filter(|r| r.site.as_deref() != Some("witness"))
                .collect();
            assert!(off.is_empty(), "after the witness is ready again: {off:?}");
        },
    );
}

#[test]
fn partition_5_syn_black_hole_turns_a_ready_backend_unready_from_dial_failures() {
    let spec = Spec {
        good: &[DcA, Witness],
        settled: &[(DcB, "unready")],
        ..Spec::new(
            "partition_5_syn_black_hole_turns_a_ready_backend_unready_from_dial_failures",
            "5. black hole: SYNs to dc-b's apiserver dropped, its probe connection lives",
        )
    };
    run(
        &spec,
        |lab| vec![lab.drop_syns(DcB, super::cast::APISERVER_PORT)],
        |o| {
            let p = served_throughout(o, spec.name);
            within(p, TARGET, spec.name);
            // Only the first `fall` requests pay the dial timeout, and no more than it.
            let round_trip = 0.5; // TLS + request through the balancer on a loaded machine
            assert!(
                p.slow <= FALL,
                "{} requests paid the dial timeout (fall = {FALL})",
                p.slow
            );
            assert!(
                p.slowest <= CONNECT_TIMEOUT.as_secs_f64() + round_trip,
                "slowest request {:.2} s > connect_timeout + {round_trip} s",
                p.slowest
            );
            let change = o
                .timeline
                .states
                .iter()
                .find(|c| c.t > 0.0 && c.site == "dc-b");
            assert!(
                change.is_some_and(|c| c.to == "unready" && c.reason.starts_with("dial: timeout")),
                "dc-b must turn unready from dial failures: {:?}",
                o.timeline.states
            );
        },
    );
}

#[test]
fn partition_6_lossy_link_to_the_witness_changes_its_state_at_most_once() {
    let spec = Spec {
        readyz: DCB_ETCD_DOWN,
        before: DCB_UNREADY,
        good: &[Witness, DcA],
        fault_for: Some(std::time::Duration::from_secs(60)),
        ..Spec::new(
            "partition_6_lossy_link_to_the_witness_changes_its_state_at_most_once",
            "6. lossy link: 20 % loss node <-> witness for 60 s while dc-b is unready",
        )
    };
    run(
        &spec,
        |lab| vec![lab.loss(Node, Witness, 20.0)],
        |o| {
            let p = served_throughout(o, spec.name);
            let witness: Vec<_> = p
                .changes
                .iter()
                .filter(|c| c.starts_with("witness"))
                .collect();
            assert!(
                witness.len() <= 1,
                "the witness changed state {} times: {witness:?} (why: {:?})",
                witness.len(),
                o.timeline
                    .states
                    .iter()
                    .filter(|c| c.site == "witness" && c.t > 0.0)
                    .map(|c| format!("{:+.1}s {}: {}", c.t, c.to, c.reason))
                    .collect::<Vec<_>>()
            );
            within(p, TARGET, spec.name);
        },
    );
}
