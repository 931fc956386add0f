//! One round: fresh proxy processes, then every scenario against every target in the round's
//! rotated order, each result appended to its [`Metric`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::load;
use crate::metrics::Metrics;
use crate::process::http_status;
use crate::report::pct;
use crate::targets::{tcp_out_segments, Env, Kind, Sched, Target};

/// How much work each scenario does.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Round trips per size, after `warm` untimed ones.
    pub rtts: usize,
    /// Untimed round trips first.
    pub warm: usize,
    /// Connect + first byte samples.
    pub connects: usize,
    /// Bytes per bulk transfer, each direction.
    pub bulk: u64,
    /// Concurrent connections, and round trips each.
    pub concurrent: (usize, usize),
    /// Idle connections held.
    pub idle: usize,
    /// Short connections.
    pub churn: usize,
}

/// Latency samples are taken in this many slices per round, the targets taking turns.
const SLICES: usize = 10;

/// Which scenarios run (all by default).
#[derive(Debug, Clone, Copy)]
pub struct Scenarios {
    rtt: bool,
    connect: bool,
    bulk: bool,
    concurrent: bool,
    idle: bool,
    churn: bool,
}

impl Scenarios {
    /// From a comma-separated list of names; `None`: all.
    pub fn parse(list: Option<&str>) -> Scenarios {
        let on = |name: &str| list.is_none_or(|l| l.split(',').any(|s| s.trim() == name));
        Scenarios {
            rtt: on("rtt"),
            connect: on("connect"),
            bulk: on("bulk"),
            concurrent: on("concurrent"),
            idle: on("idle"),
            churn: on("churn"),
        }
    }
}

/// What every round shares.
pub struct Setup<'a> {
    /// The targets, in the order of round 0.
    pub kinds: &'a [Kind],
    /// The backend listener each target relays to.
    pub backends: &'a BTreeMap<Kind, SocketAddr>,
    /// Binaries and certificates.
    pub env: &'a Env,
    /// The run directory (configs and logs, one folder per round).
    pub dir: &'a Path,
    /// Work per scenario.
    pub sizes: Sizes,
    /// Scenarios to run.
    pub only: Scenarios,
    /// The client runtime.
    pub rt: &'a tokio::runtime::Runtime,
}

/// Runs round `round`, the targets in an order rotated by it.
pub fn run(round: usize, setup: &Setup<'_>, out: &mut Metrics) {
    let Setup {
        kinds,
        backends,
        env,
        dir,
        sizes,
        only,
        rt,
    } = *setup;
    let mut order = kinds.to_vec();
    order.rotate_left(round % kinds.len());
    let dir = dir.join(format!("round-{round}"));
    std::fs::create_dir_all(&dir).expect("round dir");
    let mut targets: BTreeMap<Kind, Target> = BTreeMap::new();
    for &k in &order {
        let t = Target::start(k, &dir, backends[&k], env);
        if let Some(d) = t.start_listen {
            out.push("start", k, d.as_secs_f64() * 1e3);
        }
        targets.insert(k, t);
    }
    if let Some(admin) = targets[&Kind::Readyprism].admin {
        wait_for("readyprism /readyz 200", || {
            http_status(admin, "/readyz") == Some(200)
        });
    }
    // Past start-up's transient descriptors (the first probe, the start check's connections).
    std::thread::sleep(Duration::from_millis(200));
    let base: BTreeMap<Kind, (u64, u64)> = targets
        .iter()
        .map(|(k, t)| (*k, (t.rss(), t.fds())))
        .collect();
    let each = |f: &mut dyn FnMut(&Target)| {
        for k in &order {
            f(&targets[k]);
        }
    };

    let sizes_rtt: &[(usize, &str, &str)] = if only.rtt {
        &[
            (64, "rtt64_p50", "rtt64_p99"),
            (1024, "rtt1k_p50", "rtt1k_p99"),
        ]
    } else {
        &[]
    };
    for &(size, p50, p99) in sizes_rtt {
        // One open connection per target, the samples taken in slices that take turns, so a
        // burst of load from elsewhere on the machine hits every target alike.
        let mut conns: Vec<(Kind, load::EchoConn)> = order
            .iter()
            .map(|k| (*k, load::EchoConn::open(targets[k].addr, size, sizes.warm)))
            .collect();
        let mut got: BTreeMap<Kind, Vec<u64>> = BTreeMap::new();
        for _ in 0..SLICES {
            for (k, c) in &mut conns {
                got.entry(*k)
                    .or_default()
                    .extend(c.round_trips(sizes.rtts / SLICES));
            }
        }
        for (_, c) in conns {
            c.close();
        }
        for s in got.values_mut() {
            s.sort_unstable();
        }
        let direct = &got[&Kind::Direct];
        for (k, s) in &got {
            if *k != Kind::Direct {
                out.push(p50, *k, (pct(s, 50.0) - pct(direct, 50.0)) / 1e3);
                out.push(p99, *k, (pct(s, 99.0) - pct(direct, 99.0)) / 1e3);
            }
        }
        if size == 64 {
            for (k, s) in got {
                out.rtt64.entry(k).or_default().extend(s);
            }
        }
    }

    if only.connect {
        let mut got: BTreeMap<Kind, Vec<u64>> = BTreeMap::new();
        // What the scheduler did for each proxy while its own slices ran: some 30 ms a round, so
        // a watcher's tick (every 1 s) falls into them in about one round of 30, a probe (every
        // 5 s) more rarely.
        let mut sched: BTreeMap<Kind, Sched> = BTreeMap::new();
        for _ in 0..SLICES {
            each(&mut |t| {
                let before = t.sched();
                let s = load::connect_first_byte(t.addr, sizes.connects / SLICES);
                let spent = t.sched().since(before);
                let sum = sched.entry(t.kind).or_default();
                *sum = *sum + spent;
                got.entry(t.kind).or_default().extend(s);
            });
        }
        for (k, mut s) in got {
            let n = s.len() as f64;
            s.sort_unstable();
            out.push("conn_p50", k, pct(&s, 50.0) / 1e3);
            out.push("conn_p99", k, pct(&s, 99.0) / 1e3);
            if k != Kind::Direct {
                let spent = sched[&k];
                out.push("conn_cpu", k, spent.run_ns as f64 / 1e3 / n);
                out.push("conn_wait", k, spent.wait_ns as f64 / 1e3 / n);
                out.push("conn_runs", k, spent.runs as f64 / n);
                out.push("conn_sleeps", k, spent.sleeps as f64 / n);
            }
        }
    }

    let gib = sizes.bulk as f64 / f64::from(1u32 << 30);
    for (mbs, cpu, ticks, f) in [
        (
            "down_mbs",
            "down_cpu",
            "down_cpu_stat",
            load::download as fn(SocketAddr, u64) -> Duration,
        ),
        ("up_mbs", "up_cpu", "up_cpu_stat", load::upload),
    ] {
        each(&mut |t| {
            if !only.bulk {
                return;
            }
            let (d, c, k) = t.spending(|| f(t.addr, sizes.bulk));
            out.push(mbs, t.kind, sizes.bulk as f64 / 1e6 / d.as_secs_f64());
            if t.kind != Kind::Direct {
                out.push(cpu, t.kind, c.as_secs_f64() / gib);
                out.push(ticks, t.kind, k as f64 / 100.0 / gib);
            }
        });
    }

    each(&mut |t| {
        if !only.concurrent {
            return;
        }
        let (conns, rts) = sizes.concurrent;
        let segs = tcp_out_segments();
        let ((d, mut lat, failed, first), cpu, _) =
            t.spending(|| rt.block_on(load::concurrent(t.addr, conns, rts)));
        let segs = tcp_out_segments().saturating_sub(segs);
        assert_eq!(
            failed,
            0,
            "{}: {failed} of {conns} concurrent connections failed, first: {first:?}",
            t.kind.name()
        );
        lat.sort_unstable();
        out.push("conc_rps", t.kind, (conns * rts) as f64 / d.as_secs_f64());
        out.push("conc_p99", t.kind, pct(&lat, 99.0) / 1e3);
        out.push("conc_segs", t.kind, segs as f64 / (conns * rts) as f64);
        if t.kind != Kind::Direct {
            // What the proxy itself spends: on two cores shared with the client and the
            // backend, requests/s also measures them.
            let requests = (conns * rts) as f64;
            out.push("conc_cpu", t.kind, cpu.as_secs_f64() * 1e6 / requests);
        }
    });

    each(&mut |t| {
        if t.kind == Kind::Direct || !only.idle {
            return;
        }
        let (rss0, fds0) = (t.rss(), t.fds());
        let conns = rt.block_on(load::open_idle(t.addr, sizes.idle, 64));
        // Past any idle-release delay of a relay buffer (readyprism's is 100 ms at most).
        std::thread::sleep(Duration::from_millis(300));
        let (rss1, fds1) = (t.rss(), t.fds());
        rt.block_on(load::close_idle(conns));
        out.push(
            "idle_rss",
            t.kind,
            (rss1 as f64 - rss0 as f64) / sizes.idle as f64,
        );
        out.push(
            "idle_fds",
            t.kind,
            (fds1 as f64 - fds0 as f64) / sizes.idle as f64,
        );
        settle(t, fds0);
    });

    each(&mut |t| {
        if !only.churn {
            return;
        }
        let before = (t.rss(), t.fds());
        let segs = tcp_out_segments();
        let ((d, failed), cpu, _) =
            t.spending(|| rt.block_on(load::churn(t.addr, sizes.churn, 32)));
        // Every segment this host sent meanwhile: the client's, the backend's and the proxy's
        // (a proxy's choices show in all three), and a probe's now and then.
        let segs = tcp_out_segments().saturating_sub(segs);
        assert_eq!(
            failed,
            0,
            "{}: {failed} short connections failed",
            t.kind.name()
        );
        out.push("churn_cps", t.kind, sizes.churn as f64 / d.as_secs_f64());
        out.push("churn_segs", t.kind, segs as f64 / sizes.churn as f64);
        if t.kind != Kind::Direct {
            let per = cpu.as_secs_f64() * 1e6 / sizes.churn as f64;
            out.push("churn_cpu", t.kind, per);
        }
        if t.kind != Kind::Direct {
            settle(t, before.1);
            let mb = |after: u64, base: u64| (after as f64 - base as f64) / 1e6;
            out.push("churn_rss", t.kind, mb(t.rss(), before.0));
            out.push("churn_fds", t.kind, t.fds() as f64 - before.1 as f64);
            out.push("round_rss", t.kind, mb(t.rss(), base[&t.kind].0));
        }
    });
    for (k, t) in &mut targets {
        assert!(t.alive(), "{} died during round {round}", k.name());
    }
}

/// Waits (up to 3 s) until `t` is back to `fds` descriptors: closes are relayed asynchronously.
fn settle(t: &Target, fds: u64) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while t.fds() > fds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `cond` every 10 ms for up to 10 s.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
