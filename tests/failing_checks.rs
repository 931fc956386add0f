//! The named checks of a failed `/readyz` wherever an operator looks, on the app run from its config file: the
//! reason and `failing_checks` in `/status`, the `readyprism status` table, the
//! `readyprism_backend_failing_check` series, the transition log line; a check named twice is
//! one check (one series: a series twice is an invalid exposition).

use std::collections::HashSet;
use std::sync::Arc;

use readyprism::sim::apiserver::FakeApiserver;

use crate::support::Running;
use crate::support::*;

/// A balancer process in front of one fake `a` whose `etcd` check fails, waited until `a` is
/// unready.
struct Failing {
    rt: tokio::runtime::Runtime,
    _lab: Lab,
    a: FakeApiserver,
    p: Running,
}

impl Failing {
    fn start() -> Failing {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let lab = Lab::new();
        let (a, file) = lab.fake_and_config(&rt, "checks.yaml", "");
        a.control.set_check("etcd", false);
        let p = Running::start(&file);
        let f = Failing {
            rt,
            _lab: lab,
            a,
            p,
        };
        f.wait_status("a is unready", |b| b["state"] == "unready");
        f
    }

    /// Waits until `a`'s entry in `/status` satisfies `pred`; returns it.
    fn wait_status(
        &self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        self.rt.block_on(poll(what, || {
            let (_, body) = blocking_get(self.p.admin, "/status");
            let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            last = doc["backends"][0].clone();
            pred(&last)
        }));
        last
    }

    /// `readyprism_backend_failing_check` for `a` and `check`, if the series exists.
    fn series(&self, check: &str) -> Option<f64> {
        let (_, text) = blocking_get(self.p.admin, "/metrics");
        let labels = format!("backend=\"{}\",check=\"{check}\"", addr(&self.a));
        metric(&text, "readyprism_backend_failing_check", &labels)
    }
}

#[test]
fn a_failing_check_is_named_wherever_an_operator_looks() {
    let f = Failing::start();
    let a = f.wait_status("the reason", |b| b["last_error"].is_string());
    assert_eq!(a["last_error"], "readyz 500: etcd failed");
    assert_eq!(a["failing_checks"], serde_json::json!(["etcd"]));

    let o = readyprism(&["status", "--admin", &f.p.admin.to_string()]);
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with(&addr(&f.a)))
        .unwrap_or_else(|| panic!("a row for a in:\n{table}"));
    assert!(row.ends_with("readyz 500: etcd failed"), "{table}");

    assert_eq!(f.series("etcd"), Some(1.0));
    assert_eq!(f.series("etcd-readiness"), None, "only the failing ones");

    let change =
        f.p.wait_log("backend state changed", |v| v["fields"]["to"] == "unready");
    assert_eq!(change["fields"]["checks"], "etcd");
}

#[test]
fn a_failing_check_series_goes_once_the_check_passes() {
    let f = Failing::start();
    f.rt.block_on(poll("the series", || f.series("etcd").is_some()));
    f.a.control.set_check("etcd", true);
    let a = f.wait_status("a is ready again", |b| b["state"] == "ready");
    assert_eq!(f.series("etcd"), None);
    assert!(a.get("failing_checks").is_none(), "omitted when none: {a}");
    let change = f.p.wait_log("backend state changed", |v| {
        v["fields"]["to"] == "ready" && v["fields"]["from"] == "unready"
    });
    assert_eq!(change["fields"]["checks"], "");
}

#[test]
fn a_check_named_twice_in_an_answer_is_one_series() {
    let f = Failing::start();
    let twice = "[+]ping ok\n[-]etcd failed: reason withheld\n[-]etcd failed: reason withheld\n\
        [-]informer-sync failed: reason withheld\n[-]informer-sync failed: reason withheld\n\
        readyz check failed\n";
    let answer = (500, twice.to_string());
    f.a.control.readyz_answer.store(Some(Arc::new(answer)));
    let a = f.wait_status("the answer read", |b| {
        b["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("informer-sync"))
    });
    let (_, text) = blocking_get(f.p.admin, "/metrics");
    let mut seen = HashSet::new();
    for sample in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let series = sample.rsplit_once(' ').map_or(sample, |(s, _)| s);
        assert!(seen.insert(series), "{series} twice in the scrape:\n{text}");
    }
    assert_eq!(f.series("etcd"), Some(1.0));
    assert_eq!(f.series("informer-sync"), Some(1.0));
    assert_eq!(
        a["failing_checks"],
        serde_json::json!(["etcd", "informer-sync"])
    );
    assert_eq!(a["last_error"], "readyz 500: etcd, informer-sync failed");
}
