//! Confirming the escape route on the real binary: a backend that turned unready keeps its
//! connections until the backend they would go to has passed a probe since its fall. Probes come
//! every 30 s here, so within a test the only probe of the route is the confirm the table asks
//! for: a failed one closes nothing, a passed one closes at once.
//!
//! Blocking code on OS threads beside the child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

use crate::support::process::Proc;
use crate::support::*;

/// Both ready, probed every 30 s: `local` (this node's zone) and `remote`, a balancer, and a
/// connection on `local`.
struct Route {
    _lab: Lab,
    rt: Runtime,
    local: FakeApiserver,
    remote: FakeApiserver,
    p: Proc,
    on_local: BufReader<TcpStream>,
}

impl Route {
    fn start() -> Route {
        let lab = Lab::new();
        let rt = Runtime::new().expect("runtime");
        let (local, remote) =
            rt.block_on(async { (lab.fake("local").await, lab.fake("remote").await) });
        let file = lab.path("escape.yaml");
        let yaml = lab.yaml(
            "dc-a",
            &[(addr(&local), "dc-a"), (addr(&remote), "dc-b")],
            SLOW_PROBES,
        );
        std::fs::write(&file, yaml).expect("write config");
        let p = Proc::start(&file);
        rt.block_on(poll("both ready", || p.states() == [Ready, Ready]));
        let (on_local, name) = rt.block_on(raw(p.listen)).expect("relayed");
        assert_eq!(name, "local", "zone order");
        Route {
            _lab: lab,
            rt,
            local,
            remote,
            p,
            on_local,
        }
    }

    /// `local` refuses new connections: two client dials fail (fall = 2) and it turns unready,
    /// while its kept-alive probe connection would still pass.
    fn fail_local(&self) {
        self.local.close_listener();
        // The fake drops its listener on its own task: wait until a dial is refused.
        let at = self.local.addr;
        self.rt.block_on(poll("local refuses", || {
            std::net::TcpStream::connect(at).is_err()
        }));
        for _ in 0..2 {
            assert_eq!(self.rt.block_on(landed(self.p.listen)), "remote");
        }
        self.rt
            .block_on(poll("local unready", || self.p.states()[0] == Unready));
    }

    fn confirms(&self) -> f64 {
        let labels = format!("backend=\"{}\"", addr(&self.remote));
        self.p.metric("readyprism_confirm_probes_total", &labels)
    }
}

#[test]
fn a_failed_confirm_probe_closes_nothing() {
    let r = Route::start();
    r.remote.control.set_ready(false); // its next probe, the confirm, fails
    r.fail_local();
    r.rt.block_on(poll("the confirm probe answered", || {
        r.p.status().backends[1].last_error.is_some()
    }));
    assert_eq!(r.confirms(), 1.0, "one confirm probe");
    let local = addr(&r.local);
    assert!(
        !r.p.logged("closing the backend's connections", |v| {
            v["fields"]["backend"] == local.as_str() && v["fields"]["reason"] == "turned_unready"
        }),
        "closed although its route failed the confirm"
    );
    assert_eq!(r.p.closes(&local, "turned_unready"), 0);
}

#[test]
fn a_passed_confirm_probe_closes_the_unready_backends_connections() {
    let mut r = Route::start();
    r.fail_local();
    assert!(
        r.rt.block_on(read_to_end(&mut r.on_local)).is_empty(),
        "closed once the route passed its confirm probe"
    );
    let local = addr(&r.local);
    r.rt.block_on(poll("counted", || {
        r.p.closes(&local, "turned_unready") == 1
    }));
    assert_eq!(r.confirms(), 1.0, "one confirm probe, not one per check");
    assert_eq!(r.rt.block_on(landed(r.p.listen)), "remote");
}
