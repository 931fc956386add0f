//! The lab's own tests: the links have the delays of the field report, every fault does what it
//! says and heals, and a real etcd member cut off from its leader fails linearizable reads.

use std::time::Duration;

use tokio::time::Instant;

use super::etcd::{EtcdCluster, PEER_PORT};
use super::netlab::{lab_print, Host, LinkFigures, NetLab, PROBE_PORT};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The window a measured round trip must fall in: a little under the target (timer slack never
/// makes a packet early) to well over it (a loaded 2-core machine).
fn window(target: Duration) -> (f64, f64) {
    if target.is_zero() {
        (0.0, 5.0)
    } else {
        (ms(target) - 8.0, ms(target) * 1.85)
    }
}

fn assert_in_window(f: &LinkFigures) {
    let (lo, hi) = window(f.target);
    let (ping, connect) = (f.ping_median(), f.connect_median());
    assert!(
        f.ping_lost <= 1 && f.connect_errors.is_empty(),
        "{}: losses on a healthy link",
        f.line()
    );
    assert!(
        (lo..=hi).contains(&ping),
        "{}: ping median not in {lo:.0}..{hi:.0} ms",
        f.line()
    );
    assert!(
        (lo..=hi).contains(&connect),
        "{}: connect median not in {lo:.0}..{hi:.0} ms",
        f.line()
    );
}

fn reachable(lab: &NetLab, from: Host, to: Host) -> bool {
    let (ok, _) = lab.ping(from, to, 2, Duration::from_millis(500));
    !ok.is_empty()
}

/// No host keeps a fault's rules once it is healed.
fn assert_no_fault_rules(lab: &NetLab) {
    for host in Host::ALL {
        assert!(
            !lab.rules(host).contains("rpf"),
            "fault rules left in {}",
            host.name()
        );
    }
}

#[test]
fn partition_lab_links_have_the_field_report_delays() {
    let Some(lab) = NetLab::start("partition_lab_links_have_the_field_report_delays") else {
        return;
    };
    let pairs = [
        (Host::Node, Host::DcB),
        (Host::Node, Host::Witness),
        (Host::Node, Host::DcA),
        (Host::DcB, Host::Witness),
        (Host::DcA, Host::Witness),
        (Host::DcA, Host::DcB),
    ];
    for (_, to) in pairs {
        lab.ensure_probe_listener(to);
    }
    let lab_ref = &lab;
    let figures: Vec<LinkFigures> = std::thread::scope(|s| {
        let handles: Vec<_> = pairs
            .iter()
            .map(|&(a, b)| s.spawn(move || lab_ref.measure(a, b, 12)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("measure"))
            .collect()
    });
    let mut report = String::from(
        "partition lab delays (ping = ICMP echo RTT, connect = TCP SYN -> SYN-ACK):\n",
    );
    for f in &figures {
        report.push_str(&f.line());
        report.push('\n');
    }
    lab_print(&report);
    for f in &figures {
        assert_in_window(f);
    }
    // The order the balancer will see from the node: its own site, then the witness, then dc-a.
    let (b, w, a) = (&figures[0], &figures[1], &figures[2]);
    for (what, get) in [
        ("ping", LinkFigures::ping_median as fn(&LinkFigures) -> f64),
        ("connect", LinkFigures::connect_median),
    ] {
        assert!(
            get(b) + 10.0 < get(w) && get(w) + 10.0 < get(a),
            "{what} order from the node: dc-b {:.1} < witness {:.1} < dc-a {:.1} ms",
            get(b),
            get(w),
            get(a)
        );
    }
}

#[test]
fn partition_lab_a_cut_link_passes_nothing_either_way_until_healed() {
    let Some(lab) =
        NetLab::start("partition_lab_a_cut_link_passes_nothing_either_way_until_healed")
    else {
        return;
    };
    // Cut both ways: nothing passes either way, other links unaffected, heal restores.
    let cut = lab.cut(Host::DcA, Host::DcB);
    assert!(
        !reachable(&lab, Host::DcA, Host::DcB),
        "{}: a -> b",
        cut.what
    );
    assert!(
        !reachable(&lab, Host::DcB, Host::DcA),
        "{}: b -> a",
        cut.what
    );
    assert!(
        reachable(&lab, Host::DcA, Host::Witness),
        "{}: a -> witness",
        cut.what
    );
    assert!(
        reachable(&lab, Host::DcB, Host::Witness),
        "{}: b -> witness",
        cut.what
    );
    lab.heal(&cut);
    assert!(reachable(&lab, Host::DcA, Host::DcB), "healed {}", cut.what);
    assert_no_fault_rules(&lab);
}

#[test]
fn partition_lab_a_one_way_drop_loses_only_the_replies_until_healed() {
    let Some(lab) =
        NetLab::start("partition_lab_a_one_way_drop_loses_only_the_replies_until_healed")
    else {
        return;
    };
    // One way: node -> dc-a dropped; dc-a's echo requests still reach the node (its replies die).
    let one_way = lab.drop_one_way(Host::Node, Host::DcA);
    assert!(!reachable(&lab, Host::Node, Host::DcA), "{}", one_way.what);
    let before = lab.icmp_echos_received(Host::Node);
    let (replies, lost) = lab.ping(Host::DcA, Host::Node, 3, Duration::from_millis(300));
    let arrived = lab.icmp_echos_received(Host::Node) - before;
    assert!(
        replies.is_empty() && lost == 3 && arrived == 3,
        "{}: dc-a -> node requests arrived {arrived}/3, replies {}",
        one_way.what,
        replies.len()
    );
    lab.heal(&one_way);
    assert!(
        reachable(&lab, Host::Node, Host::DcA),
        "healed {}",
        one_way.what
    );
    assert_no_fault_rules(&lab);
}

#[test]
fn partition_lab_a_syn_black_hole_spares_established_connections_until_healed() {
    let Some(lab) =
        NetLab::start("partition_lab_a_syn_black_hole_spares_established_connections_until_healed")
    else {
        return;
    };
    lab.ensure_probe_listener(Host::DcA);
    // SYN black hole: an established connection lives on, new ones time out, heal restores.
    let mut hold_cmd = lab.command(Host::Node, "python3");
    hold_cmd
        .arg("-u")
        .arg(super::netlab::lab_dir().join("netprobe.py"))
        .args([
            "hold",
            &Host::DcA.ip().to_string(),
            &PROBE_PORT.to_string(),
            "3",
        ]);
    let mut hold = lab.spawn("hold-node-dca", hold_cmd).expect("spawn hold");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !hold.log_text().contains("connected") {
        assert!(
            Instant::now() < deadline,
            "hold did not connect: {}",
            hold.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let syn = lab.drop_syns(Host::DcA, PROBE_PORT);
    let (ok, errors) = lab.connect_times(
        Host::Node,
        Host::DcA.ip(),
        PROBE_PORT,
        2,
        Duration::from_secs(1),
    );
    assert!(
        ok.is_empty() && errors.len() == 2,
        "{}: new connections {ok:?}",
        syn.what
    );
    hold.wait_timeout(Duration::from_secs(10))
        .expect("hold ends");
    let last = hold.log_text();
    let v: serde_json::Value =
        serde_json::from_str(last.lines().last().unwrap_or("{}")).expect("hold result");
    assert!(
        v["echoes_failed"] == 0 && v["echoes_ok"].as_u64().unwrap_or(0) >= 10,
        "{}: the established connection must live on: {v}",
        syn.what
    );
    lab.heal(&syn);
    let (ok, _) = lab.connect_times(
        Host::Node,
        Host::DcA.ip(),
        PROBE_PORT,
        2,
        Duration::from_secs(1),
    );
    assert_eq!(ok.len(), 2, "healed {}", syn.what);
    assert_no_fault_rules(&lab);
}

#[test]
fn partition_lab_random_loss_drops_about_half_the_echoes_until_healed() {
    let Some(lab) =
        NetLab::start("partition_lab_random_loss_drops_about_half_the_echoes_until_healed")
    else {
        return;
    };
    // Random loss, 30 % each way: about half the echoes fail; heal restores.
    let loss = lab.loss(Host::Node, Host::Witness, 30.0);
    let (replies, lost) = lab.ping(Host::Node, Host::Witness, 60, Duration::from_millis(150));
    let ratio = lost as f64 / 60.0;
    lab_print(&format!(
        "{}: {lost}/60 echoes lost ({:.0} %, expected about 51 %)",
        loss.what,
        ratio * 100.0
    ));
    assert!(
        (0.25..=0.78).contains(&ratio),
        "{}: lost {ratio}",
        loss.what
    );
    assert!(replies.len() + lost == 60);
    lab.heal_all();
    let (_, lost) = lab.ping(Host::Node, Host::Witness, 10, Duration::from_millis(500));
    assert!(lost <= 1, "healed {}: {lost}/10 lost", loss.what);
    assert_no_fault_rules(&lab);
}

/// Polls a member's linearizable read until it gives `want`; returns how long that took.
fn read_becomes(etcd: &EtcdCluster, site: Host, want: bool, timeout: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let r = etcd.linearizable_read(site);
        if r.ok == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{} read still ok={} after {timeout:?}: {r:?}\n{}",
            site.name(),
            r.ok,
            etcd.logs_tail(15)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_reads(etcd: &EtcdCluster, label: &str, want: [(Host, bool); 3]) {
    let mut line = format!("linearizable reads {label}:");
    let results: Vec<_> = want
        .iter()
        .map(|(site, _)| etcd.linearizable_read(*site))
        .collect();
    for r in &results {
        line.push_str(&format!(
            " {} {} in {:.0} ms ({});",
            r.member.name(),
            if r.ok { "ok" } else { "FAILED" },
            ms(r.elapsed),
            r.detail
        ));
    }
    lab_print(&line);
    for ((site, ok), r) in want.iter().zip(&results) {
        assert_eq!(r.ok, *ok, "{label}: {} read: {r:?}", site.name());
    }
}

#[test]
fn partition_lab_etcd_member_without_leader_fails_linearizable_reads() {
    let name = "partition_lab_etcd_member_without_leader_fails_linearizable_reads";
    let Some(lab) = NetLab::start(name) else {
        return;
    };
    let Some(mut etcd) = EtcdCluster::start(&lab, name, &[]) else {
        return;
    };
    let started = Instant::now();
    let healthy = etcd
        .wait_healthy(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    etcd.move_leader(Host::DcA, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
    lab_print(&format!(
        "etcd healthy after {:.1} s, leader moved to dc-a after {:.1} s",
        healthy.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
    etcd.print_views("before the cut");
    use Host::{DcA, DcB, Witness};
    assert_reads(
        &etcd,
        "healthy",
        [(DcA, true), (DcB, true), (Witness, true)],
    );
    let term_before = etcd.status(DcA).expect("dc-a status").raft_term;

    // dc-a <-> dc-b cut both ways, leader in dc-a: dc-b has no leader and stays so (PreVote: its
    // elections do not start; CheckQuorum: the witness stays with dc-a).
    let cut = lab.cut(DcA, DcB);
    let failed_after = read_becomes(&etcd, DcB, false, Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(3)); // several election timeouts
    etcd.print_views("during the cut");
    assert_reads(
        &etcd,
        "dc-a <-> dc-b cut",
        [(DcA, true), (DcB, false), (Witness, true)],
    );
    let b = etcd.status(DcB).expect("dc-b status");
    assert_eq!(b.leader, None, "dc-b must have no leader: {b:?}");
    let a = etcd.status(DcA).expect("dc-a status");
    assert_eq!(a.leader, Some(DcA), "dc-a must stay leader: {a:?}");
    assert_eq!(a.raft_term, term_before, "no election may have happened");
    lab.heal(&cut);
    let back_after = read_becomes(&etcd, DcB, true, Duration::from_secs(20));
    lab_print(&format!(
        "{}: dc-b reads failed {:.1} s after the cut, ok {:.1} s after healing",
        cut.what,
        failed_after.as_secs_f64(),
        back_after.as_secs_f64()
    ));
    assert_reads(&etcd, "healed", [(DcA, true), (DcB, true), (Witness, true)]);

    // Only dc-b member's peer traffic cut (port 2380 in and out): it loses its leader while its
    // clients still reach it.
    let peer = lab.block_tcp_port(DcB, PEER_PORT);
    let failed_after = read_becomes(&etcd, DcB, false, Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(2));
    etcd.print_views("with dc-b's peer port blocked");
    assert_reads(
        &etcd,
        "dc-b peer port blocked",
        [(DcA, true), (DcB, false), (Witness, true)],
    );
    assert_eq!(etcd.status(DcB).expect("dc-b status").leader, None);
    lab.heal(&peer);
    let back_after = read_becomes(&etcd, DcB, true, Duration::from_secs(20));
    lab_print(&format!(
        "{}: dc-b reads failed {:.1} s after the block, ok {:.1} s after healing; test {:.1} s",
        peer.what,
        failed_after.as_secs_f64(),
        back_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
}
