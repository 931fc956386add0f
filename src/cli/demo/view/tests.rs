use super::*;
use crate::admin::status::{BackendSource, BackendStatus, Mode};
use crate::verdict::State;

/// The demo's four apiservers as `/status` names them, at ports like the ones they get.
fn names() -> Vec<(String, String)> {
    ["dc-a", "dc-b", "witness", "new-cp"]
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("127.0.0.1:{}", 41_001 + i), n.to_string()))
        .collect()
}

fn backend(i: usize, state: State, error: Option<&str>, source: BackendSource) -> BackendStatus {
    let zones = ["dc-a", "dc-b", "witness", "dc-a"];
    BackendStatus {
        zone: (i < 3).then(|| zones[i].to_string()),
        source,
        latency_ms: Some(123.45),
        last_error: error.map(str::to_string),
        active_connections: 12_345,
        rank: (state == State::Ready).then_some(i),
        ..BackendStatus::bare(&names()[i].0, state)
    }
}

fn doc(mode: Mode, dc_a: State, joined: bool) -> StatusDoc {
    let lost = "readyz 500: etcd, etcd-readiness, informer-sync failed";
    let mut backends = vec![
        backend(
            0,
            dc_a,
            (dc_a != State::Ready).then_some(lost),
            BackendSource::Config,
        ),
        backend(1, State::Ready, None, BackendSource::Config),
        backend(2, State::Ready, None, BackendSource::Config),
    ];
    if joined {
        backends.push(backend(3, State::Ready, None, BackendSource::Discovered));
    }
    StatusDoc {
        generation: 9,
        ..StatusDoc::in_dc_a(mode, backends)
    }
}

fn traffic(long_on: Option<&str>, moves: u64) -> Traffic {
    let mut t = Traffic::default();
    for _ in 0..RECENT {
        t.landed("witness");
    }
    t.failed();
    t.long_on = long_on.map(str::to_string);
    t.long_moves = moves;
    if moves > 0 {
        t.long_last_move = Some(("witness".to_string(), "new-cp".to_string()));
    }
    t
}

/// A dozen long log lines naming the apiservers by address, as `tracing` writes them.
fn logs() -> Vec<String> {
    (0..12)
        .map(|i| {
            format!(
                " WARN backend state changed backend=\"127.0.0.1:41001\" zone=\"dc-a\" from=\"ready\" \
                 to=\"unready\" reason=\"readyz 500: etcd, etcd-readiness failed\" n={i}"
            )
        })
        .collect()
}

struct Phase {
    what: &'static str,
    status: StatusDoc,
    traffic: Traffic,
    dc_a_ready_for: Option<Duration>,
    join_in: Option<Duration>,
    logs: Vec<String>,
    admin: &'static str,
    remaining: Option<Duration>,
    names: Vec<(String, String)>,
}

fn phases() -> Vec<Phase> {
    let p = |what, status, traffic, dc_a_ready_for, join_in, logs| Phase {
        what,
        status,
        traffic,
        dc_a_ready_for,
        join_in,
        logs,
        admin: "127.0.0.1:7446",
        remaining: Some(Duration::from_secs(17)),
        names: names(),
    };
    let soon = Some(Duration::from_secs(6));
    vec![
        p(
            "start: dc-a without quorum",
            doc(Mode::Normal, State::Unready, false),
            Traffic::default(),
            None,
            soon,
            vec![],
        ),
        p(
            "dc-a recovers, long-lived opens there",
            doc(Mode::Normal, State::Ready, false),
            traffic(Some("dc-a"), 0),
            Some(Duration::from_secs(2)),
            soon,
            logs(),
        ),
        p(
            "dc-a lost again, the long-lived moved",
            doc(Mode::Normal, State::Unready, true),
            traffic(None, 1),
            None,
            None,
            logs(),
        ),
        p(
            "dc-a back, long-lived away",
            doc(Mode::Normal, State::Ready, true),
            traffic(Some("new-cp"), 1),
            Some(Duration::from_secs(3)),
            None,
            logs(),
        ),
        p(
            "failback due",
            doc(Mode::Normal, State::Ready, true),
            traffic(Some("new-cp"), 1),
            Some(Duration::from_secs(58)),
            None,
            logs(),
        ),
        Phase {
            admin: "[fd00:1234:5678:9abc:def0:1234:5678:9abc]:65535",
            remaining: None,
            ..p(
                "fail open, no end, a long admin address",
                doc(Mode::FailOpen, State::Unready, true),
                traffic(Some("witness"), 3),
                None,
                None,
                logs(),
            )
        },
    ]
}

fn frame(p: &Phase) -> Frame<'_> {
    Frame {
        elapsed: Duration::from_secs(123),
        remaining: p.remaining,
        listen: "127.0.0.1:7445".parse().expect("literal"),
        admin: p.admin.parse().expect("literal"),
        status: &p.status,
        names: &p.names,
        traffic: &p.traffic,
        dc_a_ready: p.dc_a_ready_for.is_some(),
        dc_a_ready_for: p.dc_a_ready_for,
        next_flip_in: Duration::from_secs(5),
        join_in: p.join_in,
        logs: &p.logs,
    }
}

#[test]
fn every_phase_fits_80_by_24_title_on_top_with_names_not_ports() {
    for p in phases() {
        let screen = frame(&p).screen();
        let rows: Vec<&str> = screen.split('\n').collect();
        assert!(
            rows.len() <= ROWS,
            "{}: {} rows:\n{screen}",
            p.what,
            rows.len()
        );
        for r in &rows {
            assert!(
                r.chars().count() <= COLS,
                "{}: over {COLS} columns: {r:?}",
                p.what
            );
        }
        assert!(!screen.ends_with('\n'), "{}: the last row scrolls", p.what);
        assert!(
            rows[0].starts_with("readyprism demo"),
            "{}: {screen}",
            p.what
        );
        assert!(
            !screen.contains("127.0.0.1:4100"),
            "{}: a port, not a name:\n{screen}",
            p.what
        );
        for b in &p.status.backends {
            let name = &names()
                .into_iter()
                .find(|(a, _)| *a == b.address)
                .expect("named")
                .1;
            assert!(
                rows.iter()
                    .any(|r| r.starts_with(&format!("{name:<8} ")) && r.contains(b.state.as_str())),
                "{}: {name}'s row:\n{screen}",
                p.what
            );
        }
        if !p.logs.is_empty() {
            let last = rows.last().expect("rows");
            assert!(
                last.contains("n=11") || last.ends_with('…'),
                "{}: the newest log line last:\n{screen}",
                p.what
            );
            assert!(
                last.contains("backend=dc-a zone=dc-a"),
                "{}: {screen}",
                p.what
            );
        }
    }
}

#[test]
fn failback_says_when_the_long_lived_connection_comes_home() {
    let cases = [
        (
            Some("dc-a"),
            Some(2),
            "failback: nothing to do, it is home on dc-a",
        ),
        (
            Some("new-cp"),
            None,
            "failback: it stays on new-cp until dc-a has been ready 60s",
        ),
        (
            Some("new-cp"),
            Some(3),
            "failback: it stays on new-cp: dc-a loses quorum before its 60s of ready",
        ),
        (
            Some("new-cp"),
            Some(58),
            "failback: it comes home to dc-a in 2s",
        ),
        (
            None,
            None,
            "failback: once back, it returns to dc-a after dc-a is ready 60s",
        ),
    ];
    for (on, ready_for, want) in cases {
        let mut p = phases().remove(3);
        p.traffic.long_on = on.map(str::to_string);
        p.dc_a_ready_for = ready_for.map(Duration::from_secs);
        assert_eq!(frame(&p).failback(), want, "{on:?} {ready_for:?}");
    }
}

#[test]
fn log_lines_lose_their_quotes_with_their_empty_fields() {
    let cases = [
        (" INFO demo: lost etcd quorum apiserver=\"dc-a\"", " INFO demo: lost etcd quorum apiserver=dc-a"),
        (
            " INFO backend state changed backend=\"new-cp\" zone=\"\" from=\"unknown\" to=\"ready\" reason=\"HTTP 200\"",
            " INFO backend state changed backend=new-cp from=unknown to=ready reason=HTTP 200",
        ),
        (" INFO stopped", " INFO stopped"),
    ];
    for (line, want) in cases {
        assert_eq!(compact(line), want);
    }
}

#[test]
fn the_piped_line_is_short_plain_text_with_names() {
    let p = phases().remove(3);
    let line = frame(&p).line();
    assert_eq!(
        line,
        "[123s] dc-a ready, dc-b ready, witness ready, new-cp ready | last FAILED | long-lived new-cp"
    );
    assert!(line.chars().all(|c| !c.is_control()), "{line:?}");
}

#[test]
fn recent_keeps_only_the_last_ten() {
    let mut t = Traffic::default();
    for i in 0..15 {
        t.landed(if i < 5 { "dc-a" } else { "dc-b" });
    }
    assert_eq!(t.recent.len(), RECENT);
    assert!(t.recent.iter().all(|n| n == "dc-b"));
    assert_eq!(counts(&t.per_backend), "dc-a 5, dc-b 10");
}
