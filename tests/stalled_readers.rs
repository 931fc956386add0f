//! A backend that is alive but stops reading (its receive window closes) on the app run from its config file: TCP's
//! user timeout ends the leg as for a dead path, but the record says `stalled_reader` and the
//! backend's health does not count it (it stays ready, no failed check).

use tokio::io::AsyncWriteExt;

use crate::support::*;

/// Health checks of `backend` with `result` (`pass`, `fail`) in the `/metrics` text.
fn checks(text: &str, backend: &str, result: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("readyprism_health_checks_total{"))
        .filter(|l| l.contains(backend) && l.contains(&format!("result=\"{result}\"")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_backend_that_stops_reading_is_cut_as_a_stalled_reader_not_a_failed_check() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    // fall 1: a single passive failure would turn it unready at once (probes with room to spare
    // on a loaded machine, so none fails by itself). 4 s: the stuck write, sampled once a
    // second, is sampled more than once before TCP gives up.
    let health = "health: { interval: 2s, timeout: 1500ms, fast_interval: 150ms, fall: 1 }\n";
    let extra = format!("{health}dead_path_timeout: 4s\n");
    let (a, file) = lab.fake_and_config(&rt, "stall.yaml", &extra);
    let p = Running::start(&file);
    rt.block_on(poll("ready", || {
        blocking_get(p.admin, "/status").1.contains("\"ready\"")
    }));
    // Echo one byte, then neither read nor write: the backend's window closes.
    a.control.set_raw_stall_after(1);
    let (conn, name) = rt.block_on(raw(p.listen)).expect("relayed");
    assert_eq!(name, "a");
    let (mut reader, mut writer) = conn.into_inner().into_split();
    // The client keeps sending until its connection ends; the balancer's write to the backend
    // is stuck once every buffer on the way is full.
    let sender = rt.spawn(async move {
        let chunk = vec![7u8; 64 * 1024];
        let mut sent = 0u64;
        while writer.write_all(&chunk).await.is_ok() {
            sent += chunk.len() as u64;
        }
        sent
    });
    rt.block_on(async {
        let mut sink = vec![0u8; 1024];
        // The echoed byte, then the end (EOF or reset) once TCP gives up on the backend leg.
        while tokio::time::timeout(
            patience() * 2,
            tokio::io::AsyncReadExt::read(&mut reader, &mut sink),
        )
        .await
        .expect("the connection ends in time")
        .is_ok_and(|n| n > 0)
        {}
    });
    let sent = rt.block_on(sender).expect("sender");
    eprintln!("stalled reader: the client sent {sent} B before the end");
    let record = p.wait_log("connection ended", |_| true);
    assert_eq!(record["fields"]["reason"], "stalled_reader", "{record}");
    assert_eq!(record["fields"]["ended_by"], "balancer", "{record}");
    let error = record["fields"]["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("backend: the backend stopped reading (zero window)"),
        "{record}"
    );
    // A probe counted after the cut: the monitor, which takes a passive report before its next
    // probe, has had its chance to count one.
    let backend = format!("backend=\"{}\"", addr(&a));
    let text = || blocking_get(p.admin, "/metrics").1;
    let passes = checks(&text(), &backend, "pass");
    rt.block_on(poll("a probe after the cut", || {
        checks(&text(), &backend, "pass") > passes
    }));
    let text = text();
    assert_eq!(checks(&text, &backend, "fail"), 0.0, "not a failed check");
    let closed = |reason: &str| {
        let labels = format!("{backend},reason=\"{reason}\"");
        metric(&text, "readyprism_connections_closed_total", &labels)
    };
    assert_eq!(closed("stalled_reader"), Some(1.0));
    assert_eq!(closed("dead_path"), Some(0.0));
    let status = blocking_get(p.admin, "/status").1;
    assert!(status.contains("\"ready\""), "still ready: {status}");
    assert!(
        !p.logs()
            .iter()
            .any(|v| v["fields"]["message"] == "backend state changed"
                && v["fields"]["to"] == "unready"),
        "never unready"
    );
}
