//! Operations: every metric present and moving (one test per thing that moves them), and the logs an operator alerts on.

use std::time::Duration;

use readyprism::app::App;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::verdict::State::{Ready, Unready};
use tokio::io::AsyncWriteExt;

use crate::support::*;

fn m(text: &str, name: &str, labels: &str) -> f64 {
    metric(text, name, labels)
        .unwrap_or_else(|| panic!("metric {name}{{{labels}}} missing in:\n{text}"))
}

/// Two fakes behind a balancer, both ready and probed twice: `a` (dc-a, the node's zone) and `b`
/// (dc-b, answering `/readyz` 20 ms late).
struct Two {
    _lab: Lab,
    a: FakeApiserver,
    b: FakeApiserver,
    app: App,
    /// `backend="<a's address>"`.
    aa_l: String,
    /// `backend="<b's address>"`.
    ba_l: String,
}

impl Two {
    async fn start() -> Two {
        let lab = Lab::new();
        let a = lab.fake("a").await;
        let b = lab.fake("b").await;
        b.control.set_readyz_delay(Duration::from_millis(20));
        let (aa, ba) = (addr(&a), addr(&b));
        let app = lab
            .start(&lab.yaml("dc-a", &[(aa.clone(), "dc-a"), (ba.clone(), "dc-b")], ""))
            .await;
        wait_states(&app, &[Ready, Ready]).await;
        wait_probed(&app, 2).await;
        Two {
            _lab: lab,
            a,
            b,
            app,
            aa_l: format!("backend=\"{aa}\""),
            ba_l: format!("backend=\"{ba}\""),
        }
    }

    async fn scrape(&self) -> String {
        admin_get(self.app.admin_addr(), "/metrics").await.1
    }
}

#[tokio::test]
async fn every_start_up_metric_is_exported_with_its_first_values() {
    let two = Two::start().await;
    let (aa_l, ba_l) = (&two.aa_l, &two.ba_l);
    let t = two.scrape().await;
    assert_eq!(
        m(
            &t,
            "readyprism_backend_ready",
            &format!("{aa_l},zone=\"dc-a\"")
        ),
        1.0
    );
    assert_eq!(
        m(
            &t,
            "readyprism_backend_state_changes_total",
            &format!("{aa_l},to=\"ready\"")
        ),
        1.0
    );
    assert_eq!(
        m(
            &t,
            "readyprism_backend_state_changes_total",
            &format!("{aa_l},to=\"unready\"")
        ),
        0.0
    );
    assert!(
        m(
            &t,
            "readyprism_health_checks_total",
            &format!("{aa_l},result=\"pass\"")
        ) >= 2.0
    );
    // Every failure class exists from the backend's start, at 0.
    for class in readyprism::verdict::FailClass::ALL {
        let labels = format!("{aa_l},result=\"fail\",reason=\"{}\"", class.label());
        assert_eq!(
            m(&t, "readyprism_health_checks_total", &labels),
            0.0,
            "{labels}"
        );
    }
    assert!(m(&t, "readyprism_health_check_duration_seconds_count", ba_l) >= 2.0);
    assert!(m(&t, "readyprism_health_check_duration_seconds_sum", ba_l) >= 0.04);
    assert_eq!(m(&t, "readyprism_no_ready_backends", ""), 0.0);
    assert_eq!(
        m(
            &t,
            "readyprism_build_info",
            &format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))
        ),
        1.0
    );
    // The build names its commit (git at build time; `unknown` without git).
    let build = format!("version=\"{}\",commit=\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(m(&t, "readyprism_build_info", &build), 1.0);
    let commit = t
        .lines()
        .find_map(|l| l.strip_prefix("readyprism_build_info{"))
        .and_then(|l| l.split("commit=\"").nth(1)?.split('"').next())
        .unwrap_or_default();
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit:?}"
    );
    // The standard process metrics, unprefixed, read from /proc/self.
    assert!(m(&t, "process_start_time_seconds", "") > 1.7e9);
    assert!(m(&t, "process_resident_memory_bytes", "") > 0.0);
    assert!(m(&t, "process_open_fds", "") >= 3.0);
    assert!(m(&t, "process_max_fds", "") >= 3.0);
    assert!(m(&t, "process_cpu_seconds_total", "") >= 0.0);
    let not_after = m(&t, "readyprism_client_cert_expiry_timestamp_seconds", "");
    assert!(not_after > 1.7e9, "{not_after}");

    two.app.shutdown().await;
}

#[tokio::test]
async fn a_relayed_connection_is_counted_with_its_bytes() {
    let two = Two::start().await;
    let (app, aa_l) = (&two.app, &two.aa_l);
    // A connection: counted, active while open, bytes both ways.
    let (mut conn, name) = raw(app.listen_addrs()[0]).await.expect("relayed");
    assert_eq!(name, "a");
    let t = two.scrape().await;
    assert_eq!(m(&t, "readyprism_connections_total", aa_l), 1.0);
    assert_eq!(m(&t, "readyprism_connections_active", aa_l), 1.0);
    conn.get_mut().write_all(b"12345").await.expect("write");
    conn.get_mut().shutdown().await.expect("shutdown");
    read_to_end(&mut conn).await;
    let t = eventually("active back to 0", || async {
        let t = two.scrape().await;
        (metric(&t, "readyprism_connections_active", aa_l) == Some(0.0)).then_some(t)
    })
    .await;
    assert_eq!(
        m(
            &t,
            "readyprism_bytes_total",
            &format!("{aa_l},direction=\"to_backend\"")
        ),
        9.0
    ); // "RAW\n" + "12345"
    assert_eq!(
        m(
            &t,
            "readyprism_bytes_total",
            &format!("{aa_l},direction=\"to_client\"")
        ),
        11.0
    ); // "a\n" + echo "12345" + "bye\n"
       // Small exchanges are copied, not spliced.
    assert_eq!(m(&t, "readyprism_spliced_bytes_total", aa_l), 0.0);

    two.app.shutdown().await;
}

#[tokio::test]
async fn turning_unready_with_a_connection_open_moves_its_counters() {
    let two = Two::start().await;
    let (app, a, aa_l) = (&two.app, &two.a, &two.aa_l);
    // Unready with a connection open: state change, failure count, closed-unready count.
    let (_held, _) = raw(app.listen_addrs()[0]).await.expect("relayed");
    a.control.set_ready(false);
    wait_states(app, &[Unready, Ready]).await;
    poll("connection closed as unready", || {
        unready_closes(app, &addr(a), Some("turned_unready")) == 1
    })
    .await;
    let t = two.scrape().await;
    assert_eq!(m(&t, "readyprism_backend_ready", aa_l), 0.0);
    assert_eq!(
        m(
            &t,
            "readyprism_backend_state_changes_total",
            &format!("{aa_l},to=\"unready\"")
        ),
        1.0
    );
    assert!(failed_checks(&t, aa_l) >= 2.0);
    // Not ready: the apiserver answered 500, counted under its class.
    let labels = format!("{aa_l},result=\"fail\",reason=\"http_5xx\"");
    assert!(m(&t, "readyprism_health_checks_total", &labels) >= 2.0);
    assert_eq!(
        m(
            &t,
            "readyprism_connections_closed_total",
            &format!("{aa_l},reason=\"turned_unready\"")
        ),
        1.0
    );
    for reason in [
        "left_none_ready",
        "refusing",
        "silent",
        "removed",
        "failback",
    ] {
        let labels = format!("{aa_l},reason=\"{reason}\"");
        assert_eq!(
            m(&t, "readyprism_connections_closed_total", &labels),
            0.0,
            "every reason is exported from the start: {reason}"
        );
    }
    for reason in ["descriptors", "ports", "memory", "interrupted"] {
        let labels = format!("reason=\"{reason}\"");
        assert_eq!(m(&t, "readyprism_local_dial_failures_total", &labels), 0.0);
    }

    two.app.shutdown().await;
}

#[tokio::test]
async fn the_no_ready_gauge_is_up_while_nothing_is_ready() {
    let two = Two::start().await;
    let (app, a, b) = (&two.app, &two.a, &two.b);
    a.control.set_ready(false);
    wait_states(app, &[Unready, Ready]).await;
    // Nothing ready: the no-ready gauge.
    b.control.set_ready(false);
    wait_states(app, &[Unready, Unready]).await;
    assert_eq!(
        m(&two.scrape().await, "readyprism_no_ready_backends", ""),
        1.0
    );
    a.control.set_ready(true);
    wait_states(app, &[Ready, Unready]).await;
    assert_eq!(
        m(&two.scrape().await, "readyprism_no_ready_backends", ""),
        0.0
    );

    two.app.shutdown().await;
}

#[tokio::test]
async fn a_refused_dial_to_a_backend_still_marked_ready_is_counted() {
    let two = Two::start().await;
    let (app, a, aa_l) = (&two.app, &two.a, &two.aa_l);
    // A refused dial while still marked ready.
    a.stop().await;
    assert_eq!(landed(app.listen_addrs()[0]).await, "b");
    assert!(m(&two.scrape().await, "readyprism_dial_failures_total", aa_l) >= 1.0);
    two.app.shutdown().await;
}

/// The app, run from its config file, in front of one fake `a`, ready (its start-up change logged).
struct Logging {
    _rt: tokio::runtime::Runtime,
    _lab: Lab,
    a: FakeApiserver,
    p: Running,
}

impl Logging {
    fn start() -> Logging {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let lab = Lab::new();
        let (a, file) = lab.fake_and_config(&rt, "run.yaml", "");
        let p = Running::start(&file);
        let logging = Logging {
            _rt: rt,
            _lab: lab,
            a,
            p,
        };
        logging.wait_change("ready");
        logging
    }

    /// Waits for `a`'s state change to `to` in the log; the log line.
    fn wait_change(&self, to: &str) -> serde_json::Value {
        let a = addr(&self.a);
        self.p.wait_log("backend state changed", |v| {
            v["fields"]["backend"] == a.as_str() && v["fields"]["to"] == to
        })
    }

    /// Waits for the WARN that the no-ready-backend state ended.
    fn wait_leaving_none_ready(&self) {
        self.p.wait_log(
            "a backend is ready again; leaving the no-ready-backend state",
            |v| v["level"] == "WARN",
        );
    }
}

#[test]
fn each_state_change_is_logged_once_as_a_warning_with_its_reason() {
    let l = Logging::start();
    l.a.control.set_ready(false);
    let down = l.wait_change("unready");
    assert_eq!(down["level"], "WARN");
    assert_eq!(down["fields"]["from"], "ready");
    assert_eq!(down["fields"]["zone"], "dc-a");
    assert_eq!(
        down["fields"]["reason"],
        "readyz 500: etcd, etcd-readiness failed"
    );
    assert_eq!(down["fields"]["checks"], "etcd, etcd-readiness");
    l.a.control.set_ready(true);
    l.wait_leaving_none_ready();
    let changes =
        l.p.logs()
            .into_iter()
            .filter(|v| v["fields"]["message"] == "backend state changed")
            .count();
    assert_eq!(
        changes, 3,
        "start-up ready, unready, ready again: each exactly once"
    );
}

#[test]
fn no_ready_backends_is_warned_about_on_entering_as_on_leaving() {
    let l = Logging::start();
    l.a.control.set_ready(false);
    let entering = l.p.wait_log(
        "no backend is ready; failing open: routing to all backends",
        |_| true,
    );
    assert_eq!(entering["level"], "WARN");
    l.a.control.set_ready(true);
    l.wait_leaving_none_ready();
}

#[test]
fn a_fast_unready_local_apiserver_at_start_up_is_no_no_ready_alarm() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let local = rt.block_on(lab.fake("local"));
    local.control.set_ready(false); // answers its 500 at once
    let remote = rt.block_on(lab.fake("remote"));
    // Answers its 200 later: 500 ms, a gap scheduling on a loaded machine does not close.
    remote.control.set_readyz_delay(Duration::from_millis(500));
    let file = lab.path("run.yaml");
    std::fs::write(
        &file,
        lab.yaml(
            "dc-a",
            &[(addr(&local), "dc-a"), (addr(&remote), "dc-b")],
            "health: { interval: 5s, timeout: 3s, fast_interval: 1s }\n",
        ),
    )
    .expect("write");
    let p = Running::start(&file);
    p.wait_log("backend state changed", |v| {
        v["fields"]["backend"] == addr(&remote) && v["fields"]["to"] == "ready"
    });
    p.wait_log("backend state changed", |v| {
        v["fields"]["backend"] == addr(&local) && v["fields"]["to"] == "unready"
    });
    let order: Vec<String> = p
        .logs()
        .into_iter()
        .filter(|v| v["fields"]["message"] == "backend state changed")
        .map(|v| {
            v["fields"]["backend"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        order,
        [addr(&local), addr(&remote)],
        "the scenario: the local 500 comes first"
    );
    let alarms: Vec<_> = p
        .logs()
        .into_iter()
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("no backend is ready")
        })
        .collect();
    assert!(alarms.is_empty(), "{alarms:?}");
}

#[test]
fn text_logs_written_to_a_pipe_carry_no_colour_codes() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(["--log-format", "text", "demo", "--duration", "1s"])
        .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .env_remove("NO_COLOR")
        .output()
        .expect("run demo");
    assert!(o.status.success(), "{o:?}");
    let logs = String::from_utf8_lossy(&o.stderr);
    assert!(logs.contains("readyprism started"), "{logs}");
    assert!(
        !logs.contains('\x1b'),
        "ANSI escape in piped logs: {logs:?}"
    );
}

#[test]
fn the_started_line_names_version_with_commit() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "run.yaml", "");
    let p = Running::start(&file);
    let started = p.wait_log("readyprism started", |_| true);
    assert_eq!(started["fields"]["version"], env!("CARGO_PKG_VERSION"));
    let commit = started["fields"]["commit"].as_str().unwrap_or_default();
    assert!(!commit.is_empty(), "{started}");
    let metrics = blocking_get(p.admin, "/metrics").1;
    let labels = format!(
        "version=\"{}\",commit=\"{commit}\"",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        metric(&metrics, "readyprism_build_info", &labels),
        Some(1.0)
    );
}

#[test]
fn a_client_key_readable_by_others_is_warned_about_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "run.yaml", "");
    let key = lab.path("kubelet-client-current.pem");
    let warning = "the client key is readable by group or others; it should be 0600";
    for (mode, warned) in [(0o644, true), (0o600, false)] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let p = Running::start(&file);
        let said = p
            .logs()
            .iter()
            .any(|v| v["fields"]["message"] == warning && v["level"] == "WARN");
        assert_eq!(said, warned, "mode {mode:o}");
    }
}
