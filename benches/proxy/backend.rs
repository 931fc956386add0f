//! The in-process backend every proxy points at: one listener per target, each connection sorted by
//! its first byte. A TLS ClientHello (0x16) gets the health probe's HTTPS `/readyz` (200, counted);
//! `E` an echo, `D` a bulk download, `U` a bulk upload.
//!
//! Every data connection is closed by this side first (`Q` ends an echo, a download ends after its
//! last byte, an upload after its ack), so TIME_WAIT lands on the listening side and the bench
//! leaves no ephemeral ports of this machine in TIME_WAIT, where they would starve other programs'
//! dials. Runs on its own thread with a single-threaded runtime: at most one core, like the proxies.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use readyprism::sim::pki::Ca;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::TlsAcceptor;

/// What the probe side of one listener saw.
#[derive(Debug, Default)]
pub struct ProbeCounts {
    /// Completed TLS handshakes.
    pub handshakes: AtomicU64,
    /// HTTP requests answered (the probes).
    pub requests: AtomicU64,
}

/// A running backend: one listener per name given to [`Backend::start`].
pub struct Backend {
    /// Listener addresses, in the order of the names.
    pub addrs: Vec<SocketAddr>,
    /// Probe counters, per listener.
    pub probes: Vec<Arc<ProbeCounts>>,
    _thread: std::thread::JoinHandle<()>,
}

impl Backend {
    /// Starts `listeners` listeners on 127.0.0.1, serving TLS with a certificate from `ca`.
    pub fn start(ca: &Ca, listeners: usize) -> Backend {
        let server = ca
            .server(&["127.0.0.1", "localhost"])
            .expect("server certificate");
        let tls = readyprism::sim::tls::server_tls(ca, &server).expect("server TLS config");
        let tls = TlsAcceptor::from(tls);
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("backend".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("backend runtime");
                rt.block_on(async move {
                    let mut out = Vec::new();
                    for _ in 0..listeners {
                        let l = listen().expect("backend listener");
                        let counts = Arc::new(ProbeCounts::default());
                        out.push((l.local_addr().expect("addr"), counts.clone()));
                        tokio::spawn(serve(l, tls.clone(), counts));
                    }
                    tx.send(out).expect("report addresses");
                    std::future::pending::<()>().await
                })
            })
            .expect("backend thread");
        let (addrs, probes) = rx.recv().expect("backend started").into_iter().unzip();
        Backend {
            addrs,
            probes,
            _thread: thread,
        }
    }
}

/// A loopback listener with the same 1024 backlog the proxies get.
fn listen() -> std::io::Result<TcpListener> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    s.listen(1024)
}

async fn serve(l: TcpListener, tls: TlsAcceptor, counts: Arc<ProbeCounts>) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            // Out of descriptors: wait for some to close rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(connection(s, tls.clone(), counts.clone()));
    }
}

async fn connection(s: TcpStream, tls: TlsAcceptor, counts: Arc<ProbeCounts>) {
    let _ = s.set_nodelay(true);
    let mut first = [0u8; 1];
    if !matches!(s.peek(&mut first).await, Ok(1)) {
        return;
    }
    let _ = match first[0] {
        0x16 => probe(s, tls, counts).await,
        b'E' => echo(s).await,
        b'D' => download(s).await,
        b'U' => upload(s).await,
        _ => Ok(()),
    };
}

/// HTTPS: 200 `ok` to every request, keep-alive as a real apiserver.
async fn probe(s: TcpStream, tls: TlsAcceptor, counts: Arc<ProbeCounts>) -> std::io::Result<()> {
    let tls = tls.accept(s).await?;
    counts.handshakes.fetch_add(1, Ordering::Relaxed);
    let svc = service_fn(move |_req| {
        counts.requests.fetch_add(1, Ordering::Relaxed);
        async {
            Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"ok"),
            )))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), svc)
        .await;
    Ok(())
}

/// `E`, then every byte echoed until a `Q`, which closes the connection from this side.
async fn echo(mut s: TcpStream) -> std::io::Result<()> {
    let mut hdr = [0u8; 1];
    s.read_exact(&mut hdr).await?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        match buf[..n].iter().position(|&b| b == b'Q') {
            Some(q) => {
                s.write_all(&buf[..q]).await?;
                return s.shutdown().await;
            }
            None => s.write_all(&buf[..n]).await?,
        }
    }
}

/// `D` and a little-endian u64 length: that many bytes, then close.
async fn download(mut s: TcpStream) -> std::io::Result<()> {
    let mut hdr = [0u8; 9];
    s.read_exact(&mut hdr).await?;
    let mut left = u64::from_le_bytes(hdr[1..].try_into().expect("8 bytes"));
    let chunk = vec![b'd'; 256 * 1024];
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n]).await?;
        left -= n as u64;
    }
    s.shutdown().await
}

/// `U` and a little-endian u64 length: reads that many bytes, answers the count (8 bytes), closes.
async fn upload(mut s: TcpStream) -> std::io::Result<()> {
    let mut hdr = [0u8; 9];
    s.read_exact(&mut hdr).await?;
    let want = u64::from_le_bytes(hdr[1..].try_into().expect("8 bytes"));
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    while got < want {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    s.write_all(&got.to_le_bytes()).await?;
    s.shutdown().await
}
