//! A cluster-wide blink on the app run from its config file: every apiserver fails `/readyz` together (an etcd
//! leader election, a control-plane roll). Nothing is closed, the event is logged once with each
//! backend's failing checks and exported; when the apiservers recover, the connections that
//! failed open to one stay there while it rises.
//!
//! Blocking code on OS threads beside the app's own thread: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

use crate::support::Running;
use crate::support::*;

/// Probes every second; a rise takes two more at one second each, so a backend that recovers
/// with another is still rising (or ready) one interval after the other turned ready.
/// Not paced on re-entry (`reentry_window: 0s`): these tests place connections by zone order
/// right after a backend turns ready (pacing: `tests/reentry.rs`).
const HEALTH: &str =
    "health: { interval: 1s, timeout: 800ms, fast_interval: 1s, rise: 3 }\nreentry_window: 0s\n";

/// Two ready apiservers, `a` in this node's zone and `b` not, with a connection on each.
struct Blink {
    _lab: Lab,
    rt: Runtime,
    a: FakeApiserver,
    b: FakeApiserver,
    p: Running,
    on_a: BufReader<TcpStream>,
    on_b: BufReader<TcpStream>,
}

impl Blink {
    fn start() -> Blink {
        let lab = Lab::new();
        let rt = Runtime::new().expect("runtime");
        let (a, b) = rt.block_on(async { (lab.fake("a").await, lab.fake("b").await) });
        let file = lab.two_zone_config("blink.yaml", (&a, &b), HEALTH);
        // `a` unready at first, so the first connection goes to `b` and stays there.
        a.control.set_ready(false);
        let p = Running::start(&file);
        rt.block_on(poll("a unready, b ready", || {
            p.states() == [Unready, Ready]
        }));
        let (on_b, name) = rt.block_on(raw(p.listen)).expect("relayed");
        assert_eq!(name, "b");
        a.control.set_ready(true);
        rt.block_on(poll("both ready", || p.states() == [Ready, Ready]));
        let (on_a, name) = rt.block_on(raw(p.listen)).expect("relayed");
        assert_eq!(name, "a", "zone order");
        Blink {
            _lab: lab,
            rt,
            a,
            b,
            p,
            on_a,
            on_b,
        }
    }

    /// Every apiserver fails `/readyz` together; returns once both are unready.
    fn fail_both(&self) {
        self.a.control.set_ready(false);
        self.b.control.set_ready(false);
        self.rt.block_on(poll("both unready", || {
            self.p.states() == [Unready, Unready]
        }));
    }

    fn closed(&self) -> u64 {
        [&self.a, &self.b]
            .iter()
            .flat_map(|f| {
                ["turned_unready", "left_none_ready", "silent"].map(|r| self.p.closes(&addr(f), r))
            })
            .sum()
    }

    /// Passed probes of `f`, from `/metrics`.
    fn passes(&self, f: &FakeApiserver) -> f64 {
        self.checks(f, "pass")
    }

    /// Failed checks of `f`, from `/metrics`.
    fn fails(&self, f: &FakeApiserver) -> f64 {
        self.checks(f, "fail")
    }

    fn checks(&self, f: &FakeApiserver, result: &str) -> f64 {
        let labels = format!("backend=\"{}\",result=\"{result}\"", addr(f));
        self.p.metric("readyprism_health_checks_total", &labels)
    }
}

#[test]
fn every_backend_failing_closes_nothing() {
    let mut t = Blink::start();
    t.fail_both();
    let warned = t.p.wait_log(
        "no backend is ready; failing open: routing to all backends",
        |_| true,
    );
    let checks = warned["fields"]["checks"].as_str().unwrap_or_default();
    for f in [&t.a, &t.b] {
        assert!(
            checks.contains(&format!("{}: etcd", addr(f))),
            "each backend's failing checks: {warned}"
        );
    }
    assert_eq!(t.p.metric("readyprism_no_ready_backends", ""), 1.0);
    assert_eq!(
        t.p.metric("readyprism_no_ready_backends_events_total", ""),
        1.0
    );
    // A negative needs a window: the fall's confirm probes (asked at once) and the close spread
    // (1 s) are over once each backend has failed three more checks, ≥ 1.8 s apart.
    let (a, b) = (t.fails(&t.a), t.fails(&t.b));
    t.rt.block_on(poll("three more failed checks each", || {
        t.fails(&t.a) >= a + 3.0 && t.fails(&t.b) >= b + 3.0
    }));
    assert!(
        !t.p.logged("closing the backend's connections", |_| true),
        "a connection was moved during the blink"
    );
    assert_eq!(t.closed(), 0);
    assert!(t.rt.block_on(echoes(&mut t.on_a)), "still on a");
    assert!(t.rt.block_on(echoes(&mut t.on_b)), "still on b");
}

#[test]
fn connections_on_a_recovering_backend_stay_after_a_cluster_wide_blink() {
    let mut t = Blink::start();
    t.fail_both();
    t.a.control.set_ready(true);
    t.b.control.set_ready(true);
    t.rt.block_on(poll("both ready", || t.p.states() == [Ready, Ready]));
    // A negative needs a window: well past one probe interval after the first turned ready and
    // the close spread (each has passed four more probes since both were ready, ≥ 0.9 s apart).
    let (a, b) = (t.passes(&t.a), t.passes(&t.b));
    t.rt.block_on(poll("four more probes each", || {
        t.passes(&t.a) >= a + 4.0 && t.passes(&t.b) >= b + 4.0
    }));
    assert!(
        !t.p.logged("closing the backend's connections", |_| true),
        "a connection on a recovering backend was moved"
    );
    assert_eq!(t.closed(), 0);
    assert!(t.rt.block_on(echoes(&mut t.on_a)), "still on a");
    assert!(t.rt.block_on(echoes(&mut t.on_b)), "still on b");
}

/// Seconds into the day of a JSON log line's `timestamp` (RFC 3339, UTC).
fn day_secs(line: &serde_json::Value) -> f64 {
    let ts = line["timestamp"].as_str().expect("timestamp");
    let time = ts.split('T').nth(1).expect("a time").trim_end_matches('Z');
    time.split(':')
        .map(|p| p.parse::<f64>().expect("a number"))
        .fold(0.0, |acc, p| acc * 60.0 + p)
}

#[test]
fn connections_failed_open_to_a_backend_down_long_before_the_blink_move_when_another_is_ready() {
    // `x` in this node's zone is down from the start (it answers 500, so failing open picks it
    // first); `y` blinks. The connection that failed open to `x` moves as soon as `y` is ready
    // again: `x` was not part of the event, nothing says it is recovering.
    let interval = 2.0;
    let lab = Lab::new();
    let rt = Runtime::new().expect("runtime");
    let (x, y) = rt.block_on(async { (lab.fake("x").await, lab.fake("y").await) });
    let health = "health: { interval: 2s, timeout: 800ms, fast_interval: 300ms, rise: 2 }\n";
    let file = lab.two_zone_config("blink.yaml", (&x, &y), health);
    x.control.set_ready(false);
    let p = Running::start(&file);
    rt.block_on(poll("x unready, y ready", || {
        p.states() == [Unready, Ready]
    }));
    // Down for longer than an interval before the blink: two more failed checks at 2 s.
    let failed = |f: &FakeApiserver| {
        let labels = format!("backend=\"{}\",result=\"fail\"", addr(f));
        p.metric("readyprism_health_checks_total", &labels)
    };
    let before = failed(&x);
    rt.block_on(poll("x failed two more checks", || {
        failed(&x) >= before + 2.0
    }));
    y.control.set_ready(false);
    rt.block_on(poll("both unready", || p.states() == [Unready, Unready]));
    let (mut on_x, name) = rt.block_on(raw(p.listen)).expect("relayed");
    assert_eq!(name, "x", "failing open: the zone first");
    y.control.set_ready(true);
    let left = p.wait_log(
        "a backend is ready again; leaving the no-ready-backend state",
        |_| true,
    );
    let moved = p.wait_log("closing the backend's connections", |v| {
        v["fields"]["backend"] == addr(&x).as_str() && v["fields"]["reason"] == "left_none_ready"
    });
    let after = day_secs(&moved) - day_secs(&left);
    assert!(
        after < interval / 2.0,
        "moved {after:.2} s after y was ready again: at once, not one interval later"
    );
    assert!(
        !rt.block_on(echoes(&mut on_x)),
        "the connection on x is closed"
    );
    assert_eq!(p.closes(&addr(&x), "left_none_ready"), 1);
}
