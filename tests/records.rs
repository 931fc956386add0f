//! One record per connection, read from the balancer's JSON log: its stable fields, who ended
//! it and why, and the level (DEBUG for an ordinary end, INFO for evictions and failures); and
//! the line that announces a removed backend's closes, with its reason and how many it closes.

use tokio::io::AsyncWriteExt;

use crate::support::process::Proc;
use crate::support::*;

/// The `connection ended` record whose `reason` is `reason`.
/// Waits until `/status` shows two backends ready.
async fn both_ready(p: &impl Balancer) {
    poll("both ready", || {
        blocking_get(p.admin, "/status")
            .1
            .matches("\"ready\"")
            .count()
            >= 2
    })
    .await
}

fn record(p: &impl Balancer, reason: &str) -> serde_json::Value {
    p.wait_log("connection ended", |v| v["fields"]["reason"] == reason)
}

#[test]
fn every_connection_ends_with_one_record_naming_its_ender_with_a_reason() {
    let lab = Lab::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (local, remote) =
        rt.block_on(async { (lab.fake("local").await, lab.fake("remote").await) });
    let file = lab.path("records.yaml");
    let yaml = lab.yaml(
        "dc-a",
        &[(addr(&local), "dc-a"), (addr(&remote), "dc-b")],
        "",
    );
    std::fs::write(&file, yaml).expect("write config");
    let p = Running::start(&file);
    rt.block_on(both_ready(&p));

    // An ordinary end: the client sends 5 bytes and closes; the fake echoes them and says bye.
    let (mut c, name) = rt.block_on(raw(p.listen)).expect("relayed");
    assert_eq!(name, "local");
    rt.block_on(async {
        c.get_mut().write_all(b"12345").await.expect("write");
        c.get_mut().shutdown().await.expect("half-close");
        assert_eq!(read_to_end(&mut c).await, b"12345bye\n");
    });
    let r = record(&p, "closed");
    let f = &r["fields"];
    assert_eq!(
        r["level"], "DEBUG",
        "ordinary ends stay out of the INFO log: {r}"
    );
    assert_eq!(f["ended_by"], "client", "{r}");
    assert_eq!(f["backend"], addr(&local).as_str());
    assert_eq!(f["zone"], "dc-a");
    assert_eq!(
        (f["rank"].as_i64(), f["dials"].as_u64()),
        (Some(0), Some(1)),
        "{r}"
    );
    assert!(f["attempts"].as_u64() >= Some(1), "{r}");
    // "RAW\n" + "12345" up; "local\n" + "12345" + "bye\n" down.
    assert_eq!(f["to_backend_bytes"].as_u64(), Some(9), "{r}");
    assert_eq!(f["to_client_bytes"].as_u64(), Some(15), "{r}");
    assert!(f["connect_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{r}");
    assert!(f["duration_ms"].as_f64() >= f["connect_ms"].as_f64(), "{r}");
    assert!(
        f["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")),
        "{r}"
    );

    // An eviction: the local backend turns unready under a held connection.
    let (mut held, name) = rt.block_on(raw(p.listen)).expect("relayed");
    assert_eq!(name, "local");
    local.control.set_ready(false);
    assert!(rt.block_on(read_to_end(&mut held)).is_empty(), "closed");
    let r = record(&p, "turned_unready");
    assert_eq!(r["level"], "INFO", "evictions are worth INFO: {r}");
    assert_eq!(r["fields"]["ended_by"], "balancer");
    assert_eq!(r["fields"]["backend"], addr(&local).as_str());
    // The close itself is logged once with its reason, beside the record.
    let close = p.wait_log("closing the backend's connections", |v| {
        v["fields"]["reason"] == "turned_unready"
    });
    assert_eq!(close["fields"]["backend"], addr(&local).as_str());
    let records = p
        .logs()
        .into_iter()
        .filter(|v| v["fields"]["message"] == "connection ended")
        .count();
    assert_eq!(records, 2, "one record per connection, nothing per packet");
}

#[test]
fn a_connection_no_backend_accepted_is_a_failure_record_at_info() {
    let lab = Lab::new();
    let (_hold, refusing) = refusing_addr();
    let file = lab.path("refused.yaml");
    std::fs::write(&file, lab.yaml("dc-a", &[(refusing.clone(), "dc-a")], "")).expect("write");
    let p = Running::start(&file);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Failing open (or starting): the only backend is dialed, refuses, and the client is closed.
    assert!(
        rt.block_on(raw(p.listen)).is_none(),
        "closed without a backend"
    );
    let r = record(&p, "all_dials_failed");
    let f = &r["fields"];
    assert_eq!(r["level"], "INFO", "{r}");
    assert_eq!(
        (f["ended_by"].as_str(), f["backend"].as_str()),
        (Some("balancer"), Some(""))
    );
    assert_eq!(
        (f["rank"].as_i64(), f["dials"].as_u64()),
        (Some(-1), Some(1)),
        "{r}"
    );
    // The dial's failure reads the same in /status as a probe's.
    rt.block_on(poll("refused in status", || {
        blocking_get(p.admin, "/status")
            .1
            .contains("dial: connection refused")
    }));
}

#[test]
fn a_backend_removed_by_a_reload_logs_one_close_line_naming_reason_removed_with_the_active_count() {
    let lab = Lab::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (a, b) = rt.block_on(async { (lab.fake("a").await, lab.fake("b").await) });
    let file = lab.path("removal.yaml");
    let both = [(addr(&a), "dc-a"), (addr(&b), "dc-a")];
    std::fs::write(&file, lab.yaml("dc-a", &both, "")).expect("write config");
    // A process: the reload is a hang-up.
    let p = Proc::start(&file);
    rt.block_on(both_ready(&p));
    // Held connections, wherever the picker puts them; the first one's backend is removed.
    let held: Vec<_> = (0..3)
        .map(|_| rt.block_on(raw(p.listen)).expect("relayed"))
        .collect();
    let gone = held[0].1.clone();
    let (removed, kept) = if gone == "a" { (&a, &b) } else { (&b, &a) };
    let on_removed = held.iter().filter(|(_, name)| *name == gone).count();

    std::fs::write(&file, lab.yaml("dc-a", &[(addr(kept), "dc-a")], "")).expect("rewrite");
    p.signal("HUP");
    let line = p.wait_log("backend removed; closing its connections", |v| {
        v["fields"]["backend"] == addr(removed).as_str()
    });
    let f = &line["fields"];
    assert_eq!(f["reason"], "removed", "{line}");
    assert_eq!(f["active"].as_u64(), Some(on_removed as u64), "{line}");
    assert_eq!(f["source"], "config", "{line}");
    for (mut c, name) in held {
        if name == gone {
            assert!(rt.block_on(read_to_end(&mut c)).is_empty(), "closed");
        }
    }
    let r = p.wait_log("connection ended", |v| {
        v["fields"]["backend"] == addr(removed).as_str()
    });
    assert_eq!(r["fields"]["reason"], "removed", "{r}");
}
