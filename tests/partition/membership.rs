//! Lab scenario 9: the control plane changes while the client runs, and no node's
//! config does. The balancer is configured with two seeds (dc-a, witness), the zones by network
//! and discovery on; dc-b's apiserver is known only from the cluster's Endpoints object. A
//! control-plane node joins in dc-b (`dc-b2`, 10.77.2.2), then dc-b's first apiserver leaves the
//! Endpoints object (its process keeps answering, as a node being drained does).
//!
//! The scenario runs once; each test judges one thing of its record. Asserted: the join moves nothing (the stream stays where it is); the leave moves only the
//! leaving backend's connections (the stream, closed with the reason `removed`, re-dials to
//! dc-b2 in the same zone) within the bound of 3 good answers; no client-visible error; the config
//! file never changes.

use std::net::Ipv4Addr;
use std::sync::OnceLock;
use std::time::Duration;

use super::cast::{poll, wall, Cast, ClientEvent, Exchange, Members, Readyz, APISERVER_PORT};
use super::netlab::{lab_print, Host, NetLab};

/// Discovery's poll interval in this scenario (the default is 30 s; the scenario is about what
/// moves, not about waiting).
const INTERVAL: f64 = 2.0;
/// A discovered backend missing from this many consecutive good answers is removed.
const MISSES: f64 = 3.0;
const JITTER: f64 = 1.1;
const EVICT_SPREAD: f64 = 0.5;
const SLACK: f64 = 1.5;
const JOINER: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 2);

fn address(ip: Ipv4Addr) -> String {
    format!("{ip}:{APISERVER_PORT}")
}

/// The `/status` entry of the backend at `ip`, if listed: (source, state).
fn listed(cast: &Cast, ip: Ipv4Addr) -> Option<(String, String)> {
    let status = cast.status().ok()?;
    let b = status["backends"]
        .as_array()?
        .iter()
        .find(|b| b["address"] == address(ip).as_str())?;
    Some((
        b["source"].as_str()?.to_string(),
        b["state"].as_str()?.to_string(),
    ))
}

/// The stream connections the client made: (connection, site, first event, last event).
fn stream_connections(events: &[ClientEvent]) -> Vec<(u32, String, f64, f64)> {
    let mut out: Vec<(u32, String, f64, f64)> = Vec::new();
    for e in events {
        if let ClientEvent::Line { t, c, site } = e {
            match out.iter_mut().find(|s| s.0 == *c) {
                Some(s) => s.3 = *t,
                None => out.push((*c, site.clone(), *t, *t)),
            }
        }
    }
    out
}

/// What one run of scenario 9 recorded, for the tests below to judge.
struct Run {
    /// Everything the client saw.
    events: Vec<ClientEvent>,
    /// Its stream connections: (connection, site, first event, last event).
    streams: Vec<(u32, String, f64, f64)>,
    /// When dc-b left the Endpoints object (wall clock).
    left_at: f64,
    /// How long after that the balancer no longer listed it.
    removed_after: f64,
    /// The connections the balancer closed, from its records: (backend, reason).
    closed: Vec<(String, String)>,
    /// The config file before the run and after it.
    config: (Vec<u8>, Vec<u8>),
}

/// The scenario, run once for all of its tests rather than a lab, a cast and a client each:
/// `None` when the lab is skipped; a run that failed on the way fails every test with its
/// message.
fn scenario_9() -> Option<&'static Run> {
    static RUN: OnceLock<Option<Result<Run, String>>> = OnceLock::new();
    let run = RUN.get_or_init(|| {
        let name = "partition_9 (scenario 9, run once for its tests)";
        let lab = NetLab::start(name)?;
        Some(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&lab))).map_err(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            }),
        )
    });
    match run {
        None => None,
        Some(Ok(run)) => Some(run),
        Some(Err(e)) => panic!("scenario 9 failed on the way: {e}"),
    }
}

/// A cast with dc-b's apiserver known only from the Endpoints object, the client's stream on
/// dc-b (same zone first); and the balancer's config file as the cast wrote it.
fn started(lab: &NetLab) -> (Cast<'_>, Vec<u8>) {
    let members = Members {
        seeds: &[Host::DcA, Host::Witness],
        interval: "2s",
    };
    let pass = [
        (Host::DcA, Readyz::Pass),
        (Host::DcB, Readyz::Pass),
        (Host::Witness, Readyz::Pass),
    ];
    let mut cast = Cast::start_with(lab, pass, Some(&members));
    let config = std::fs::read(lab.path("readyprism.yaml")).expect("the config");
    let dcb = Host::DcB.ip();
    let found = poll(Duration::from_secs(30), || {
        listed(&cast, dcb) == Some(("discovered".into(), "ready".into()))
    });
    assert!(
        found,
        "dc-b was never discovered and ready: {:?}\n{}",
        cast.status(),
        cast.balancer_log()
    );
    let zone = cast.status().expect("status")["zone"].clone();
    assert_eq!(zone, "dc-b", "the node's zone from its address 10.77.2.10");
    cast.start_client();
    assert!(
        poll(Duration::from_secs(10), || settled(&cast, "dc-b")),
        "the stream is not on dc-b (same zone first): {:?}",
        cast.client_events()
    );
    (cast, config)
}

/// Whether the client's latest stream connection is on `site` and delivering.
fn settled(cast: &Cast, site: &str) -> bool {
    let events = cast.client_events();
    stream_connections(&events)
        .last()
        .is_some_and(|s| s.1 == site && s.3 > wall() - 1.0)
}

/// Waits until the client has made `n` more requests.
fn requests_go_on(cast: &Cast, n: usize) {
    let before = cast.client_events().len();
    assert!(poll(Duration::from_secs(10), || {
        cast.client_events().len() >= before + n
    }));
}

/// The scenario: dc-b2 joins, then dc-b leaves the Endpoints object, with the client running.
fn run(lab: &NetLab) -> Run {
    let (mut cast, config_before) = started(lab);
    let dcb = Host::DcB.ip();

    // A control-plane node joins in dc-b.
    lab.add_address(Host::DcB, JOINER)
        .expect("the joiner's address");
    cast.start_apiserver(Host::DcB, JOINER, "dc-b2");
    let joined_at = wall();
    cast.set_endpoints(&[Host::DcA.ip(), dcb, JOINER, Host::Witness.ip()]);
    let joined = poll(Duration::from_secs(30), || {
        listed(&cast, JOINER) == Some(("discovered".into(), "ready".into()))
    });
    assert!(joined, "dc-b2 never joined: {:?}", cast.status());
    let join_ready = wall() - joined_at;
    // Several requests while both are in the list (they may go to either: same zone).
    requests_go_on(&cast, 10);

    // dc-b's first apiserver leaves the cluster's list.
    let left_at = wall();
    cast.set_endpoints(&[Host::DcA.ip(), JOINER, Host::Witness.ip()]);
    let removed = poll(Duration::from_secs(30), || {
        cast.status().is_ok() && listed(&cast, dcb).is_none()
    });
    assert!(removed, "dc-b was never removed: {:?}", cast.status());
    let removed_after = wall() - left_at;
    assert!(
        poll(Duration::from_secs(15), || settled(&cast, "dc-b2")),
        "the stream did not move to dc-b2: {:?}",
        cast.client_events()
    );
    // Let requests run a while after the move.
    requests_go_on(&cast, 10);
    cast.stop_client();
    let events = cast.client_events();
    let streams = stream_connections(&events);
    lab_print(&format!(
        "9. a control-plane node joins (dc-b2) and dc-b leaves; no config change\n  \
         dc-b2 discovered and ready {join_ready:.1} s after it joined the Endpoints object; \
         dc-b removed {removed_after:.1} s after it left (interval {INTERVAL} s, {MISSES} good answers)\n  \
         stream connections: {:?}\n  polls: {:?}",
        streams
            .iter()
            .map(|s| format!("{} {:+.1}..{:+.1}", s.1, s.2 - left_at, s.3 - left_at))
            .collect::<Vec<_>>(),
        cast.metrics("readyprism_discovery_polls_total"),
    ));
    Run {
        closed: cast
            .closed_by_balancer()
            .into_iter()
            .map(|e| (e.backend, e.reason))
            .collect(),
        events,
        streams,
        left_at,
        removed_after,
        config: (
            config_before,
            std::fs::read(lab.path("readyprism.yaml")).expect("the config"),
        ),
    }
}

#[test]
fn partition_9_no_client_sees_an_error_while_the_control_plane_changes() {
    let Some(run) = scenario_9() else {
        return;
    };
    let errors: Vec<_> = run
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                ClientEvent::Req(Exchange { ok: false, .. }) | ClientEvent::DialError { .. }
            )
        })
        .collect();
    assert!(errors.is_empty(), "client-visible errors: {errors:?}");
}

#[test]
fn partition_9_a_joining_apiserver_moves_no_connection() {
    let Some(run) = scenario_9() else {
        return;
    };
    // One stream connection, on dc-b, from the start until the leave.
    let streams = &run.streams;
    let before: Vec<_> = streams.iter().filter(|s| s.2 < run.left_at).collect();
    assert_eq!(before.len(), 1, "the join moved the stream: {streams:?}");
    assert_eq!(before[0].1, "dc-b");
}

#[test]
fn partition_9_a_leaving_apiserver_moves_its_stream_once_to_its_zone_within_the_bound() {
    let Some(run) = scenario_9() else {
        return;
    };
    // Within 3 good answers and the spread.
    let streams = &run.streams;
    let after: Vec<_> = streams.iter().filter(|s| s.2 >= run.left_at).collect();
    assert_eq!(after.len(), 1, "one re-dial after the leave: {streams:?}");
    assert_eq!(after[0].1, "dc-b2", "the same zone's remaining apiserver");
    let bound = (MISSES + 1.0) * INTERVAL * JITTER + EVICT_SPREAD + SLACK;
    assert!(
        after[0].2 - run.left_at <= bound,
        "the stream moved {:.1} s after the leave; bound {bound:.1} s",
        after[0].2 - run.left_at
    );
}

#[test]
fn partition_9_only_the_leaving_backends_connections_are_closed_as_removed() {
    let Some(run) = scenario_9() else {
        return;
    };
    let (closed, dcb_address) = (&run.closed, address(Host::DcB.ip()));
    assert!(
        closed
            .iter()
            .any(|(b, r)| *b == dcb_address && r == "removed"),
        "dc-b's stream closed with the reason removed: {closed:?}"
    );
    assert!(
        closed
            .iter()
            .all(|(b, r)| *b == dcb_address && r == "removed"),
        "only the leaving backend's connections are closed: {closed:?}"
    );
}

#[test]
fn partition_9_no_request_goes_to_a_removed_backend() {
    let Some(run) = scenario_9() else {
        return;
    };
    let late: Vec<_> = run
        .events
        .iter()
        .filter(|e| {
            matches!(e, ClientEvent::Req(Exchange { t0, site: Some(s), .. })
                if t0 > &(run.left_at + run.removed_after + 0.1) && s == "dc-b")
        })
        .collect();
    assert!(
        late.is_empty(),
        "requests to dc-b after its removal: {late:?}"
    );
}

#[test]
fn partition_9_the_config_file_never_changes() {
    let Some(run) = scenario_9() else {
        return;
    };
    assert_eq!(run.config.1, run.config.0, "no config change");
}
