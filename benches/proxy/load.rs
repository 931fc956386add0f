//! The client side of every scenario. Latency-bound ones use blocking sockets on the bench's own
//! thread (no runtime between the clock and the syscall); the many-connection ones use a
//! single-threaded tokio runtime. Each connection speaks the backend's protocol (`backend.rs`)
//! and lets the backend close first.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Nanoseconds of `d`, saturating.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn open_echo(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"E")?;
    Ok(s)
}

/// Ends an echo connection: `Q`, then read to the backend's EOF.
fn quit(mut s: TcpStream) -> std::io::Result<()> {
    s.write_all(b"Q")?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)?;
    Ok(())
}

/// An open echo connection for round trips of one size.
pub struct EchoConn {
    s: TcpStream,
    out: Vec<u8>,
    inp: Vec<u8>,
}

impl EchoConn {
    /// Connects and does `warm` untimed round trips of `size` bytes.
    pub fn open(addr: SocketAddr, size: usize, warm: usize) -> EchoConn {
        let s = open_echo(addr).expect("connect for round trips");
        let mut c = EchoConn {
            s,
            out: vec![b'x'; size],
            inp: vec![0u8; size],
        };
        c.round_trips(warm);
        c
    }

    /// `n` timed round trips (ns each).
    pub fn round_trips(&mut self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let t = Instant::now();
                self.s.write_all(&self.out).expect("write");
                self.s.read_exact(&mut self.inp).expect("read echo");
                ns(t.elapsed())
            })
            .collect()
    }

    /// Closes it the backend-first way.
    pub fn close(self) {
        quit(self.s).expect("close");
    }
}

/// `n` times: connect, send one byte, receive it; the time to that first byte back.
pub fn connect_first_byte(addr: SocketAddr, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            let mut s = open_echo(addr).expect("connect");
            s.write_all(b"x").expect("write");
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("first byte");
            let d = ns(t.elapsed());
            quit(s).expect("close");
            d
        })
        .collect()
}

/// Downloads `bytes` through `addr`; the wall time from the request to the backend's EOF.
pub fn download(addr: SocketAddr, bytes: u64) -> Duration {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut hdr = vec![b'D'];
    hdr.extend_from_slice(&bytes.to_le_bytes());
    let mut buf = vec![0u8; 256 * 1024];
    let t = Instant::now();
    s.write_all(&hdr).expect("request");
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    let d = t.elapsed();
    assert_eq!(got, bytes, "short download");
    d
}

/// Uploads `bytes` through `addr`; the wall time until the backend's ack.
pub fn upload(addr: SocketAddr, bytes: u64) -> Duration {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut hdr = vec![b'U'];
    hdr.extend_from_slice(&bytes.to_le_bytes());
    let buf = vec![b'u'; 256 * 1024];
    let t = Instant::now();
    s.write_all(&hdr).expect("request");
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        s.write_all(&buf[..n]).expect("upload");
        left -= n as u64;
    }
    let mut ack = [0u8; 8];
    s.read_exact(&mut ack).expect("ack");
    let d = t.elapsed();
    assert_eq!(u64::from_le_bytes(ack), bytes, "short upload");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    d
}

/// `conns` connections opened first (64 at a time), then all doing `rts` round trips of 64 B at once; the time
/// from the start signal to the last answer, every round trip's latency, and the connections
/// that failed (with the first error).
pub async fn concurrent(
    addr: SocketAddr,
    conns: usize,
    rts: usize,
) -> (Duration, Vec<u64>, usize, Option<String>) {
    let start = Arc::new(tokio::sync::Barrier::new(conns + 1));
    // Opened 64 at a time: the scenario is many open connections working at once, not a SYN
    // storm (which overflows listen queues and measures the kernel's SYN-cookie path).
    let gate = Arc::new(tokio::sync::Semaphore::new(64));
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (start, gate) = (start.clone(), gate.clone());
            tokio::spawn(async move {
                let permit = gate.acquire_owned().await.expect("semaphore");
                let s = async_echo(addr).await;
                drop(permit);
                start.wait().await;
                let mut s = s.map_err(|e| format!("connect: {e}"))?;
                let mut samples = Vec::with_capacity(rts);
                let mut b = [0u8; 64];
                for i in 0..rts {
                    let t = Instant::now();
                    s.write_all(&[b'x'; 64])
                        .await
                        .map_err(|e| format!("write {i}: {e}"))?;
                    s.read_exact(&mut b)
                        .await
                        .map_err(|e| format!("read {i}: {e}"))?;
                    samples.push(ns(t.elapsed()));
                }
                async_quit(s).await;
                Ok::<_, String>(samples)
            })
        })
        .collect();
    start.wait().await;
    let t = Instant::now();
    let mut all = Vec::with_capacity(conns * rts);
    let (mut failed, mut first) = (0, None);
    for task in tasks {
        match task.await.expect("client task") {
            Ok(s) => all.extend(s),
            Err(e) => {
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    (t.elapsed(), all, failed, first)
}

async fn async_echo(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    s.write_all(b"E").await?;
    Ok(s)
}

async fn async_quit(mut s: tokio::net::TcpStream) {
    if s.write_all(b"Q").await.is_ok() {
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
    }
}

/// Opens `n` connections, `par` at a time, each with one echoed byte (so the relay has moved data
/// and had its buffers), and returns them open.
pub async fn open_idle(addr: SocketAddr, n: usize, par: usize) -> Vec<tokio::net::TcpStream> {
    let gate = Arc::new(tokio::sync::Semaphore::new(par));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _permit = gate.acquire().await.expect("semaphore");
                let mut s = async_echo(addr).await.expect("connect idle");
                s.write_all(b"x").await.expect("write");
                let mut b = [0u8; 1];
                s.read_exact(&mut b).await.expect("read");
                s
            })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.expect("idle opener"));
    }
    out
}

/// Closes connections from [`open_idle`], all at once.
pub async fn close_idle(conns: Vec<tokio::net::TcpStream>) {
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|s| tokio::spawn(async_quit(s)))
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// `n` short connections, `par` at a time: connect, one byte each way, closed. The wall time and
/// the number that failed.
pub async fn churn(addr: SocketAddr, n: usize, par: usize) -> (Duration, usize) {
    let gate = Arc::new(tokio::sync::Semaphore::new(par));
    let t = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let gate = gate.clone();
            tokio::spawn(async move {
                let _permit = gate.acquire().await.expect("semaphore");
                let mut s = async_echo(addr).await?;
                s.write_all(b"x").await?;
                let mut b = [0u8; 1];
                s.read_exact(&mut b).await?;
                async_quit(s).await;
                std::io::Result::Ok(())
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        if !matches!(task.await, Ok(Ok(()))) {
            failed += 1;
        }
    }
    (t.elapsed(), failed)
}
