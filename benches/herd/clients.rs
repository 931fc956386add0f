//! The kubelet-like clients: each a TLS connection (the kubelet's client certificate, the cluster
//! CA) through its node's balancer to an apiserver, kept alive with a small `GET /name` about every
//! second. A connection that closes is re-dialled at once through the same balancer, as kubelet
//! does; a dial the balancer refuses is tried again after a short, growing pause (0.2 s doubling
//! to 2 s, so a balancer that refuses for seconds sees a bounded, counted stream of dials, not a
//! spin).
//!
//! Everything the clients see goes into one [`Record`]: each new connection and the apiserver it
//! reached, each close and whether a request was under way, each refused or cut dial.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

/// No apiserver: the client is between connections.
pub const NONE: u8 = u8::MAX;

/// How long one step of a dial (TCP, TLS, first answer) or one request may take before it counts as
/// failed. Generous: the 2-core machine is shared, and a slow answer is not the thing measured.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a connected client sends its request.
const REQUEST_EVERY: Duration = Duration::from_secs(1);

/// What happened to one client, when (since the record's epoch).
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// Seconds since [`Record::epoch`].
    pub t: f64,
    /// What.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A new connection completed its TLS handshake with this apiserver and answered.
    Connected(u8),
    /// The connection to this apiserver closed; `in_request`: under a request, which failed.
    Closed { apiserver: u8, in_request: bool },
    /// A dial the balancer refused: TCP failed, or the connection ended before the balancer relayed
    /// a byte of an apiserver's TLS. A failed request.
    DialFailed,
    /// A dial that reached an apiserver (its TLS bytes came back) and was closed before its first
    /// answer: a request cut; `handshaken`: its TLS handshake had completed (a new connection).
    DialCut { handshaken: bool },
}

/// Shared by every client of a scenario and read by the harness.
pub struct Record {
    /// Time zero of [`Event::t`].
    pub epoch: Instant,
    events: Mutex<Vec<Event>>,
    /// Per client: the apiserver it is connected to now, or [`NONE`].
    pub current: Vec<AtomicU8>,
    /// Clients connected now.
    pub connected: AtomicUsize,
}

impl Record {
    /// A record for `clients` clients, none connected yet.
    pub fn new(clients: usize) -> Record {
        Record {
            epoch: Instant::now(),
            events: Mutex::new(Vec::new()),
            current: (0..clients).map(|_| AtomicU8::new(NONE)).collect(),
            connected: AtomicUsize::new(0),
        }
    }

    fn push(&self, kind: EventKind) {
        let t = self.epoch.elapsed().as_secs_f64();
        self.events
            .lock()
            .expect("event log")
            .push(Event { t, kind });
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("event log").clone()
    }

    /// Clients connected to each of `apiservers` apiservers now.
    pub fn on_each(&self, apiservers: usize) -> Vec<usize> {
        let mut on = vec![0; apiservers];
        for c in &self.current {
            if let Some(n) = on.get_mut(usize::from(c.load(Ordering::SeqCst))) {
                *n += 1;
            }
        }
        on
    }

    fn connected_to(&self, client: usize, apiserver: u8) {
        self.current[client].store(apiserver, Ordering::SeqCst);
        self.connected.fetch_add(1, Ordering::SeqCst);
        self.push(EventKind::Connected(apiserver));
    }

    fn closed(&self, client: usize, apiserver: u8, in_request: bool) {
        self.current[client].store(NONE, Ordering::SeqCst);
        self.connected.fetch_sub(1, Ordering::SeqCst);
        self.push(EventKind::Closed {
            apiserver,
            in_request,
        });
    }
}

/// Where a client dials and how.
#[derive(Clone)]
pub struct Dialer {
    /// Its balancer's listener.
    pub balancer: SocketAddr,
    /// The kubelet's TLS: cluster CA, client certificate.
    pub tls: TlsConnector,
    /// The apiservers' names, in index order (what `/name` answers).
    pub names: Arc<Vec<String>>,
}

/// One open connection: its request sender, its driver task, and the apiserver behind it.
struct Conn {
    send: SendRequest<Empty<Bytes>>,
    driver: JoinHandle<()>,
    apiserver: u8,
}

/// Runs client `id` until `stop`: connect, request every second, re-dial on close.
pub async fn run(id: usize, dialer: Dialer, rec: Arc<Record>, stop: CancellationToken) {
    let mut failures = 0u32;
    loop {
        let dialed = tokio::select! {
            _ = stop.cancelled() => return,
            d = dial(&dialer) => d,
        };
        let mut conn = match dialed {
            Ok(conn) => conn,
            Err(EventKind::DialFailed) => {
                rec.push(EventKind::DialFailed);
                let pause =
                    Duration::from_millis(200 << failures.min(3)).min(Duration::from_secs(2));
                failures += 1;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
            Err(cut) => {
                // Closed under its first request: re-dialled at once, as after any close.
                rec.push(cut);
                failures = 0;
                continue;
            }
        };
        failures = 0;
        rec.connected_to(id, conn.apiserver);
        // Spread the clients' requests over the second.
        let offset = Duration::from_millis((id as u64 * 7919) % 1000);
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + offset, REQUEST_EVERY);
        let in_request = loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    conn.driver.abort();
                    return;
                }
                _ = &mut conn.driver => break false,
                _ = tick.tick() => {
                    if !request(&mut conn.send).await {
                        break true;
                    }
                }
            }
        };
        conn.driver.abort();
        rec.closed(id, conn.apiserver, in_request);
    }
}

/// TCP to the balancer, TLS to the apiserver behind it, one `GET /name`. Fails with
/// [`EventKind::DialFailed`] when the balancer refused (nothing of an apiserver came back), else
/// with [`EventKind::DialCut`].
async fn dial(d: &Dialer) -> Result<Conn, EventKind> {
    let refused = EventKind::DialFailed;
    let tcp = tokio::time::timeout(STEP_TIMEOUT, TcpStream::connect(d.balancer))
        .await
        .map_err(|_| refused)?
        .map_err(|_| refused)?;
    tcp.set_nodelay(true).map_err(|_| refused)?;
    let heard = Arc::new(AtomicBool::new(false));
    let tcp = Heard {
        inner: tcp,
        heard: heard.clone(),
    };
    let name = ServerName::try_from("127.0.0.1").map_err(|_| refused)?;
    let tls = match tokio::time::timeout(STEP_TIMEOUT, d.tls.connect(name, tcp)).await {
        Ok(Ok(tls)) => tls,
        _ if heard.load(Ordering::SeqCst) => return Err(EventKind::DialCut { handshaken: false }),
        _ => return Err(refused),
    };
    let cut = EventKind::DialCut { handshaken: true };
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|_| cut)?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let answer = get_name(&mut send)
        .await
        .and_then(|body| d.names.iter().position(|n| *n == body))
        .and_then(|i| u8::try_from(i).ok());
    let Some(apiserver) = answer else {
        driver.abort();
        return Err(cut);
    };
    Ok(Conn {
        send,
        driver,
        apiserver,
    })
}

/// A TCP stream that notes whether any byte came back: a balancer that refuses closes before
/// relaying one; one that dialled an apiserver relays its TLS.
struct Heard {
    inner: TcpStream,
    heard: Arc<AtomicBool>,
}

impl AsyncRead for Heard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Ordering::SeqCst);
        }
        polled
    }
}

impl AsyncWrite for Heard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One kept-alive request; `false` if it failed (closed under it, an error, or too slow).
async fn request(send: &mut SendRequest<Empty<Bytes>>) -> bool {
    get_name(send).await.is_some()
}

/// `GET /name` on the connection: the apiserver's name.
async fn get_name(send: &mut SendRequest<Empty<Bytes>>) -> Option<String> {
    let exchange = async {
        send.ready().await.ok()?;
        let req = Request::get("/name")
            .header("host", "127.0.0.1")
            .body(Empty::<Bytes>::new())
            .ok()?;
        let resp = send.send_request(req).await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = resp.into_body().collect().await.ok()?.to_bytes();
        String::from_utf8(body.to_vec()).ok()
    };
    tokio::time::timeout(STEP_TIMEOUT, exchange).await.ok()?
}
