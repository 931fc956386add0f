//! Our own client certificate, named as ours on the app run from its config file: an expired or soon-expiring one
//! is a WARN at start-up and at rotation, `/status` and `readyprism status` say when it expires,
//! an apiserver refusing it reads as a refusal of ours, and a wrong server name names both sides.

use readyprism::sim::pki::Issued;
use readyprism::verdict::State;

use crate::support::Running;
use crate::support::*;

const EXPIRED: &str = "our client certificate has expired: the apiservers will refuse it; is kubelet's certificate rotation working?";
const SOON: &str =
    "our client certificate expires within 7 days; is kubelet's certificate rotation working?";

fn write_client(lab: &Lab, cert: &Issued) {
    std::fs::write(lab.path("kubelet-client-current.pem"), cert.combined_pem())
        .expect("write client cert");
}

fn status(p: &Running) -> serde_json::Value {
    serde_json::from_str(&blocking_get(p.admin, "/status").1).expect("status JSON")
}

/// Waits until `/status` satisfies `pred`; returns it.
fn wait_status(
    p: &Running,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + patience();
    loop {
        let doc = status(p);
        if pred(&doc) {
            return doc;
        }
        assert!(tokio::time::Instant::now() < deadline, "no {what}: {doc}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `metrics` count at least one failed check of `a` as our client certificate's.
fn counted_as_ours(metrics: &str, a: &readyprism::sim::apiserver::FakeApiserver) {
    let labels = format!(
        "backend=\"{}\",result=\"fail\",reason=\"client_cert\"",
        addr(a)
    );
    assert!(
        metric(metrics, "readyprism_health_checks_total", &labels).is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
}

/// `readyprism status`'s table for the balancer `p`, once its summary line ends with `said`.
fn status_summary_says(p: &Running, said: &str) -> String {
    let out = readyprism(&["status", "--admin", &p.admin.to_string()]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = table.lines().next().unwrap_or_default();
    assert!(summary.ends_with(said), "{table}");
    table
}

/// Writes the kubelet certificate, expired at midnight UTC yesterday (between one and two days
/// ago, whenever the test runs); answers a server certificate for 127.0.0.1 from the same CA.
fn expired_client(lab: &Lab) -> readyprism::sim::pki::Issued {
    let expired = lab.cluster.ca.client_until("test-node", -1).expect("cert");
    write_client(lab, &expired);
    lab.cluster.ca.server(&["127.0.0.1"]).expect("server cert")
}

#[test]
fn an_expired_client_certificate_is_named_as_ours_everywhere_it_shows() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    // An apiserver that verifies client certificates against the cluster CA, as kube-apiserver's
    // TLS front does: it refuses an expired one with a `certificate expired` alert.
    let server = expired_client(&lab);
    let strict =
        readyprism::sim::apiserver::strict_server_tls(&lab.cluster.ca, &server).expect("tls");
    let a = rt.block_on(async { readyprism::testing::fake_serving("a", strict) });
    let file = lab.path("expired.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(addr(&a), "dc-a")], "")).expect("write");
    let p = Running::start(&file);

    let warned = p.wait_log(EXPIRED, |_| true);
    assert_eq!(warned["level"], "WARN");
    assert_eq!(warned["fields"]["expiry"], "EXPIRED 1d ago");
    assert_eq!(
        warned["fields"]["client_cert"],
        lab.path("kubelet-client-current.pem").display().to_string()
    );

    let refused = "the apiserver refused our client certificate: certificate expired";
    let doc = wait_status(&p, "the refusal as the backend's last error", |d| {
        d["backends"][0]["last_error"] == refused
    });
    assert_eq!(doc["client_cert"], "loaded");
    assert_eq!(doc["client_cert_expiry"], "EXPIRED 1d ago");
    assert!(doc["client_cert_not_after"].as_i64().is_some(), "{doc}");

    let table = status_summary_says(&p, "client cert EXPIRED 1d ago");
    assert!(table.contains(refused), "{table}");

    counted_as_ours(&blocking_get(p.admin, "/metrics").1, &a);
}

#[test]
fn a_soon_expiring_client_certificate_after_a_rotation_is_warned_about() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (_a, file) = lab.fake_and_config(&rt, "soon.yaml", "");
    let p = Running::start(&file);
    p.wait_log("backend state changed", |v| v["fields"]["to"] == "ready");
    // The lab's certificate is valid for centuries: no warning, and `/status` says so.
    let doc = status(&p);
    let far = doc["client_cert_expiry"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        far.starts_with("expires in ") && far.ends_with('d'),
        "{doc}"
    );
    assert!(!p
        .logs()
        .iter()
        .any(|v| v["fields"]["message"] == SOON || v["fields"]["message"] == EXPIRED));

    // kubelet rotates to one valid until midnight UTC six days from today: 5 whole days left.
    write_client(
        &lab,
        &lab.cluster.ca.client_until("test-node", 6).expect("cert"),
    );
    let warned = p.wait_log(SOON, |_| true);
    assert_eq!(warned["level"], "WARN");
    assert_eq!(warned["fields"]["expiry"], "expires in 5d");
    wait_status(&p, "the new expiry", |d| {
        d["client_cert_expiry"] == "expires in 5d"
    });
    status_summary_says(&p, "client cert expires in 5d");
}

#[tokio::test]
async fn a_server_name_mismatch_names_the_expected_name_beside_the_presented_ones() {
    let lab = Lab::new();
    let a = lab.fake("a").await;
    let yaml = lab
        .yaml("dc-a", &[(addr(&a), "dc-a")], "")
        .replace(", zone: dc-a }", ", zone: dc-a, server_name: api.example }");
    let app = lab.start(&yaml).await;
    let snap = wait_states(&app, &[State::Unready]).await;
    let reason = snap.backends[0].last_error.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "TLS: the apiserver's certificate is not valid for api.example; it names "
        ),
        "{reason}"
    );
    // The lab's server certificate holds 127.0.0.1, ::1 and localhost: all named.
    for san in ["127.0.0.1", "::1", "localhost"] {
        assert!(reason.contains(san), "{san} in {reason}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_401_while_our_client_certificate_has_expired_names_our_certificate() {
    // kube-apiserver verifies client certificates after the handshake: an expired one gets
    // `401 Unauthorized` on /readyz, not a TLS alert.
    let lab = Lab::new();
    let server = expired_client(&lab);
    let lenient =
        readyprism::sim::apiserver::lenient_server_tls(&lab.cluster.ca, &server).expect("tls");
    let a = readyprism::testing::fake_serving("a", lenient);
    a.control
        .readyz_answer
        .store(Some(std::sync::Arc::new((401, "Unauthorized".to_string()))));
    let app = lab.alone_behind_balancer(&a, "").await;
    let snap = wait_states(&app, &[State::Unready]).await;
    assert_eq!(
        snap.backends[0].last_error.as_deref(),
        Some("HTTP 401: Unauthorized; our client certificate EXPIRED 1d ago")
    );
    counted_as_ours(&app.metrics_text(), &a);
    app.shutdown().await;
}
