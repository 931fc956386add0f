//! The per-backend collector's unit tests: the failing-check gauge follows the snapshot.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::backend::{Backend, BackendLive, Snapshot};
use crate::metrics::Metrics;
use crate::verdict::{CheckFailure, FailingChecks, Health, State};

/// A snapshot of one backend `10.0.0.1:6443` whose latest answer named `checks` as failing
/// (none: it passed).
fn snapshot(checks: &[&str]) -> Snapshot {
    let last_failure = (!checks.is_empty()).then(|| CheckFailure {
        reason: "readyz 500: …".into(),
        checks: FailingChecks::of(checks),
    });
    let backend = Backend {
        live: Arc::new(BackendLive::default()),
        spec: crate::testing::fixtures::spec("10.0.0.1:6443", None),
        health: Health {
            state: State::Unready,
            last_failure,
            ..Health::UNKNOWN
        },
        evict_epoch: 0,
        degraded: None,
    };
    Snapshot {
        generation: 1,
        backends: vec![backend],
        ..Snapshot::default()
    }
}

/// The `readyprism_backend_failing_check` lines of a scrape.
fn failing_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("readyprism_backend_failing_check{"))
        .collect()
}

#[test]
fn each_failing_check_is_a_series_until_an_answer_no_longer_names_it() {
    let current = Arc::new(ArcSwap::from_pointee(snapshot(&["etcd", "etcd-readiness"])));
    let source = current.clone();
    let metrics = Metrics::new(Box::new(move || source.load_full()));
    assert_eq!(
        failing_lines(&metrics.encode()),
        [
            "readyprism_backend_failing_check{backend=\"10.0.0.1:6443\",check=\"etcd\"} 1",
            "readyprism_backend_failing_check{backend=\"10.0.0.1:6443\",check=\"etcd-readiness\"} 1",
        ]
    );
    current.store(Arc::new(snapshot(&["etcd"])));
    assert_eq!(failing_lines(&metrics.encode()).len(), 1);
    current.store(Arc::new(snapshot(&[])));
    assert!(failing_lines(&metrics.encode()).is_empty());
}

#[test]
fn a_backend_names_at_most_eight_failing_checks() {
    let names: Vec<String> = (0..12).map(|i| format!("check-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let snap = Arc::new(snapshot(&refs));
    let metrics = Metrics::new(Box::new(move || snap.clone()));
    assert_eq!(failing_lines(&metrics.encode()).len(), 8);
}

#[test]
fn the_close_reasons_help_and_series_name_every_reason() {
    let snap = Arc::new(snapshot(&[]));
    let metrics = Metrics::new(Box::new(move || snap.clone()));
    let text = metrics.encode();
    let help = text
        .lines()
        .find(|l| l.starts_with("# HELP readyprism_connections_closed_total "))
        .expect("the help line");
    for r in crate::eviction::CloseReason::ALL {
        let name = r.as_str();
        assert!(help.contains(name), "{name} missing from {help}");
        let series = format!(
            "readyprism_connections_closed_total{{backend=\"10.0.0.1:6443\",reason=\"{name}\"}} 0"
        );
        assert!(text.lines().any(|l| l == series), "no {series}");
    }
}
