//! Paced re-entry on the real binary: an apiserver of this node's zone comes back from unready,
//! and a new connection reaches it only from the connection's own point of `reentry_window`:
//! sent to the remote apiserver before it (counted against the paced one), or, with nothing
//! else ready, held until it (counted, never past the window). Every draw is pinned
//! (`READYPRISM_REENTRY_DRAW`) so the point falls half-way through the window.
//!
//! On the process, not in it: the pinned draw is read once per process.
//!
//! Blocking code on OS threads beside the child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::time::{Duration, Instant};

use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::runtime::Runtime;

use crate::support::process::Proc;
use crate::support::*;

/// The window, and every connection's point half-way through it.
const WINDOW: Duration = Duration::from_secs(4);
const DRAW: &str = "0.5";

/// A connection counts as at its point this close before it: `/status` rounds to 1 ms.
const SLACK: Duration = Duration::from_millis(5);

/// Fast probes; `rise: 2`.
fn extra() -> String {
    format!(
        "health: {{ interval: 1s, timeout: 800ms, fast_interval: 1s, rise: 2 }}\nreentry_window: {}s\n",
        WINDOW.as_secs()
    )
}

/// `local` in the node's zone dc-a and `remote` (if any) in dc-b, behind the real binary; the
/// local one turned unready and then ready again.
struct Back {
    _lab: Lab,
    rt: Runtime,
    _fakes: Vec<FakeApiserver>,
    p: Proc,
    local: String,
    /// Every connection's point in the local one's window, from `/status` read right after it
    /// showed ready again.
    gate: Instant,
}

fn back_from_unready(with_remote: bool) -> Back {
    let lab = Lab::new();
    let rt = Runtime::new().expect("runtime");
    let names: Vec<&str> = ["local"]
        .into_iter()
        .chain(with_remote.then_some("remote"))
        .collect();
    let fakes: Vec<FakeApiserver> = rt.block_on(async {
        let mut v = Vec::new();
        for n in &names {
            v.push(lab.fake(n).await);
        }
        v
    });
    let zones = ["dc-a", "dc-b"];
    let backends: Vec<(String, &str)> = fakes.iter().map(addr).zip(zones).collect();
    let file = lab.write("reentry.yaml", &lab.yaml("dc-a", &backends, &extra()));
    let p = Proc::start_with_env(
        std::path::Path::new(&file),
        &[("READYPRISM_REENTRY_DRAW", DRAW)],
    );
    let all = |s| vec![s; fakes.len()];
    rt.block_on(poll("every backend ready", || p.states() == all(Ready)));
    fakes[0].control.set_ready(false);
    let mut want = vec![Unready];
    want.extend(with_remote.then_some(Ready));
    rt.block_on(poll("the local one unready", || p.states() == want));
    fakes[0].control.set_ready(true);
    rt.block_on(poll("the local one ready again", || {
        p.states() == all(Ready)
    }));
    let read = Instant::now();
    let doc = p.status();
    let left = doc.backends[0].reentry_window_left_s;
    let left = Duration::from_secs_f64(left.expect("in its window right after it turned ready"));
    // Opened at `read - (WINDOW - left)`; the point is half-way.
    let gate = read + left - WINDOW / 2;
    assert!(gate > read, "looked too late: {left:?} of the window left");
    Back {
        local: addr(&fakes[0]),
        _lab: lab,
        rt,
        _fakes: fakes,
        p,
        gate,
    }
}

#[test]
fn a_local_apiserver_back_from_unready_takes_a_connection_from_its_point_of_the_window() {
    let h = back_from_unready(true);
    // A connection every 50 ms until one lands home; the window's end bounds it.
    let deadline = h.gate + WINDOW + patience();
    let mut landed = Vec::new();
    let home = loop {
        assert!(
            Instant::now() < deadline,
            "no connection home by the window's end: {landed:?}"
        );
        let (_, name) = h.rt.block_on(raw(h.p.listen)).expect("relayed");
        let at = Instant::now();
        landed.push(name.clone());
        if name == "local" {
            break at;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        landed[0], "remote",
        "sent past the paced local one: {landed:?}"
    );
    assert!(
        home + SLACK >= h.gate,
        "home {:?} before the gate",
        h.gate - home
    );
    let deferred = h.p.metric(
        "readyprism_reentry_deferred_total",
        &format!("backend=\"{}\"", h.local),
    );
    assert_eq!(deferred as usize, landed.len() - 1, "{landed:?}");
    assert_eq!(h.p.metric("readyprism_reentry_waits_total", ""), 0.0);
}

#[test]
fn with_nothing_else_ready_a_new_connection_waits_for_its_point() {
    let h = back_from_unready(false);
    let (_, name) = h.rt.block_on(raw(h.p.listen)).expect("relayed");
    let answered = Instant::now();
    assert_eq!(name, "local");
    assert!(
        answered + SLACK >= h.gate,
        "answered {:?} before the gate",
        h.gate - answered
    );
    assert_eq!(h.p.metric("readyprism_reentry_waits_total", ""), 1.0);
    assert!(h.p.metric("readyprism_reentry_wait_seconds_total", "") > 0.0);
}
