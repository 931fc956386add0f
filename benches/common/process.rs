//! The processes the benches that run the real binary start (readyprism, HAProxy, nginx,
//! KubePrism): started with their output in a log, stopped with SIGTERM then SIGKILL, and reached
//! on a free port over plain HTTP. Not what each is configured with (the benches' own files).

#![allow(dead_code)] // each bench uses what it needs

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `cmd` with no stdin and its stdout and stderr in `log`; panics naming `name` if it
/// cannot start.
pub fn spawn_logged(cmd: &mut Command, log: File, name: &str) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().expect("log fd"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"))
}

/// SIGTERM first (a profiler wrapping readyprism writes its output on exit), SIGKILL after 5 s;
/// then reaps it.
pub fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A port free right now (the balancers take their listen address from their config files).
pub fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr")
}

/// GET `path` on `addr` over plain HTTP/1.0; the status code.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}
