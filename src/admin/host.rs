//! Which `Host` the admin server answers: `localhost`, a loopback address, or the address the
//! client reached it at. A web page whose DNS name its owner rebinds to 127.0.0.1 (through an
//! operator's browser on an `ssh -L` tunnel, say) sends its own name, so it cannot read `/status`,
//! `/config`, `/metrics` or the page.
//!
//! Owns the decision, a pure function of the request's names and the server's addresses. Does
//! not own answering a refusal nor which paths are guarded (`admin`).

use std::net::IpAddr;

/// Why a request's `Host` is not one of this admin server's names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A DNS name other than `localhost`: what a rebound name looks like.
    #[error("Host {0:?} is not localhost, a loopback address or this server's address; a DNS name could be a web page rebound to this address")]
    Name(String),
    /// An IP address this server was not reached at.
    #[error("Host {0} is not localhost, a loopback address or this server's address")]
    Address(IpAddr),
    /// Not a host, or not text.
    #[error("Host {0:?} is not a host[:port]")]
    Unreadable(String),
    /// More than one `Host` header: which one a browser meant cannot be told.
    #[error("more than one Host header")]
    Several,
}

/// Whether a request with the `Host` headers `hosts` is for this server, reached at `server`
/// (the listener's address and the connection's local one; an unspecified one names nothing). No `Host` passes: a browser always sends one. The port is not
/// compared: a tunnel (`ssh -L 8080:…`) changes it.
pub fn judge(hosts: &[&[u8]], server: &[IpAddr]) -> Result<(), Refused> {
    if hosts.len() > 1 {
        return Err(Refused::Several);
    }
    hosts.iter().try_for_each(|h| judge_one(h, server))
}

fn judge_one(raw: &[u8], server: &[IpAddr]) -> Result<(), Refused> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| Refused::Unreadable(String::from_utf8_lossy(raw).into_owned()))?;
    let unreadable = || Refused::Unreadable(text.to_string());
    let host = if let Some(rest) = text.strip_prefix('[') {
        let (v6, port) = rest.split_once(']').ok_or_else(unreadable)?;
        if !(port.is_empty() || is_port(port.strip_prefix(':').ok_or_else(unreadable)?)) {
            return Err(unreadable());
        }
        v6.parse::<std::net::Ipv6Addr>()
            .map_err(|_| unreadable())?
            .to_string()
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if is_port(port) => host.to_string(),
            Some(_) => return Err(unreadable()),
            None => text.to_string(),
        }
    };
    let host = host.strip_suffix('.').unwrap_or(&host).to_ascii_lowercase();
    if host == "localhost" {
        return Ok(());
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => {
            let ip = ip.to_canonical();
            // An unspecified listener address names no host.
            let ours = server
                .iter()
                .any(|s| !s.is_unspecified() && s.to_canonical() == ip);
            if ip.is_loopback() || ours {
                Ok(())
            } else {
                Err(Refused::Address(ip))
            }
        }
        Err(_) if host.is_empty() || host.contains(['/', '@', ' ', '[', ']']) => Err(unreadable()),
        Err(_) => Err(Refused::Name(host)),
    }
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("literal")
    }

    #[test]
    fn loopback_names_and_addresses_and_the_servers_own_pass_on_any_port() {
        let server = [ip("127.0.0.1"), ip("10.0.0.5")];
        for host in [
            "127.0.0.1:7446",
            "127.0.0.1:8080",
            "127.0.0.1",
            "127.1.2.3:7446",
            "localhost:7446",
            "LOCALHOST",
            "localhost.:8080",
            "[::1]:7446",
            "[::1]",
            "[::ffff:127.0.0.1]:7446",
            "10.0.0.5:7446",
            "[::ffff:10.0.0.5]:7446",
        ] {
            assert_eq!(judge(&[host.as_bytes()], &server), Ok(()), "{host}");
        }
        assert_eq!(judge(&[], &server), Ok(()), "no Host");
    }

    #[test]
    fn another_name_or_address_is_refused_saying_which() {
        let server = [ip("127.0.0.1")];
        for (host, want) in [
            ("evil.example", Refused::Name("evil.example".into())),
            ("evil.example:7446", Refused::Name("evil.example".into())),
            (
                "localhost.evil.example",
                Refused::Name("localhost.evil.example".into()),
            ),
            ("10.0.0.6:7446", Refused::Address(ip("10.0.0.6"))),
            ("[fd00::1]:7446", Refused::Address(ip("fd00::1"))),
            ("[::1", Refused::Unreadable("[::1".into())),
            ("[::1]x", Refused::Unreadable("[::1]x".into())),
            (
                "localhost:http",
                Refused::Unreadable("localhost:http".into()),
            ),
            ("", Refused::Unreadable(String::new())),
            ("a@localhost", Refused::Unreadable("a@localhost".into())),
        ] {
            assert_eq!(judge(&[host.as_bytes()], &server), Err(want), "{host:?}");
        }
        assert_eq!(
            judge(&[b"\xff"], &server),
            Err(Refused::Unreadable("\u{fffd}".into()))
        );
        let two: [&[u8]; 2] = [b"localhost", b"evil.example"];
        assert_eq!(judge(&two, &server), Err(Refused::Several));
    }

    #[test]
    fn a_wildcard_listener_passes_the_address_the_connection_came_to() {
        // The listener's 0.0.0.0 names nothing; the connection's local address does.
        let server = [ip("0.0.0.0"), ip("192.0.2.2")];
        assert_eq!(judge(&[b"192.0.2.2:7446"], &server), Ok(()));
        assert_eq!(
            judge(&[b"0.0.0.0:7446"], &server),
            Err(Refused::Address(ip("0.0.0.0")))
        );
    }
}
