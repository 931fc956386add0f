//! Plain TCP backends on 127.0.0.1, for tests below TLS: one that says its name, one that holds
//! every connection silent, one that answers a canned reply. Each runs on a thread of its own for
//! the rest of the test run, so it serves sync and async tests alike. Not TLS (`apiservers.rs`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// A backend that serves every connection with `serve` on a thread of its own; its address.
fn backend(serve: impl FnMut(TcpStream) + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    std::thread::spawn(move || listener.incoming().map_while(Result::ok).for_each(serve));
    addr
}

/// A backend that writes `name` to every connection, then closes it.
pub fn says(name: &'static str) -> SocketAddr {
    backend(move |mut s| {
        let _ = s.write_all(name.as_bytes());
    })
}

/// A backend that accepts every connection and holds it open, silent.
pub fn holds() -> SocketAddr {
    let mut held = Vec::new();
    backend(move |s| held.push(s))
}

/// A backend that reads a request (one read) and answers `response` on every connection, then
/// closes it.
pub fn answers(response: Vec<u8>) -> SocketAddr {
    backend(move |mut s| {
        let _ = s.read(&mut [0u8; 4096]);
        let _ = s.write_all(&response);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(request).expect("write");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read");
        got
    }

    #[test]
    fn a_saying_backend_says_its_name_to_every_connection() {
        let addr = says("a");
        assert_eq!(read_all(addr, b""), b"a");
        assert_eq!(read_all(addr, b""), b"a");
    }

    #[test]
    fn an_answering_backend_answers_every_request() {
        let addr = answers(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec());
        for _ in 0..2 {
            assert_eq!(
                read_all(addr, b"GET / HTTP/1.1\r\n\r\n"),
                b"HTTP/1.1 204 No Content\r\n\r\n"
            );
        }
    }
}
