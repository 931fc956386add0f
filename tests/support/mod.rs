//! Test fixtures: a lab with an in-memory CA, fake apiservers on port 0, a balancer started from
//! YAML, and waits on table generations or polls with deadlines (never fixed sleeps).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use readyprism::admin::StatusDoc;
use readyprism::app::App;
use readyprism::config::Config;
use readyprism::health::verdict::State;
use readyprism::sim::apiserver::FakeApiserver;
use readyprism::sim::pki::{Ca, Issued};
pub mod iptables;
pub mod netns;
pub mod process;

use rustls::ServerConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Probes at start-up only, in practice: backends stay as first seen while a test breaks them.
pub const SLOW_PROBES: &str = "health: { interval: 30s, timeout: 2s, fast_interval: 1s }\n";

/// Generous bound for things that should happen in well under a second: 10 s, or
/// `READYPRISM_TEST_PATIENCE_MS` when set (a slow or heavily loaded machine may want more).
pub fn patience() -> Duration {
    static PATIENCE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *PATIENCE.get_or_init(|| {
        let ms = std::env::var("READYPRISM_TEST_PATIENCE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000);
        Duration::from_millis(ms)
    })
}

/// A CA, a server cert for 127.0.0.1, a kubelet-style client cert, and a temp dir with the files.
pub struct Lab {
    pub ca: Ca,
    pub client: Issued,
    pub dir: tempfile::TempDir,
    server_tls: Arc<ServerConfig>,
}

impl Lab {
    pub fn new() -> Lab {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = Ca::new("test-cluster-ca").expect("ca");
        let server = ca
            .server(&["127.0.0.1", "::1", "localhost"])
            .expect("server cert");
        let client = ca.client("test-node").expect("client cert");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.crt"), &ca.cert_pem).expect("write ca");
        std::fs::write(
            dir.path().join("kubelet-client-current.pem"),
            client.combined_pem(),
        )
        .expect("write client");
        let server_tls = readyprism::sim::apiserver::server_tls(&ca, &server).expect("server tls");
        Lab {
            ca,
            client,
            dir,
            server_tls,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A fake apiserver on 127.0.0.1:0. Once stopped, its port refuses (stays bound).
    pub async fn fake(&self, name: &str) -> FakeApiserver {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        FakeApiserver::bind(name, any, self.server_tls.clone()).expect("start fake")
    }

    /// A fake apiserver on `listener` (one the test made: a short accept queue, say) with the
    /// lab's TLS.
    pub fn fake_on(&self, name: &str, listener: TcpListener) -> FakeApiserver {
        FakeApiserver::start(name, listener, self.server_tls.clone()).expect("start fake")
    }

    /// A fake apiserver on 127.0.0.1:0 with TLS of its own
    /// (`readyprism::sim::apiserver::server_tls` or `strict_server_tls` with another CA): a
    /// certificate the balancer does not trust, a client CA that refuses the kubelet's.
    pub async fn fake_serving(&self, name: &str, tls: Arc<ServerConfig>) -> FakeApiserver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        FakeApiserver::start(name, listener, tls).expect("start fake")
    }

    /// Config YAML: ports 0, fast probes, the lab's CA and client cert, `backends` as
    /// `(address, zone)`, then `extra` appended (top-level keys; may override `health`).
    pub fn yaml(&self, zone: &str, backends: &[(String, &str)], extra: &str) -> String {
        let mut y = format!(
            "listen: [\"127.0.0.1:0\"]\nadmin: \"127.0.0.1:0\"\nzone: {zone}\ntls:\n  ca: {}\n  client_cert: {}\nbackends:\n",
            self.path("ca.crt").display(),
            self.path("kubelet-client-current.pem").display()
        );
        for (addr, z) in backends {
            y.push_str(&format!("  - {{ address: \"{addr}\", zone: {z} }}\n"));
        }
        if !extra.contains("health:") {
            // Fast enough for short tests, with a timeout that a loaded machine still meets.
            y.push_str("health: { interval: 1s, timeout: 800ms, fast_interval: 150ms }\n");
        }
        y.push_str(extra);
        y
    }

    /// Two fake apiservers, `local` in the node's zone `dc-a` and `remote` in `dc-b`, behind a
    /// balancer started with `extra` config, both ready.
    pub async fn local_and_remote(&self, extra: &str) -> (FakeApiserver, FakeApiserver, App) {
        let (local, remote) = (self.fake("local").await, self.fake("remote").await);
        let app = self
            .start(&self.yaml(
                "dc-a",
                &[(addr(&local), "dc-a"), (addr(&remote), "dc-b")],
                extra,
            ))
            .await;
        wait_states(&app, &[State::Ready, State::Ready]).await;
        (local, remote, app)
    }

    /// One fake apiserver `a` in the node's zone `dc-a` behind a balancer started with `extra`
    /// config, ready.
    pub async fn one_ready(&self, extra: &str) -> (FakeApiserver, App) {
        let a = self.fake("a").await;
        let app = self.alone_behind_balancer(&a, extra).await;
        wait_states(&app, &[State::Ready]).await;
        (a, app)
    }

    /// A balancer (zone dc-a, `extra` config) in front of `a` alone, started, its state not
    /// waited for.
    pub async fn alone_behind_balancer(&self, a: &FakeApiserver, extra: &str) -> App {
        self.start(&self.yaml("dc-a", &[(addr(a), "dc-a")], extra))
            .await
    }

    /// For tests of the real binary: a fake `a` started on `rt`, and a config file `name` in the
    /// lab's directory that routes to it (zone dc-a, the lab's fast probes, then `extra`).
    pub fn fake_and_config(
        &self,
        rt: &tokio::runtime::Runtime,
        name: &str,
        extra: &str,
    ) -> (FakeApiserver, PathBuf) {
        let a = rt.block_on(self.fake("a"));
        let file = self.path(name);
        std::fs::write(&file, self.yaml("dc-a", &[(addr(&a), "dc-a")], extra)).expect("write");
        (a, file)
    }

    /// Writes `text` to the file `name` in the lab's directory; returns its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    }

    pub async fn start(&self, yaml: &str) -> App {
        let config = Config::parse(yaml, "test.yaml").expect("valid test config");
        App::start(config).await.expect("start balancer")
    }
}

/// An address that refuses connections for as long as the returned socket lives: bound, never
/// listening, so no other test can take the port and answer in its place.
pub fn refusing_addr() -> (socket2::Socket, String) {
    let s =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    s.bind(&any.into()).expect("bind");
    let addr = s
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("ip")
        .to_string();
    (s, addr)
}

/// Whether `kubectl` is on PATH. Without it a test skips what needs kubectl, saying so on stderr
/// as `SKIPPED <what>`, so a plain `cargo test` on a laptop works; with
/// `READYPRISM_REQUIRE_KUBECTL=1` (set by `.ci/run`) a missing kubectl fails the test instead.
pub fn kubectl_available(what: &str) -> bool {
    let found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("READYPRISM_REQUIRE_KUBECTL").as_deref() != Ok("1"),
            "kubectl is not on PATH, and READYPRISM_REQUIRE_KUBECTL=1 requires it"
        );
        eprintln!(
            "SKIPPED {what}: kubectl is not on PATH (install it, e.g. Debian's kubernetes-client, \
             to run it)"
        );
    }
    found
}

pub fn addr(f: &FakeApiserver) -> String {
    f.addr.to_string()
}

/// Waits until the status document satisfies `pred`, re-checking on every published snapshot.
pub async fn wait_until(app: &App, what: &str, pred: impl Fn(&StatusDoc) -> bool) -> StatusDoc {
    let mut gen = app.subscribe();
    let wait = async {
        loop {
            let doc = app.status();
            if pred(&doc) {
                return doc;
            }
            gen.changed().await.expect("table writer alive");
        }
    };
    tokio::time::timeout(patience(), wait)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "timed out waiting for: {what}; last status: {:?}",
                app.status()
            )
        })
}

/// Waits until every backend has a decided state equal to `states`, in config order.
pub async fn wait_states(app: &App, states: &[State]) -> StatusDoc {
    wait_until(app, &format!("states {states:?}"), |s| {
        s.backends.len() == states.len()
            && s.backends
                .iter()
                .zip(states)
                .all(|(b, want)| b.state == *want)
    })
    .await
}

/// A per-backend counter from `/metrics`: `name{backend="<address>"<extra>}`, 0 when absent.
pub fn backend_metric(app: &App, name: &str, address: &str, extra: &str) -> u64 {
    let labels = format!("backend=\"{address}\"{extra}");
    metric(&app.metrics_text(), name, &labels).unwrap_or(0.0) as u64
}

/// State changes of the backend at `address` to `to` (`ready`, `unready`).
pub fn state_changes(app: &App, address: &str, to: &str) -> u64 {
    let extra = format!(",to=\"{to}\"");
    backend_metric(
        app,
        "readyprism_backend_state_changes_total",
        address,
        &extra,
    )
}

/// Failed dials to the backend at `address`.
pub fn dial_failures(app: &App, address: &str) -> u64 {
    backend_metric(app, "readyprism_dial_failures_total", address, "")
}

/// Waits until every backend has finished at least `probes` probes.
pub async fn wait_probed(app: &App, probes: u64) -> StatusDoc {
    poll("each backend probed enough times", || {
        app.status().backends.iter().all(|b| {
            let n = |r: &str| {
                let extra = format!(",result=\"{r}\"");
                backend_metric(app, "readyprism_health_checks_total", &b.address, &extra)
            };
            n("pass") + n("fail") >= probes
        })
    })
    .await;
    app.status()
}

/// Polls `cond` every 10 ms until true or [`patience`] passes.
pub async fn poll(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + patience();
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Retries `f` every 10 ms until it yields `Some`, or panics after [`patience`].
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + patience();
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A raw connection through the balancer: sends `RAW\n`, returns the stream and the greeting
/// (the fake apiserver's name), or `None` if the balancer closed the connection.
pub async fn raw(proxy: SocketAddr) -> Option<(BufReader<TcpStream>, String)> {
    let mut s = TcpStream::connect(proxy)
        .await
        .expect("connect to balancer");
    s.write_all(b"RAW\n").await.ok()?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    match tokio::time::timeout(patience(), r.read_line(&mut line))
        .await
        .expect("greeting in time")
    {
        Ok(n) if n > 0 => Some((r, line.trim().to_string())),
        _ => None,
    }
}

/// Name of the fake that a new connection through the balancer reaches.
pub async fn landed(proxy: SocketAddr) -> String {
    raw(proxy).await.expect("balancer relayed the connection").1
}

/// Reads until EOF or error; returns what was read.
pub async fn read_to_end(r: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(patience(), r.read_to_end(&mut out))
        .await
        .expect("EOF in time");
    out
}

/// GET `path` from the admin server; returns (status code, body).
pub async fn admin_get(admin: SocketAddr, path: &str) -> (u16, String) {
    let a = readyprism::cli::http::get(&admin.to_string(), path)
        .await
        .expect("admin answers");
    (a.status, a.body)
}

/// [`admin_get`] for synchronous code (polls of a child process); code 0 if unreachable. Runs on
/// a thread of its own, so it may be called from inside a runtime too.
pub fn blocking_get(admin: SocketAddr, path: &str) -> (u16, String) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(readyprism::cli::http::get(&admin.to_string(), path))
                .map_or((0, String::new()), |a| (a.status, a.body))
        })
        .join()
        .expect("GET thread")
    })
}

/// `readyprism ARGS...` run to completion (no zone from the environment).
pub fn readyprism(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_readyprism"))
        .args(args)
        .env_remove("READYPRISM_ZONE")
        .output()
        .expect("run readyprism")
}

/// A finished command's stderr as text.
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The value of one Prometheus sample line `name{labels} value`, matching labels as a substring.
pub fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let (series, _) = l.rsplit_once(' ').unwrap_or((l, ""));
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name && rest.contains(labels)
        })
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

/// Connections to the backend at `address` closed for its state (`readyprism_unready_closes_total`),
/// for one `reason`, or over every reason with `None`.
pub fn unready_closes(app: &App, address: &str, reason: Option<&str>) -> u64 {
    let reasons = [
        "turned_unready",
        "left_none_ready",
        "refusing",
        "silent",
        "removed",
        "failback",
    ];
    reasons
        .iter()
        .filter(|r| reason.is_none_or(|want| want == **r))
        .map(|r| {
            let extra = format!(",reason=\"{r}\"");
            backend_metric(app, "readyprism_unready_closes_total", address, &extra)
        })
        .sum()
}
