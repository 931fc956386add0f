//! Lab scenario 10, a cluster-wide blink: the etcd leader (dc-a's member, where the runner moves
//! it) is stopped with SIGSTOP for 3 s in one test and 8 s in the other, then continued. Every
//! site's apiserver follows its own member's linearizable reads (`Readyz::Etcd`), so the
//! apiservers fail `/readyz` together while the cluster has no leader. The design's rule ("Move
//! a connection only when it helps"): closing connections then only moves clients onto the next
//! failing apiserver, at fleet scale a herd into a recovering control plane.
//!
//! The members run with a 10 s election timeout (etcd's default is 1 s; 5 s or more is common
//! on slow links and disks): the followers wait out the leader's freeze instead of electing
//! another, so the blink lasts as long as the freeze at every site. With the default, raft's
//! randomized 1–2 s election timeout lets dc-b and the witness elect a leader early in the freeze
//! (the first run of the 3 s blink, with the default, saw no failed probe and no failed lease
//! attempt). The lab checks that the blink is cluster-wide: reads started at every member right
//! after the stop must fail.
//!
//! The 3 s blink cannot make a backend unready with the default health settings (fall 2: a
//! failed probe takes the 2 s read budget, the fast re-probe starts 1 s later, after the blink);
//! it guards the rule for the short blinks. The 8 s one is where closing starts.
//!
//! Asserted: readyprism closes no client connection from the fault to the end of the record; the
//! longest time between node-lease renewals is at most the blink + 10 s (kubelet renews every
//! 10 s). Printed: every close with its reason, the client-visible errors, the lease's failed
//! attempts (the figures report prints the state changes).

use std::cell::RefCell;
use std::time::Duration;

use super::etcd::spawn_read;
use super::lease;
use super::netlab::lab_print;
use super::netlab::Host::{self, DcA, DcB, Witness};
use super::runner::{run, Heal, Outcome, Spec};
use super::scenarios::ETCD;

/// kubelet's lease renewal period: a blink may add at most this to the longest gap.
const RENEW_EVERY: f64 = 10.0;

/// Stops the etcd leader for `blink`, continues it, and judges the record.
fn blink(name: &'static str, title: &'static str, blink: Duration) {
    let spec = Spec {
        etcd: true,
        etcd_flags: &["--election-timeout", "10000"],
        readyz: ETCD,
        // Nothing better exists while every apiserver fails: any backend is as good as another.
        good: &[DcA, DcB, Witness],
        fault_for: Some(blink),
        heal: Some(Heal {
            good: &[DcA, DcB, Witness],
            settled: &[(DcA, "ready"), (DcB, "ready"), (Witness, "ready")],
            longer: Duration::ZERO,
        }),
        lease_renewed: true,
        ..Spec::new(name, title)
    };
    let reads = RefCell::new(Vec::new());
    run(
        &spec,
        |lab| {
            let stop = lab.stop_program(DcA, "etcd");
            // Not awaited here: the blink is timed from the stop.
            *reads.borrow_mut() = Host::SITES.map(|site| spawn_read(lab, site)).into();
            vec![stop]
        },
        |o| {
            let reads: Vec<String> = reads.take().into_iter().map(outcome).collect();
            assert!(
                reads.len() == 3 && reads.iter().all(|r| failed(r)),
                "{name}: the lab's blink is not cluster-wide: reads at dc-a, dc-b, witness right \
                 after the stop: {reads:?}"
            );
            judge(o, name, blink.as_secs_f64());
        },
    );
}

/// Whether a read's JSON line says it failed.
fn failed(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v["ok"] == false)
}

/// What a read started by `spawn_read` printed (a JSON line with `"ok"`).
fn outcome(read: std::process::Child) -> String {
    read.wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| e.to_string())
}

fn judge(o: &Outcome, name: &str, blink: f64) {
    let (fault, heal) = (o.phase("fault"), o.phase("heal"));
    // The lab worked: the client ran through the blink and renewed its lease after it.
    assert!(
        fault.requests > 0 && heal.requests > 0,
        "{name}: no requests in a window"
    );
    let gap = lease::longest_gap(&o.timeline.leases, (0.0, heal.to));
    let closed = o.closed_after_fault();
    let errors = [fault, heal].map(|p| p.errors);
    lab_print(&format!(
        "{name}: {blink} s blink: {} connections closed by readyprism {closed:?}; client errors \
         {} during the blink, {} after it {:?}; longest lease gap {gap:.2} s (goal <= {:.0} s, \
         {} failed attempts); closes counted {:?}",
        closed.len(),
        errors[0],
        errors[1],
        [&fault.error_samples[..], &heal.error_samples[..]].concat(),
        blink + RENEW_EVERY,
        fault.lease_failures + heal.lease_failures,
        o.cast
            .metrics("readyprism_connections_closed_total")
            .into_iter()
            .filter(|m| !m.ends_with(" 0"))
            .collect::<Vec<_>>(),
    ));
    assert!(
        closed.is_empty(),
        "{name}: readyprism closed {} connections during a cluster-wide blink: {closed:?}",
        closed.len()
    );
    assert!(
        gap <= blink + RENEW_EVERY,
        "{name}: longest gap between lease renewals {gap:.2} s > blink {blink} s + {RENEW_EVERY} s"
    );
}

#[test]
fn partition_10_a_3s_cluster_wide_blink_is_ridden_out_in_place() {
    blink(
        "partition_10_a_3s_cluster_wide_blink_is_ridden_out_in_place",
        "10a. cluster-wide blink (real etcd): the etcd leader stopped for 3 s",
        Duration::from_secs(3),
    );
}

#[test]
fn partition_10_an_8s_cluster_wide_blink_is_ridden_out_in_place() {
    blink(
        "partition_10_an_8s_cluster_wide_blink_is_ridden_out_in_place",
        "10b. cluster-wide blink (real etcd): the etcd leader stopped for 8 s",
        Duration::from_secs(8),
    );
}
