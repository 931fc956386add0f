//! Whether a backend address is this balancer's own: a dial there would come back to one of its
//! client listeners (it would relay to itself) or to its admin server.
//!
//! Owns the rule, a pure function of the address, the balancer's sockets and this host's
//! addresses, and [`host_addresses`], the impure read its callers make each time they judge (the
//! listing itself is `zones::list_interface_addresses`). Does not own what is done with an own
//! address (a static one is a config error, a discovered or cached one is left out).

use std::net::{IpAddr, SocketAddr};

/// This balancer's own servers, as bound where known (a configured port 0 is the port it got; a
/// port still 0 is nobody's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sockets {
    /// The client listeners.
    pub listen: Vec<SocketAddr>,
    /// The admin listener.
    pub admin: Option<SocketAddr>,
}

/// Which of this balancer's servers a dial would reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// A client listener: the balancer would relay to itself, each hop a connection more.
    Listener,
    /// The admin server: a client would be relayed to `/status` and `/config`.
    Admin,
}

impl Own {
    /// `listen` or `admin`, as the config names them.
    pub fn field(self) -> &'static str {
        match self {
            Own::Listener => "listen",
            Own::Admin => "admin",
        }
    }
}

/// Which of `sockets` a dial to `addr` reaches, if any: `addr`'s port is one of theirs and its IP,
/// in any form (a v4-mapped IPv6 address is its IPv4 address: a v6 socket dialling it reaches the
/// IPv4 listener), is one this host answers on: loopback, unspecified, a listener's own IP, or one
/// of `host` (this host's interface addresses, read live by the caller). Any such IP counts for
/// every listener, whatever it is bound to: no other server on this host answers on the
/// balancer's ports, and a wildcard listener answers on all of them.
pub fn own(addr: SocketAddr, sockets: &Sockets, host: &[IpAddr]) -> Option<Own> {
    let ip = addr.ip().to_canonical();
    let listeners = sockets.listen.iter().map(|s| (s, Own::Listener));
    let all = || {
        listeners
            .clone()
            .chain(sockets.admin.iter().map(|s| (s, Own::Admin)))
    };
    let answers = ip.is_loopback()
        || ip.is_unspecified()
        || all().any(|(s, _)| s.ip().to_canonical() == ip)
        || host.iter().any(|h| h.to_canonical() == ip);
    if !answers || addr.port() == 0 {
        return None;
    }
    all().find(|(s, _)| s.port() == addr.port()).map(|(_, o)| o)
}

/// This host's interface addresses, read now (blocks: one `getifaddrs(3)`). A failure is said
/// with a WARN and yields none: loopback, unspecified and the listeners' own IPs still count.
pub fn host_addresses() -> Vec<IpAddr> {
    match super::zones::list_interface_addresses() {
        Ok(addrs) => addrs,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this node's interface addresses; a backend at one of them on a listen or admin port is not recognised as this balancer's own");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("literal")
    }

    fn sockets(listen: &[&str], admin: &str) -> Sockets {
        Sockets {
            listen: listen.iter().map(|s| sa(s)).collect(),
            admin: Some(sa(admin)),
        }
    }

    /// Every form a dial to this IPv4 address can take: itself and its v4-mapped IPv6 form.
    fn forms(ip: Ipv4Addr) -> [IpAddr; 2] {
        [IpAddr::V4(ip), IpAddr::V6(ip.to_ipv6_mapped())]
    }

    #[test]
    fn the_forms_the_issue_found_are_own() {
        let node: IpAddr = "10.0.0.5".parse().expect("literal");
        let loopback = sockets(&["127.0.0.1:7445"], "127.0.0.1:7446");
        let wildcard = sockets(&["0.0.0.0:7445", "[::]:7447"], "0.0.0.0:7446");
        for (addr, s, host, want) in [
            (
                "[::ffff:127.0.0.1]:7445",
                &loopback,
                &[][..],
                Some(Own::Listener),
            ),
            ("[::ffff:0.0.0.0]:7445", &loopback, &[], Some(Own::Listener)),
            ("10.0.0.5:7445", &wildcard, &[node][..], Some(Own::Listener)),
            ("10.0.0.5:7447", &wildcard, &[node], Some(Own::Listener)),
            (
                "[::ffff:10.0.0.5]:7445",
                &wildcard,
                &[node],
                Some(Own::Listener),
            ),
            ("127.0.0.1:7446", &loopback, &[], Some(Own::Admin)),
            ("0.0.0.0:7446", &wildcard, &[], Some(Own::Admin)),
            ("[::ffff:127.0.0.1]:7446", &loopback, &[], Some(Own::Admin)),
            ("10.0.0.5:7446", &wildcard, &[node], Some(Own::Admin)),
            // Not this host, or not its ports.
            ("10.0.0.6:7445", &wildcard, &[node], None),
            ("10.0.0.5:6443", &wildcard, &[node], None),
            ("[::ffff:10.0.0.6]:7445", &wildcard, &[node], None),
        ] {
            assert_eq!(own(sa(addr), s, host), want, "{addr} with {s:?}");
        }
    }

    #[test]
    fn a_listeners_own_ip_is_own_without_the_host_addresses() {
        let s = sockets(&["10.0.0.5:7445"], "127.0.0.1:7446");
        assert_eq!(own(sa("10.0.0.5:7445"), &s, &[]), Some(Own::Listener));
        assert_eq!(own(sa("10.0.0.5:7446"), &s, &[]), Some(Own::Admin));
    }

    #[test]
    fn a_port_still_0_is_nobodys() {
        let s = sockets(&["127.0.0.1:0"], "127.0.0.1:0");
        assert_eq!(own(sa("127.0.0.1:0"), &s, &[]), None);
        assert_eq!(own(sa("127.0.0.1:6443"), &s, &[]), None);
    }

    fn port() -> impl Strategy<Value = u16> {
        1u16..
    }

    proptest! {
        #[test]
        fn every_form_of_a_host_address_on_an_own_port_is_own(
            host in proptest::collection::vec(any::<[u8; 4]>(), 1..4),
            pick in any::<prop::sample::Index>(),
            listen in port(),
            admin in port(),
            on_admin in any::<bool>(),
        ) {
            prop_assume!(listen != admin);
            let host: Vec<IpAddr> = host.into_iter().map(IpAddr::from).collect();
            let s = sockets(&[&format!("0.0.0.0:{listen}")], &format!("0.0.0.0:{admin}"));
            let IpAddr::V4(v4) = *pick.get(&host) else { unreachable!("built from [u8; 4]") };
            let (port, want) = if on_admin { (admin, Own::Admin) } else { (listen, Own::Listener) };
            for ip in forms(v4) {
                prop_assert_eq!(own(SocketAddr::new(ip, port), &s, &host), Some(want), "{}", ip);
            }
        }

        #[test]
        fn every_loopback_or_unspecified_form_on_an_own_port_is_own(
            last in any::<[u8; 3]>(), unspecified in any::<bool>(), listen in port(),
        ) {
            let v4 = if unspecified { Ipv4Addr::UNSPECIFIED } else { Ipv4Addr::new(127, last[0], last[1], last[2]) };
            let s = sockets(&[&format!("10.9.9.9:{listen}")], "127.0.0.1:0");
            let v6 = if unspecified { Ipv6Addr::UNSPECIFIED } else { Ipv6Addr::LOCALHOST };
            for ip in forms(v4).into_iter().chain([IpAddr::V6(v6)]) {
                prop_assert_eq!(own(SocketAddr::new(ip, listen), &s, &[]), Some(Own::Listener), "{}", ip);
            }
        }

        #[test]
        fn a_v4_address_and_its_mapped_form_are_judged_alike(
            ip in any::<[u8; 4]>(), port in port(), host in proptest::collection::vec(any::<[u8; 4]>(), 0..3),
        ) {
            let host: Vec<IpAddr> = host.into_iter().map(IpAddr::from).collect();
            let s = sockets(&["0.0.0.0:7445", "[::1]:7447"], "127.0.0.1:7446");
            let [v4, mapped] = forms(Ipv4Addr::from(ip));
            prop_assert_eq!(own(SocketAddr::new(v4, port), &s, &host), own(SocketAddr::new(mapped, port), &s, &host));
        }

        #[test]
        fn nothing_off_the_own_ports_or_off_this_host_is_own(
            ip in any::<[u8; 16]>(), port in port(), host in proptest::collection::vec(any::<[u8; 16]>(), 0..3),
        ) {
            let ip = IpAddr::from(ip);
            let host: Vec<IpAddr> = host.into_iter().map(IpAddr::from).collect();
            let s = sockets(&["0.0.0.0:7445"], "127.0.0.1:7446");
            let c = ip.to_canonical();
            let answers = c.is_loopback() || c.is_unspecified() || host.iter().any(|h| h.to_canonical() == c);
            let on_port = [7445, 7446].contains(&port);
            prop_assert_eq!(own(SocketAddr::new(ip, port), &s, &host).is_some(), answers && on_port);
        }
    }
}
