//! Soak: the real `readyprism` binary under mixed churn, bulk and idle connections for N minutes
//! while one backend flaps, its config file is edited every few seconds (`edits`), the cluster's
//! Endpoints answer changes every few seconds (`discovery`) and its admin port is flooded
//! (`admin`); prints RSS and descriptor counts over time and fails on growth, a panic, a stuck
//! connection, an edit not applied, a list that does not follow the last answer or a `/livez`
//! not answered. Not a CI test (it
//! takes minutes):
//!
//! ```sh
//! cargo build --release && cargo run --release --example soak -- 10
//! ```
//!
//! The backends are two simulated apiservers (`readyprism::sim`) in this process; the balancer
//! is `target/release/readyprism` (or `READYPRISM_BIN`), so its figures are its own.
// A load generator on real threads and the wall clock, not a paused-time test.
#![allow(clippy::disallowed_types)]

mod admin;
mod discovery;
mod edits;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use readyprism::sim::apiserver::{server_tls, FakeApiserver};
use readyprism::sim::pki::Ca;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const IDLE: usize = 500;
const FLAP_EVERY: Duration = Duration::from_secs(5);
const STUCK_AFTER: Duration = Duration::from_secs(15);
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Counts {
    churn_ok: AtomicU64,
    churn_failed: AtomicU64,
    bulk_ok: AtomicU64,
    bulk_stuck: AtomicU64,
    idle_reopened: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let minutes: u64 = std::env::args()
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(10);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("soak-ca")?;
    let tls = server_tls(&ca, &ca.server(&["127.0.0.1"])?).map_err(|e| e.to_string())?;
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let steady = FakeApiserver::bind("steady", any, tls.clone())?;
    let flapping = FakeApiserver::bind("flapping", any, tls.clone())?;
    let pool = discovery::pool(tls)?;
    std::fs::write(dir.path().join("ca.crt"), &ca.cert_pem)?;
    std::fs::write(
        dir.path().join("client.pem"),
        ca.client("soak")?.combined_pem(),
    )?;
    let layout = edits::Layout {
        config: dir.path().join("soak.yaml"),
        dir: dir.path().to_path_buf(),
        flapping: flapping.addr,
        steady: steady.addr,
    };
    let config = layout.config.clone();
    let layout_addrs = (layout.flapping, layout.steady);
    std::fs::write(&config, layout.render(0, "ca.crt"))?;
    let bin =
        std::env::var("READYPRISM_BIN").unwrap_or_else(|_| "target/release/readyprism".into());
    let mut child = Command::new(&bin)
        .args(["--log-format", "json", "run", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{bin}: {e} (cargo build --release first)"))?;
    let pid = child.id();
    let mut lines = BufReader::new(child.stderr.take().ok_or("stderr")?).lines();
    let (listen, admin_addr): (SocketAddr, SocketAddr) = loop {
        let line = lines.next().ok_or("exited before it started")??;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["fields"]["message"] == "readyprism started" {
            let field = |k: &str| v["fields"][k].as_str().unwrap_or_default().to_string();
            break (field("listen").parse()?, field("admin").parse()?);
        }
    };
    let panicked = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = panicked.clone();
    let started = Instant::now();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("panicked") {
                eprintln!("PANIC in readyprism: {line}");
                seen.store(true, Ordering::SeqCst);
            }
            // Its warnings and errors, to tell a rejected edit from a torn read or a shortage.
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if matches!(v["level"].as_str(), Some("ERROR" | "WARN")) {
                eprintln!("t={:>4}s readyprism: {line}", started.elapsed().as_secs());
            }
        }
    });

    let counts = Arc::new(Counts::default());
    let end = Instant::now() + Duration::from_secs(minutes * 60);
    let tasks = tokio_util::task::TaskTracker::new();
    // Flap one backend; the other stays ready.
    let control = flapping.control.clone();
    tasks.spawn(async move {
        let mut ready = true;
        while Instant::now() < end {
            tokio::time::sleep(FLAP_EVERY).await;
            ready = !ready;
            control.set_ready(ready);
        }
    });
    // Churn: short connections, two streams of about 100 a second each.
    for _ in 0..2 {
        let c = counts.clone();
        tasks.spawn(async move {
            while Instant::now() < end {
                match greet(listen).await {
                    Some(_) => c.churn_ok.fetch_add(1, Ordering::Relaxed),
                    None => c.churn_failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    // Bulk: 4 MiB through the echo and back, again and again; a transfer over STUCK_AFTER is stuck.
    let c = counts.clone();
    tasks.spawn(async move {
        while Instant::now() < end {
            match tokio::time::timeout(STUCK_AFTER, bulk(listen, 4 << 20)).await {
                Ok(true) => c.bulk_ok.fetch_add(1, Ordering::Relaxed),
                Ok(false) => 0, // closed by an eviction mid-transfer: fine, it re-dials
                Err(_) => c.bulk_stuck.fetch_add(1, Ordering::Relaxed),
            };
        }
    });
    // Idle: held open, re-opened when the balancer closes one (its backend flapped).
    for _ in 0..IDLE {
        let c = counts.clone();
        tasks.spawn(async move {
            while Instant::now() < end {
                if let Some(mut s) = greet(listen).await {
                    let mut buf = [0u8; 64];
                    let left = end.saturating_duration_since(Instant::now());
                    let _ = tokio::time::timeout(left, s.read(&mut buf)).await;
                    c.idle_reopened.fetch_add(1, Ordering::Relaxed);
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    let flood = Arc::new(admin::Flood::default());
    admin::spawn(&tasks, admin_addr, end, &flood);
    let answers = Arc::new(discovery::Answers::default());
    let answering = tasks.spawn(discovery::run(
        [&flapping, &steady]
            .into_iter()
            .chain(&pool)
            .map(|s| s.control.clone())
            .collect(),
        pool.iter().map(|p| p.addr).collect(),
        admin_addr,
        end,
        answers.clone(),
    ));
    let edited = Arc::new(edits::Edits::default());
    tasks.spawn(edits::run(layout, admin_addr, end, edited.clone()));
    tasks.close();

    let mut samples = Vec::new();
    let start = Instant::now();
    // The last sample comes before `end`, while the load still runs.
    while Instant::now() + SAMPLE_EVERY < end {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let s = (start.elapsed().as_secs(), rss_kib(pid), fds(pid));
        println!(
            "t={:>4}s rss={} KiB fds={} churn={} (failed {}) bulk={} (stuck {}) idle reopened={}",
            s.0,
            s.1,
            s.2,
            counts.churn_ok.load(Ordering::Relaxed),
            counts.churn_failed.load(Ordering::Relaxed),
            counts.bulk_ok.load(Ordering::Relaxed),
            counts.bulk_stuck.load(Ordering::Relaxed),
            counts.idle_reopened.load(Ordering::Relaxed),
        );
        println!(
            "        edits {} made / {} applied / {} lost; admin flood {} connects ({} ended by it, {} failed); /livez {} ok / {} failed (slowest {} ms)",
            edited.made.load(Ordering::Relaxed),
            edited.applied.load(Ordering::Relaxed),
            edited.lost.load(Ordering::Relaxed),
            flood.connects.load(Ordering::Relaxed),
            flood.ended_by_server.load(Ordering::Relaxed),
            flood.connect_failed.load(Ordering::Relaxed),
            flood.livez_ok.load(Ordering::Relaxed),
            flood.livez_failed.load(Ordering::Relaxed),
            flood.livez_slowest_ms.load(Ordering::Relaxed),
        );
        samples.push(s);
    }
    tasks.wait().await;
    let last_good = answering.await?;
    let statics = [layout_addrs.0, layout_addrs.1];
    let followed = discovery::settled(admin_addr, &statics, &last_good).await;
    let polled = discovery::polls(admin_addr).await;
    tokio::time::sleep(Duration::from_secs(3)).await; // let the last connections close
    let after = (rss_kib(pid), fds(pid));
    let reloaded = (
        edits::reloads(admin_addr, "success").await,
        edits::reloads(admin_addr, "failure").await,
    );
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let status = child.wait()?;
    // After warm-up (the first minute) against the end: growth is a leak.
    let warm = samples
        .iter()
        .find(|s| s.0 >= 60)
        .or(samples.first())
        .copied()
        .unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let first = samples.first().copied().unwrap_or_default();
    let max = |f: fn(&(u64, u64, u64)) -> u64| samples.iter().map(f).max().unwrap_or_default();
    println!("figures: RSS {} KiB first sample, {} after warm-up, {} at the end, {} max, {} once idle; fds {} first sample, {} after warm-up, {} at the end, {} max, {} once idle",
        first.1, warm.1, last.1, max(|s| s.1), after.0, first.2, warm.2, last.2, max(|s| s.2), after.1);
    let e = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!("edits: {} made, {} applied, {} lost, {} named a CA file before it landed ({} applied before it landed); slowest to show {} ms ({} ms after a CA file landed); reloads counted: {:?} success, {:?} failure",
        e(&edited.made), e(&edited.applied), e(&edited.lost), e(&edited.ca_later),
        e(&edited.applied_too_early), e(&edited.slowest_ms), e(&edited.slowest_ca_ms), reloaded.0, reloaded.1);
    println!("admin flood: {} connects, {} ended by the balancer, {} connects failed; /livez {} ok, {} failed (longest run {}), slowest {} ms",
        e(&flood.connects), e(&flood.ended_by_server), e(&flood.connect_failed),
        e(&flood.livez_ok), e(&flood.livez_failed), e(&flood.livez_failed_run), e(&flood.livez_slowest_ms));
    // Every edit is one successful reload; every CA-later edit one rejection, counted once. A
    // rejection beyond those is a truncate-and-write edit read half-written (its ERROR line is
    // above; the next check applies the whole file): reported, not a failure of the soak.
    let rejected = reloaded.1.unwrap_or_default();
    if rejected > e(&edited.ca_later) {
        println!("note: {} rejection(s) beyond the CA-later edits: an in-place edit read half-written (see the ERROR lines)",
            rejected - e(&edited.ca_later));
    }
    println!("discovery: {} good answers, {} bad ones; at most {} backends listed at once; polls by result {:?}; the list {}",
        e(&answers.good), e(&answers.bad), e(&answers.most_listed), polled,
        match &followed { Ok(()) => "followed the last good answer".to_string(), Err(why) => why.clone() });
    let polled_ok = polled.iter().any(|(r, n)| r == "changed" && *n > 0);
    let discovery_ok =
        followed.is_ok() && polled_ok && e(&answers.most_listed) <= (2 + discovery::POOL) as u64;
    let edits_ok = e(&edited.lost) == 0
        && e(&edited.applied_too_early) == 0
        && reloaded.0 == Some(e(&edited.made))
        && rejected >= e(&edited.ca_later);
    println!("summary: {minutes} min; RSS {} KiB after warm-up, {} KiB at the end, {} KiB once idle; fds {} after warm-up, {} at the end, {} once idle; churn {} ok / {} failed; bulk {} ok / {} stuck; exit {status}",
        warm.1, last.1, after.0, warm.2, last.2, after.1,
        counts.churn_ok.load(Ordering::Relaxed), counts.churn_failed.load(Ordering::Relaxed),
        counts.bulk_ok.load(Ordering::Relaxed), counts.bulk_stuck.load(Ordering::Relaxed));
    let grew = last.1 > warm.1 + 10 * 1024 || after.1 > 32;
    if panicked.load(Ordering::SeqCst)
        || counts.bulk_stuck.load(Ordering::Relaxed) > 0
        || grew
        || !edits_ok
        || !discovery_ok
        || e(&flood.livez_failed) > 0
        || !status.success()
    {
        return Err("soak failed: see above".into());
    }
    steady.stop().await;
    flapping.stop().await;
    for p in pool {
        p.stop().await;
    }
    Ok(())
}

/// One short connection through the balancer: the backend's greeting, or `None`.
async fn greet(listen: SocketAddr) -> Option<tokio::io::BufReader<TcpStream>> {
    let mut s = TcpStream::connect(listen).await.ok()?;
    s.write_all(b"RAW\n").await.ok()?;
    let mut r = tokio::io::BufReader::new(s);
    let mut name = String::new();
    let n = tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut name))
        .await
        .ok()?
        .ok()?;
    (n > 0).then_some(r)
}

/// Sends `size` bytes through the echo backend and reads them back; false if cut midway.
async fn bulk(listen: SocketAddr, size: usize) -> bool {
    let Some(conn) = greet(listen).await else {
        return false;
    };
    let (mut rd, mut wr) = tokio::io::split(conn);
    let writer = async move {
        let chunk = vec![42u8; 64 * 1024];
        let mut sent = 0;
        while sent < size {
            if wr.write_all(&chunk).await.is_err() {
                return false;
            }
            sent += chunk.len();
        }
        true
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < size {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
        }
        true
    };
    let (w, r) = tokio::join!(writer, reader);
    w && r
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}
