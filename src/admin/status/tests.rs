//! The `/status` document's unit tests: the mode, the JSON field names, the zone's source, the
//! failing checks.

use std::sync::Arc;

use super::*;
use crate::backend::{Backend, BackendId, BackendLive, Routing};
use crate::pick::WhenNoneReady;
use crate::verdict::Health;

fn snapshot(states: &[State], policy: WhenNoneReady) -> Snapshot {
    let backends = states
        .iter()
        .enumerate()
        .map(|(i, &state)| {
            let id = BackendId::new(&format!("10.0.0.{i}:6443"));
            Backend {
                live: Arc::new(BackendLive::default()),
                spec: crate::testing::fixtures::spec(id.as_str(), None),
                health: Health {
                    state,
                    ..Health::UNKNOWN
                },
                evict_epoch: 0,
                degraded: None,
            }
        })
        .collect();
    Snapshot {
        generation: 1,
        routing: Routing {
            when_none_ready: policy,
            ..Routing::default()
        },
        backends,
    }
}

#[test]
fn mode_says_what_new_connections_get() {
    use State::*;
    use WhenNoneReady::*;
    let cases = [
        (vec![Ready, Unready], FailOpen, Mode::Normal),
        (vec![Unready, Unready], FailOpen, Mode::FailOpen),
        (vec![Unknown, Unready], FailOpen, Mode::FailOpen),
        (vec![Unknown, Unknown], FailOpen, Mode::Starting),
        (vec![Unknown, Unready], Refuse, Mode::Starting),
        (vec![Unready, Unready], Refuse, Mode::Refuse),
    ];
    for (states, policy, want) in cases {
        let doc = StatusDoc::of(&snapshot(&states, policy), false, CertStatus::None, None);
        assert_eq!(doc.mode, want, "{states:?} {policy:?}");
    }
}

#[test]
fn document_round_trips_through_json_with_the_documented_field_names() {
    let doc = StatusDoc::of(
        &snapshot(&[State::Ready, State::Unready], WhenNoneReady::FailOpen),
        false,
        CertStatus::Loaded,
        None,
    );
    let text = serde_json::to_string(&doc).expect("serialize");
    for key in [
        "\"zone\":null",
        "\"zone_source\":null",
        "\"ready\":true",
        "\"mode\":\"normal\"",
        "\"shutting_down\":false",
        "\"client_cert\":\"loaded\"",
        "\"generation\":1",
        "\"state\":\"unready\"",
        "\"rank\":null",
        "\"rank\":0",
        "\"active_connections\":0",
        "\"latency_ms\":null",
        "\"last_error\":null",
    ] {
        assert!(text.contains(key), "{key} in {text}");
    }
    let back: StatusDoc = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, doc);
}

/// A status document of one ready backend, zoned.
fn zoned_doc() -> StatusDoc {
    let mut doc = StatusDoc::of(
        &snapshot(&[State::Ready], WhenNoneReady::FailOpen),
        false,
        CertStatus::None,
        None,
    );
    doc.zone = Some("dc-a".into());
    doc
}

#[test]
fn zone_source_reads_as_the_log_writes_it() {
    let mut doc = zoned_doc();
    for (source, text) in [
        (ZoneSource::Flag, "\"flag\""),
        (ZoneSource::Env, "\"env\""),
        (ZoneSource::Config, "\"config\""),
        (
            ZoneSource::Address([10, 0, 1, 5].into()),
            "\"address 10.0.1.5\"",
        ),
        (
            ZoneSource::Address("fd00:2::5".parse().expect("ip")),
            "\"address fd00:2::5\"",
        ),
    ] {
        doc.zone = Some("dc-a".into());
        doc.zone_source = Some(source);
        let json = serde_json::to_string(&doc).expect("serialize");
        assert!(json.contains(&format!("\"zone_source\":{text}")), "{json}");
        let back: StatusDoc = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, doc);
    }
}

#[test]
fn a_document_from_before_zone_source_reads_as_absent() {
    let mut doc = zoned_doc();
    doc.zone_source = Some(ZoneSource::Address("fd00:2::5".parse().expect("ip")));
    // A document from a balancer that predates the field.
    let mut old: serde_json::Value = serde_json::to_value(&doc).expect("value");
    old.as_object_mut().expect("object").remove("zone_source");
    let back: StatusDoc = serde_json::from_value(old).expect("deserialize");
    assert_eq!(back.zone_source, None);
}

#[test]
fn failing_checks_are_listed_only_when_an_answer_named_some() {
    use crate::verdict::{CheckFailure, FailingChecks};
    let mut snap = snapshot(&[State::Unready, State::Ready], WhenNoneReady::FailOpen);
    snap.backends[0].health.last_failure = Some(CheckFailure {
        reason: "readyz 500: etcd, etcd-readiness failed".into(),
        checks: FailingChecks::of(&["etcd", "etcd-readiness"]),
    });
    let doc = StatusDoc::of(&snap, false, CertStatus::Loaded, None);
    assert_eq!(doc.backends[0].failing_checks, ["etcd", "etcd-readiness"]);
    let json = serde_json::to_value(&doc).expect("serialize");
    assert_eq!(
        json["backends"][0]["failing_checks"],
        serde_json::json!(["etcd", "etcd-readiness"])
    );
    let ready = json["backends"][1].as_object().expect("object");
    assert!(
        !ready.contains_key("failing_checks"),
        "omitted when none: {ready:?}"
    );
    assert!(!ready.contains_key("failing_checks_more"), "{ready:?}");
    let back: StatusDoc = serde_json::from_value(json).expect("deserialize");
    assert_eq!(back, doc);
}
