//! The alerts in `talos/alerts/` against a real Prometheus (Debian's `prometheus`, on loopback):
//! it scrapes a running balancer whose backends include one failing its checks, every metric and
//! label the rules use is in what it scraped, and the "backend unready" expression evaluates to
//! exactly that backend.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

use readyprism::verdict::State::{Ready, Unready};

use crate::support::*;

const RULES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/talos/alerts/readyprism.rules.yaml"
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_finds_the_unready_backend_through_every_metric_the_alerts_use() {
    if !prometheus_available() {
        return;
    }
    let lab = Lab::new();
    let good = lab.fake("good").await;
    let failing = lab.fake("failing").await;
    failing.control.set_ready(false);
    let app = lab
        .start(&lab.yaml(
            "dc-a",
            &[(addr(&good), "dc-a"), (addr(&failing), "dc-b")],
            "",
        ))
        .await;
    wait_states(&app, &[Ready, Unready]).await;
    let (_prometheus, api) = start_prometheus(&lab, &app.admin_addr().to_string()).await;

    eventually("Prometheus scraped readyprism", || async {
        let v = query(&api, "up{job=\"readyprism\"} == 1").await?;
        (v.as_array()?.len() == 1).then_some(())
    })
    .await;

    let rules = std::fs::read_to_string(RULES).expect("rules file");
    for (metric, labels) in used_by_rules(&rules) {
        let series = eventually(&format!("{metric} scraped"), || async {
            let v = query(&api, &format!("{{__name__=\"{metric}\"}}")).await?;
            let s = v.as_array()?.clone();
            (!s.is_empty()).then_some(s)
        })
        .await;
        for label in labels {
            assert!(
                series.iter().any(|s| s["metric"].get(&label).is_some()),
                "{metric} has no label {label}: {series:?}"
            );
        }
    }

    let expr = alert_expr(&rules, "ReadyprismBackendUnready");
    let unready = eventually("the unready expression evaluates", || async {
        let v = query(&api, &expr).await?;
        let s = v.as_array()?.clone();
        (!s.is_empty()).then_some(s)
    })
    .await;
    let backends: Vec<&str> = unready
        .iter()
        .filter_map(|s| s["metric"]["backend"].as_str())
        .collect();
    assert_eq!(backends, [addr(&failing)], "{expr}: {unready:?}");
    app.shutdown().await;
}

/// Every `readyprism_*` metric in the rules' expressions, with the labels the rules use on it
/// (in selectors, `without (...)`, and `$labels.x` of its alert's annotations).
fn used_by_rules(rules: &str) -> Vec<(String, BTreeSet<String>)> {
    let doc: serde_json::Value = serde_json::to_value(yaml_value(rules)).expect("rules as a value");
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for rule in doc["groups"][0]["rules"].as_array().expect("rules") {
        let expr = rule["expr"].as_str().expect("expr");
        let annotations = rule["annotations"].to_string();
        let mut labels: BTreeSet<String> = words_after(&annotations, "$labels.")
            .into_iter()
            .filter(|l| l != "instance") // added by Prometheus, not by us
            .collect();
        for inside in between(expr, "{", "}") {
            labels.extend(inside.split(',').filter_map(|m| {
                let name = m.split(['=', '!', '~']).next()?.trim();
                (!name.is_empty()).then(|| name.to_string())
            }));
        }
        for inside in between(expr, "without (", ")") {
            labels.extend(inside.split(',').map(|l| l.trim().to_string()));
        }
        for metric in words_after(expr, "readyprism_") {
            let metric = format!("readyprism_{metric}");
            match out.iter_mut().find(|(m, _)| *m == metric) {
                Some((_, l)) => l.extend(labels.iter().cloned()),
                None => out.push((metric, labels.clone())),
            }
        }
    }
    assert!(!out.is_empty(), "no metric found in {RULES}");
    out
}

fn alert_expr(rules: &str, alert: &str) -> String {
    let doc = serde_json::to_value(yaml_value(rules)).expect("rules as a value");
    doc["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["alert"] == alert)
        .and_then(|r| r["expr"].as_str())
        .unwrap_or_else(|| panic!("no alert {alert}"))
        .to_string()
}

fn yaml_value(text: &str) -> yaml_serde::Value {
    yaml_serde::from_str(text).expect("rules are YAML")
}

/// Identifier-like words right after each `prefix` in `text`.
fn words_after(text: &str, prefix: &str) -> Vec<String> {
    text.match_indices(prefix)
        .map(|(i, _)| {
            text[i + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every text between `open` and the next `close`.
fn between<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    text.match_indices(open)
        .filter_map(|(i, _)| {
            let rest = &text[i + open.len()..];
            rest.find(close).map(|j| &rest[..j])
        })
        .collect()
}

/// Prometheus scraping `target` every second with the alert rules loaded; its API address.
async fn start_prometheus(lab: &Lab, target: &str) -> (KillOnDrop, String) {
    let config = lab.path("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\nrule_files: [\"{RULES}\"]\nscrape_configs:\n  - job_name: readyprism\n    static_configs: [{{ targets: [\"{target}\"] }}]\n"
        ),
    )
    .expect("write prometheus.yml");
    // Prometheus cannot report a port it chose, so pick a free one; retry if it was taken meanwhile.
    for attempt in 0..5 {
        let (held, web) = refusing_addr();
        drop(held);
        let data = lab.path(&format!("tsdb-{attempt}"));
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn prometheus");
        let child = std::sync::Mutex::new(KillOnDrop(child));
        let exited = || {
            let mut c = child.lock().expect("child");
            c.0.try_wait().ok().flatten().is_some()
        };
        let ready = eventually("Prometheus ready or gone", || async {
            if exited() {
                return Some(false);
            }
            let answer = readyprism::cli::http::get(&web, "/-/ready").await.ok()?;
            (answer.status == 200).then_some(true)
        })
        .await;
        let child = child.into_inner().expect("child");
        if ready {
            return (child, web);
        }
    }
    panic!("Prometheus did not start in 5 attempts");
}

/// An instant query; the `data.result` array.
async fn query(api: &str, promql: &str) -> Option<serde_json::Value> {
    let path = format!("/api/v1/query?query={}", url_encode(promql));
    let answer = readyprism::cli::http::get(api, &path).await.ok()?;
    let v: serde_json::Value = serde_json::from_str(&answer.body).ok()?;
    (v["status"] == "success").then(|| v["data"]["result"].clone())
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether Prometheus is installed. Without it the test says it is skipped, unless
/// `READYPRISM_REQUIRE_PROMETHEUS=1` (set by `.ci/run`), which makes that a failure.
fn prometheus_available() -> bool {
    let found = Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("READYPRISM_REQUIRE_PROMETHEUS").as_deref() != Ok("1"),
            "prometheus is not on PATH, and READYPRISM_REQUIRE_PROMETHEUS=1 requires it"
        );
        eprintln!("SKIPPED alerts test: prometheus is not on PATH (Debian package `prometheus`)");
    }
    found
}

/// Kills the child process when the test ends, passed or not.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
