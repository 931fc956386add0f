//! This balancer's own addresses are never its backends, on the app run from its config file, in each form that
//! once got through: the v4-mapped IPv6 form of a loopback listener, the node's own address
//! behind a wildcard listener, and the admin port. A static backend there is refused by `check`
//! (file, field, line); a discovery answer listing one never makes it a backend.
//!
//! Blocking code on OS threads beside the app's own thread: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::net::{IpAddr, SocketAddr};

use readyprism::admin::status::StatusDoc;
use readyprism::sim::apiserver::FakeApiserver;

use crate::support::Running;
use crate::support::*;

/// The refusal `check` gives a static backend at one of this balancer's own addresses.
fn check_refuses(lab: &Lab, name: &str, listen: &str, backend: &str, what: &str) {
    let yaml = lab
        .yaml("dc-a", &[(backend.to_string(), "dc-a")], "")
        .replace(
            "listen: [\"127.0.0.1:0\"]",
            &format!("listen: [\"{listen}\"]"),
        )
        .replace("admin: \"127.0.0.1:0\"", "admin: \"127.0.0.1:7446\"");
    let file = lab.write(name, &yaml);
    let line = yaml
        .lines()
        .position(|l| l.contains(backend))
        .expect("the backend's line")
        + 1;
    let o = readyprism(&["check", "--config", &file]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "check accepted {backend}: {err}");
    let want = format!(
        "{file}:{line}: backends[0].address: {backend:?} is this balancer's own {what} address"
    );
    assert!(err.contains(&want), "{err:?} lacks {want:?}");
}

fn status(p: &Running) -> StatusDoc {
    serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status")
}

/// A balancer listening on `listen`, a static fake `a` and a fake `b` only discovery lists,
/// discovery asking every second.
struct Discovering {
    a: FakeApiserver,
    b: FakeApiserver,
    p: Running,
    _lab: Lab,
    rt: tokio::runtime::Runtime,
}

fn discovering(listen: &str) -> Discovering {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let extra = "discovery:\n  endpoints: true\n  interval: 1s\n";
    let (a, file) = lab.fake_and_config(&rt, "discovering.yaml", extra);
    let yaml = std::fs::read_to_string(&file).expect("config");
    let moved = yaml.replace(
        "listen: [\"127.0.0.1:0\"]",
        &format!("listen: [\"{listen}\"]"),
    );
    std::fs::write(&file, moved).expect("write");
    let b = rt.block_on(lab.fake("b"));
    let p = Running::start(&file);
    Discovering {
        a,
        b,
        p,
        _lab: lab,
        rt,
    }
}

impl Discovering {
    /// Every answer lists `a`, `own` and `b`: once `b` is a backend the answer was taken, and
    /// `own` must not be one.
    fn own_never_listed(&self, own: SocketAddr) {
        let listed = [self.a.addr, own, self.b.addr];
        for f in [&self.a, &self.b] {
            f.control.set_endpoints(&listed);
        }
        let b = addr(&self.b);
        self.rt.block_on(poll("discovery lists b", || {
            status(&self.p).backends.iter().any(|x| x.address == b)
        }));
        let backends: Vec<String> = status(&self.p)
            .backends
            .into_iter()
            .map(|x| x.address)
            .collect();
        assert_eq!(backends, [addr(&self.a), b], "{own} is never a backend");
        let warned = self.p.wait_log(
            "discovery lists this balancer's own address; refused (it would relay to itself)",
            |_| true,
        );
        assert_eq!(warned["fields"]["addresses"], own.to_string());
    }
}

#[test]
fn the_v4_mapped_form_of_a_loopback_listener_is_never_a_backend() {
    let lab = Lab::new();
    check_refuses(
        &lab,
        "mapped.yaml",
        "127.0.0.1:7445",
        "[::ffff:127.0.0.1]:7445",
        "listen",
    );
    let d = discovering("127.0.0.1:0");
    let mapped = SocketAddr::new(
        "::ffff:127.0.0.1".parse().expect("literal"),
        d.p.listen.port(),
    );
    d.own_never_listed(mapped);
}

/// A non-loopback address of this host: an IPv4 one if any (dialled without a scope), else an
/// IPv6 one that is not link-local.
fn node_address() -> Option<IpAddr> {
    let addrs = readyprism::config::zones::list_interface_addresses().expect("list addresses");
    let usable = |a: &&IpAddr| match a {
        IpAddr::V4(v4) => !v4.is_loopback(),
        IpAddr::V6(v6) => !v6.is_loopback() && !v6.is_unicast_link_local(),
    };
    let v4 = addrs.iter().filter(usable).find(|a| a.is_ipv4());
    v4.or_else(|| addrs.iter().find(usable)).copied()
}

#[test]
fn the_nodes_own_address_behind_a_wildcard_listener_is_never_a_backend() {
    let Some(node) = node_address() else {
        eprintln!(
            "SKIPPED the_nodes_own_address_behind_a_wildcard_listener_is_never_a_backend: \
             this host has no non-loopback address"
        );
        return;
    };
    let lab = Lab::new();
    let at_listen = SocketAddr::new(node, 17445).to_string();
    check_refuses(&lab, "node.yaml", "0.0.0.0:17445", &at_listen, "listen");
    let d = discovering("0.0.0.0:0");
    d.own_never_listed(SocketAddr::new(node, d.p.listen.port()));
}

#[test]
fn the_admin_port_is_never_a_backend() {
    let lab = Lab::new();
    check_refuses(
        &lab,
        "admin.yaml",
        "127.0.0.1:7445",
        "127.0.0.1:7446",
        "admin",
    );
    check_refuses(
        &lab,
        "admin-mapped.yaml",
        "127.0.0.1:7445",
        "[::ffff:127.0.0.1]:7446",
        "admin",
    );
    let d = discovering("127.0.0.1:0");
    d.own_never_listed(d.p.admin);
}
