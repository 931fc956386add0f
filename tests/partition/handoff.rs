//! Lab scenario 11, a planned restart of the local apiserver: dc-b's simulated apiserver runs with
//! `--shutdown-delay 15s --shutdown-grace 5s` and gets SIGTERM, then does kube-apiserver's graceful
//! shutdown: `/readyz` fails at once with only `[-]shutdown failed`, everything else is served for
//! the delay, then the listener closes, and connections still open are closed after the grace.
//! The design's planned hand-off: readyprism moves the connections off a backend whose only
//! failing check is `shutdown` within `handoff_window` (5 s), before its listener closes.
//!
//! Asserted: no client-visible error (requests, stream dials) through the delay and the grace;
//! readyprism has no connection open to dc-b just before its listener closes; requests and the
//! stream are on dc-a or the witness by then. Printed: readyprism's closes with their reasons, and
//! the lease's failed attempts (the kept-alive lease connection, closed while idle, fails its next
//! attempt with EOF and `kubelet.py` retries at once on a new one; Go's transport retries such a
//! request itself).

use std::cell::RefCell;
use std::time::Duration;

use super::cast::{lab_metrics, poll, wall};
use super::netlab::{
    lab_print,
    Host::{DcA, DcB, Witness},
};
use super::runner::{run, Outcome, Spec};

const DELAY: f64 = 15.0;
const GRACE: f64 = 5.0;
const FLAGS: &[&str] = &["--shutdown-delay", "15s", "--shutdown-grace", "5s"];
/// How long before the listener closes readyprism's connections to dc-b are counted: the
/// `/metrics` fetch from the node's namespace takes a few hundred ms on a loaded machine.
const LEAD: f64 = 1.0;
/// dc-b's series of `readyprism_connections_active`.
const DCB_ACTIVE: &str = "readyprism_connections_active{backend=\"10.77.2.1:6443\"}";

#[test]
fn partition_11_planned_restart_of_the_local_apiserver_hands_its_connections_off_in_time() {
    let name =
        "partition_11_planned_restart_of_the_local_apiserver_hands_its_connections_off_in_time";
    let spec = Spec {
        apiserver_flags: &[(DcB, FLAGS)],
        good: &[DcA, Witness],
        // The delay, the grace, and time to see what the closes after the grace would break.
        fault_for: Some(Duration::from_secs_f64(DELAY + GRACE + 2.0)),
        ..Spec::new(
            name,
            "11. planned restart of dc-b's apiserver: SIGTERM, 15 s shutdown delay, 5 s grace",
        )
    };
    let active = RefCell::new(Vec::new());
    run(
        &spec,
        |lab| {
            let term = lab.signal_program(DcB, "readyprism", "TERM");
            let at = wall();
            let _ = poll(Duration::from_secs_f64(DELAY), || {
                wall() >= at + DELAY - LEAD
            });
            *active.borrow_mut() = lab_metrics(lab, DCB_ACTIVE);
            vec![term]
        },
        |o| judge(o, name, &active.borrow()),
    );
}

fn judge(o: &Outcome, name: &str, active: &[String]) {
    let p = o.phase("fault");
    let closed = o.closed_after_fault();
    lab_print(&format!(
        "{name}: readyprism's connections to dc-b {:.0} s after SIGTERM: {active:?}; closed by \
         readyprism: {closed:?}; client errors {} {:?}, failed lease attempts {}",
        DELAY - LEAD,
        p.errors,
        p.error_samples,
        p.lease_failures
    ));
    assert!(
        !active.is_empty() && active.iter().all(|l| !l.starts_with("metrics:")),
        "{name}: dc-b's active connections not read: {active:?}"
    );
    let open: f64 = active
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        open, 0.0,
        "{name}: connections still open to dc-b {LEAD} s before its listener closes; closed: \
         {closed:?}"
    );
    assert_eq!(p.errors, 0, "{name}: client errors: {:?}", p.error_samples);
    let by_close = |v: Option<f64>| v.is_some_and(|v| v <= DELAY);
    assert!(
        by_close(p.all_good) && by_close(p.stream_good),
        "{name}: requests all on dc-a/witness after {:?} s, stream after {:?} s; the listener \
         closes at {DELAY} s",
        p.all_good,
        p.stream_good
    );
}
