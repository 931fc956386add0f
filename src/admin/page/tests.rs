use std::time::Duration;

use super::*;

fn backend(address: &str, state: State, last_error: Option<&str>) -> BackendStatus {
    BackendStatus {
        zone: Some("dc-a".to_string()),
        latency_ms: Some(1.5),
        last_error: last_error.map(str::to_string),
        active_connections: 3,
        rank: Some(0),
        ..BackendStatus::bare(address, state)
    }
}

fn doc(mode: Mode, backends: Vec<BackendStatus>) -> StatusDoc {
    StatusDoc {
        generation: 7,
        ..StatusDoc::in_dc_a(mode, backends)
    }
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn escape_makes_markup_or_controls_inert() {
    let cases = [
        ("plain", "plain"),
        (
            "<script>alert(1)</script>",
            "&lt;script&gt;alert(1)&lt;/script&gt;",
        ),
        ("a & b", "a &amp; b"),
        ("\"quoted\" 'single'", "&quot;quoted&quot; &#39;single&#39;"),
        ("\x1b[2J<b>", "\\x1b[2J&lt;b&gt;"),
        ("\u{202e}rtl", "\\u{202e}rtl"),
    ];
    for (input, want) in cases {
        assert_eq!(escape(input, MAX_ERROR), want, "{input:?}");
    }
}

#[test]
fn clock_is_the_utc_time_of_day() {
    let cases = [
        (0, "00:00:00 UTC"),
        (3_723, "01:02:03 UTC"),
        (86_400 + 59, "00:00:59 UTC"),
    ];
    for (secs, want) in cases {
        assert_eq!(clock(at(secs)), want);
    }
}

#[test]
fn the_page_names_every_backend_state_with_the_mode() {
    let cases = [
        (Mode::Normal, "normal: ready backends only"),
        (Mode::FailOpen, "fail open"),
        (Mode::Refuse, "refuse"),
        (Mode::Starting, "starting"),
    ];
    for (mode, said) in cases {
        let d = doc(
            mode,
            vec![
                backend("10.0.1.10:6443", State::Ready, None),
                backend(
                    "10.0.2.10:6443",
                    State::Unready,
                    Some("readyz 500: etcd failed"),
                ),
                backend("[fd00::3]:6443", State::Unknown, None),
            ],
        );
        let page = render(&d, &[]);
        assert!(page.contains(said), "{mode:?}: {page}");
        assert!(
            page.contains("<td>10.0.1.10:6443</td><td class=\"ready\">ready</td>"),
            "{page}"
        );
        assert!(
            page.contains("<td>10.0.2.10:6443</td><td class=\"unready\">unready</td>"),
            "{page}"
        );
        assert!(
            page.contains("<td>[fd00::3]:6443</td><td class=\"unknown\">unknown</td>"),
            "{page}"
        );
        assert!(page.contains("readyz 500: etcd failed"), "{page}");
        assert!(page.contains("http-equiv=\"refresh\""), "{page}");
        assert!(page.contains("None since start-up."), "{page}");
        assert!(!page.contains("<script"), "no script: {page}");
        assert!(
            !page.contains("src=") && !page.contains("<link"),
            "no external assets: {page}"
        );
    }
}

/// The page of two backends, one gone unready at 02:00 after turning ready at 01:00.
fn with_transitions() -> String {
    let recent = [
        Transition {
            at: at(3_600),
            backend: "10.0.2.10:6443".to_string(),
            from: State::Unknown,
            to: State::Ready,
            reason: None,
        },
        Transition {
            at: at(7_200),
            backend: "10.0.2.10:6443".to_string(),
            from: State::Ready,
            to: State::Unready,
            reason: Some("timeout after 3s".to_string()),
        },
    ];
    let d = doc(
        Mode::Normal,
        vec![
            backend("10.0.1.10:6443", State::Ready, None),
            backend("10.0.2.10:6443", State::Unready, Some("timeout after 3s")),
        ],
    );
    render(&d, &recent)
}

#[test]
fn the_page_shows_transitions_newest_first() {
    let page = with_transitions();
    let newest = page.find("<tr><td>02:00:00 UTC</td>").expect("newest row");
    let oldest = page.find("<tr><td>01:00:00 UTC</td>").expect("oldest row");
    assert!(newest < oldest, "newest first: {page}");
}

#[test]
fn a_backends_since_is_its_latest_transition_into_its_state() {
    let page = with_transitions();
    assert!(
        page.contains("unready</td><td>02:00:00 UTC</td>"),
        "since: {page}"
    );
    assert!(
        page.contains("ready</td><td>-</td>"),
        "unknown since: {page}"
    );
    assert!(page.contains("<td class=\"reason\">passed</td>"), "{page}");
}

#[test]
fn everything_a_backend_or_the_config_says_is_escaped() {
    let hostile = "<script>alert('x')</script>";
    let mut b = backend(hostile, State::Unready, Some(hostile));
    b.zone = Some(hostile.to_string());
    let mut d = doc(Mode::FailOpen, vec![b]);
    d.zone = Some(hostile.to_string());
    let recent = [Transition {
        at: at(0),
        backend: hostile.to_string(),
        from: State::Ready,
        to: State::Unready,
        reason: Some(hostile.to_string()),
    }];
    let page = render(&d, &recent);
    assert!(!page.contains("<script"), "{page}");
    assert_eq!(
        page.matches("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;")
            .count(),
        6, // the zone; the address, zone and reason of the backend; the transition's backend and reason
        "{page}"
    );
}
