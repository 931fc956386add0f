//! A simulated kube-apiserver for the demo and the tests: real TLS with optional client
//! certificates, a switchable `/readyz`, and the misbehaviours that matter (hang before TLS, reset
//! at once or mid-stream).
//!
//! A connection whose first bytes are `RAW\n` instead of a TLS hello gets a plain echo service that
//! names the server, so relay behaviour (half-close, eviction) can be tested without HTTP.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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

pub use super::control::{Behaviour, Control};
pub use super::shutdown::{Phase, Plan};

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
        let control = Arc::new(Control::new(name));
        let stop = CancellationToken::new();
        let unlisten = stop.child_token();
        let tasks = TaskTracker::new();
        let accepting = accept_loop(
            listener,
            TlsAcceptor::from(tls),
            control.clone(),
            (stop.clone(), unlisten.clone()),
            tasks.clone(),
        );
        let listening = control.clone();
        tasks.spawn(async move {
            accepting.await; // drops the listener
            listening.listening.send_replace(false);
        });
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

    /// Begins a graceful shutdown, as kube-apiserver's `--shutdown-delay-duration`: at once
    /// `/readyz` fails with only `[-]shutdown failed` while everything else is served and new
    /// connections are accepted; after `delay` the listener closes; after `grace` more the open
    /// connections are closed. Follow it with [`Control::shutdown_phase`]; a second call changes
    /// nothing.
    pub fn begin_shutdown(&self, delay: Duration, grace: Duration) {
        self.begin_shutdown_as(Plan {
            delay,
            grace,
            send_retry_after: false,
        });
    }

    /// [`FakeApiserver::begin_shutdown`] as `plan` says (`--shutdown-send-retry-after` too).
    pub fn begin_shutdown_as(&self, plan: Plan) {
        if *self.control.phase.borrow() != Phase::Serving {
            return;
        }
        let tokens = (self.stop.clone(), self.unlisten.clone());
        let timeline = super::shutdown::timeline(self.control.clone(), plan, tokens);
        // Sets `Draining` before it first waits: the check fails from the first poll.
        self.control.phase.send_replace(Phase::Draining);
        self.tasks.spawn(timeline);
    }

    /// A graceful shutdown ([`FakeApiserver::begin_shutdown_as`]) to its end: every task done.
    pub async fn shut_down(&self, plan: Plan) {
        let mut phase = self.control.shutdown_phase();
        self.begin_shutdown_as(plan);
        let _ = phase.wait_for(|p| *p == Phase::Closed).await;
        self.stop().await;
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
