//! Operations: live reload (SIGHUP) and clean shutdown (SIGTERM).

use std::time::Duration;

use readyprism::app::App;
use readyprism::config::Config;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unknown};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::process::Proc;
use crate::support::*;

async fn echo_ok(conn: &mut tokio::io::BufReader<tokio::net::TcpStream>, msg: &[u8]) -> bool {
    if conn.get_mut().write_all(msg).await.is_err() {
        return false;
    }
    let mut buf = vec![0u8; msg.len()];
    matches!(
        tokio::time::timeout(patience(), conn.read_exact(&mut buf)).await,
        Ok(Ok(_))
    ) && buf == msg
}

/// The listener lines a reloaded config may have: the first, both, the second alone.
const FIRST: &str = "listen: [\"127.0.0.1:0\"]\n";
const BOTH: &str = "listen: [\"127.0.0.1:0\", \"127.0.0.2:0\"]\n";
const SECOND: &str = "listen: [\"127.0.0.2:0\"]\n";

/// A balancer started from a config file, reloaded by rewriting it; three fakes `a`, `b`, `c`
/// to list in it.
struct Reloading {
    lab: Lab,
    file: std::path::PathBuf,
    app: App,
    fakes: [FakeApiserver; 3],
}

impl Reloading {
    /// A balancer in the node's zone `zone`, on the listeners of `listen`, in front of `listed`
    /// (as [`Reloading::write`] takes it), every listed backend ready.
    async fn start(zone: &str, listen: &str, listed: &str) -> Reloading {
        let lab = Lab::new();
        let fakes = [
            lab.fake("a").await,
            lab.fake("b").await,
            lab.fake("c").await,
        ];
        let file = lab.path("reload.yaml");
        Reloading::write(&lab, &fakes, &file, zone, listen, listed);
        let app = App::start(Config::load(&file).expect("config"))
            .await
            .expect("start");
        wait_states(&app, &vec![Ready; listed.split(' ').count()]).await;
        Reloading {
            lab,
            file,
            app,
            fakes,
        }
    }

    /// Writes a config with the node's zone `zone`, the listeners of `listen` and the backends
    /// of `listed`: `name:zone` of fakes, space-separated (`"a:dc-a b:dc-b"`).
    fn write(
        lab: &Lab,
        fakes: &[FakeApiserver; 3],
        file: &std::path::Path,
        zone: &str,
        listen: &str,
        listed: &str,
    ) {
        let backends: Vec<(String, &str)> = listed
            .split(' ')
            .map(|b| {
                let (name, zone) = b.split_once(':').expect("name:zone");
                let fake = fakes.iter().find(|f| f.control.name == name);
                (addr(fake.expect("a, b or c")), zone)
            })
            .collect();
        let yaml = lab.yaml(zone, &backends, "").replace(FIRST, listen);
        std::fs::write(file, yaml).expect("write");
    }

    /// Rewrites the file (zone, listeners, backends as in [`Reloading::write`]) and reloads it.
    async fn reload(&mut self, zone: &str, listen: &str, listed: &str) {
        Reloading::write(&self.lab, &self.fakes, &self.file, zone, listen, listed);
        self.app.reload_from(&source(&self.file)).await;
    }

    /// A raw connection through the first listener, which lands on `on`.
    async fn connect(&self, on: &str) -> tokio::io::BufReader<tokio::net::TcpStream> {
        let (conn, name) = raw(self.app.listen_addrs()[0]).await.expect("relayed");
        assert_eq!(name, on);
        conn
    }

    /// The address of fake `b`, the backend every test keeps.
    fn b(&self) -> String {
        addr(&self.fakes[1])
    }
}

#[tokio::test]
async fn a_reload_moving_the_nodes_zone_sends_only_new_connections_to_the_new_zone() {
    let mut r = Reloading::start("dc-a", FIRST, "a:dc-a b:dc-b").await;
    let mut on_a = r.connect("a").await;
    r.reload("dc-b", FIRST, "a:dc-a b:dc-b").await;
    r.connect("b").await;
    assert!(echo_ok(&mut on_a, b"zone change moves nothing").await);
    r.app.shutdown().await;
}

#[tokio::test]
async fn a_reload_leaves_an_unchanged_backend_untouched() {
    let mut r = Reloading::start("dc-b", FIRST, "a:dc-a b:dc-b").await;
    let mut on_b = r.connect("b").await;
    let b_changes = state_changes(&r.app, &r.b(), "ready");
    r.reload("dc-b", FIRST, "b:dc-b c:dc-c").await;
    let snap = r.app.status();
    assert_eq!(snap.backends.len(), 2);
    assert_eq!(snap.backends[0].address, r.b());
    assert_eq!(
        snap.backends[0].state, Ready,
        "unchanged backend keeps its state"
    );
    wait_states(&r.app, &[Ready, Ready]).await;
    assert_eq!(
        state_changes(&r.app, &r.app.status().backends[0].address, "ready"),
        b_changes,
        "no re-decision for b"
    );
    assert!(
        echo_ok(&mut on_b, b"kept").await,
        "connection to the unchanged backend survives"
    );
    r.app.shutdown().await;
}

#[tokio::test]
async fn a_backend_added_by_reload_is_probed_at_once() {
    let mut r = Reloading::start("dc-b", FIRST, "b:dc-b").await;
    r.reload("dc-b", FIRST, "b:dc-b c:dc-c").await;
    assert_eq!(r.app.status().backends[1].state, Unknown);
    wait_states(&r.app, &[Ready, Ready]).await; // the new backend is probed at once
    r.app.shutdown().await;
}

#[tokio::test]
async fn a_reload_closes_the_connections_of_a_removed_backend() {
    let mut r = Reloading::start("dc-a", FIRST, "a:dc-a b:dc-b").await;
    let mut on_a = r.connect("a").await;
    r.reload("dc-b", FIRST, "b:dc-b c:dc-c").await;
    assert!(
        read_to_end(&mut on_a).await.is_empty(),
        "connection to the removed backend is closed"
    );
    r.app.shutdown().await;
}

#[tokio::test]
async fn a_reload_adds_a_listener() {
    let mut r = Reloading::start("dc-b", FIRST, "a:dc-a b:dc-b").await;
    r.reload("dc-b", BOTH, "b:dc-b c:dc-c").await;
    wait_states(&r.app, &[Ready, Ready]).await;
    let listeners = r.app.listen_addrs();
    assert_eq!(listeners.len(), 2);
    assert!(["b", "c"].contains(&landed(listeners[1]).await.as_str()));
    r.app.shutdown().await;
}

#[tokio::test]
async fn a_backend_whose_zone_changes_stays_the_same_backend() {
    let mut r = Reloading::start("dc-b", FIRST, "b:dc-b c:dc-c").await;
    let mut on_b = r.connect("b").await;
    // Same address, so its health and connections stay.
    let b_ready_changes = state_changes(&r.app, &r.app.status().backends[0].address, "ready");
    r.reload("dc-b", FIRST, "b:dc-x c:dc-c").await;
    let snap = r.app.status();
    assert_eq!(
        (snap.backends[0].zone.as_deref(), snap.backends[0].state),
        (Some("dc-x"), Ready)
    );
    assert!(
        echo_ok(&mut on_b, b"zone changed").await,
        "connection survives a zone change"
    );
    let t = admin_get(r.app.admin_addr(), "/metrics").await.1;
    let ready_in = |zone: &str| {
        let labels = format!("backend=\"{}\",zone=\"{zone}\"", r.b());
        metric(&t, "readyprism_backend_ready", &labels)
    };
    assert_eq!(ready_in("dc-x"), Some(1.0));
    assert_eq!(ready_in("dc-b"), None);
    assert_eq!(
        state_changes(&r.app, &r.app.status().backends[0].address, "ready"),
        b_ready_changes
    );
    r.app.shutdown().await;
}

#[tokio::test]
async fn an_invalid_config_on_reload_is_counted_as_a_failure_leaving_the_running_one() {
    let mut r = Reloading::start("dc-b", FIRST, "b:dc-b c:dc-c").await;
    // Three good reloads, then a bad one.
    for listed in ["b:dc-b c:dc-c", "b:dc-x c:dc-c", "b:dc-b c:dc-c"] {
        r.reload("dc-b", FIRST, listed).await;
    }
    std::fs::write(&r.file, "backends: [\n").expect("write");
    r.app.reload_from(&source(&r.file)).await;
    assert_eq!(r.app.config().backends.len(), 2);
    let t = admin_get(r.app.admin_addr(), "/metrics").await.1;
    assert_eq!(
        metric(&t, "readyprism_config_reloads_total", "result=\"success\""),
        Some(3.0)
    );
    assert_eq!(
        metric(&t, "readyprism_config_reloads_total", "result=\"failure\""),
        Some(1.0)
    );
    r.app.shutdown().await;
}

#[tokio::test]
async fn dropping_a_listener_by_reload_keeps_the_connections_it_accepted() {
    let mut r = Reloading::start("dc-b", BOTH, "b:dc-x c:dc-c").await;
    let listeners = r.app.listen_addrs();
    let (mut on_first, _) = raw(listeners[0]).await.expect("relayed");
    r.reload("dc-b", SECOND, "b:dc-x c:dc-c").await;
    assert_eq!(r.app.listen_addrs(), vec![listeners[1]]);
    poll_refused(listeners[0]).await;
    assert!(
        echo_ok(&mut on_first, b"still").await,
        "established connection survives the listener change"
    );
    r.app.shutdown().await;
}

fn source(file: &std::path::Path) -> readyprism::config::Source {
    readyprism::config::Source {
        path: file.to_path_buf(),
        zone: None,
    }
}

async fn poll_refused(addr: std::net::SocketAddr) {
    eventually("listener closed", || async {
        tokio::net::TcpStream::connect(addr)
            .await
            .is_err()
            .then_some(())
    })
    .await
}

#[test]
fn a_sighup_reloads_the_file_unless_it_is_invalid() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("b")));
    let file = lab.path("hup.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let p = Proc::start(&file);
    std::fs::write(
        &file,
        lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], ""),
    )
    .expect("write");
    p.signal("HUP");
    p.wait_log("config reloaded", |_| true);
    let status = |p: &Proc| -> serde_json::Value {
        serde_json::from_str(&blocking_get(p.admin, "/status").1).unwrap_or_default()
    };
    rt.block_on(poll("b probed and ready", || {
        status(&p)["backends"][1]["state"] == "ready"
    }));
    std::fs::write(&file, "backends:\n  - address: nope\n").expect("write");
    p.signal("HUP");
    let rejected = p.wait_log("config reload rejected; the running config stays", |_| true);
    let err = rejected["fields"]["error"].as_str().expect("error field");
    assert!(
        err.contains(&format!("{}:2:", file.display())) && err.contains("backends[0].address"),
        "{err}"
    );
    // A file the config names is placed at its field too.
    let good = lab.yaml("dc-a", &[(addr(&a), "dc-a")], "");
    std::fs::write(
        &file,
        good.replace(
            &lab.path("ca.crt").display().to_string(),
            "/nonexistent/ca.crt",
        ),
    )
    .expect("write");
    p.signal("HUP");
    let rejected = p.wait_log("config reload rejected; the running config stays", |v| {
        v["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent/ca.crt"))
    });
    let err = rejected["fields"]["error"].as_str().expect("error field");
    assert!(
        err.starts_with(&format!("{}:", file.display()))
            && err.contains(": tls.ca: /nonexistent/ca.crt: cannot read"),
        "{err}"
    );
    assert_eq!(status(&p)["backends"].as_array().map(Vec::len), Some(2));
}

#[test]
// Times a real child process from a blocking thread, outside tokio's clock: std's Instant.
#[allow(clippy::disallowed_types)]
fn sigterm_drains_within_the_grace_period_to_exit_zero() {
    use std::time::Instant;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "term.yaml", "shutdown_grace: 2s\n");
    let mut p = Proc::start(&file);
    rt.block_on(poll("ready", || blocking_get(p.admin, "/readyz").0 == 200));
    let (mut held, _) = rt.block_on(raw(p.listen)).expect("relayed");
    let signalled = Instant::now();
    p.signal("TERM");
    // Readiness goes first, the listener closes, the held connection still works during the grace.
    rt.block_on(poll("readyz 503", || {
        blocking_get(p.admin, "/readyz").0 == 503
    }));
    rt.block_on(poll_refused(p.listen));
    assert!(
        rt.block_on(echo_ok(&mut held, b"draining")),
        "established connection works during the grace period"
    );
    let (status, _) = p.wait_exit();
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took >= Duration::from_secs(2) && took <= Duration::from_secs(3),
        "took {took:?}: grace is 2s, bound is grace + 1s"
    );
    assert!(
        rt.block_on(read_to_end(&mut held)).is_empty(),
        "cut after the grace period"
    );
}

#[test]
fn sigterm_without_connections_exits_at_once() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "term.yaml", "shutdown_grace: 30s\n");
    let mut p = Proc::start(&file);
    p.signal("INT");
    let (status, took) = p.wait_exit();
    assert!(status.success(), "{status:?}");
    assert!(
        took < Duration::from_secs(30),
        "no connection to wait for, so no 30 s grace: {took:?}"
    );
}

#[test]
fn the_config_file_is_reloaded_on_change_without_a_signal() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, b) = (rt.block_on(lab.fake("a")), rt.block_on(lab.fake("b")));
    let file = lab.path("watched.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let p = Running::start(&file);
    let backends = |p: &Running| -> Vec<String> {
        let doc: readyprism::admin::StatusDoc =
            serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status");
        doc.backends.into_iter().map(|b| b.address).collect()
    };
    let reloads = |p: &Running, result: &str| {
        let t = blocking_get(p.admin, "/metrics").1;
        metric(
            &t,
            "readyprism_config_reloads_total",
            &format!("result=\"{result}\""),
        )
    };
    assert_eq!(
        reloads(&p, "failure"),
        Some(0.0),
        "the series exists from start-up"
    );

    // Written in place.
    std::fs::write(
        &file,
        lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], ""),
    )
    .expect("write");
    rt.block_on(poll("b added by the file change", || {
        backends(&p) == [addr(&a), addr(&b)]
    }));
    // An invalid file, replaced by rename as Talos and editors do: rejected, counted, kept.
    let tmp = lab.path("watched.yaml.tmp");
    std::fs::write(&tmp, "backends: [\n").expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    let rejected = p.wait_log("config reload rejected; the running config stays", |_| true);
    let err = rejected["fields"]["error"].as_str().unwrap_or_default();
    assert!(err.contains(&file.display().to_string()), "{err}");
    rt.block_on(poll("failure counted", || {
        reloads(&p, "failure") == Some(1.0)
    }));
    assert_eq!(
        backends(&p),
        [addr(&a), addr(&b)],
        "the running config stays"
    );
    // Fixed, again by rename.
    std::fs::write(&tmp, lab.yaml("dc-a", &[(addr(&b), "dc-b")], "")).expect("write");
    std::fs::rename(&tmp, &file).expect("rename");
    rt.block_on(poll("a removed", || backends(&p) == [addr(&b)]));
    // Counted once the reload is complete, a moment after the new backends show.
    rt.block_on(poll("two successful reloads", || {
        reloads(&p, "success") == Some(2.0)
    }));
}

#[test]
fn signals_right_after_start_reload_or_drain_never_kill() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "early.yaml", "");
    for _ in 0..3 {
        // `start` returns as soon as "readyprism started" is logged: the moment clients may come.
        let p = Proc::start(&file);
        p.signal("HUP");
        p.wait_log("config reloaded", |_| true);
        assert_eq!(blocking_get(p.admin, "/livez").0, 200, "still alive");
        let mut p = Proc::start(&file);
        p.signal("TERM");
        let (status, _) = p.wait_exit();
        assert!(status.success(), "drained, not killed: {status:?}");
    }
}

#[tokio::test]
async fn a_reload_from_fail_open_to_refuse_closes_the_connections_that_failed_open() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    a.control.set_ready(false);
    let file = lab.path("policy.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let mut app = App::start(Config::load(&file).expect("config"))
        .await
        .expect("start");
    wait_states(&app, &[readyprism::verdict::State::Unready]).await;
    let (mut failed_open, name) = raw(app.listen_addrs()[0]).await.expect("failed open");
    assert_eq!(name, "a");
    std::fs::write(
        &file,
        lab.yaml("dc-a", &[(addr(&a), "dc-a")], "when_none_ready: refuse\n"),
    )
    .expect("write");
    app.reload_from(&source(&file)).await;
    assert!(
        read_to_end(&mut failed_open).await.is_empty(),
        "the new policy applies to existing connections too"
    );
    assert!(
        raw(app.listen_addrs()[0]).await.is_none(),
        "and to new ones"
    );
    app.shutdown().await;
}
