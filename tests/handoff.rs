//! A planned hand-off on the real binary: an apiserver whose only failing check is `shutdown`
//! (kube-apiserver's graceful shutdown, still serving) takes no new connections after one probe,
//! and its connections are closed each at a random point of `handoff_window` (reason `handoff`);
//! if it stops answering before the window ends, the rest are closed at once.
//!
//! Blocking code on OS threads beside the child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

use crate::support::process::Proc;
use crate::support::*;

/// kube-apiserver's `/readyz` while it shuts down gracefully.
const SHUTTING_DOWN: &str =
    "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n";

/// Probes every second and fall 3: a fall for any other reason takes three failed probes.
const HEALTH: &str = "health: { interval: 1s, timeout: 800ms, fast_interval: 1s, fall: 3 }\n";

/// `a` (this node's zone) and `b`, both ready, with `n` connections on `a`.
struct Drain {
    _lab: Lab,
    rt: Runtime,
    a: FakeApiserver,
    b: FakeApiserver,
    p: Proc,
    on_a: Vec<BufReader<TcpStream>>,
}

impl Drain {
    fn start(window: &str, n: usize) -> Drain {
        let lab = Lab::new();
        let rt = Runtime::new().expect("runtime");
        let (a, b) = rt.block_on(async { (lab.fake("a").await, lab.fake("b").await) });
        let file = lab.path("handoff.yaml");
        let extra = format!("{HEALTH}handoff_window: {window}\n");
        let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], &extra);
        std::fs::write(&file, yaml).expect("write config");
        let p = Proc::start(&file);
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
    let doc = d.rt.block_on(async {
        let mut doc = d.p.status();
        while doc.backends[0].state != Unready {
            doc = d.p.status();
            tokio::task::yield_now().await;
        }
        doc
    });
    assert!(
        doc.backends[0].consecutive_failures < 3,
        "fell before fall = 3 failed probes: {:?}",
        doc.backends[0]
    );
    assert_eq!(d.rt.block_on(landed(d.p.listen)), "b");
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
