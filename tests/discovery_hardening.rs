//! Discovery and its cache on the app run from its config file, as a clumsy operator or an attacker would meet
//! them: an answer or a cache listing the balancer's own address is refused (it would
//! relay to itself); a cache listing an address twice (or a static one) gives one backend each, probed; a cache of
//! 5,000 entries gives at most 64 and the static backend is ready at once; the cache is private
//! and leaves no temporary file (that a link or file planted at the temporary name is never
//! followed is `atomic_write`'s unit tests': the name is random); a file that is not a cache is
//! never written over; a failed write is tried again without waiting for the next change, and its
//! error names the cache; a cache directory the balancer may not write (SELinux enforcing on a
//! system extension) is warned about once while discovery and relaying go on.
//!
//! Blocking code on OS threads beside the app's own thread: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use readyprism::admin::status::{BackendSource, StatusDoc};
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State;

use crate::support::unwritable::Unwritable;
use crate::support::Running;
use crate::support::*;

/// Discovery every second, the cache at `cache`.
fn discovery(cache: &Path) -> String {
    format!(
        "zones: {{ dc-a: [\"127.0.0.0/8\"] }}\ndiscovery:\n  endpoints: true\n  interval: 1s\n  cache: {}\n",
        cache.display()
    )
}

fn status(p: &Running) -> StatusDoc {
    serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status")
}

fn write_cache(path: &Path, backends: &[String]) {
    let doc = serde_json::json!({ "version": 1, "backends": backends });
    std::fs::write(path, doc.to_string()).expect("write the cache");
}

/// A static fake `a`, a config with discovery and the cache in the lab's `state/` directory.
struct Cached {
    a: FakeApiserver,
    cache: PathBuf,
    file: PathBuf,
    lab: Lab,
    rt: tokio::runtime::Runtime,
}

fn cached() -> Cached {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    std::fs::create_dir(lab.path("state")).expect("mkdir");
    let cache = lab.path("state").join("backends.json");
    let (a, file) = lab.fake_and_config(&rt, "cached.yaml", &discovery(&cache));
    Cached {
        a,
        cache,
        file,
        lab,
        rt,
    }
}

#[test]
fn a_cache_listing_an_address_twice_gives_one_probed_backend_each() {
    let Cached {
        rt,
        lab,
        a,
        cache,
        file,
    } = cached();
    let b = rt.block_on(lab.fake("b"));
    // Every answer fails meanwhile: the list is the cache's.
    for f in [&a, &b] {
        f.control
            .set_endpoints_answer(503, "etcd leader changed".into());
    }
    write_cache(&cache, &[addr(&b), addr(&b), addr(&a), addr(&a)]);
    let p = Running::start(&file);
    rt.block_on(poll("both backends ready", || {
        let s = status(&p);
        s.backends.iter().all(|x| x.state == State::Ready) && s.backends.len() >= 2
    }));
    let s = status(&p);
    let listed: Vec<(&str, BackendSource)> = s
        .backends
        .iter()
        .map(|x| (x.address.as_str(), x.source))
        .collect();
    let (a_addr, b_addr) = (addr(&a), addr(&b));
    assert_eq!(
        listed,
        [
            (a_addr.as_str(), BackendSource::Config),
            (b_addr.as_str(), BackendSource::Cache)
        ],
        "one backend per address, the static one as configured"
    );
    let metrics = blocking_get(p.admin, "/metrics").1;
    let series = format!("readyprism_backend_ready{{backend=\"{b_addr}\"");
    assert_eq!(
        metrics.matches(&series).count(),
        1,
        "one series:\n{metrics}"
    );
    p.wait_log(
        "the discovery cache lists an address more than once; each is one backend",
        |_| true,
    );
}

#[test]
fn a_cache_of_5000_entries_gives_at_most_64_backends_beside_a_ready_static_one() {
    let Cached {
        rt,
        lab: _lab,
        a,
        cache,
        file,
    } = cached();
    a.control
        .set_endpoints_answer(503, "etcd leader changed".into());
    // Refusing addresses on loopback: probes fail at once, each costs a monitor.
    let many: Vec<String> = (0..5000u16)
        .map(|i| SocketAddr::from(([127, 0, 0, 1], 20000 + i)).to_string())
        .collect();
    write_cache(&cache, &many);
    let p = Running::start(&file);
    rt.block_on(poll("the static backend ready", || {
        status(&p)
            .backends
            .iter()
            .any(|x| x.address == addr(&a) && x.state == State::Ready)
    }));
    let s = status(&p);
    assert_eq!(s.backends.len(), 65, "the static backend and 64 cached");
    p.wait_log(
        "the discovery cache lists more than 64 backends; only the first 64 are used",
        |v| v["fields"]["listed"] == 5000,
    );
}

/// A static `a`, the balancer running, `before` run on it, then `b` listed by every answer: the
/// cache is written once `b` is discovered.
fn discover_b(c: &Cached, before: impl FnOnce(&Running)) -> (FakeApiserver, Running) {
    let b = c.rt.block_on(c.lab.fake("b"));
    for f in [&c.a, &b] {
        f.control.set_endpoints(&[c.a.addr]);
    }
    let p = Running::start(&c.file);
    before(&p);
    let listed = [c.a.addr, b.addr];
    for f in [&c.a, &b] {
        f.control.set_endpoints(&listed);
    }
    c.rt.block_on(poll("b discovered", || {
        status(&p)
            .backends
            .iter()
            .any(|x| x.address == addr(&b) && x.source == BackendSource::Discovered)
    }));
    (b, p)
}

#[test]
fn the_cache_is_private_and_leaves_no_temporary_file() {
    let c = cached();
    let (b, _p) = discover_b(&c, |_| {});
    c.rt.block_on(poll("the cache written", || {
        std::fs::read_to_string(&c.cache).is_ok_and(|t| t.contains(&addr(&b)))
    }));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&c.cache).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the cache is private");
    let dir = c.cache.parent().expect("dir");
    let names: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names,
        [c.cache.file_name().expect("name")],
        "only the cache"
    );
}

#[test]
fn a_file_that_is_not_a_cache_is_never_written_over() {
    let c = cached();
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n";
    std::fs::write(&c.cache, kubeconfig).expect("write");
    let (_b, p) = discover_b(&c, |_| {});
    let warned = p.wait_log("the discovery cache was not written", |_| true);
    let error = warned["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("not a readyprism discovery cache"),
        "{warned}"
    );
    assert_eq!(
        std::fs::read_to_string(&c.cache).expect("read"),
        kubeconfig,
        "left as it was"
    );
}

#[test]
fn a_failed_cache_write_names_the_cache_then_is_tried_again() {
    let c = cached();
    std::fs::remove_dir(c.cache.parent().expect("dir")).expect("rmdir");
    let (b, p) = discover_b(&c, |_| {});
    let warned = p.wait_log(
        "the discovery cache was not written; trying again at each poll",
        |_| true,
    );
    let error = warned["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!("{}:", c.cache.display())) && !error.contains(".tmp-"),
        "the error names the cache: {warned}"
    );
    // The directory comes back (a volume mounted late); the list does not change again.
    std::fs::create_dir(c.cache.parent().expect("dir")).expect("mkdir");
    c.rt.block_on(poll("the cache written without another change", || {
        std::fs::read_to_string(&c.cache).is_ok_and(|t| t.contains(&addr(&b)))
    }));
    p.wait_log("the discovery cache is written again", |_| true);
}

/// `readyprism_discovery_polls_total{result="unchanged"}` of the running balancer.
fn unchanged_polls(p: &Running) -> f64 {
    let text = blocking_get(p.admin, "/metrics").1;
    metric(
        &text,
        "readyprism_discovery_polls_total",
        "result=\"unchanged\"",
    )
    .unwrap_or(0.0)
}

#[test]
fn an_unwritable_cache_directory_is_one_warn_while_the_balancer_runs_on() {
    let c = cached();
    let _ro = Unwritable::new(c.cache.parent().expect("dir"));
    let (b, p) = discover_b(&c, |_| {});
    let warning = "the discovery cache was not written; trying again at each poll";
    p.wait_log(warning, |_| true);
    // Three more polls, each trying the write again: still the one warning.
    let after = unchanged_polls(&p);
    c.rt.block_on(poll("three more polls", || {
        unchanged_polls(&p) >= after + 3.0
    }));
    let warnings = p
        .logs()
        .iter()
        .filter(|v| v["fields"]["message"] == warning)
        .count();
    assert_eq!(warnings, 1, "warned once, not at every poll");
    assert!(!c.cache.exists(), "nothing was written");
    let s = status(&p);
    let ready = |a: &str| {
        s.backends
            .iter()
            .any(|x| x.address == a && x.state == State::Ready)
    };
    assert!(ready(&addr(&c.a)) && ready(&addr(&b)), "both ready: {s:?}");
    assert_eq!(blocking_get(p.admin, "/readyz").0, 200, "/readyz answers");
    let landed_on = c.rt.block_on(landed(p.listen));
    assert!(
        ["a", "b"].contains(&landed_on.as_str()),
        "relayed to {landed_on}"
    );
}

#[test]
fn an_answer_or_a_cache_listing_the_balancers_own_listener_is_refused() {
    let Cached {
        rt: _rt,
        lab: _lab,
        a,
        cache,
        file,
    } = cached();
    let first = Running::start(&file);
    let own = first.listen;
    a.control.set_endpoints(&[a.addr, own]);
    let warned = first.wait_log(
        "discovery lists this balancer's own address; refused (it would relay to itself)",
        |_| true,
    );
    assert_eq!(warned["fields"]["addresses"], own.to_string());
    let listed: Vec<String> = status(&first)
        .backends
        .into_iter()
        .map(|b| b.address)
        .collect();
    assert_eq!(listed, [addr(&a)], "never a backend");
    drop(first);

    // The same address in the cache, with the listener on the same port (a fixed one now).
    let yaml = std::fs::read_to_string(&file).expect("config");
    let fixed = yaml.replace("listen: [\"127.0.0.1:0\"]", &format!("listen: [\"{own}\"]"));
    assert_ne!(fixed, yaml, "the lab's config listens on port 0");
    std::fs::write(&file, fixed).expect("write");
    write_cache(&cache, &[own.to_string()]);
    a.control
        .set_endpoints_answer(503, "etcd leader changed".into());
    let p = Running::start(&file);
    assert_eq!(p.listen, own);
    p.wait_log(
        "the discovery cache lists this balancer's own address; refused (it would relay to itself)",
        |_| true,
    );
    let listed: Vec<String> = status(&p).backends.into_iter().map(|b| b.address).collect();
    assert_eq!(listed, [addr(&a)]);
}
