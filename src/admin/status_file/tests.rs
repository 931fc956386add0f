//! The status file's unit tests: when it is written (a table of looks), its bounds, and a file
//! that is not a status document left alone.

use super::*;

#[test]
fn written_on_a_change_or_a_refresh_never_twice_within_a_second() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let look = |at: u64, changed, attempt: Option<u64>, written: Option<u64>| Look {
        now: t0 + s(at),
        changed,
        last_attempt: attempt.map(|a| t0 + s(a)),
        last_written: written.map(|w| t0 + s(w)),
    };
    let cases = [
        // (what it knows, decision)
        (look(0, true, None, None), Decision::Write),
        (look(0, false, None, None), Decision::Write),
        (
            look(10, true, Some(10), Some(10)),
            Decision::Wait(t0 + s(11)),
        ),
        (look(11, true, Some(10), Some(10)), Decision::Write),
        (
            look(12, false, Some(10), Some(10)),
            Decision::Wait(t0 + s(40)),
        ),
        (look(40, false, Some(10), Some(10)), Decision::Write),
        // A failed write: the content stays changed, retried a second later, not before.
        (
            look(50, true, Some(50), Some(10)),
            Decision::Wait(t0 + s(51)),
        ),
        (look(51, true, Some(50), Some(10)), Decision::Write),
    ];
    for (i, (look, want)) in cases.into_iter().enumerate() {
        assert_eq!(decide(look), want, "case {i}");
    }
}

/// The sample document with a first reason ten times too long, stored and read back:
/// (the directory, the file, what was stored, what was read).
fn stored_with_a_long_reason() -> (tempfile::TempDir, PathBuf, StatusDoc, StatusDoc) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("status.json");
    let mut doc = crate::cli::status::sample();
    doc.backends[0].last_error = Some("x".repeat(10 * MAX_REASON));
    store(&path, &bounded(doc.clone())).expect("store");
    let back = parse(&std::fs::read(&path).expect("read")).expect("parse");
    (dir, path, doc, back)
}

#[test]
fn a_stored_reason_is_cut_to_its_bound() {
    let (_dir, _, _, back) = stored_with_a_long_reason();
    let reason = back.backends[0].last_error.as_deref().expect("reason");
    assert_eq!(reason.chars().count(), MAX_REASON);
    assert!(reason.ends_with('…'));
}

#[test]
fn a_document_round_trips_through_the_file() {
    let (_dir, path, doc, back) = stored_with_a_long_reason();
    assert_eq!(back.backends[1], doc.backends[1]);
    store(&path, &back).expect("a status file is replaced");
}

#[test]
fn a_file_that_is_not_a_status_document_is_never_written_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubelet.conf");
    std::fs::write(&path, "apiVersion: v1\n").expect("write");
    let e = store(&path, &crate::cli::status::sample()).expect_err("refused");
    assert!(matches!(e, WriteError::NotOurs { .. }), "{e}");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "apiVersion: v1\n"
    );
    let missing = dir.path().join("gone").join("status.json");
    let e = store(&missing, &crate::cli::status::sample()).expect_err("no directory");
    assert!(
        e.to_string()
            .starts_with(&format!("{}:", missing.display())),
        "{e}"
    );
}

#[test]
fn only_a_real_change_is_a_change_of_content() {
    let doc = crate::cli::status::sample();
    let mut probed = doc.clone();
    probed.generation += 7;
    probed.at = Some("2030-01-01T00:00:00Z".into());
    for b in &mut probed.backends {
        b.last_check = Some("2030-01-01T00:00:00Z".into());
        b.consecutive_failures += 3;
        b.active_connections += 2;
        b.latency_ms = Some(99.0);
    }
    assert_eq!(content(&probed), content(&doc), "a probe's new snapshot");
    let mut fell = doc.clone();
    fell.backends[1].state = crate::verdict::State::Unready;
    assert_ne!(content(&fell), content(&doc), "a backend fell");
    let mut reason = doc.clone();
    reason.backends[0].last_error = Some("readyz 500: shutdown failed".into());
    assert_ne!(content(&reason), content(&doc), "a new reason");
}
