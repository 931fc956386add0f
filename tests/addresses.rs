//! A DNS-named backend whose first address is black-holed costs one attempt delay once, not on
//! every dial and probe: the failing address is remembered and tried last (Happy Eyeballs'
//! cache). On the real binary, in a mount namespace of its own whose `/etc/hosts` gives the
//! backend's name two addresses.

use std::net::SocketAddr;

use readyprism::testing::BlackHole;

use crate::support::process::Proc;
use crate::support::*;

/// Whether this machine lets a child have its own `/etc/hosts` (`unshare -m` and a bind mount).
fn private_hosts_work(hosts: &str) -> bool {
    let ok = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!("mount --bind {hosts} /etc/hosts"),
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("READYPRISM_REQUIRE_NETNS").is_none(),
            "unshare -m with a bind mount is required here"
        );
        eprintln!("skipped: this machine does not allow a private /etc/hosts (unshare -m)");
    }
    ok
}

#[test]
fn a_black_holed_first_address_of_a_name_is_remembered_to_be_tried_last() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    // The good address 127.0.0.9:P and a black hole on 127.0.0.1:P, the address the resolver
    // gives first.
    let (good, _hole) = loop {
        let l = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.9:0"))
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        if let Ok(hole) = BlackHole::at(SocketAddr::from(([127, 0, 0, 1], port))) {
            break (rt.block_on(async { lab.cluster.fake_on("good", l) }), hole);
        }
    };
    let port = good.addr.port();
    let hosts = lab.write("hosts", "127.0.0.1 twohomed\n127.0.0.9 twohomed\n");
    if !private_hosts_work(&hosts) {
        return;
    }
    let yaml = lab.yaml("dc-a", &[], "").replace(
        "backends:\n",
        &format!(
            "backends:\n  - {{ address: \"twohomed:{port}\", zone: dc-a, server_name: localhost }}\n"
        ),
    );
    let file = lab.path("twohomed.yaml");
    std::fs::write(&file, yaml).expect("write");
    let script = format!("mount --bind {hosts} /etc/hosts && exec \"$0\" \"$@\"");
    let p = Proc::start_under(&["unshare", "-m", "sh", "-c", &script], &file);
    // The first probe raced the black hole and the good address, and learned.
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    for _ in 0..3 {
        let (c, name) = rt.block_on(raw(p.listen)).expect("relayed");
        assert_eq!(name, "good");
        drop(c);
    }
    let records = || -> Vec<serde_json::Value> {
        p.logs()
            .into_iter()
            .filter(|v| v["fields"]["message"] == "connection ended")
            .collect()
    };
    rt.block_on(poll("three records", || records().len() == 3));
    for r in records() {
        assert_eq!(
            r["fields"]["attempts"].as_u64(),
            Some(1),
            "the remembered black hole is tried last: one attempt, no delay: {r}"
        );
    }
}
