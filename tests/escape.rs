//! Confirming the escape route on the app run from its config file: a backend that turned unready keeps its
//! connections until the backend they would go to has passed a probe since its fall, and its own
//! confirm, asked with the route's, still fails. Probes come every 30 s in most tests here, so the
//! only probe of the route is the confirm the table asks for: a failed one closes nothing, a
//! passed one closes as soon as the fallen backend's own confirm fails. A blink seen by the fallen
//! backend's probes alone closes nothing: its own confirm passes.
//!
//! Blocking code on OS threads beside the app's own thread: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

use crate::support::Running;
use crate::support::*;

/// Both ready, probed as `health` says: `local` (this node's zone) and `remote`, a balancer, and
/// a connection on `local`.
struct Route {
    _lab: Lab,
    rt: Runtime,
    local: FakeApiserver,
    remote: FakeApiserver,
    p: Running,
    on_local: BufReader<TcpStream>,
}

impl Route {
    fn start(health: &str) -> Route {
        Route::start_with(health, false)
    }

    /// With `short_queue`, `local` listens with a one-slot accept queue: once it stops
    /// accepting and the queue is full, dials to it hang.
    fn start_with(health: &str, short_queue: bool) -> Route {
        let lab = Lab::new();
        let rt = Runtime::new().expect("runtime");
        let (local, remote) = rt.block_on(async {
            let local = if short_queue {
                let listener = readyprism::testing::short_queue().expect("short queue");
                lab.cluster.fake_on("local", listener)
            } else {
                lab.fake("local").await
            };
            (local, lab.fake("remote").await)
        });
        let file = lab.two_zone_config("escape.yaml", (&local, &remote), health);
        let p = Running::start(&file);
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

    /// Confirm probes made of `f`.
    fn confirms(&self, f: &FakeApiserver) -> f64 {
        let labels = format!("backend=\"{}\"", addr(f));
        self.p.metric("readyprism_confirm_probes_total", &labels)
    }

    /// State changes of `f` to `to` (`ready`, `unready`).
    fn changes(&self, f: &FakeApiserver, to: &str) -> f64 {
        let labels = format!("backend=\"{}\",to=\"{to}\"", addr(f));
        self.p
            .metric("readyprism_backend_state_changes_total", &labels)
    }
}

#[test]
fn a_failed_confirm_probe_closes_nothing() {
    let r = Route::start(SLOW_PROBES);
    r.remote.control.set_ready(false); // its next probe, the confirm, fails
    r.fail_local();
    r.rt.block_on(poll("the confirm probe answered", || {
        r.p.status().backends[1].last_error.is_some()
    }));
    assert_eq!(r.confirms(&r.remote), 1.0, "one confirm probe");
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
    let mut r = Route::start(SLOW_PROBES);
    r.fail_local();
    assert!(
        r.rt.block_on(read_to_end(&mut r.on_local)).is_empty(),
        "closed once the route passed its confirm probe"
    );
    let local = addr(&r.local);
    r.rt.block_on(poll("counted", || {
        r.p.closes(&local, "turned_unready") == 1
    }));
    assert_eq!(
        r.confirms(&r.remote),
        1.0,
        "one confirm probe, not one per check"
    );
    assert_eq!(r.rt.block_on(landed(r.p.listen)), "remote");
}

/// Probes every 2 s, every second while a change is pending, a fall of two and a rise of three:
/// a backend that fails two answers falls, and passing again it stays unready (rising) for two
/// more probes, about two seconds.
const BLINKING: &str =
    "health: { interval: 2s, timeout: 1500ms, fast_interval: 1s, fall: 2, rise: 3 }\n";

#[test]
fn a_blink_seen_only_by_the_fallen_backends_probes_closes_nothing() {
    let mut r = Route::start(BLINKING);
    // The route answers its probes in 500 ms, so its confirm, asked with the fallen backend's own
    // (answered at once), passes long after it, with a 500 ms wait for it beyond that.
    r.remote
        .control
        .set_readyz_delay(Duration::from_millis(500));
    // `local` fails its next two answers and falls on the second, while `remote` keeps passing
    // (its probes missed the blink); the blink is over as it falls: its own confirm passes.
    let hits = r.local.control.readyz_hits.load(SeqCst);
    r.local.control.fail_next(2);
    r.rt.block_on(poll("local fell and rose again", || {
        r.changes(&r.local, "unready") == 1.0 && r.p.states() == [Ready, Ready]
    }));
    assert!(
        r.local.control.readyz_hits.load(SeqCst) >= hits + 5,
        "two failures, its own confirm, two more passes"
    );
    let local = addr(&r.local);
    assert_eq!(
        r.p.closes(&local, "turned_unready"),
        0,
        "closed on the route's pass alone"
    );
    assert!(
        !r.p.logged("closing the backend's connections", |_| true),
        "a connection was moved though its backend passed its own confirm"
    );
    assert!(r.rt.block_on(echoes(&mut r.on_local)), "still on local");
    assert_eq!(
        r.confirms(&r.local),
        1.0,
        "its own confirm, asked at its fall"
    );
}

#[test]
fn a_fallen_backend_slow_to_answer_its_own_confirm_is_left_a_round_trip_after_the_routes_pass() {
    let mut r = Route::start(BLINKING);
    // `local` answers in 500 ms (an apiserver without etcd quorum can be slow to say so): it fails
    // two answers and falls, then its own confirm passes, 500 ms after it was asked. The route
    // passes at once (its confirm, or a probe that started during the fall's answer); the wait
    // for the fallen backend's own answer is one round trip of that, so its connections move
    // long before it answers, on the writer's timer: the route's next probe is due over a second
    // after the fall.
    r.local.control.set_readyz_delay(Duration::from_millis(500));
    r.local.control.fail_next(2);
    assert!(
        r.rt.block_on(read_to_end(&mut r.on_local)).is_empty(),
        "closed once the wait for its own confirm ran out"
    );
    let local = addr(&r.local);
    r.rt.block_on(poll("counted", || {
        r.p.closes(&local, "turned_unready") == 1
    }));
    assert_eq!(r.confirms(&r.local), 1.0, "its own confirm was asked");
}

/// Probes every 5 s, every second while a change is pending; dials time out after 300 ms.
const FIVE: &str =
    "health: { interval: 5s, timeout: 2s, fast_interval: 1s, fall: 2, rise: 2 }\nconnect_timeout: 300ms\n";

#[test]
fn a_route_that_failed_since_the_fall_saw_the_blink_so_an_older_own_failure_moves_nothing() {
    // A blink on this node: `local` stops answering new connections and falls (two client dials
    // time out), its own confirm fails, and so does the route's: the node sees the event through
    // the route too. The route passes its re-probe a second later, the blink over: the failure of
    // `local` is a round older than that pass, so its connections wait for its next result, which
    // passes. (Closing on the route's pass would move them though `local` recovers.)
    let mut r = Route::start_with(FIVE, true);
    let hold = r.rt.block_on(async {
        r.remote.control.fail_next(1); // its next answer is the confirm
        r.local.control.set_accepting(false);
        let mut fillers = Vec::new();
        for _ in 0..16 {
            match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(r.local.addr))
                .await
            {
                Ok(Ok(s)) => fillers.push(s),
                _ => break, // the queue is full: dials now hang
            }
        }
        fillers
    });
    for _ in 0..2 {
        assert_eq!(r.rt.block_on(landed(r.p.listen)), "remote");
    }
    r.rt.block_on(poll("local unready", || r.p.states()[0] == Unready));
    r.rt.block_on(poll("both confirms failed, the route passed again", || {
        let doc = r.p.status();
        let own_failed = doc.backends[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("unanswered"));
        own_failed
            && r.confirms(&r.local) == 1.0
            && r.confirms(&r.remote) == 1.0
            && doc.backends[1].last_error.is_none()
            && doc.backends[1].state == Ready
    }));
    assert!(
        r.p.metric(
            "readyprism_health_checks_total",
            &format!("backend=\"{}\",result=\"fail\"", addr(&r.remote))
        ) >= 1.0,
        "the route failed its confirm"
    );
    r.local.control.set_accepting(true); // the blink is over for `local` too
    r.rt.block_on(poll("local rose again", || {
        r.changes(&r.local, "unready") == 1.0 && r.p.states() == [Ready, Ready]
    }));
    drop(hold);
    let local = addr(&r.local);
    assert_eq!(
        r.p.closes(&local, "turned_unready"),
        0,
        "moved on the route's pass"
    );
    assert!(
        !r.p.logged("closing the backend's connections", |_| true),
        "a connection was moved though its backend's failure was older than the route's pass"
    );
    assert!(r.rt.block_on(echoes(&mut r.on_local)), "still on local");
}
