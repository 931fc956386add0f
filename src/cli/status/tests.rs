//! `readyprism status`'s unit tests: the table, its last line, the exit code, escaping, and
//! documents that are not status documents.

use super::*;
use crate::testing::answers;

#[test]
fn table_shows_a_summary_over_one_aligned_row_per_backend() {
    let want = "\
node zone dc-a (address 10.0.1.5)  ready yes  mode normal  client cert loaded
BACKEND         ZONE  SOURCE      STATE    SINCE                 PENDING      LATENCY  ACTIVE  RANK  FAILS  CHECKED               LAST ERROR
10.0.1.10:6443  dc-a  config      unready  2026-12-05T12:40:00Z  -            0.31ms   0       -     3      2026-12-05T12:48:01Z  readyz 500: etcd failed
10.0.2.10:6443  dc-b  config      ready    2026-12-05T12:40:00Z  falling 1/2  23.3ms   12      0     0      2026-12-05T12:48:01Z  -
[fd00::3]:6443  -     discovered  unknown  2026-12-05T12:40:00Z  -            -        0       -     0      -                     -
status at 2026-12-05T12:48:04Z  config /etc/readyprism.yaml loaded 2026-12-05T12:00:00Z  last reload -
";
    assert_eq!(render_table(&sample()), want);
}

#[test]
fn the_summary_says_when_our_client_certificate_expires() {
    for expiry in ["expires in 6d", "EXPIRED 1h ago"] {
        let doc = StatusDoc {
            client_cert_expiry: Some(expiry.to_string()),
            ..sample()
        };
        let table = render_table(&doc);
        let want = format!("mode normal  client cert {expiry}\n");
        assert!(
            table
                .lines()
                .next()
                .is_some_and(|l| format!("{l}\n").ends_with(&want)),
            "{table}"
        );
    }
}

#[test]
fn table_flags_not_ready_or_shutting_down() {
    let doc = StatusDoc {
        zone: None,
        zone_source: None,
        ready: false,
        mode: Mode::FailOpen,
        shutting_down: true,
        client_cert: CertStatus::Absent,
        backends: vec![],
        at: None,
        config: None,
        ..sample()
    };
    let table = render_table(&doc);
    assert!(
        table.starts_with(
            "node zone -  ready NO  mode fail_open  client cert absent  SHUTTING DOWN\n"
        ),
        "{table}"
    );
    assert!(table.ends_with("(no backends configured)\n"), "{table}");
}

#[test]
fn the_last_line_says_a_rejected_reload_with_why() {
    use crate::admin::config_view::ReloadStatus;
    let mut doc = sample();
    let config = doc.config.as_mut().expect("sample has one");
    config.last_reload = Some(ReloadStatus {
        at: "2026-12-05T12:30:00Z".to_string(),
        result: ReloadResult::Rejected,
        error: Some("/etc/readyprism.yaml:3:5: health.rise: 0 must be 1 to 10\x1b[2J".into()),
    });
    let table = render_table(&doc);
    let last = table.lines().last().expect("a line");
    assert_eq!(
        last,
        "status at 2026-12-05T12:48:04Z  config /etc/readyprism.yaml loaded 2026-12-05T12:00:00Z  last reload REJECTED 2026-12-05T12:30:00Z: /etc/readyprism.yaml:3:5: health.rise: 0 must be 1 to 10\\x1b[2J"
    );
}

#[test]
fn exit_code_is_ready_only_with_a_ready_backend_to_route_to() {
    assert_eq!(exit_code(&sample()), EXIT_READY);
    let not_ready = StatusDoc {
        ready: false,
        ..sample()
    };
    assert_eq!(exit_code(&not_ready), EXIT_NOT_READY);
    // Ready with nothing ready to route to (no backends, or none ready) is not ready.
    let nothing = StatusDoc {
        backends: vec![],
        ..sample()
    };
    assert_eq!(exit_code(&nothing), EXIT_NOT_READY);
    assert!(render_table(&nothing).starts_with("node zone dc-a (address 10.0.1.5)  ready NO"));
    let mut none_ready = sample();
    none_ready.backends.retain(|b| b.state != State::Ready);
    assert_eq!(exit_code(&none_ready), EXIT_NOT_READY);
}

/// The table of a document with control characters, a huge latency and a long address.
fn hostile_table() -> String {
    let mut doc = sample();
    doc.zone = Some("z\x1b[2J".to_string());
    let b = &mut doc.backends[0];
    b.last_error = Some("HTTP 500: \x1b]0;owned\x07\x1b[2J".to_string());
    b.latency_ms = Some(1e308);
    b.address = "a".repeat(300);
    render_table(&doc)
}

#[test]
fn cells_show_controls_as_escapes() {
    let table = hostile_table();
    assert!(
        !table.chars().any(|c| c.is_control() && c != '\n'),
        "{table:?}"
    );
    assert!(
        table.contains("HTTP 500: \\x1b]0;owned\\x07\\x1b[2J"),
        "{table}"
    );
}

#[test]
fn cells_are_cut() {
    let table = hostile_table();
    assert!(table.contains(">100s"), "{table}");
    assert!(
        table.contains(&format!("{}…", "a".repeat(MAX_CELL - 1))),
        "{table}"
    );
    assert!(
        table
            .lines()
            .all(|l| l.chars().count() < 2 * MAX_CELL + MAX_ERROR),
        "{table}"
    );
}

#[tokio::test]
async fn any_json_that_is_not_a_status_document_is_rejected() {
    for body in ["hello", "{\"ready\": true}"] {
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let addr = answers(response.into_bytes()).to_string();
        let err = fetch(&addr).await.expect_err("not a document");
        assert!(
            matches!(err, StatusError::NotAStatusDocument { .. }),
            "{err}"
        );
    }
}

#[test]
fn a_multi_line_error_is_folded_onto_one_line() {
    let mut doc = sample();
    doc.backends[0].last_error = Some("HTTP 500: [+]ping ok\n[-]etcd failed\n".to_string());
    let table = render_table(&doc);
    assert!(
        table.contains("  HTTP 500: [+]ping ok; [-]etcd failed\n"),
        "{table}"
    );
}

#[test]
fn a_degraded_backend_says_why_where_its_error_would_be() {
    let mut b = BackendStatus::bare("10.0.0.1:6443", State::Ready);
    b.degraded = Some("HTTP 429 Too Many Requests, Retry-After: 1s".to_string());
    let cells = backend_cells(&b);
    assert_eq!(
        cells[7],
        "degraded: HTTP 429 Too Many Requests, Retry-After: 1s"
    );
    b.last_error = Some("timeout after 3s".to_string());
    assert_eq!(
        backend_cells(&b)[7],
        "degraded: HTTP 429 Too Many Requests, Retry-After: 1s; timeout after 3s"
    );
    b.degraded = None;
    assert_eq!(backend_cells(&b)[7], "timeout after 3s");
}
