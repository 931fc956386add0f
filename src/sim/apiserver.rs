//! A simulated kube-apiserver for the demo and the tests: real TLS with optional client
//! certificates, a switchable `/readyz`, and the misbehaviours that matter (hang before TLS, reset
//! at once or mid-stream).
//!
//! A connection whose first bytes are `RAW\n` instead of a TLS hello gets a plain echo service that
//! names the server, so relay behaviour (half-close, eviction) can be tested without HTTP.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::routes::{answer, raw_echo};
use crate::accept::Acceptor;
pub use crate::sim::tls::{lenient_server_tls, server_tls, strict_server_tls, TlsSetupError};

/// How the fake treats new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Behaviour {
    /// TLS and HTTP as a real apiserver.
    Serve = 0,
    /// Accept TCP and never say anything (a process stuck before TLS).
    Hang = 1,
    /// Accept TCP and reset at once.
    Reset = 2,
    /// Complete TLS, then never answer HTTP (a process stuck behind its TLS terminator).
    HangHttp = 3,
}

/// The knobs and counters of a running fake, shared with its tasks.
#[derive(Debug)]
pub struct Control {
    /// Name returned by `/name` and the raw echo greeting.
    pub name: String,
    ready: AtomicBool,
    mode: AtomicU8,
    pub(super) readyz_delay_us: AtomicU64,
    /// When non-zero, `/readyz` answers 200 at once and then its body one byte per this many µs.
    pub(super) readyz_trickle_us: AtomicU64,
    /// When non-zero, a `RAW\n` connection echoes this many bytes, then neither reads nor writes.
    pub(super) raw_stall_after: AtomicU64,
    /// When set, a `RAW\n` connection greets, then resets at the client's first bytes.
    pub(super) raw_reset: AtomicBool,
    fail_next: AtomicU64,
    pass_next: AtomicU64,
    handshake_delay_us: AtomicU64,
    accepting: AtomicBool,
    /// `/readyz` requests answered.
    pub readyz_hits: AtomicU64,
    /// Completed TLS handshakes.
    pub handshakes: AtomicU64,
    /// A fixed `/readyz` answer (status, body) replacing the ready switch: redirects, huge bodies.
    pub readyz_answer: ArcSwapOption<(u16, String)>,
    /// The answer (status, body) to `GET /api/v1/namespaces/default/endpoints/kubernetes`;
    /// unset: 404, as an apiserver without the object. See [`Control::set_endpoints`].
    pub endpoints: ArcSwapOption<(u16, String)>,
    /// Endpoints requests answered.
    pub endpoints_hits: AtomicU64,
    /// The Endpoints answer is cut off: its head announces the whole body, half of it is sent,
    /// then the connection closes.
    pub endpoints_cut: AtomicBool,
    /// DER of the client certificate presented on the latest `/readyz` (None: anonymous).
    pub last_client_cert: ArcSwapOption<Vec<u8>>,
    /// When set, `/readyz` also needs a linearizable read from this etcd client URL to pass.
    pub(super) etcd: ArcSwapOption<String>,
}

impl Control {
    /// Makes `/readyz` answer 200 (`true`) or 500 with an etcd failure (`false`).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether `/readyz` currently passes.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Delays every `/readyz` answer by `d` (simulated distance or load).
    pub fn set_readyz_delay(&self, d: Duration) {
        self.readyz_delay_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// The next `n` `/readyz` answers fail, whatever [`Control::set_ready`] says.
    pub fn fail_next(&self, n: u64) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    /// The next `n` `/readyz` answers pass, whatever [`Control::set_ready`] says.
    pub fn pass_next(&self, n: u64) {
        self.pass_next.store(n, Ordering::SeqCst);
    }

    /// This answer's verdict: a scripted one if any is left, else the ready switch.
    pub(super) fn verdict(&self) -> bool {
        let take = |c: &AtomicU64| {
            c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if take(&self.fail_next) {
            false
        } else if take(&self.pass_next) {
            true
        } else {
            self.is_ready()
        }
    }

    /// Makes `/readyz` depend on a linearizable read from the etcd member at `client_url`, as
    /// kube-apiserver's etcd check does: without quorum, 500 `[-]etcd failed`.
    pub fn set_etcd(&self, client_url: &str) {
        self.etcd.store(Some(Arc::new(client_url.to_string())));
    }

    /// Serves an Endpoints object listing `addrs` (each with an `https` port), as a cluster with
    /// these apiservers would.
    pub fn set_endpoints(&self, addrs: &[SocketAddr]) {
        let body = crate::discovery::answer::endpoints_json(addrs);
        self.endpoints.store(Some(Arc::new((200, body))));
    }

    /// Answers the Endpoints request with `status` and `body` as given (the bad answers).
    pub fn set_endpoints_answer(&self, status: u16, body: String) {
        self.endpoints.store(Some(Arc::new((status, body))));
    }

    /// Cuts the Endpoints answer off mid-body (`true`) or sends it whole again.
    pub fn set_endpoints_cut(&self, cut: bool) {
        self.endpoints_cut.store(cut, Ordering::SeqCst);
    }

    /// Makes `/readyz` a slowloris: status and headers at once, then a 1000-byte body one byte
    /// every `d`.
    pub fn set_readyz_trickle(&self, d: Duration) {
        self.readyz_trickle_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Makes new `RAW\n` connections stall mid-response: echo the first `bytes`, then hold the
    /// connection without reading or writing until the fake stops (0: never stall).
    pub fn set_raw_stall_after(&self, bytes: u64) {
        self.raw_stall_after.store(bytes, Ordering::SeqCst);
    }

    /// Makes new `RAW\n` connections abort mid-stream: greet, then reset (RST, not FIN) when the
    /// client's first bytes arrive, unread, as an apiserver that crashes or aborts a stream does.
    pub fn set_raw_reset(&self, reset: bool) {
        self.raw_reset.store(reset, Ordering::SeqCst);
    }

    /// Delays every TLS handshake by `d` (a far or slow site: must not count as `/readyz` latency).
    pub fn set_handshake_delay(&self, d: Duration) {
        self.handshake_delay_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Stops (`false`) or resumes calling `accept`: with the backlog full, new dials then hang in
    /// the SYN stage, like a black-holed site.
    pub fn set_accepting(&self, accepting: bool) {
        self.accepting.store(accepting, Ordering::SeqCst);
    }

    /// Changes how new connections are treated.
    pub fn set_mode(&self, mode: Behaviour) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn mode(&self) -> Behaviour {
        match self.mode.load(Ordering::SeqCst) {
            1 => Behaviour::Hang,
            2 => Behaviour::Reset,
            3 => Behaviour::HangHttp,
            _ => Behaviour::Serve,
        }
    }
}

/// A running fake apiserver. Stops when dropped.
#[derive(Debug)]
pub struct FakeApiserver {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its knobs.
    pub control: Arc<Control>,
    stop: CancellationToken,
    /// Stops only the accept loop (a child of `stop`).
    unlisten: CancellationToken,
    tasks: TaskTracker,
    /// Holds the port after [`FakeApiserver::stop`], bound but not listening: dials then get a
    /// reset, and no other listener (another test's) can take the port meanwhile.
    _tombstone: Option<socket2::Socket>,
}

impl Drop for FakeApiserver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeApiserver {
    /// Binds `addr` (port 0: any) and serves there with `tls`. After [`FakeApiserver::stop`] the
    /// port stays bound, not listening, so it refuses until the fake is dropped.
    pub fn bind(
        name: &str,
        addr: SocketAddr,
        tls: Arc<ServerConfig>,
    ) -> std::io::Result<FakeApiserver> {
        use socket2::{Domain, Socket, Type};
        let socket = |addr: SocketAddr| -> std::io::Result<Socket> {
            let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
            // Both sockets share the port; a listener of anyone else (no SO_REUSEPORT) cannot.
            s.set_reuse_port(true)?;
            s.set_nonblocking(true)?;
            s.bind(&addr.into())?;
            Ok(s)
        };
        let listening = socket(addr)?;
        listening.listen(1024)?;
        let bound = listening.local_addr()?.as_socket().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an IP socket")
        })?;
        let tombstone = socket(bound)?;
        let listener = TcpListener::from_std(std::net::TcpListener::from(listening))?;
        let mut fake = FakeApiserver::start(name, listener, tls)?;
        fake._tombstone = Some(tombstone);
        Ok(fake)
    }

    /// Serves on `listener` with `tls`, ready and in [`Behaviour::Serve`].
    pub fn start(
        name: &str,
        listener: TcpListener,
        tls: Arc<ServerConfig>,
    ) -> std::io::Result<FakeApiserver> {
        let addr = listener.local_addr()?;
        let control = Arc::new(Control {
            name: name.to_string(),
            ready: AtomicBool::new(true),
            mode: AtomicU8::new(Behaviour::Serve as u8),
            readyz_delay_us: AtomicU64::new(0),
            readyz_trickle_us: AtomicU64::new(0),
            raw_stall_after: AtomicU64::new(0),
            raw_reset: AtomicBool::new(false),
            fail_next: AtomicU64::new(0),
            pass_next: AtomicU64::new(0),
            handshake_delay_us: AtomicU64::new(0),
            accepting: AtomicBool::new(true),
            readyz_hits: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            readyz_answer: ArcSwapOption::empty(),
            endpoints: ArcSwapOption::empty(),
            endpoints_hits: AtomicU64::new(0),
            endpoints_cut: AtomicBool::new(false),
            last_client_cert: ArcSwapOption::empty(),
            etcd: ArcSwapOption::empty(),
        });
        let stop = CancellationToken::new();
        let unlisten = stop.child_token();
        let tasks = TaskTracker::new();
        tasks.spawn(accept_loop(
            listener,
            TlsAcceptor::from(tls),
            control.clone(),
            (stop.clone(), unlisten.clone()),
            tasks.clone(),
        ));
        Ok(FakeApiserver {
            addr,
            control,
            stop,
            unlisten,
            tasks,
            _tombstone: None,
        })
    }

    /// Stops listening but keeps the connections it has: new dials are refused while, e.g., a
    /// kept-alive probe connection still answers. (Refusing needs the port held: use
    /// [`FakeApiserver::bind`].)
    pub fn close_listener(&self) {
        self.unlisten.cancel();
    }

    /// Stops listening and closes every connection; the port then refuses.
    pub async fn stop(&self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: TlsAcceptor,
    control: Arc<Control>,
    (stop, unlisten): (CancellationToken, CancellationToken),
    tasks: TaskTracker,
) {
    // Polling is fine for a test fixture: it only matters while accepting is paused.
    let pause = Duration::from_millis(10);
    let mut acceptor = Acceptor::new("simulated apiserver", listener, unlisten.clone());
    loop {
        if !control.accepting.load(Ordering::SeqCst) {
            tokio::select! {
                _ = unlisten.cancelled() => return,
                _ = tokio::time::sleep(pause) => continue,
            }
        }
        let Some((stream, _)) = acceptor.next().await else {
            return;
        };
        let (tls, control, stop) = (tls.clone(), control.clone(), stop.clone());
        tasks.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = connection(stream, tls, control) => {}
            }
        });
    }
}

async fn connection(stream: TcpStream, tls: TlsAcceptor, control: Arc<Control>) {
    // As a real apiserver (Go sets it by default): without it the first answer on a connection
    // waits for a delayed ACK, which would show up as ~40 ms of fake latency.
    let _ = stream.set_nodelay(true);
    match control.mode() {
        Behaviour::Hang => return std::future::pending().await,
        Behaviour::Reset => {
            let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            return;
        }
        Behaviour::Serve | Behaviour::HangHttp => {}
    }
    let mut first = [0u8; 4];
    if stream.peek(&mut first).await.is_ok() && &first == b"RAW\n" {
        return raw_echo(stream, &control).await;
    }
    let Ok(tls_stream) = tls.accept(stream).await else {
        return;
    };
    control.handshakes.fetch_add(1, Ordering::SeqCst);
    let peer_cert = tls_stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| Arc::new(c.to_vec()));
    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
        let (control, peer_cert) = (control.clone(), peer_cert.clone());
        async move { Ok::<_, std::convert::Infallible>(answer(&req, &control, peer_cert).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls_stream), svc)
        .await;
}
