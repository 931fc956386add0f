//! The node's zone from the `zones:` map on the real binary: from an interface address in a
//! network namespace of the test's own (a veth end holding 10.0.1.5/24), the precedence of
//! `--zone`, `READYPRISM_ZONE` and `zone:` over it, a backend's zone from its IP, no match, an
//! ambiguous match (a WARN and the zone unknown, never a refusal), and the zone following the
//! addresses while the balancer runs (added late, renumbered, removed). Namespaces need root and `ip`; without them these tests say why they are
//! skipped, unless `READYPRISM_REQUIRE_NETNS=1`, which makes that a failure.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use readyprism::admin::status::StatusDoc;

use crate::support::netns::{self, Netns};
use crate::support::process::Proc;
use crate::support::*;

/// `readyprism ARGS...` run to completion inside `ns`, with `env` set.
fn readyprism(ns: &Netns, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = ns.command(env!("CARGO_BIN_EXE_readyprism"));
    c.args(args).env_remove("READYPRISM_ZONE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run ip netns exec")
}

/// A namespace whose veth end holds `addrs`, or `None` after saying why the test is skipped (a
/// failure with `READYPRISM_REQUIRE_NETNS=1`).
fn netns(test: &str, addrs: &[&str]) -> Option<Netns> {
    netns::or_skip(test, Netns::new("rpz").and_then(|ns| ns.on_veth(addrs)))
}

/// A config for the namespace: ports 0, the lab's CA, `zone_line` (may be empty), `zones`, and
/// backends that are never reached (their zones are the point).
fn config(lab: &Lab, name: &str, zone_line: &str, zones: &str) -> String {
    let text = format!(
        "listen: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\n{zone_line}zones:\n{zones}backends:\n  - address: 10.0.2.10:6443\n  - address: \"[fd00:2::10]:6443\"\n  - {{ address: 10.0.1.10:6443, zone: elsewhere }}\n  - address: apiserver.invalid:6443\n  - address: 192.168.77.1:6443\ntls:\n  ca: {}\n",
        lab.path("ca.crt").display()
    );
    lab.write(name, &text)
}

const ZONES: &str = "  dc-a: [\"10.0.1.0/24\"]\n  dc-b: [\"10.0.2.0/24\", \"fd00:2::/64\"]\n  wide: [\"10.0.0.0/16\"]\n";

#[test]
fn zones_come_from_addresses_for_the_node_as_for_backends() {
    let test = "zones_come_from_addresses_for_the_node_as_for_backends";
    let Some(ns) = netns(test, &["10.0.1.5/24"]) else {
        return;
    };
    let lab = Lab::new();
    let file = config(&lab, "zones.yaml", "", ZONES);
    let p = Proc::start_under(&ns.exec(), Path::new(&file));
    // The start-up log says which zone and why: the /24 holding 10.0.1.5 beats the /16.
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["zone"], "dc-a", "{started}");
    assert_eq!(started["fields"]["zone_source"], "address 10.0.1.5");
    // /status, read inside the namespace (its 127.0.0.1 is not ours).
    let admin = p.admin.to_string();
    let o = readyprism(&ns, &[], &["status", "--admin", &admin, "--json"]);
    let doc: StatusDoc = serde_json::from_slice(&o.stdout).expect("status JSON");
    assert_eq!(doc.zone.as_deref(), Some("dc-a"));
    assert_eq!(
        doc.zone_source.map(|s| s.to_string()).as_deref(),
        Some("address 10.0.1.5")
    );
    let zones: Vec<_> = doc
        .backends
        .iter()
        .map(|b| (b.address.as_str(), b.zone.as_deref()))
        .collect();
    assert_eq!(
        zones,
        [
            ("10.0.2.10:6443", Some("dc-b")),
            ("[fd00:2::10]:6443", Some("dc-b")),
            ("10.0.1.10:6443", Some("elsewhere")),
            ("apiserver.invalid:6443", None),
            ("192.168.77.1:6443", None),
        ]
    );
    // `readyprism status` says it on its summary line.
    let o = readyprism(&ns, &[], &["status", "--admin", &admin]);
    let table = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        table.starts_with("node zone dc-a (address 10.0.1.5)  "),
        "{table}"
    );
    // No warning: a zone was found.
    assert!(
        !p.logs().iter().any(|v| v["level"] == "WARN"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("zone"))),
        "{:?}",
        p.logs()
    );
}

#[test]
fn the_zone_is_the_flag_then_the_environment_then_the_config_then_an_address() {
    let test = "the_zone_is_the_flag_then_the_environment_then_the_config_then_an_address";
    let Some(ns) = netns(test, &["10.0.1.5/24"]) else {
        return;
    };
    let lab = Lab::new();
    let with_zone = config(&lab, "with-zone.yaml", "zone: dc-config\n", ZONES);
    let without = config(&lab, "without.yaml", "", ZONES);
    let env = [("READYPRISM_ZONE", "dc-env")];
    // (config, environment, flag, what `check` says it would pick here)
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&str, Env, Option<&str>, &str); 5] = [
        (&with_zone, &env, Some("dc-flag"), "dc-flag (from flag)"),
        (&without, &env, Some("dc-flag"), "dc-flag (from flag)"),
        (&with_zone, &env, None, "dc-env (from env)"),
        (&with_zone, &[], None, "dc-config (from config)"),
        (&without, &[], None, "dc-a (from address 10.0.1.5)"),
    ];
    for (file, env, flag, want) in cases {
        let mut args = vec!["check", "--skip-node-files", "--config", file];
        // --skip-node-files skips the addresses too: check once without, once with.
        let o = readyprism(&ns, env, &args);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!out.contains("this node's zone"), "{out}");
        args.remove(1);
        if let Some(z) = flag {
            args.extend(["--zone", z]);
        }
        let o = readyprism(&ns, env, &args);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            out.ends_with(&format!("# this node's zone: {want}\n")),
            "{file} {env:?} {flag:?}: {out}"
        );
        // The resolved zone map is printed.
        assert!(out.contains("zones:\n  dc-a:\n  - 10.0.1.0/24\n"), "{out}");
    }
    // `run` knows the source the same way: the environment, then the flag.
    let p = Proc::start_under(
        &[
            "ip",
            "netns",
            "exec",
            &ns.name,
            "env",
            "READYPRISM_ZONE=dc-env",
        ],
        Path::new(&with_zone),
    );
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["zone"], "dc-env");
    assert_eq!(started["fields"]["zone_source"], "env");
    drop(p);
    let script = "exec \"$0\" \"$@\" --zone dc-flag";
    let p = Proc::start_under(
        &["ip", "netns", "exec", &ns.name, "sh", "-c", script],
        Path::new(&with_zone),
    );
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["zone"], "dc-flag");
    assert_eq!(started["fields"]["zone_source"], "flag");
}

#[test]
fn no_zone_matching_this_node_starts_anyway_with_one_warning() {
    let test = "no_zone_matching_this_node_starts_anyway_with_one_warning";
    let Some(ns) = netns(test, &["10.0.1.5/24"]) else {
        return;
    };
    let lab = Lab::new();
    let file = config(&lab, "nomatch.yaml", "", "  dc-x: [\"10.9.0.0/16\"]\n");
    let p = Proc::start_under(&ns.exec(), Path::new(&file));
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["zone"], "");
    assert_eq!(started["fields"]["zone_source"], "");
    let warned = |v: &serde_json::Value| {
        v["level"] == "WARN"
            && v["fields"]["message"] == "no zone matches this node's addresses; zone unknown"
    };
    assert_eq!(p.logs().iter().filter(|v| warned(v)).count(), 1);
    let o = readyprism(
        &ns,
        &[],
        &["status", "--admin", &p.admin.to_string(), "--json"],
    );
    let doc: StatusDoc = serde_json::from_slice(&o.stdout).expect("status JSON");
    assert_eq!((doc.zone, doc.zone_source), (None, None));
}

#[test]
fn two_zones_holding_this_node_equally_start_with_a_warning_leaving_the_zone_unknown() {
    let test = "two_zones_holding_this_node_equally_start_with_a_warning_leaving_the_zone_unknown";
    // A node address in dc-a and a VIP (kube-vip, keepalived) in dc-b's network.
    let Some(ns) = netns(test, &["10.0.1.5/24", "10.0.2.100/32"]) else {
        return;
    };
    let lab = Lab::new();
    let file = config(&lab, "ambiguous.yaml", "", ZONES);
    let o = readyprism(&ns, &[], &["check", "--config", &file]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "check refused a run-time tie: {err}");
    assert!(
        out.ends_with("# this node's zone: unknown (this node's addresses are in two zones)\n"),
        "{out}"
    );
    assert!(err.starts_with("readyprism check: WARN: "), "{err}");
    for part in [
        "10.0.1.5",
        "dc-a",
        "10.0.2.100",
        "dc-b",
        "/24",
        "the zone is unknown",
    ] {
        assert!(err.contains(part), "{part} in {err}");
    }
    // `run` starts and serves, zone unknown, with one WARN saying why.
    let p = Proc::start_under(&ns.exec(), Path::new(&file));
    let warned = p.wait_log(
        "this node's addresses are in two zones, neither network more specific; zone unknown",
        |_| true,
    );
    assert_eq!(warned["level"], "WARN");
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["zone"], "", "{started}");
    // A zone set by hand settles it; an empty READYPRISM_ZONE is as if unset.
    let o = readyprism(&ns, &[], &["check", "--config", &file, "--zone", "dc-a"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = readyprism(
        &ns,
        &[("READYPRISM_ZONE", "")],
        &["check", "--config", &file],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("the zone is unknown"), "{}", stderr(&o));
    let o = readyprism(&ns, &[], &["check", "--config", &file, "--zone", ""]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "an empty --zone is still an error"
    );
}

/// This node's zone and its source as `/status` says, read inside `ns`.
fn status_zone(ns: &Netns, admin: &str) -> (Option<String>, Option<String>) {
    let o = readyprism(ns, &[], &["status", "--admin", admin, "--json"]);
    let doc: StatusDoc = serde_json::from_slice(&o.stdout).expect("status JSON");
    (doc.zone, doc.zone_source.map(|s| s.to_string()))
}

/// Waits until `/status` says zone `want` (with its source), polling; the deadline is twice the
/// usual patience, so the balancer's address poll (every 5 s) may come round before the change.
#[allow(clippy::disallowed_types)] // blocking code on this thread, not tokio's clock
fn wait_zone(ns: &Netns, admin: &str, want: (Option<&str>, Option<&str>)) {
    let want = (want.0.map(String::from), want.1.map(String::from));
    let deadline = std::time::Instant::now() + 2 * patience();
    loop {
        let now = status_zone(ns, admin);
        if now == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zone still {now:?}, waiting for {want:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_node_zone_follows_its_addresses_while_it_runs() {
    let test = "the_node_zone_follows_its_addresses_while_it_runs";
    // No address at start-up: DHCP has not answered yet.
    let Some(ns) = netns(test, &[]) else {
        return;
    };
    let ip = |args: &[&str]| {
        ns.run("ip", args).expect("ip addr in the namespace");
    };
    let lab = Lab::new();
    let file = config(&lab, "follow.yaml", "", ZONES);
    let p = Proc::start_under(&ns.exec(), Path::new(&file));
    let admin = p.admin.to_string();
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["zone"], "", "{started}");
    assert_eq!(status_zone(&ns, &admin), (None, None));
    let changed = |new: &'static str| move |v: &serde_json::Value| v["fields"]["new_zone"] == new;

    // The address arrives: the zone follows, without a hang-up, and says why.
    ip(&["addr", "add", "10.0.1.5/24", "dev", "v0"]);
    wait_zone(&ns, &admin, (Some("dc-a"), Some("address 10.0.1.5")));
    let line = p.wait_log("this node's zone changed", changed("dc-a"));
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["fields"]["old_zone"], "", "{line}");
    assert_eq!(line["fields"]["zone_source"], "address 10.0.1.5", "{line}");
    let why = line["fields"]["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("10.0.1.5") && why.contains("10.0.1.0/24"),
        "{line}"
    );

    // Renumbered into another zone.
    ip(&["addr", "del", "10.0.1.5/24", "dev", "v0"]);
    ip(&["addr", "add", "10.0.2.5/24", "dev", "v0"]);
    wait_zone(&ns, &admin, (Some("dc-b"), Some("address 10.0.2.5")));
    p.wait_log("this node's zone changed", changed("dc-b"));

    // A second address in another zone, as specific: the tie rule holds while running too.
    ip(&["addr", "add", "10.0.1.5/24", "dev", "v0"]);
    wait_zone(&ns, &admin, (None, None));
    let tie = "this node's addresses are in two zones, neither network more specific; zone unknown";
    assert_eq!(p.wait_log(tie, |_| true)["level"], "WARN");
    p.wait_log("this node's zone changed", |v| {
        v["fields"]["old_zone"] == "dc-b" && v["fields"]["new_zone"] == ""
    });

    // The tie resolved, then every address gone.
    ip(&["addr", "del", "10.0.2.5/24", "dev", "v0"]);
    wait_zone(&ns, &admin, (Some("dc-a"), Some("address 10.0.1.5")));
    ip(&["addr", "del", "10.0.1.5/24", "dev", "v0"]);
    wait_zone(&ns, &admin, (None, None));
    let gone = p.wait_log("this node's zone changed", |v| {
        v["fields"]["old_zone"] == "dc-a" && v["fields"]["new_zone"] == ""
    });
    let why = gone["fields"]["reason"].as_str().unwrap_or_default();
    assert!(why.contains("no address"), "{gone}");

    // Each change logged once: every line starts where the previous one ended.
    let changes: Vec<(String, String)> = p
        .logs()
        .iter()
        .filter(|v| v["fields"]["message"] == "this node's zone changed")
        .map(|v| {
            let f = |k: &str| v["fields"][k].as_str().unwrap_or_default().to_string();
            (f("old_zone"), f("new_zone"))
        })
        .collect();
    assert!(changes.len() >= 5, "{changes:?}");
    assert_eq!(changes[0].0, "", "{changes:?}");
    for pair in changes.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "{changes:?}");
    }
    assert!(changes.iter().all(|(old, new)| old != new), "{changes:?}");
}
