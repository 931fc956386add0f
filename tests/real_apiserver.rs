//! The simulated apiserver held to the real one: the same faults, at the same moment, to a real
//! kube-apiserver (k8s.io/kubernetes v1.37.2) and to `readyprism sim-apiserver`, both on one member
//! of a real three-member etcd 3.7 cluster on loopback, both probed as the balancer probes
//! (`/readyz` on a new TLS connection with the kubelet's certificate). Compared: status codes, the
//! failing checks' names, answer times (within [`ANSWER_TOLERANCE`]) and when the listener closes
//! (within [`CLOSE_TOLERANCE`]). Where they differ the simulator is wrong: these tests keep the
//! two aligned.
//!
//! The real binaries come from `tests/real/build`; without them the tests say they skipped
//! (`READYPRISM_REQUIRE_REAL=1` makes that a failure, as in CI). Every figure is also written to
//! `target/real-apiserver/<test>.json`, the numbers `docs/behaviour.md` quotes.

mod etcd;
mod fall;
pub(crate) mod kube;
mod moves;
mod overload;
mod peers;
mod probe;
mod sim;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use readyprism::testing::Cluster;
use tokio::time::Instant;

use crate::support::real::real_bin;
use etcd::{loopback_prefix, Etcd};
use kube::{ApiserverFiles, KubeApiserver, Launch};
use probe::{Outcome, Prober, Seen};
use sim::SimApiserver;

/// How far the simulator's answer times may be from the real apiserver's, on a loaded 2-core
/// machine: a probe started up to 1 s apart from the other's meets a different moment of the
/// apiserver's rate-limited etcd checks.
const ANSWER_TOLERANCE: f64 = 1.0;

/// How far apart the two listeners may close after the same `SIGTERM` (probes 100 ms apart).
const CLOSE_TOLERANCE: f64 = 1.0;

/// The real apiservers are heavy (a core each for seconds at start): one test at a time, the
/// real partition lab (`partition::real_k8s`) included.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A real etcd cluster, the shared certificates, and where each side listens.
struct Rig {
    dir: tempfile::TempDir,
    cluster: Arc<Cluster>,
    etcd: Etcd,
    files: ApiserverFiles,
    apiserver_bin: PathBuf,
    real_addr: SocketAddr,
    sim_addr: SocketAddr,
    /// A second real apiserver's address (the tests that move connections between two).
    second_addr: SocketAddr,
}

impl Rig {
    /// Starts etcd; `None` (after saying why) without the real binaries.
    fn new(what: &str, salt: u8) -> Option<Rig> {
        let apiserver_bin = real_bin("kube-apiserver", "kube-apiserver", what)?;
        let etcd_bin = real_bin("etcd", "etcd", what)?;
        let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
        let cluster = Arc::new(Cluster::new("real-apiserver-ca"));
        let prefix = loopback_prefix(salt);
        let (real_ip, sim_ip) = (format!("{prefix}10"), format!("{prefix}11"));
        // 127.0.0.1 too: a client through a balancer on 127.0.0.1 verifies that name.
        let second_ip = format!("{prefix}12");
        let ips = [
            real_ip.as_str(),
            sim_ip.as_str(),
            second_ip.as_str(),
            "127.0.0.1",
        ];
        let files = ApiserverFiles::write(dir.path(), &cluster.ca, &ips);
        let etcd = Etcd::start(&etcd_bin, dir.path(), &prefix);
        Some(Rig {
            real_addr: format!("{real_ip}:6443").parse().expect("addr"),
            second_addr: format!("{second_ip}:6443").parse().expect("addr"),
            sim_addr: format!("{sim_ip}:6443").parse().expect("addr"),
            dir,
            cluster,
            etcd,
            files,
            apiserver_bin,
        })
    }

    /// A real kube-apiserver and a simulated one, both on etcd member 0, both with `/readyz` green
    /// for 10 s (the lab's settle rule: start-up load is over before a fault).
    async fn pair(&self, tag: &str, real: &[&str], sim: &[&str]) -> (KubeApiserver, SimApiserver) {
        let url = self.etcd.url(0);
        let dir = self.dir.path();
        let real = Launch {
            dir,
            tag,
            files: &self.files,
            addr: self.real_addr,
            etcd_url: &url,
            extra: real,
        };
        let mut k = KubeApiserver::start(&self.apiserver_bin, &real);
        let s = SimApiserver::start(&Launch {
            addr: self.sim_addr,
            extra: sim,
            ..real
        });
        for addr in [self.real_addr, self.sim_addr] {
            let limits = (Duration::from_secs(10), Duration::from_secs(240));
            if let Err(e) = self.settle(addr, limits.0, limits.1, &mut k).await {
                panic!(
                    "{e}; kube-apiserver exit {:?}, its log:\n{}",
                    k.exited(),
                    k.tail(30)
                );
            }
        }
        (k, s)
    }

    /// Waits until `/readyz` at `addr` has answered 200 for `green` without a break; fails at
    /// once if `k` exits meanwhile.
    async fn settle(
        &self,
        addr: SocketAddr,
        green: Duration,
        limit: Duration,
        k: &mut KubeApiserver,
    ) -> Result<(), String> {
        let start = Instant::now();
        let mut since: Option<Instant> = None;
        loop {
            let outcome =
                probe::probe(&self.cluster, addr, "/readyz", Duration::from_secs(5)).await;
            let ok = matches!(outcome, Outcome::Answer { status: 200, .. });
            since = if ok {
                since.or(Some(Instant::now()))
            } else {
                None
            };
            if since.is_some_and(|s| s.elapsed() >= green) {
                return Ok(());
            }
            if let Some(exit) = k.exited() {
                return Err(format!(
                    "kube-apiserver exited ({exit}) while {addr} settled"
                ));
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "{addr}: /readyz not green for {green:?} within {limit:?} (last: {outcome:?})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A balancer (zone dc-a) running in this process in front of `backends` (address,
    /// zone), with the rig's CA and the kubelet's certificate and `extra` config, its backends
    /// ready.
    async fn balancer(&self, backends: &[(SocketAddr, &str)], extra: &str) -> readyprism::app::App {
        let pem = self.dir.path().join("kubelet.pem");
        std::fs::write(&pem, self.cluster.client.combined_pem()).expect("kubelet pem");
        let mut yaml = format!(
            "listen: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\nzone: dc-a\nstatus_file: \"\"\ntls:\n  ca: {}\n  client_cert: {}\nbackends:\n",
            self.files.client_ca,
            pem.display()
        );
        for (addr, zone) in backends {
            yaml.push_str(&format!("  - {{ address: \"{addr}\", zone: {zone} }}\n"));
        }
        yaml.push_str(extra);
        let config = readyprism::config::Config::parse(&yaml, "real.yaml").expect("config");
        let app = readyprism::app::App::start(config).await.expect("start");
        let ready = vec![readyprism::verdict::State::Ready; backends.len()];
        crate::support::wait_states(&app, &ready).await;
        app
    }

    /// A kubeconfig for an admin (`system:masters`, exempt from priority and fairness) of the
    /// real apiserver at `real_addr`.
    fn admin_kubeconfig(&self) -> PathBuf {
        let admin = self
            .cluster
            .ca
            .user("admin", "system:masters")
            .expect("admin cert");
        let dir = self.dir.path();
        let (cert, key) = (dir.join("admin.crt"), dir.join("admin.key"));
        std::fs::write(&cert, &admin.cert_pem).expect("admin cert");
        std::fs::write(&key, &admin.key_pem).expect("admin key");
        let file = dir.join("admin.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: https://{}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: real\n  context: {{cluster: real, user: admin}}\ncurrent-context: real\n",
            self.real_addr,
            self.files.client_ca,
            cert.display(),
            key.display()
        );
        std::fs::write(&file, text).expect("kubeconfig");
        file
    }

    fn probers(&self, t0: Instant, every: Duration, deadline: Duration) -> (Prober, Prober) {
        let p = |addr| Prober::start(self.cluster.clone(), addr, "/readyz", t0, (every, deadline));
        (p(self.real_addr), p(self.sim_addr))
    }
}

/// Waits (at most `limit`) until the last probe of both probers answered 200.
async fn both_green(real: &Prober, sim: &Prober, limit: Duration) {
    let start = Instant::now();
    let green = |p: &Prober| p.seen().last().and_then(Seen::status) == Some(200);
    while !(green(real) && green(sim)) {
        assert!(
            start.elapsed() < limit,
            "not both green within {limit:?}: real {:?}, sim {:?}",
            real.seen().last(),
            sim.seen().last()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Probes that started in `[from, to)`.
fn within(seen: &[Seen], from: f64, to: f64) -> Vec<Seen> {
    seen.iter()
        .filter(|s| s.at >= from && s.at < to)
        .cloned()
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "no values");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds from `from` to the end of the first probe started after it that `pred` accepts.
fn first_after(seen: &[Seen], from: f64, pred: impl Fn(&Seen) -> bool) -> Option<f64> {
    seen.iter()
        .find(|s| s.at >= from && pred(s))
        .map(|s| s.at + s.took - from)
}

fn write_record(test: &str, value: &serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/real-apiserver");
    std::fs::create_dir_all(&dir).expect("record dir");
    let text = serde_json::to_string_pretty(value).expect("json");
    std::fs::write(dir.join(format!("{test}.json")), text).expect("write record");
}

/// What one side showed while its etcd member had no quorum.
#[derive(Debug)]
struct NoQuorum {
    statuses: Vec<u16>,
    failing: Vec<Vec<String>>,
    answer_median: f64,
    answer_max: f64,
    timeouts: usize,
    back_after: f64,
    blink_failed: bool,
    blink_back_after: f64,
}

fn no_quorum_figures(
    seen: &[Seen],
    (lost, back): (f64, f64),
    (blink, blink_end): (f64, f64),
) -> NoQuorum {
    // From 3 s after the loss: the member has noticed it has no leader by then.
    let during = within(seen, lost + 3.0, back);
    // Only answers that ended before quorum was back: a probe that straddles its return runs
    // the `etcd` check without quorum and `etcd-readiness` with it (one after the other, each
    // its own read), and names `etcd` alone, in either apiserver.
    let answers: Vec<&Seen> = during
        .iter()
        .filter(|s| s.status().is_some() && s.at + s.took <= back)
        .collect();
    assert!(
        !answers.is_empty(),
        "no answer while without quorum: {during:?}"
    );
    let mut failing: Vec<Vec<String>> = answers.iter().map(|s| s.failing()).collect();
    failing.dedup();
    NoQuorum {
        statuses: answers.iter().filter_map(|s| s.status()).collect(),
        failing,
        answer_median: median(answers.iter().map(|s| s.took).collect()),
        answer_max: answers.iter().map(|s| s.took).fold(0.0, f64::max),
        timeouts: during
            .iter()
            .filter(|s| s.outcome == Outcome::Timeout)
            .count(),
        back_after: first_after(seen, back, |s| s.status() == Some(200))
            .expect("green after quorum came back"),
        blink_failed: within(seen, blink, blink_end)
            .iter()
            .any(|s| s.status() != Some(200)),
        blink_back_after: first_after(seen, blink_end, |s| s.status() == Some(200))
            .expect("green after the blink"),
    }
}

/// The cluster-wide blink of the quorum test: long enough for a fresh etcd check to time out
/// inside it (1 s of limiter, 2 s of read, 3 s to spare for the one-a-second probes).
const BLINK: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_apiserver_answers_readyz_as_the_real_one_when_etcd_loses_quorum_and_blinks() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(rig) = Rig::new("sim held to the real apiserver (quorum)", 1) else {
        return;
    };
    let (_real, _sim) = rig.pair("quorum", &[], &[]).await;
    let t0 = Instant::now();
    // As the balancer: a probe every second at most, each given 10 s so the whole answer time shows.
    let (real, sim) = rig.probers(t0, Duration::from_secs(1), Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lost = t0.elapsed().as_secs_f64();
    rig.etcd.stop(&[1, 2]);
    tokio::time::sleep(Duration::from_secs(16)).await;
    let back = t0.elapsed().as_secs_f64();
    rig.etcd.resume(&[1, 2]);
    both_green(&real, &sim, Duration::from_secs(40)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Every member stopped: a cluster-wide blink, 6 s so that both apiservers must fail a probe
    // in it. Each runs its etcd checks at most once a second and answers from the last result in
    // between, and a check waits up to 2 s for its read: in a 3 s blink whether any probe fails
    // depends on where the limiter's second falls (CI saw the real one pass a 3 s blink its
    // simulation failed). From 1 s after the stop to 2 s before the resume, every check is fresh
    // and times out while etcd is down, in both.
    let blink = t0.elapsed().as_secs_f64();
    rig.etcd.stop(&[0, 1, 2]);
    tokio::time::sleep(BLINK).await;
    let blink_end = t0.elapsed().as_secs_f64();
    rig.etcd.resume(&[0, 1, 2]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    both_green(&real, &sim, Duration::from_secs(40)).await;
    let (real, sim) = (real.finish().await, sim.finish().await);

    let r = no_quorum_figures(&real, (lost, back), (blink, blink_end));
    let s = no_quorum_figures(&sim, (lost, back), (blink, blink_end));
    eprintln!("no quorum, real: {r:?}\nno quorum, sim:  {s:?}");
    let side = |n: &NoQuorum, seen: &[Seen]| {
        serde_json::json!({
            "statuses": n.statuses, "failing": n.failing, "answer_median_s": n.answer_median,
            "answer_max_s": n.answer_max, "timeouts": n.timeouts, "green_after_quorum_s": n.back_after,
            "blink_failed_a_probe": n.blink_failed, "green_after_blink_s": n.blink_back_after,
            "probes": seen.iter().map(|p| serde_json::json!({"at": p.at, "took": p.took, "outcome": format!("{:?}", p.outcome)})).collect::<Vec<_>>(),
        })
    };
    write_record(
        "quorum",
        &serde_json::json!({"lost_at": lost, "back_at": back, "blink": [blink, blink_end],
            "real": side(&r, &real), "sim": side(&s, &sim)}),
    );

    assert!(r.statuses.iter().all(|&c| c == 500), "real: {r:?}");
    assert!(s.statuses.iter().all(|&c| c == 500), "sim: {s:?}");
    assert_eq!(s.failing, r.failing, "the failing checks differ");
    assert!(
        (r.answer_median - s.answer_median).abs() <= ANSWER_TOLERANCE,
        "median answer time without quorum: real {:.2} s, sim {:.2} s",
        r.answer_median,
        s.answer_median
    );
    assert!(
        (r.answer_max - s.answer_max).abs() <= ANSWER_TOLERANCE,
        "longest answer without quorum: real {:.2} s, sim {:.2} s",
        r.answer_max,
        s.answer_max
    );
    assert_eq!(
        r.blink_failed, s.blink_failed,
        "the blink: real {r:?}, sim {s:?}"
    );
}

/// What one side did after `SIGTERM`.
#[derive(Debug)]
struct Shutdown {
    /// Seconds to the end of the first answer failing only `shutdown`, if any.
    draining_after: Option<f64>,
    /// Every set of failing checks seen before the listener closed.
    failing: Vec<Vec<String>>,
    /// Seconds to the first refused dial.
    closed_after: f64,
    /// A `/readyz` answer that was neither 200 nor 500 (`429`), if any.
    odd: Option<Seen>,
}

fn shutdown_figures(seen: &[Seen], term: f64) -> Shutdown {
    let after = within(seen, term, f64::MAX);
    let closed_after = first_after(&after, term, |s| s.outcome == Outcome::Refused)
        .unwrap_or_else(|| panic!("the listener never closed: {after:?}"));
    let open = within(&after, term, term + closed_after);
    let mut failing: Vec<Vec<String>> = open
        .iter()
        .filter(|s| s.status().is_some())
        .map(Seen::failing)
        .collect();
    failing.dedup();
    Shutdown {
        draining_after: first_after(&after, term, |s| s.failing() == ["shutdown"]),
        failing,
        closed_after,
        odd: open
            .iter()
            .find(|s| !matches!(s.status(), None | Some(200) | Some(500)))
            .cloned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_apiserver_shuts_down_as_the_real_one_with_and_without_a_delay() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(rig) = Rig::new("sim held to the real apiserver (shutdown)", 2) else {
        return;
    };
    let variants: [(&str, &[&str], &[&str], f64); 3] = [
        (
            "no delay (Talos's default)",
            &[],
            &["--shutdown-delay", "0s"],
            0.0,
        ),
        (
            "5 s delay",
            &["--shutdown-delay-duration=5s"],
            &["--shutdown-delay", "5s"],
            5.0,
        ),
        (
            "5 s delay, send retry-after",
            &[
                "--shutdown-delay-duration=5s",
                "--shutdown-send-retry-after",
            ],
            &["--shutdown-delay", "5s", "--shutdown-send-retry-after"],
            5.0,
        ),
    ];
    let mut record = Vec::new();
    for (i, (name, real_flags, sim_flags, delay)) in variants.into_iter().enumerate() {
        let (mut k, s) = rig
            .pair(&format!("shutdown-{i}"), real_flags, sim_flags)
            .await;
        let t0 = Instant::now();
        let (real, sim) = rig.probers(t0, Duration::from_millis(100), Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let term = t0.elapsed().as_secs_f64();
        k.term();
        s.term();
        let status = tokio::task::block_in_place(|| k.wait_exit(Duration::from_secs(90)));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (real, sim) = (real.finish().await, sim.finish().await);
        let (r, sm) = (shutdown_figures(&real, term), shutdown_figures(&sim, term));
        eprintln!("{name}: real {r:?} (exit {status:?})\n{name}: sim  {sm:?}");
        record.push(serde_json::json!({
            "variant": name, "delay_s": delay,
            "real": {"draining_after_s": r.draining_after, "closed_after_s": r.closed_after, "failing": r.failing, "exit": status.code()},
            "sim": {"draining_after_s": sm.draining_after, "closed_after_s": sm.closed_after, "failing": sm.failing},
        }));

        assert!(
            r.odd.is_none() && sm.odd.is_none(),
            "{name}: /readyz is exempt from 429: real {r:?}, sim {sm:?}"
        );
        assert!(
            (r.closed_after - sm.closed_after).abs() <= CLOSE_TOLERANCE,
            "{name}: listener closed after {:.2} s (real) and {:.2} s (sim)",
            r.closed_after,
            sm.closed_after
        );
        assert!(
            r.closed_after >= delay && sm.closed_after >= delay,
            "{name}: closed before the delay: {r:?} {sm:?}"
        );
        // The `[-]shutdown` window: from the first answer failing only `shutdown` to the first
        // refused dial (none seen: about zero; probes are 100 ms apart).
        let window = |x: &Shutdown| x.closed_after - x.draining_after.unwrap_or(x.closed_after);
        assert!(
            (window(&r) - window(&sm)).abs() <= CLOSE_TOLERANCE,
            "{name}: the [-]shutdown window: real {:.2} s, sim {:.2} s",
            window(&r),
            window(&sm)
        );
        for f in r.failing.iter().chain(&sm.failing) {
            assert!(
                f.is_empty() || f == &["shutdown"],
                "{name}: failing {f:?} besides shutdown: real {r:?}, sim {sm:?}; etcd's logs: {:?}",
                rig.etcd.troubles(rig.dir.path())
            );
        }
    }
    write_record("shutdown", &serde_json::Value::Array(record));
}
