//! How often the status file is written, on the app run from its config file: in steady state once per refresh
//! (30 s), not at every published snapshot. Each write renames a new file over the old one, so a
//! write shows as a new (inode, mtime) at the path.
//!
//! Blocking code on OS threads, not driven by tokio's clock: std's `Instant` is right here.
#![allow(clippy::disallowed_types)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use readyprism::admin::StatusDoc;
use readyprism::verdict::State;

use crate::support::Running;
use crate::support::*;

/// The refresh period (`admin::status_file::REFRESH`), and a little more: the window watched.
const WATCHED: Duration = Duration::from_secs(32);

/// The file at `path` as a write leaves it: (inode, mtime in ns); `None` while there is none.
fn written(path: &Path) -> Option<(u64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec()))
}

#[test]
fn a_steady_status_file_is_written_once_per_refresh_not_every_second() {
    let lab = Lab::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (a, b) = rt.block_on(async { (lab.fake("a").await, lab.fake("b").await) });
    std::fs::create_dir(lab.path("state")).expect("mkdir");
    let file = lab.path("state").join("status.json");
    // The lab's probes: every backend every second, a new snapshot each time.
    let extra = format!("status_file: {}\n", file.display());
    let yaml = lab.yaml("dc-a", &[(addr(&a), "dc-a"), (addr(&b), "dc-b")], &extra);
    let config = lab.write("node.yaml", &yaml);
    let p = Running::start(Path::new(&config));
    rt.block_on(poll("the file shows both ready", || {
        std::fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<StatusDoc>(&bytes).ok())
            .is_some_and(|d| d.backends.iter().all(|b| b.state == State::Ready))
    }));
    // Steady from here: both ready, nothing changes but times, latencies and generations.
    let generation = p.status().generation;
    let mut last = written(&file).expect("the file");
    let mut writes = 0;
    let end = Instant::now() + WATCHED;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        let now = written(&file).expect("the file stays");
        if now != last {
            writes += 1;
            last = now;
        }
    }
    let snapshots = p.status().generation - generation;
    assert!(
        snapshots >= 20,
        "the probes published only {snapshots} snapshots in {WATCHED:?}: not the case tested"
    );
    assert!(
        writes <= 2,
        "{writes} writes in {WATCHED:?} of steady state ({snapshots} snapshots): one per 30 s \
         refresh is the rate"
    );
    assert!(
        p.status().backends.iter().all(|b| b.state == State::Ready),
        "the state changed while watched"
    );
}
