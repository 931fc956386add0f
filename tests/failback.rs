//! Failback on the app run from its config file (the binary where a test needs the process), as a flapping home apiserver meets it: a failback under way is
//! called off once this node's zone has no ready backend left, and the streams it has not closed
//! yet stay on the far backend instead of re-dialling it.
//!
//! Blocking code on OS threads beside the app's thread or child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::time::Instant;

use readyprism::admin::status::StatusDoc;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{self, Ready, Unready};

use crate::support::process::Proc;
use crate::support::*;

/// Long-lived streams on the far backend (kubelets' watches, say), enough that a failback's
/// spread has closed only a few of them by the time the home backend is unready again.
const STREAMS: usize = 30;

fn states(p: &impl Balancer) -> Vec<State> {
    let doc: StatusDoc = serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status");
    doc.backends.iter().map(|b| b.state).collect()
}

/// Connections to `f` closed for `reason`, from `/metrics`.
fn closes(p: &impl Balancer, f: &FakeApiserver, reason: &str) -> usize {
    let labels = format!("backend=\"{}\",reason=\"{reason}\"", addr(f));
    let text = blocking_get(p.admin, "/metrics").1;
    metric(&text, "readyprism_connections_closed_total", &labels).unwrap_or(0.0) as usize
}

/// A balancer in dc-a whose local backend is unready, with [`STREAMS`] streams on the far one.
struct Far<P> {
    file: std::path::PathBuf,
    local: FakeApiserver,
    remote: FakeApiserver,
    p: P,
    streams: Vec<tokio::io::BufReader<tokio::net::TcpStream>>,
}

impl<P: Balancer> Far<P> {
    /// Turns the local apiserver ready and waits until the failback has closed its first
    /// stream; its closes spread over the failback window from then on. Returns when it began.
    fn begin_failback(&self, rt: &tokio::runtime::Runtime) -> Instant {
        self.local.control.set_ready(true);
        rt.block_on(poll("the failback begun", || {
            closes(&self.p, &self.remote, "failback") > 0
        }));
        Instant::now()
    }

    /// Checks that every stream the failback has not closed (`closed` of them) still relays.
    fn assert_the_rest_relay(&mut self, rt: &tokio::runtime::Runtime, closed: usize) {
        let alive = rt.block_on(echoing(&mut self.streams));
        assert_eq!(
            alive,
            STREAMS - closed,
            "the streams not closed still relay"
        );
    }

    /// Waits for the log line `message` that calls off the far backend's failback.
    fn called_off(&self, message: &str) -> serde_json::Value {
        let called_off = self.p.wait_log(message, |v| {
            v["fields"]["backend"] == addr(&self.remote).as_str()
        });
        assert_eq!(called_off["fields"]["reason"], "failback", "{called_off}");
        called_off
    }
}

/// A negative needs a window: sleeps until every turn of a failback begun at `begun` is past.
fn past_the_spread(begun: Instant) {
    let spread_over = begun + readyprism::testing::FAILBACK_SPREAD;
    std::thread::sleep(spread_over.saturating_duration_since(Instant::now()));
}

fn far_streams<P: Balancer>(
    lab: &Lab,
    rt: &tokio::runtime::Runtime,
    start: impl FnOnce(&std::path::Path) -> P,
) -> Far<P> {
    let (local, remote) =
        rt.block_on(async { (lab.fake("local").await, lab.fake("remote").await) });
    local.control.set_ready(false);
    let file = lab.two_zone_config("failback.yaml", (&local, &remote), "failback_after: 1s\n");
    let p = start(&file);
    rt.block_on(poll("local unready, remote ready", || {
        states(&p) == [Unready, Ready]
    }));
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let (c, name) = rt.block_on(raw(p.listen)).expect("relayed");
        assert_eq!(name, "remote", "the only ready backend");
        streams.push(c);
    }
    Far {
        file,
        local,
        remote,
        p,
        streams,
    }
}

#[test]
fn a_failback_under_way_is_called_off_when_the_home_backend_turns_unready_again() {
    let lab = Lab::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut far = far_streams(&lab, &rt, Running::start);
    let (p, remote) = (&far.p, &far.remote);

    // The local apiserver is back: a second after it turned ready, the failback begins, its
    // closes spread over the failback window ...
    let begun = far.begin_failback(&rt);
    // ... and the local apiserver turns unready again before the spread is over.
    far.local.control.set_ready(false);
    rt.block_on(poll("local unready again", || {
        states(p) == [Unready, Ready]
    }));
    let before_call_off = closes(p, remote, "failback");
    assert!(
        before_call_off < STREAMS,
        "the whole spread went by before the local backend was unready; nothing left to show"
    );

    past_the_spread(begun);
    let closed = closes(p, remote, "failback");
    assert_eq!(
        closed, before_call_off,
        "streams closed for failback after the local backend was unready again"
    );
    far.assert_the_rest_relay(&rt, closed);
    let called_off = far.called_off(
        "no backend in this node's zone is ready; failback called off, the backend's connections not yet closed stay",
    );
    assert!(
        called_off["fields"]["active"].as_u64() >= Some((STREAMS - closed) as u64),
        "{called_off}"
    );
}

#[test]
fn a_far_backend_turning_unready_during_its_failback_has_its_remaining_streams_closed_at_once() {
    let lab = Lab::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let far = far_streams(&lab, &rt, Running::start);
    let (p, remote) = (&far.p, &far.remote);

    // The failback begins, its closes spread over the failback window ...
    far.begin_failback(&rt);
    // ... and the far backend turns unready before the spread is over: the streams still
    // waiting for their failback turn must not stay on it until then.
    remote.control.set_ready(false);
    rt.block_on(poll("remote unready", || states(p) == [Ready, Unready]));
    assert!(
        closes(p, remote, "failback") < STREAMS,
        "the whole spread went by before the far backend was unready; nothing left to show"
    );
    rt.block_on(poll("every stream closed", || {
        closes(p, remote, "failback") + closes(p, remote, "turned_unready") == STREAMS
    }));
    assert!(
        closes(p, remote, "turned_unready") > 0,
        "the streams left of the failback were closed at their failback turns, not as turned_unready"
    );
}

#[test]
fn a_failback_under_way_is_called_off_for_a_backend_the_node_renumbers_into() {
    let lab = Lab::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // A process: the node's move is a reload by hang-up.
    let mut far = far_streams(&lab, &rt, Proc::start);

    // The failback begins, its closes spread over the failback window ...
    let begun = far.begin_failback(&rt);
    // ... and the node moves into the far backend's zone (renumbered; a reload says the same to
    // the table): its streams are home now.
    let yaml = std::fs::read_to_string(&far.file).expect("read config");
    std::fs::write(&far.file, yaml.replace("zone: dc-a\n", "zone: dc-b\n")).expect("write config");
    far.p.signal("HUP");
    rt.block_on(poll("the node in dc-b", || {
        far.p.status().zone.as_deref() == Some("dc-b")
    }));

    past_the_spread(begun);
    let closed = closes(&far.p, &far.remote, "failback");
    assert!(
        closed < STREAMS,
        "all {STREAMS} closed: the failback went on closing streams that are home now"
    );
    far.assert_the_rest_relay(&rt, closed);
    far.called_off(
        "this node's zone changed to the backend's own; failback called off, the backend's connections not yet closed stay",
    );
}
