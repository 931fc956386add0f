//! Reading a balancer's `/metrics` in tests: one Prometheus sample ([`metric`]) and the
//! per-backend counters the tests count (state changes, dial failures, closes for state). It does
//! not wait for a value (`wait.rs`).

use readyprism::app::App;

/// A per-backend counter from `/metrics`: `name{backend="<address>"<extra>}`, 0 when absent.
pub fn backend_metric(app: &App, name: &str, address: &str, extra: &str) -> u64 {
    let labels = format!("backend=\"{address}\"{extra}");
    metric(&app.metrics_text(), name, &labels).unwrap_or(0.0) as u64
}

/// State changes of the backend at `address` to `to` (`ready`, `unready`).
pub fn state_changes(app: &App, address: &str, to: &str) -> u64 {
    let extra = format!(",to=\"{to}\"");
    backend_metric(
        app,
        "readyprism_backend_state_changes_total",
        address,
        &extra,
    )
}

/// Failed dials to the backend at `address`.
pub fn dial_failures(app: &App, address: &str) -> u64 {
    backend_metric(app, "readyprism_dial_failures_total", address, "")
}

/// The value of one Prometheus sample line `name{labels} value`, matching labels as a substring.
pub fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let (series, _) = l.rsplit_once(' ').unwrap_or((l, ""));
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name && rest.contains(labels)
        })
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

/// Failed health checks (`readyprism_health_checks_total{result="fail"}`) whose labels hold
/// `labels` (e.g. `backend="…"`), summed over every failure class (`reason`).
pub fn failed_checks(text: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("readyprism_health_checks_total{"))
        .filter(|l| l.contains(labels) && l.contains("result=\"fail\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Connections to the backend at `address` closed for its state (`readyprism_connections_closed_total`),
/// for one `reason`, or over every reason with `None`.
pub fn unready_closes(app: &App, address: &str, reason: Option<&str>) -> u64 {
    let reasons = [
        "turned_unready",
        "left_none_ready",
        "refusing",
        "silent",
        "removed",
        "failback",
        "handoff",
    ];
    reasons
        .iter()
        .filter(|r| reason.is_none_or(|want| want == **r))
        .map(|r| {
            let extra = format!(",reason=\"{r}\"");
            backend_metric(app, "readyprism_connections_closed_total", address, &extra)
        })
        .sum()
}
