//! Moving bytes between the client and the backend, both directions, with half-close.
//!
//! Buffers are taken only while data is in flight and released as soon as a socket has nothing more
//! to read, so an idle connection holds no relay buffer (memory per idle connection matters when
//! every node keeps kubelet's and every DaemonSet's watch connections open).

use std::io;
use std::net::Shutdown;

use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpStream;

/// Size of the buffer used while data flows: 32 KiB moves a TCP window's worth per syscall pair
/// without making a busy connection cost more than two of them.
pub const BUF_SIZE: usize = 32 * 1024;

/// Relays until both directions have ended (EOF each way) or either fails.
pub async fn relay(
    client: &TcpStream,
    backend: &TcpStream,
    to_backend: &Counter,
    to_client: &Counter,
) -> io::Result<()> {
    tokio::try_join!(
        pump(client, backend, to_backend),
        pump(backend, client, to_client)
    )?;
    Ok(())
}

/// One direction: read from `from`, write to `to`; on EOF shut down `to`'s write side so the peer
/// sees the half-close while the other direction keeps flowing.
async fn pump(from: &TcpStream, to: &TcpStream, counter: &Counter) -> io::Result<()> {
    let mut buf: Option<Box<[u8]>> = None;
    loop {
        from.readable().await?;
        let b = buf.get_or_insert_with(|| vec![0u8; BUF_SIZE].into_boxed_slice());
        match from.try_read(b) {
            Ok(0) => {
                return match socket2::SockRef::from(to).shutdown(Shutdown::Write) {
                    // The peer may already be gone; the other direction reports that.
                    Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
                    _ => Ok(()),
                };
            }
            Ok(n) => {
                write_all(to, &b[..n]).await?;
                counter.inc_by(n as u64);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => buf = None, // idle: give it back
            Err(e) => return Err(e),
        }
    }
}

async fn write_all(to: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        to.writable().await?;
        match to.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
