//! Discovery on the app run from its config file (the binary where a test needs the process): the `default/kubernetes` Endpoints object adds a backend (probed,
//! taking connections) and removes it after three good answers without it (its connection closed,
//! reason removed); every bad answer leaves the list alone and is counted; the cache carries the
//! list across a restart with every static backend down; a reload keeps discovered backends; a
//! static backend is never removed. And in process: an `App` left to run applies the lists itself.
//!
//! Blocking code on OS threads beside the app's thread or child process: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::net::SocketAddr;

use readyprism::admin::status::{BackendSource, BackendStatus, StatusDoc};
use readyprism::app::Control;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State;

use tokio_util::sync::CancellationToken;

use crate::support::process::Proc;
use crate::support::*;

/// Discovery every second (the shortest interval), and 127.0.0.0/8 in the node's zone, so a
/// discovered backend on 127.0.0.1 shares new connections with the static one.
const DISCOVERY: &str =
    "zones: { dc-a: [\"127.0.0.0/8\"] }\ndiscovery:\n  endpoints: true\n  interval: 1s\n";

fn status(p: &impl Balancer) -> StatusDoc {
    serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status")
}

fn backend(p: &impl Balancer, f: &FakeApiserver) -> Option<BackendStatus> {
    status(p)
        .backends
        .into_iter()
        .find(|b| b.address == addr(f))
}

fn polls(p: &impl Balancer, result: &str) -> u64 {
    let t = blocking_get(p.admin, "/metrics").1;
    let labels = format!("result=\"{result}\"");
    metric(&t, "readyprism_discovery_polls_total", &labels).unwrap_or(-1.0) as u64
}

/// Every fake serves the same Endpoints object: the poll may go to any ready backend.
fn serve(fakes: &[&FakeApiserver], listed: &[&FakeApiserver]) {
    let addrs: Vec<SocketAddr> = listed.iter().map(|f| f.addr).collect();
    for f in fakes {
        f.control.set_endpoints(&addrs);
    }
}

/// Waits until `f` is listed, ready, with `source`.
fn wait_listed(
    rt: &tokio::runtime::Runtime,
    p: &impl Balancer,
    f: &FakeApiserver,
    source: BackendSource,
) {
    rt.block_on(poll("the backend listed and ready", || {
        backend(p, f).is_some_and(|b| b.source == source && b.state == State::Ready)
    }));
}

/// A connection through the balancer that landed on `name` (new connections share the zone).
fn held_on(
    rt: &tokio::runtime::Runtime,
    p: &impl Balancer,
    name: &str,
) -> tokio::io::BufReader<tokio::net::TcpStream> {
    rt.block_on(eventually(
        "a connection lands on the discovered backend",
        || async {
            raw(p.listen)
                .await
                .filter(|(_, n)| n == name)
                .map(|(s, _)| s)
        },
    ))
}

/// A static backend `a` and a discovered one `b`, both listed by every answer, the balancer
/// running on `file` with `b` listed and ready. Bind every field (`_lab`, not `_`): one left
/// unbound is dropped at once. Bindings drop in reverse order: the balancer first.
struct Discovered<P> {
    p: P,
    a: FakeApiserver,
    b: FakeApiserver,
    file: std::path::PathBuf,
    lab: Lab,
    rt: tokio::runtime::Runtime,
}

fn discovered<P: Balancer>(start: impl FnOnce(&std::path::Path) -> P) -> Discovered<P> {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "discovery.yaml", DISCOVERY);
    let b = rt.block_on(lab.fake("b"));
    serve(&[&a, &b], &[&a, &b]);
    let p = start(&file);
    wait_listed(&rt, &p, &b, BackendSource::Discovered);
    Discovered {
        p,
        a,
        b,
        file,
        lab,
        rt,
    }
}

#[test]
fn a_discovered_backend_is_listed_until_three_good_answers_without_it() {
    let Discovered {
        rt,
        lab: _lab,
        a,
        b,
        file: _file,
        p,
    } = discovered(Running::start);
    let doc = status(&p);
    assert_eq!(
        doc.backends.len(),
        2,
        "the static backend is not added twice: {doc:?}"
    );
    let found = backend(&p, &b).expect("listed");
    assert_eq!(
        found.zone.as_deref(),
        Some("dc-a"),
        "its zone from the zones: map"
    );
    assert!(
        b.control
            .readyz_hits
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0,
        "probed"
    );
    // `readyprism status` shows the source; the gauge counts backends by it.
    let o = readyprism(&["status", "--admin", &p.admin.to_string()]);
    let table = String::from_utf8_lossy(&o.stdout).to_string();
    let row = table
        .lines()
        .find(|l| l.starts_with(&addr(&b)))
        .expect("b's row");
    assert!(row.contains(" discovered "), "{table}");
    assert!(
        table.lines().nth(1).is_some_and(|h| h.contains("SOURCE")),
        "{table}"
    );
    let text = blocking_get(p.admin, "/metrics").1;
    assert_eq!(
        metric(&text, "readyprism_backends", "source=\"discovered\""),
        Some(1.0)
    );
    assert_eq!(
        metric(&text, "readyprism_backends", "source=\"config\""),
        Some(1.0)
    );
    let mut held = held_on(&rt, &p, "b");

    serve(&[&a, &b], &[&a]);
    let before = polls(&p, "unchanged") + polls(&p, "changed");
    rt.block_on(poll("removed", || backend(&p, &b).is_none()));
    let good = polls(&p, "unchanged") + polls(&p, "changed") - before;
    assert!(
        good >= 3,
        "removed after three good answers without it, not {good}"
    );
    assert!(
        rt.block_on(read_to_end(&mut held)).is_empty(),
        "its connection is closed"
    );
    let line = p.wait_log("backend removed; closing its connections", |v| {
        v["fields"]["backend"] == addr(&b).as_str()
    });
    let f = &line["fields"];
    assert_eq!(
        (
            f["reason"].as_str(),
            f["active"].as_u64(),
            f["source"].as_str()
        ),
        (Some("removed"), Some(1), Some("discovered")),
        "{line}"
    );
    let r = p.wait_log("connection ended", |v| {
        v["fields"]["backend"] == addr(&b).as_str()
    });
    assert_eq!(r["fields"]["reason"], "removed", "{r}");
    assert_eq!(
        backend(&p, &a).map(|s| s.source),
        Some(BackendSource::Config)
    );
}

/// The `/metrics` lines that name `f` (as a label value).
fn series_naming(p: &impl Balancer, f: &FakeApiserver) -> Vec<String> {
    let needle = format!("\"{}\"", addr(f));
    blocking_get(p.admin, "/metrics")
        .1
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(&needle))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_backend_discovery_removes_leaves_no_series_in_metrics() {
    let Discovered {
        rt,
        lab: _lab,
        a,
        b,
        file: _file,
        p,
    } = discovered(Running::start);
    let mut held = held_on(&rt, &p, "b");
    // Probed, ready and carrying a connection: every per-backend family names it.
    let named = series_naming(&p, &b);
    for family in [
        "readyprism_backend_ready{",
        "readyprism_backend_state_changes_total{",
        "readyprism_health_checks_total{",
        "readyprism_health_check_duration_seconds_bucket{",
        "readyprism_connections_total{",
        "readyprism_connections_active{",
        "readyprism_connections_closed_total{",
        "readyprism_bytes_total{",
    ] {
        assert!(
            named.iter().any(|l| l.starts_with(family)),
            "{family} names the discovered backend: {named:#?}"
        );
    }

    serve(&[&a, &b], &[&a]);
    rt.block_on(poll("removed", || backend(&p, &b).is_none()));
    assert!(
        rt.block_on(read_to_end(&mut held)).is_empty(),
        "its connection is closed"
    );
    assert_eq!(series_naming(&p, &b), Vec::<String>::new());
    assert!(
        !series_naming(&p, &a).is_empty(),
        "the static backend's series stay"
    );
}

#[test]
fn every_bad_answer_is_counted_leaving_the_list_alone() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "bad-answers.yaml", DISCOVERY);
    let b = rt.block_on(lab.fake("b"));
    serve(&[&a, &b], &[&a, &b]);
    let p = Running::start(&file);
    // Every result is exported from start-up (the first poll may already have been made).
    let text = blocking_get(p.admin, "/metrics").1;
    for result in readyprism::discovery::Poll::labels() {
        let labels = format!("result=\"{result}\"");
        let n = metric(&text, "readyprism_discovery_polls_total", &labels);
        assert!(n.is_some(), "{result} exported");
        if !["changed", "unchanged"].contains(&result) {
            assert_eq!(n, Some(0.0), "{result} at 0");
        }
    }
    wait_listed(&rt, &p, &b, BackendSource::Discovered);
    let pad = "x".repeat(1 << 20);
    let bad = [
        (
            "bad_status",
            403,
            "{\"kind\":\"Status\",\"code\":403}".to_string(),
        ),
        ("not_json", 200, "<html>hello</html>".to_string()),
        (
            "not_endpoints",
            200,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\"}".to_string(),
        ),
        (
            "too_large",
            200,
            format!("{{\"kind\":\"Endpoints\",\"apiVersion\":\"v1\",\"p\":\"{pad}\"}}"),
        ),
        (
            "no_addresses",
            200,
            "{\"kind\":\"Endpoints\",\"apiVersion\":\"v1\",\"subsets\":[]}".to_string(),
        ),
        // A subset whose only port is UDP is no apiserver's: not a backend.
        (
            "no_addresses",
            200,
            format!(
                "{{\"kind\":\"Endpoints\",\"apiVersion\":\"v1\",\"subsets\":[{{\"addresses\":[{{\"ip\":\"127.0.0.1\"}}],\"ports\":[{{\"port\":{},\"protocol\":\"UDP\"}}]}}]}}",
                a.addr.port()
            ),
        ),
        // A good object cut off mid-body (the head announces all of it).
        ("cut_off", 200, String::new()),
    ];
    let mut counted = std::collections::HashMap::<&str, u64>::new();
    for (result, status_code, body) in bad {
        for f in [&a, &b] {
            if result == "cut_off" {
                f.control.set_endpoints(&[a.addr, b.addr]);
                f.control.set_endpoints_cut(true);
            } else {
                f.control.set_endpoints_answer(status_code, body.clone());
            }
        }
        // More bad answers in a row than it takes good ones to remove a backend.
        let seen = counted.entry(result).or_insert(0);
        let want = *seen + 4;
        rt.block_on(poll(result, || polls(&p, result) >= want));
        *seen = polls(&p, result);
        let listed: Vec<String> = status(&p).backends.into_iter().map(|s| s.address).collect();
        assert_eq!(listed, [addr(&a), addr(&b)], "{result} changed nothing");
    }
    for f in [&a, &b] {
        f.control.set_endpoints_cut(false);
    }
    let warned = p
        .logs()
        .iter()
        .filter(|v| {
            v["fields"]["message"] == "discovery poll failed; the backend list stays as it is"
        })
        .count();
    assert_eq!(warned, 1, "one WARN for the whole bad spell");
    serve(&[&a, &b], &[&a, &b]);
    p.wait_log("discovery answers again", |_| true);
}

#[test]
fn the_cache_serves_a_discovered_backend_after_a_restart_with_every_static_backend_down() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    std::fs::create_dir(lab.path("state")).expect("mkdir");
    let cache = lab.path("state").join("backends.json");
    let extra = format!("{DISCOVERY}  cache: {}\n", cache.display());
    let (a, file) = lab.fake_and_config(&rt, "cached.yaml", &extra);
    let b = rt.block_on(lab.fake("b"));
    serve(&[&a, &b], &[&a, &b]);
    let mut first = Proc::start(&file);
    wait_listed(&rt, &first, &b, BackendSource::Discovered);
    rt.block_on(poll("the cache written", || {
        std::fs::read_to_string(&cache).is_ok_and(|t| t.contains(&addr(&b)))
    }));
    first.signal("TERM");
    first.wait_exit();

    rt.block_on(a.stop()); // the only static backend refuses from now on
                           // The cluster cannot be asked meanwhile: what b says is not an answer.
    b.control
        .set_endpoints_answer(503, "etcd leader changed".to_string());
    let p = Proc::start(&file);
    wait_listed(&rt, &p, &b, BackendSource::Cache);
    assert_eq!(rt.block_on(landed(p.listen)), "b", "clients get through");
    rt.block_on(poll("the static backend is down", || {
        backend(&p, &a).is_some_and(|s| s.state == State::Unready)
    }));
}

#[test]
fn a_reload_keeps_discovered_backends_with_their_connections() {
    let Discovered {
        rt,
        lab: _lab,
        a: _a,
        b,
        file,
        p,
    } = discovered(Proc::start); // A process: reloaded with a hang-up.
    let mut held = held_on(&rt, &p, "b");
    let edited = std::fs::read_to_string(&file).expect("read") + "shutdown_grace: 2s\n";
    std::fs::write(&file, edited).expect("write");
    p.signal("HUP");
    p.wait_log("config reloaded", |_| true);
    assert_eq!(
        backend(&p, &b).map(|s| s.source),
        Some(BackendSource::Discovered)
    );
    // The connection relayed to b is still open: it echoes.
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        held.get_mut().write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        tokio::time::timeout(patience(), held.read_exact(&mut buf))
            .await
            .expect("in time")
            .expect("the connection to b survived the reload");
        assert_eq!(&buf, b"ping");
    });
}

#[test]
fn a_static_backend_is_never_removed_even_when_no_answer_lists_it() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, c) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("c")));
    let b = rt.block_on(lab.fake("b"));
    let file = lab.two_zone_config("seeds.yaml", (&a, &c), DISCOVERY);
    serve(&[&a, &b, &c], &[&a, &b]);
    let p = Running::start(&file);
    wait_listed(&rt, &p, &b, BackendSource::Discovered);
    let after = polls(&p, "unchanged");
    rt.block_on(poll("four more good answers without c", || {
        polls(&p, "unchanged") >= after + 4
    }));
    let c_now = backend(&p, &c).expect("the static backend stays");
    assert_eq!(c_now.source, BackendSource::Config);
    assert_eq!(c_now.state, State::Ready);
}

/// While no backend is ready, discovery asks the one connections fail open to: the only static
/// backend, unready, still answers the Endpoints object, and the backend it lists is learned,
/// probed and takes connections (before, nothing was asked while none was ready). Its answers
/// never remove: once every backend is unready again, answers without the discovered backend
/// leave it listed.
#[test]
fn with_no_backend_ready_discovery_asks_an_unready_one_which_adds_but_never_removes() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "none-ready.yaml", DISCOVERY);
    let b = rt.block_on(lab.fake("b"));
    a.control.set_ready(false);
    serve(&[&a, &b], &[&a, &b]);
    let p = Running::start(&file);
    wait_listed(&rt, &p, &b, BackendSource::Discovered);
    assert_eq!(rt.block_on(landed(p.listen)), "b", "clients get through");

    b.control.set_ready(false);
    serve(&[&a, &b], &[&a]);
    rt.block_on(poll("no backend ready", || {
        status(&p)
            .backends
            .iter()
            .all(|s| s.state == State::Unready)
    }));
    let after = polls(&p, "unchanged");
    rt.block_on(poll("four answers without b while none is ready", || {
        polls(&p, "unchanged") >= after + 4
    }));
    let b_now = backend(&p, &b).expect("an unready backend's answer removes nothing");
    assert_eq!(b_now.source, BackendSource::Discovered);
}

/// `App::run` applies discovery by itself, in process: no loop outside the app forwards the
/// lists. It adds the listed backend, removes it after the answers without it, and ends when told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_left_running_applies_discovered_lists_by_itself() {
    let lab = Lab::new();
    let (a, b) = (lab.fake("a").await, lab.fake("b").await);
    serve(&[&a, &b], &[&a, &b]);
    let app = lab.alone_behind_balancer(&a, DISCOVERY).await;
    let handle = app.handle();
    let end = CancellationToken::new();
    let running = tokio::spawn(app.run(Control::until(end.clone())));
    let listed = |f: &FakeApiserver| {
        let want = addr(f);
        handle
            .status()
            .backends
            .into_iter()
            .find(|s| s.address == want)
    };
    poll("the discovered backend listed and ready", || {
        listed(&b).is_some_and(|s| s.source == BackendSource::Discovered && s.state == State::Ready)
    })
    .await;
    serve(&[&a, &b], &[&a]);
    poll("the backend no answer lists any more removed", || {
        listed(&b).is_none()
    })
    .await;
    assert!(listed(&a).is_some(), "the static backend stays");
    end.cancel();
    tokio::time::timeout(patience(), running)
        .await
        .expect("run ends when told")
        .expect("run did not panic");
}
