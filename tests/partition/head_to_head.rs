//! Failover head to head: lab scenarios 1 to 8 on the same lab with the node's
//! balancer swapped for HAProxy and nginx as kubespray ships them and HAProxy set up as KubePrism
//! behaves (`balancers` says exactly how). One test per scenario and balancer; each prints one
//! row of the tables in `docs/partition-lab.md` and `docs/results/head-to-head.md` and asserts
//! only that the lab worked (the client ran, the fault was applied): these measure others'
//! behaviour. readyprism runs here too, on the
//! same fixed window, for its row; its bounds are asserted in `scenarios` and `dying_path`. The
//! fault phase only (no heals), kept for a fixed [`FAULT_FOR`] (scenario 6 too, 60 s in the lab).
//! Scenario 8 reports what can be measured alike for every balancer (readyprism's metrics exist
//! for it alone): SYNs at dc-b during the herd and in the [`AFTER_HERD`] after it, the herd's
//! time and answers. Ignored by default (32 runs of about 90 s, about 50 min; CI does not
//! install HAProxy or nginx for them): `cargo test --test tests -- --ignored --nocapture
//! --test-threads 1 head_to_head`.

use std::cell::RefCell;
use std::time::Duration;

use super::balancers::Balancer::{
    self, HaproxyKubeprism, HaproxyKubespray, NginxKubespray, Readyprism,
};
use super::cast::{poll, wall, APISERVER_PORT};
use super::dying_path::{dial_herd, drop_counted_syns, syns, CLIENTS};
use super::etcd::PEER_PORT;
use super::netlab::lab_print;
use super::netlab::Host::{DcA, DcB, Node, Witness};
use super::netlab::{Fault, NetLab};
use super::runner::{run, Outcome, Spec};
use super::scenarios::{DCB_ETCD_DOWN, DCB_UNREADY, ETCD};

/// How long the fault is kept: the others log no states, so a window cannot end once their
/// states hold; long enough for kubespray's checks (every 15 s, fall 2) and KubePrism's (every
/// 20 s) to act.
const FAULT_FOR: Duration = Duration::from_secs(75);

/// Scenario 8: how long after the herd SYNs at dc-b are counted (the checks' own SYNs, and any
/// late re-attempts).
const AFTER_HERD: Duration = Duration::from_secs(10);

/// Which scenario, as in `scenarios` / `dying_path`.
#[derive(Clone, Copy)]
enum Scenario {
    NoQuorum,
    DcCut,
    OneWay,
    Isolation,
    BlackHole,
    Lossy,
    InFlight,
}

fn opt(v: Option<f64>) -> String {
    v.map_or("never".to_string(), |v| format!("{v:.1}"))
}

/// The table row of one run: scenario, balancer, requests and stream on a good backend, the
/// in-flight request (scenario 7), client-visible errors, the longest lease gap.
fn row(o: &Outcome, scenario: &str, balancer: Balancer) {
    let p = o.phase("fault");
    let inflight = if o.timeline.slow.is_empty() {
        "-".to_string()
    } else {
        format!("{} ({} failed)", opt(p.inflight_good), p.inflight_errors)
    };
    lab_print(&format!(
        "head-to-head row: | {scenario} | {} | {} | {} | {inflight} | {} | {:.1} |",
        balancer.name(),
        opt(p.all_good),
        opt(p.stream_good),
        p.errors,
        p.lease_gap
    ));
    // The lab worked: requests were made in the fault window and the record has the stream.
    assert!(p.requests > 0, "no requests in the fault window");
    assert!(!o.timeline.stream.is_empty(), "no stream recorded");
}

fn h2h(scenario: Scenario, balancer: Balancer, name: &'static str) {
    let base = Spec {
        fault_for: Some(FAULT_FOR),
        ..Spec::new(name, name)
    };
    let (spec, fault): (Spec, fn(&NetLab) -> Vec<Fault>) = match scenario {
        Scenario::NoQuorum => (
            Spec {
                etcd: true,
                readyz: ETCD,
                good: &[DcA, Witness],
                balancer,
                ..base
            },
            |lab| vec![lab.block_tcp_port(DcB, PEER_PORT)],
        ),
        Scenario::DcCut => (
            Spec {
                etcd: true,
                readyz: ETCD,
                good: &[Witness],
                balancer,
                ..base
            },
            |lab| vec![lab.cut(DcA, DcB), lab.cut(DcA, Node)],
        ),
        Scenario::OneWay => (
            Spec {
                good: &[DcB, Witness],
                balancer,
                ..base
            },
            |lab| vec![lab.drop_one_way(Node, DcA)],
        ),
        Scenario::Isolation => (
            Spec {
                readyz: DCB_ETCD_DOWN,
                before: DCB_UNREADY,
                good: &[DcB],
                balancer,
                ..base
            },
            |lab| vec![lab.cut(Node, DcA), lab.cut(Node, Witness)],
        ),
        Scenario::BlackHole => (
            Spec {
                good: &[DcA, Witness],
                balancer,
                ..base
            },
            |lab| vec![lab.drop_syns(DcB, APISERVER_PORT)],
        ),
        Scenario::Lossy => (
            Spec {
                readyz: DCB_ETCD_DOWN,
                before: DCB_UNREADY,
                good: &[Witness, DcA],
                balancer,
                ..base
            },
            |lab| vec![lab.loss(Node, Witness, 20.0)],
        ),
        Scenario::InFlight => (
            Spec {
                good: &[DcA, Witness],
                client_flags: &["--slow"],
                balancer,
                ..base
            },
            |lab| vec![lab.cut(Node, DcB)],
        ),
    };
    let label = match scenario {
        Scenario::NoQuorum => "1 no-quorum dc-b",
        Scenario::DcCut => "2 dc-a<->dc-b cut, node cannot reach dc-a",
        Scenario::OneWay => "3 one-way block node->dc-a",
        Scenario::Isolation => "4 site isolation (fail open to dc-b)",
        Scenario::BlackHole => "5 SYN black hole dc-b",
        Scenario::Lossy => "6 20 % loss node<->witness, dc-b unready",
        Scenario::InFlight => "7 in-flight, node<->dc-b cut",
    };
    run(&spec, fault, |o| row(o, label, balancer));
}

/// What scenario 8's herd saw, measured alike for every balancer.
#[derive(Debug, Default)]
struct Herd {
    /// The slowest of the herd's dials, as `dialer.py` timed them.
    seconds: f64,
    /// SYNs at dc-b from the drop until the herd had ended.
    syns: u64,
    /// SYNs at dc-b in the [`AFTER_HERD`] after it, and that window's length.
    syns_after: u64,
    after_for: f64,
    /// `dialer.py`'s output: answered dials, by site, and the first errors.
    answer: serde_json::Value,
}

/// The row of scenario 8: balancer, the herd's seconds, answered dials and where, SYNs at dc-b
/// during the herd, SYN/s at dc-b after it, the client's errors (and the herd's failed dials'
/// first errors), the longest lease gap.
fn herd_row(o: &Outcome, herd: &Herd, balancer: Balancer) {
    let p = o.phase("fault");
    let answered = herd.answer["ok"].as_u64().unwrap_or(0);
    lab_print(&format!(
        "head-to-head row 8: | {} | {:.1} | {answered}/{CLIENTS} {} | {} | {:.1} | {} | {:.1} |\n  herd errors: {}",
        balancer.name(),
        herd.seconds,
        herd.answer["sites"],
        herd.syns,
        herd.syns_after as f64 / herd.after_for,
        p.errors,
        p.lease_gap,
        herd.answer["errors"],
    ));
    assert!(
        herd.answer["dials"].as_u64() == Some(CLIENTS as u64),
        "no herd: {herd:?}"
    );
    assert!(herd.syns > 0, "no SYN reached dc-b: {herd:?}");
    assert!(p.requests > 0, "no requests in the fault window");
}

/// Scenario 8 (`dying_path`'s `partition_8_...`): dc-b's SYNs dropped while [`CLIENTS`] clients
/// dial at once; SYNs at dc-b counted from the drop to the herd's end, then for [`AFTER_HERD`].
fn h2h_herd(balancer: Balancer, name: &'static str) {
    let spec = Spec {
        fault_for: Some(FAULT_FOR),
        good: &[DcA, Witness],
        balancer,
        ..Spec::new(name, name)
    };
    let herd = RefCell::new(Herd::default());
    run(
        &spec,
        |lab| {
            let fault = drop_counted_syns(lab, DcB);
            let syns0 = syns(lab, DcB);
            let out = dial_herd(lab);
            let syns1 = syns(lab, DcB);
            let t1 = wall();
            let _ = poll(AFTER_HERD + Duration::from_secs(1), || {
                wall() - t1 >= AFTER_HERD.as_secs_f64()
            });
            let syns2 = syns(lab, DcB);
            let after_for = wall() - t1;
            let text = String::from_utf8_lossy(&out.stdout);
            let answer: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
                panic!(
                    "dialer.py: {e}: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            let seconds = answer["seconds"].as_array().map_or(0.0, |v| {
                v.iter().filter_map(|s| s.as_f64()).fold(0.0, f64::max)
            });
            *herd.borrow_mut() = Herd {
                seconds,
                syns: syns1 - syns0,
                syns_after: syns2 - syns1,
                after_for,
                answer,
            };
            vec![fault]
        },
        |o| herd_row(o, &herd.borrow(), balancer),
    );
}

macro_rules! head_to_head {
    ($($test:ident: $scenario:ident, $balancer:ident;)*) => {$(
        #[test]
        #[ignore = "the head-to-head takes about 50 min: cargo test --test tests head_to_head -- --ignored"]
        fn $test() {
            h2h(Scenario::$scenario, $balancer, stringify!($test));
        }
    )*};
}

macro_rules! head_to_head_herd {
    ($($test:ident: $balancer:ident;)*) => {$(
        #[test]
        #[ignore = "the head-to-head takes about 50 min: cargo test --test tests head_to_head -- --ignored"]
        fn $test() {
            h2h_herd($balancer, stringify!($test));
        }
    )*};
}

head_to_head! {
    head_to_head_1_no_quorum_readyprism: NoQuorum, Readyprism;
    head_to_head_4_site_isolation_readyprism: Isolation, Readyprism;
    head_to_head_5_black_hole_readyprism: BlackHole, Readyprism;
    head_to_head_7_in_flight_readyprism: InFlight, Readyprism;
    head_to_head_1_no_quorum_haproxy_kubespray: NoQuorum, HaproxyKubespray;
    head_to_head_1_no_quorum_nginx_kubespray: NoQuorum, NginxKubespray;
    head_to_head_1_no_quorum_haproxy_as_kubeprism: NoQuorum, HaproxyKubeprism;
    head_to_head_4_site_isolation_haproxy_kubespray: Isolation, HaproxyKubespray;
    head_to_head_4_site_isolation_nginx_kubespray: Isolation, NginxKubespray;
    head_to_head_4_site_isolation_haproxy_as_kubeprism: Isolation, HaproxyKubeprism;
    head_to_head_5_black_hole_haproxy_kubespray: BlackHole, HaproxyKubespray;
    head_to_head_5_black_hole_nginx_kubespray: BlackHole, NginxKubespray;
    head_to_head_5_black_hole_haproxy_as_kubeprism: BlackHole, HaproxyKubeprism;
    head_to_head_7_in_flight_haproxy_kubespray: InFlight, HaproxyKubespray;
    head_to_head_7_in_flight_nginx_kubespray: InFlight, NginxKubespray;
    head_to_head_7_in_flight_haproxy_as_kubeprism: InFlight, HaproxyKubeprism;
    head_to_head_2_dc_cut_readyprism: DcCut, Readyprism;
    head_to_head_2_dc_cut_haproxy_kubespray: DcCut, HaproxyKubespray;
    head_to_head_2_dc_cut_nginx_kubespray: DcCut, NginxKubespray;
    head_to_head_2_dc_cut_haproxy_as_kubeprism: DcCut, HaproxyKubeprism;
    head_to_head_3_one_way_readyprism: OneWay, Readyprism;
    head_to_head_3_one_way_haproxy_kubespray: OneWay, HaproxyKubespray;
    head_to_head_3_one_way_nginx_kubespray: OneWay, NginxKubespray;
    head_to_head_3_one_way_haproxy_as_kubeprism: OneWay, HaproxyKubeprism;
    head_to_head_6_lossy_readyprism: Lossy, Readyprism;
    head_to_head_6_lossy_haproxy_kubespray: Lossy, HaproxyKubespray;
    head_to_head_6_lossy_nginx_kubespray: Lossy, NginxKubespray;
    head_to_head_6_lossy_haproxy_as_kubeprism: Lossy, HaproxyKubeprism;
}

head_to_head_herd! {
    head_to_head_8_herd_readyprism: Readyprism;
    head_to_head_8_herd_haproxy_kubespray: HaproxyKubespray;
    head_to_head_8_herd_nginx_kubespray: NginxKubespray;
    head_to_head_8_herd_haproxy_as_kubeprism: HaproxyKubeprism;
}
