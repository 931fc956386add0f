//! An overloaded apiserver on the real binary: its `/readyz` passes (exempt from priority and
//! fairness) while its request path refuses with `429` or slows down. The request check finds it
//! degraded: new connections go to the healthy apiserver, the ones on it stay, `/status`, the
//! status file, the metrics and one log line say so; healthy again, it takes new connections
//! again. The check rides the probe's connection: no handshake of its own, at most one `GET` per
//! interval.
//!
//! On the process, not in it: the interval is pinned below the 30 s minimum with
//! `READYPRISM_REQUEST_CHECK_INTERVAL`, read by the process.
//!
//! Blocking code on OS threads beside the child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::Ready;
use tokio::runtime::Runtime;

use crate::support::process::Proc;
use crate::support::*;

/// The pinned interval: a check after every probe (1 s apart) at most.
const EVERY: &str = "1s";

/// `local` in the node's zone dc-a and `remote` in dc-b, behind the real binary with the request
/// check pinned to [`EVERY`], both ready; `extra` is appended to the config.
struct Pair {
    lab: Lab,
    rt: Runtime,
    local: FakeApiserver,
    _remote: FakeApiserver,
    p: Proc,
}

fn pair(extra: impl FnOnce(&Lab) -> String) -> Pair {
    let lab = Lab::new();
    let extra = extra(&lab);
    let rt = Runtime::new().expect("runtime");
    let (local, remote) =
        rt.block_on(async { (lab.fake("local").await, lab.fake("remote").await) });
    let backends = [(addr(&local), "dc-a"), (addr(&remote), "dc-b")];
    let file = lab.write("overload.yaml", &lab.yaml("dc-a", &backends, &extra));
    let p = Proc::start_with_env(
        std::path::Path::new(&file),
        &[("READYPRISM_REQUEST_CHECK_INTERVAL", EVERY)],
    );
    rt.block_on(poll("both ready", || p.states() == [Ready, Ready]));
    Pair {
        lab,
        rt,
        local,
        _remote: remote,
        p,
    }
}

impl Pair {
    fn degraded(&self) -> Option<String> {
        self.p.status().backends[0].degraded.clone()
    }

    fn landed(&self) -> String {
        self.rt.block_on(landed(self.p.listen))
    }

    fn checks(&self, result: &str) -> f64 {
        let labels = format!("result=\"{result}\"");
        let local = addr(&self.local);
        let text = blocking_get(self.p.admin, "/metrics").1;
        text.lines()
            .filter(|l| l.starts_with("readyprism_request_checks_total{"))
            .filter(|l| l.contains(&local) && l.contains(&labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

#[test]
fn a_throttled_apiserver_is_ranked_after_the_healthy_one_and_keeps_its_connections() {
    let h = pair(|lab| {
        let file = lab.path("status.json");
        format!("status_file: \"{}\"\n", file.display())
    });
    let started = Instant::now();
    let local = addr(&h.local);
    assert_eq!(h.landed(), "local", "zone order while healthy");
    let (mut held, name) = h.rt.block_on(raw(h.p.listen)).expect("relayed");
    assert_eq!(name, "local");
    let handshakes = h.local.control.handshakes.load(SeqCst);

    h.local.control.set_throttled(true);
    h.rt.block_on(poll("the local apiserver degraded in /status", || {
        h.degraded().is_some()
    }));
    assert_eq!(
        h.degraded().as_deref(),
        Some("HTTP 429 Too Many Requests, Retry-After: 1s")
    );
    assert_eq!(h.p.states(), [Ready, Ready], "degraded is not unready");
    for _ in 0..3 {
        assert_eq!(h.landed(), "remote", "new connections to the healthy one");
    }
    assert!(
        h.rt.block_on(echoes(&mut held)),
        "the connection on the degraded one stays"
    );
    assert_eq!(
        h.p.metric("readyprism_backend_degraded", &local),
        1.0,
        "the gauge"
    );
    assert!(h.checks("throttled") >= 1.0, "counted as throttled");
    let line = h.p.wait_log("backend degraded: its request check finds it overloaded; ranked after the healthy backends for new connections, nothing closed", |l| {
        l["fields"]["backend"] == local.as_str()
    });
    assert_eq!(line["level"], "WARN");
    let file = h.lab.path("status.json");
    h.rt.block_on(poll("the status file says so", || {
        std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str::<readyprism::admin::StatusDoc>(&t).ok())
            .is_some_and(|doc| {
                doc.backends[0].degraded.as_deref()
                    == Some("HTTP 429 Too Many Requests, Retry-After: 1s")
            })
    }));

    h.local.control.set_throttled(false);
    h.rt.block_on(poll("healthy again", || h.degraded().is_none()));
    assert_eq!(h.landed(), "local", "home first again");
    h.p.wait_log("backend no longer degraded", |l| {
        l["fields"]["backend"] == local.as_str()
    });
    let said =
        h.p.logs()
            .iter()
            .filter(|l| {
                l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("backend degraded"))
            })
            .count();
    assert_eq!(said, 1, "one line per change, not one per check");
    assert!(
        h.rt.block_on(echoes(&mut held)),
        "still relayed: nothing was closed"
    );
    // The checks rode the probe's connection, at most one per interval (−10 % jitter).
    assert_eq!(
        h.local.control.handshakes.load(SeqCst),
        handshakes,
        "no handshake of its own"
    );
    let gets = h.local.control.version_gets.load(SeqCst) as f64;
    let bound = started.elapsed().as_secs_f64() / 0.9 + 2.0;
    assert!(gets <= bound, "{gets} GETs in {:?}", started.elapsed());
}

#[test]
fn an_apiserver_five_times_slower_than_its_average_is_degraded_until_it_is_fast_again() {
    // A timeout that a 600 ms answer meets on a loaded machine: slow, not unanswered.
    let h = pair(|_| "health: { interval: 2s, timeout: 1500ms, fast_interval: 150ms }\n".into());
    h.rt.block_on(poll("three healthy checks to average", || {
        h.checks("healthy") >= 3.0
    }));
    h.local
        .control
        .set_request_delay(Duration::from_millis(600));
    h.rt.block_on(poll("slow: degraded", || h.degraded().is_some()));
    let why = h.degraded().unwrap_or_default();
    assert!(why.starts_with("slow: answered in 6"), "{why}");
    assert_eq!(h.landed(), "remote");
    h.local.control.set_request_delay(Duration::ZERO);
    h.rt.block_on(poll("fast again", || h.degraded().is_none()));
    assert_eq!(h.landed(), "local");
}

#[test]
fn with_the_checks_off_nothing_is_checked_and_a_throttled_apiserver_keeps_its_rank() {
    let h = pair(|_| {
        "health: { interval: 1s, timeout: 800ms, fast_interval: 150ms, request_check_interval: 0s }\n"
            .into()
    });
    h.local.control.set_throttled(true);
    let hits = h.local.control.readyz_hits.load(SeqCst);
    h.rt.block_on(poll("five more probes", || {
        h.local.control.readyz_hits.load(SeqCst) >= hits + 5
    }));
    assert_eq!(h.local.control.version_gets.load(SeqCst), 0, "no GET made");
    assert_eq!(h.degraded(), None);
    assert_eq!(h.landed(), "local");
}
