//! A planned hand-off on the app run from its config file: an apiserver whose only failing check is `shutdown`
//! (kube-apiserver's graceful shutdown, still serving) takes no new connections after one probe,
//! and its connections are closed each at a random point of `handoff_window` (reason `handoff`),
//! one with a request outstanding then once it is answered (by the window's end at the latest);
//! if it stops answering before the window ends, the rest are closed at once. `shutdown` failing
//! beside another check (`poststarthook/rbac/bootstrap-roles`) is no hand-off: a fall as any other.
//!
//! Blocking code on OS threads beside the app's own thread: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

use crate::support::Running;
use crate::support::*;

/// kube-apiserver's `/readyz` while it shuts down gracefully.
const SHUTTING_DOWN: &str =
    "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n";

/// What the balancer logs when a hand-off's turn finds a request outstanding.
const WAITING: &str =
    "hand-off: a request is outstanding at the connection's turn; closing it once answered";

/// A request several relay reads long: its answer (the fake's echo) comes back in parts.
const REQUEST: usize = 64 * 1024;

/// Probes every second and fall 3: a fall for any other reason takes three failed probes.
const HEALTH: &str = "health: { interval: 1s, timeout: 800ms, fast_interval: 1s, fall: 3 }\n";

/// What the balancer logs when it calls a hand-off under way off.
const CALLED_OFF: &str = "hand-off called off; the backend's connections not yet closed stay";

/// `a` (this node's zone) and `b`, both ready, with `n` connections on `a`.
struct Drain {
    _lab: Lab,
    rt: Runtime,
    a: FakeApiserver,
    b: FakeApiserver,
    p: Running,
    on_a: Vec<BufReader<TcpStream>>,
}

impl Drain {
    fn start(window: &str, n: usize) -> Drain {
        Drain::start_with(HEALTH, window, n)
    }

    /// [`Drain::start`] with `health` as the `health:` line.
    fn start_with(health: &str, window: &str, n: usize) -> Drain {
        let lab = Lab::new();
        let rt = Runtime::new().expect("runtime");
        let (a, b) = rt.block_on(async { (lab.fake("a").await, lab.fake("b").await) });
        let file = lab.path("handoff.yaml");
        let extra = format!("{health}handoff_window: {window}\n");
        let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], &extra);
        std::fs::write(&file, yaml).expect("write config");
        let p = Running::start(&file);
        rt.block_on(poll("both ready", || p.states() == [Ready, Ready]));
        let on_a = (0..n)
            .map(|_| {
                let (c, name) = rt.block_on(raw(p.listen)).expect("relayed");
                assert_eq!(name, "a", "zone order");
                c
            })
            .collect();
        Drain {
            _lab: lab,
            rt,
            a,
            b,
            p,
            on_a,
        }
    }

    /// `a` starts its graceful shutdown: only `shutdown` fails.
    fn drain_a(&self) {
        let answer = (500, SHUTTING_DOWN.to_string());
        self.a.control.readyz_answer.store(Some(Arc::new(answer)));
    }

    /// `b` starts its graceful shutdown too.
    fn drain_b(&self) {
        let answer = (500, SHUTTING_DOWN.to_string());
        self.b.control.readyz_answer.store(Some(Arc::new(answer)));
    }

    /// Waits for the log line of `a`'s hand-off beginning (its connections bumped).
    fn handoff_begun(&self) {
        let a = addr(&self.a);
        self.p.wait_log("closing the backend's connections", |v| {
            v["fields"]["backend"] == a.as_str() && v["fields"]["reason"] == "handoff"
        });
    }

    /// How many connections on `a` still relay (each echoes a line).
    fn alive(&mut self) -> usize {
        self.rt.block_on(echoing(&mut self.on_a))
    }

    /// Past a's hand-off window: not all `n` of a's connections were closed for the hand-off
    /// (all would mean it went on `went_on`), and those left still relay; `prefix` starts each
    /// message. Returns how many it closed.
    fn assert_the_rest_stayed(&mut self, n: usize, prefix: &str, went_on: &str) -> usize {
        let closed = self.p.closes(&addr(&self.a), "handoff") as usize;
        assert!(
            closed < n,
            "{prefix}all {n} closed: the hand-off went on {went_on}"
        );
        assert_eq!(
            self.alive(),
            n - closed,
            "{prefix}the connections not closed still relay"
        );
        closed
    }

    /// Makes `a` hold its answers, sends a request on the (one) connection on `a`, and returns
    /// it once the balancer has relayed all of it to `a` (its byte count says so): the request
    /// is outstanding, and `a` echoes it as its answer once released.
    fn send_held_request(&mut self) -> Vec<u8> {
        self.a.control.set_raw_hold(true);
        let request: Vec<u8> = (0..REQUEST).map(|i| (i % 251) as u8).collect();
        let c = self.on_a[0].get_mut();
        self.rt
            .block_on(c.write_all(&request))
            .expect("send the request");
        let labels = format!("backend=\"{}\",direction=\"to_backend\"", addr(&self.a));
        let relayed = (b"RAW\n".len() + REQUEST) as f64;
        self.rt.block_on(poll("the request relayed to a", || {
            self.p.metric("readyprism_bytes_total", &labels) >= relayed
        }));
        request
    }

    /// Reads every connection on `a` to its end at once; returns when each ended, in order.
    fn ends(&mut self) -> Vec<Instant> {
        let streams = std::mem::take(&mut self.on_a);
        self.rt.block_on(async {
            let readers: Vec<_> = streams
                .into_iter()
                .map(|mut c| {
                    tokio::spawn(async move {
                        read_to_end(&mut c).await;
                        Instant::now()
                    })
                })
                .collect();
            let mut ends = Vec::new();
            for r in readers {
                ends.push(r.await.expect("reader"));
            }
            ends.sort();
            ends
        })
    }
}

#[test]
fn a_draining_backend_takes_no_new_connections_after_one_failed_probe() {
    let d = Drain::start("5s", 0);
    d.drain_a();
    let mut doc = d.p.status();
    d.rt.block_on(poll("a unready", || {
        doc = d.p.status();
        doc.backends[0].state == Unready
    }));
    assert!(
        doc.backends[0].consecutive_failures < 3,
        "fell before fall = 3 failed probes: {:?}",
        doc.backends[0]
    );
    assert_eq!(d.rt.block_on(landed(d.p.listen)), "b");
}

/// kube-apiserver past its delay with `--shutdown-send-retry-after` (on a probe path it does not
/// exempt): `429` with `Retry-After` is draining, a hand-off, not a failed check.
#[test]
fn a_429_with_retry_after_is_draining_and_hands_off() {
    const N: usize = 3;
    let mut d = Drain::start("2s", N);
    let answer = (
        429,
        "The apiserver is shutting down, please try again later.\n".to_string(),
    );
    d.a.control.readyz_answer.store(Some(Arc::new(answer)));
    d.ends();
    let a = addr(&d.a);
    d.rt.block_on(poll("every close counted as a hand-off", || {
        d.p.closes(&a, "handoff") == N as u64
    }));
    assert_eq!(d.p.closes(&a, "turned_unready"), 0);
    let doc = d.p.status();
    assert_eq!(
        doc.backends[0].failing_checks,
        ["shutdown"],
        "{:?}",
        doc.backends[0]
    );
    assert!(
        doc.backends[0].consecutive_failures < 3,
        "no fall of 3 failed probes: {:?}",
        doc.backends[0]
    );
}

#[test]
fn a_draining_backends_connections_are_closed_spread_across_the_handoff_window() {
    const N: usize = 12;
    let mut d = Drain::start("3s", N);
    d.drain_a();
    let ends = d.ends();
    let span = ends[N - 1] - ends[0];
    assert!(
        span >= Duration::from_secs(1),
        "closed over {span:?}, not spread across the 3 s window"
    );
    let a = addr(&d.a);
    d.rt.block_on(poll("every close counted", || {
        d.p.closes(&a, "handoff") == N as u64
    }));
    let record =
        d.p.wait_log("connection ended", |v| v["fields"]["reason"] == "handoff");
    assert_eq!(record["fields"]["backend"], a.as_str(), "{record}");
    assert_eq!(d.rt.block_on(landed(d.p.listen)), "b");
}

#[test]
fn a_draining_backend_that_stops_answering_has_the_rest_closed_at_once() {
    const N: usize = 6;
    // A window far beyond the test's patience: only the second bump can close them in time.
    let mut d = Drain::start("600s", N);
    d.drain_a();
    let a = addr(&d.a);
    d.p.wait_log("closing the backend's connections", |v| {
        v["fields"]["backend"] == a.as_str() && v["fields"]["reason"] == "handoff"
    });
    // Its /readyz now outlasts the probe timeout: it stopped answering.
    d.a.control.set_readyz_delay(Duration::from_secs(5));
    let ends = d.ends();
    assert_eq!(ends.len(), N);
    d.rt.block_on(poll("every close counted", || {
        d.p.closes(&a, "handoff") + d.p.closes(&a, "turned_unready") == N as u64
    }));
    assert!(
        d.p.closes(&a, "turned_unready") >= 1,
        "the rest closed at once"
    );
    let _ = &d.b;
}

#[test]
fn a_request_outstanding_at_its_handoff_turn_is_answered_before_the_close() {
    let mut d = Drain::start("1s", 1);
    let request = d.send_held_request();
    d.drain_a();
    let mut c = d.on_a.pop().expect("the connection on a");
    let reading = d.rt.spawn(async move { read_to_end(&mut c).await });
    d.rt.block_on(poll("its turn (or its end)", || {
        reading.is_finished() || d.p.logged(WAITING, |_| true)
    }));
    assert!(
        !reading.is_finished(),
        "closed at its turn with its request outstanding"
    );
    d.a.control.set_raw_hold(false);
    let got = d.rt.block_on(reading).expect("reader");
    assert!(
        got == request,
        "the whole answer before the close: {} of {} B",
        got.len(),
        request.len()
    );
    let a = addr(&d.a);
    d.rt.block_on(poll("the close counted as a hand-off", || {
        d.p.closes(&a, "handoff") == 1
    }));
    let record =
        d.p.wait_log("connection ended", |v| v["fields"]["reason"] == "handoff");
    assert_eq!(record["fields"]["backend"], a.as_str(), "{record}");
}

#[test]
fn a_request_never_answered_is_closed_by_the_end_of_the_handoff_window() {
    let mut d = Drain::start("1s", 1);
    d.send_held_request();
    d.drain_a();
    d.p.wait_log(WAITING, |_| true);
    let mut c = d.on_a.pop().expect("the connection on a");
    let got = d.rt.block_on(read_to_end(&mut c));
    assert!(got.is_empty(), "no answer came: {} B", got.len());
    let a = addr(&d.a);
    d.rt.block_on(poll("the close counted as a hand-off", || {
        d.p.closes(&a, "handoff") == 1
    }));
    assert_eq!(
        d.p.closes(&a, "turned_unready"),
        0,
        "a's checks but shutdown pass"
    );
}

#[test]
fn shutdown_failing_beside_a_post_start_hook_is_no_handoff() {
    // A window far beyond the test's patience: only a fall can close the connection in time.
    let mut d = Drain::start("600s", 1);
    let hook = "poststarthook/rbac/bootstrap-roles";
    d.a.control.set_check(hook, false);
    d.a.control.set_check("shutdown", false);
    let ends = d.ends();
    assert_eq!(ends.len(), 1);
    let a = addr(&d.a);
    d.rt.block_on(poll("the close counted", || {
        d.p.closes(&a, "turned_unready") + d.p.closes(&a, "handoff") == 1
    }));
    assert_eq!(d.p.closes(&a, "handoff"), 0, "judged a planned hand-off");
    let doc = d.p.status();
    assert_eq!(doc.backends[0].failing_checks, [hook, "shutdown"]);
    assert!(
        doc.backends[0].consecutive_failures >= 3,
        "fell by fall = 3, not at once: {:?}",
        doc.backends[0]
    );
}

/// A draining `a` answers ready again (`rise` 1: ready at once; 2: rising) a moment into a
/// [`WINDOW`] hand-off; once the window is over, the connections not closed by then still relay
/// and none was cut as `turned_unready`.
fn a_handoff_ends_when_the_backend_answers_ready_again(rise: u32) {
    const N: usize = 10;
    const WINDOW: Duration = Duration::from_secs(6);
    let health =
        format!("health: {{ interval: 1s, timeout: 800ms, fast_interval: 1s, rise: {rise} }}\n");
    let mut d = Drain::start_with(&health, "6s", N);
    d.drain_a();
    d.handoff_begun();
    let begun = Instant::now();
    d.a.control.readyz_answer.store(None);
    let a = addr(&d.a);
    d.rt.block_on(poll("a ready again", || d.p.states() == [Ready, Ready]));
    // A negative needs a window: every turn of the hand-off is past.
    std::thread::sleep((begun + WINDOW).saturating_duration_since(Instant::now()));
    let cut = d.p.closes(&a, "turned_unready");
    assert_eq!(cut, 0, "rise {rise}: the rest of the hand-off cut at once");
    d.assert_the_rest_stayed(N, &format!("rise {rise}: "), "after a answered ready");
    let called_off =
        d.p.wait_log(CALLED_OFF, |v| v["fields"]["backend"] == a.as_str());
    assert_eq!(
        called_off["fields"]["why"], "it answers ready again",
        "{called_off}"
    );
}

#[test]
fn a_handoff_is_called_off_when_the_backend_answers_ready_again() {
    a_handoff_ends_when_the_backend_answers_ready_again(2);
}

#[test]
fn a_handoff_is_called_off_when_the_backend_turns_ready_at_once() {
    a_handoff_ends_when_the_backend_answers_ready_again(1);
}

#[test]
fn a_handoff_waits_while_every_backend_drains_and_goes_on_once_one_is_ready() {
    const N: usize = 10;
    const WINDOW: Duration = Duration::from_secs(6);
    let mut d = Drain::start("6s", N);
    d.drain_a();
    d.handoff_begun();
    let begun = Instant::now();
    // b drains too (a roll that overlaps): nowhere better to go.
    d.drain_b();
    d.rt.block_on(poll("both draining", || d.p.states() == [Unready, Unready]));
    // A negative needs a window: every turn of a's hand-off is past.
    std::thread::sleep((begun + WINDOW).saturating_duration_since(Instant::now()));
    let a = addr(&d.a);
    d.assert_the_rest_stayed(N, "", "with no backend ready to go to");
    // b is back: a's hand-off goes on, to b.
    d.b.control.readyz_answer.store(None);
    let ends = d.ends();
    assert_eq!(ends.len(), N);
    d.rt.block_on(poll("every close counted", || {
        let all = ["handoff", "turned_unready", "left_none_ready"];
        all.iter().map(|r| d.p.closes(&a, r)).sum::<u64>() == N as u64
    }));
    assert_eq!(
        d.p.closes(&a, "handoff") as usize,
        N,
        "the rest closed as a hand-off once b was ready"
    );
    assert_eq!(d.rt.block_on(landed(d.p.listen)), "b");
}
