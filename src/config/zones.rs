//! The `zones:` map (which networks are which zone) and the matching of addresses against it: the
//! node's zone from its own interface addresses, a backend's zone from its IP.
//!
//! The matching is pure ([`ZoneMap::zone_of`], [`ZoneMap::node_zone`], [`ZoneMap::place`]); the one
//! impure step, listing this node's addresses, is [`interface_addresses`]. Does not own the YAML
//! shape (`raw`), the precedence of `--zone` / `READYPRISM_ZONE` / `zone:` over the map (`Source`
//! in `config`), nor when the addresses are read again while running (`app`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::backend::{NodeZone, ZoneSource};

/// The zones and their networks, validated: no network is in two zones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZoneMap {
    /// Zone name → its networks, in the order written.
    zones: BTreeMap<String, Vec<IpNet>>,
}

/// A network listed under two zones: any address in it would be in both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedNetwork {
    /// The network.
    pub net: IpNet,
    /// The zone that lists it first (in name order).
    pub first: String,
    /// The zone that lists it again, and its index there.
    pub second: (String, usize),
}

/// Two zones hold this node's addresses and neither network is more specific: the same, longest,
/// prefix length in one address family, or the best matches of the two families disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this node's address {first_ip} is in zone {first_zone} ({first_net}) and {second_ip} in zone {second_zone} ({second_net}), neither network more specific: set zone: or --zone, or make one network more specific")]
pub struct Ambiguous {
    /// Address, zone and network of one match.
    pub first_ip: IpAddr,
    /// Zone of `first_ip`.
    pub first_zone: String,
    /// Network of `first_ip`.
    pub first_net: IpNet,
    /// Address, zone and network of the other (same prefix length).
    pub second_ip: IpAddr,
    /// Zone of `second_ip`.
    pub second_zone: String,
    /// Network of `second_ip`.
    pub second_net: IpNet,
}

/// The zone an address matched, with the network that matched it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneMatch<'a> {
    /// The zone's name.
    pub zone: &'a str,
    /// The most specific network of that zone holding the address.
    pub net: IpNet,
}

impl ZoneMap {
    /// Builds the map; a network listed under two zones is an error (it would make every address
    /// in it ambiguous). Networks of the same prefix length either are equal or do not overlap, so
    /// after this check one address has at most one zone at each prefix length.
    pub fn new(zones: BTreeMap<String, Vec<IpNet>>) -> Result<ZoneMap, SharedNetwork> {
        let mut owner = BTreeMap::<IpNet, &str>::new();
        for (zone, nets) in &zones {
            for (i, net) in nets.iter().enumerate() {
                match owner.get(net) {
                    Some(first) if *first != zone.as_str() => {
                        return Err(SharedNetwork {
                            net: *net,
                            first: first.to_string(),
                            second: (zone.clone(), i),
                        })
                    }
                    _ => {
                        owner.insert(*net, zone);
                    }
                }
            }
        }
        Ok(ZoneMap { zones })
    }

    /// No zones configured.
    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
    }

    /// Zone name → networks, in name order (what `check` prints).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[IpNet])> {
        self.zones.iter().map(|(z, n)| (z.as_str(), n.as_slice()))
    }

    /// The zone whose networks hold `ip`, the longest prefix winning; `None` when none does.
    pub fn zone_of(&self, ip: IpAddr) -> Option<ZoneMatch<'_>> {
        self.zones
            .iter()
            .flat_map(|(zone, nets)| nets.iter().map(move |n| (zone, n)))
            .filter(|(_, net)| net.contains(&ip))
            .max_by_key(|(_, net)| net.prefix_len())
            .map(|(zone, net)| ZoneMatch { zone, net: *net })
    }

    /// This node's zone from its interface addresses: loopback addresses never count; within
    /// each address family the match with the longest prefix wins (prefix lengths of IPv4 and
    /// IPv6 networks are never compared). `Ok(None)` when no address matches; an error when two
    /// zones match at the same longest length in one family, or the families' matches disagree.
    pub fn node_zone(
        &self,
        addrs: &[IpAddr],
    ) -> Result<Option<(ZoneMatch<'_>, IpAddr)>, Ambiguous> {
        let v4 = self.most_specific(addrs.iter().filter(|ip| ip.is_ipv4()))?;
        let v6 = self.most_specific(addrs.iter().filter(|ip| ip.is_ipv6()))?;
        match (v4, v6) {
            (Some(a), Some(b)) if a.0.zone != b.0.zone => Err(Ambiguous::of(a, b)),
            (a, b) => Ok(a.or(b)),
        }
    }

    /// The longest-prefix match among `addrs` (one family), or the tie at that length.
    fn most_specific<'i>(
        &self,
        addrs: impl Iterator<Item = &'i IpAddr>,
    ) -> Result<Option<(ZoneMatch<'_>, IpAddr)>, Ambiguous> {
        let mut best: Option<(ZoneMatch<'_>, IpAddr)> = None;
        let mut tie: Option<(ZoneMatch<'_>, IpAddr)> = None;
        for &ip in addrs.filter(|ip| !ip.is_loopback()) {
            let Some(m) = self.zone_of(ip) else { continue };
            let len = m.net.prefix_len();
            match &best {
                Some((b, _)) if b.net.prefix_len() > len => {}
                Some((b, _)) if b.net.prefix_len() == len => {
                    if b.zone != m.zone && tie.is_none() {
                        tie = Some((m, ip));
                    }
                }
                _ => {
                    best = Some((m, ip));
                    tie = None;
                }
            }
        }
        match (best, tie) {
            (Some(a), Some(b)) => Err(Ambiguous::of(a, b)),
            (best, _) => Ok(best),
        }
    }
}

/// Where this node's interface addresses place it in the map: what its zone is derived from, at
/// start-up, on a reload and whenever the addresses change while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In `zone`: the node's address `ip` is in its network `net`, the most specific match.
    In {
        /// The zone's name.
        zone: String,
        /// The node's address that matched.
        ip: IpAddr,
        /// The network that holds it.
        net: IpNet,
    },
    /// No address of the node (loopback aside) is in a network of the map: the zone is unknown.
    Nowhere,
    /// Two zones, neither network more specific: the zone is unknown, with a WARN saying why.
    Tie(Ambiguous),
}

impl Placement {
    /// The node's zone it gives, its source the address that matched; `None`: unknown.
    pub fn zone(&self) -> Option<NodeZone> {
        match self {
            Placement::In { zone, ip, .. } => Some(NodeZone {
                name: zone.clone(),
                source: ZoneSource::Address(*ip),
            }),
            Placement::Nowhere | Placement::Tie(_) => None,
        }
    }

    /// The tie in words, when it is one (what the config keeps as `zone_ambiguous`).
    pub fn tie(&self) -> Option<String> {
        match self {
            Placement::Tie(tie) => Some(tie.to_string()),
            Placement::In { .. } | Placement::Nowhere => None,
        }
    }

    /// Why the node is where it is, for the log line of a change.
    pub fn why(&self) -> String {
        match self {
            Placement::In { zone, ip, net } => format!("address {ip} is in {net} of zone {zone}"),
            Placement::Nowhere => "no address of this node is in a network of zones:".to_string(),
            Placement::Tie(tie) => tie.to_string(),
        }
    }
}

impl ZoneMap {
    /// [`ZoneMap::node_zone`] as a [`Placement`], of the addresses as a set: the same addresses
    /// in another order place the node alike, a tie in the same words.
    pub fn place(&self, addrs: &[IpAddr]) -> Placement {
        let mut addrs = addrs.to_vec();
        addrs.sort_unstable();
        match self.node_zone(&addrs) {
            Ok(Some((m, ip))) => Placement::In {
                zone: m.zone.to_string(),
                ip,
                net: m.net,
            },
            Ok(None) => Placement::Nowhere,
            Err(tie) => Placement::Tie(tie),
        }
    }
}

impl Ambiguous {
    fn of((a, a_ip): (ZoneMatch<'_>, IpAddr), (b, b_ip): (ZoneMatch<'_>, IpAddr)) -> Ambiguous {
        Ambiguous {
            first_ip: a_ip,
            first_zone: a.zone.to_string(),
            first_net: a.net,
            second_ip: b_ip,
            second_zone: b.zone.to_string(),
            second_net: b.net,
        }
    }
}

/// This node's interface addresses (every interface, loopback included: [`ZoneMap::node_zone`]
/// leaves it out), sorted, each once: one `getifaddrs(3)` (a netlink dump of the links and the
/// addresses, so its cost grows with the node's interfaces, pod veths included). Blocks.
pub fn list_interface_addresses() -> std::io::Result<Vec<IpAddr>> {
    let mut addrs: Vec<IpAddr> = if_addrs::get_if_addrs()?.iter().map(|i| i.ip()).collect();
    addrs.sort_unstable();
    addrs.dedup();
    Ok(addrs)
}

/// [`list_interface_addresses`] at start-up and on a reload. A failure to list them is logged and
/// yields none, so the zone is unknown: the balancer never refuses to serve over its zone.
pub fn interface_addresses() -> Vec<IpAddr> {
    match list_interface_addresses() {
        Ok(addrs) => addrs,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this node's interface addresses; zone unknown");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(zones: &[(&str, &[&str])]) -> ZoneMap {
        ZoneMap::new(
            zones
                .iter()
                .map(|(z, nets)| {
                    let nets = nets.iter().map(|n| n.parse().expect("cidr")).collect();
                    (z.to_string(), nets)
                })
                .collect(),
        )
        .expect("valid map")
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().expect("ip")).collect()
    }

    #[test]
    fn the_node_zone_is_the_longest_prefix_match_of_a_non_loopback_address() {
        let zones = map(&[
            ("dc-a", &["10.0.1.0/24", "127.0.0.0/8", "::1/128"]),
            ("dc-b", &["10.0.2.0/24", "fd00:2::/64"]),
            ("wide", &["10.0.0.0/16"]),
            ("host", &["10.0.2.7/32"]),
        ]);
        /// This node's addresses, and the zone with the address that matched it.
        type Case<'a> = (&'a [&'a str], Option<(&'a str, &'a str)>);
        let cases: &[Case] = &[
            (&["10.0.1.5"], Some(("dc-a", "10.0.1.5"))),
            (&["192.168.1.1", "10.0.1.5"], Some(("dc-a", "10.0.1.5"))),
            // Longest prefix: the /24 beats the /16 holding it, whatever the order.
            (&["10.0.9.9", "10.0.1.5"], Some(("dc-a", "10.0.1.5"))),
            (&["10.0.1.5", "10.0.9.9"], Some(("dc-a", "10.0.1.5"))),
            (&["10.0.9.9"], Some(("wide", "10.0.9.9"))),
            (&["10.0.2.7"], Some(("host", "10.0.2.7"))),
            (&["10.0.1.5", "10.0.2.7"], Some(("host", "10.0.2.7"))),
            // IPv6.
            (&["fe80::1", "fd00:2::5"], Some(("dc-b", "fd00:2::5"))),
            // Loopback never counts, even when a zone lists it.
            (&["127.0.0.1", "::1"], None),
            (&["127.0.0.1", "10.0.2.9"], Some(("dc-b", "10.0.2.9"))),
            // No match.
            (&["192.168.1.1", "fd00:9::1"], None),
            (&[], None),
        ];
        for (addrs, want) in cases {
            let got = zones.node_zone(&ips(addrs)).expect("not ambiguous");
            let got = got.map(|(m, ip)| (m.zone.to_string(), ip.to_string()));
            let want = want.map(|(z, ip)| (z.to_string(), ip.to_string()));
            assert_eq!(got, want, "{addrs:?}");
        }
    }

    #[test]
    fn two_zones_at_the_same_longest_prefix_are_an_ambiguity_naming_both() {
        let zones = map(&[
            ("dc-a", &["10.0.1.0/24"]),
            ("dc-b", &["10.0.2.0/24", "fd00::/24"]),
            ("wide", &["10.0.0.0/16"]),
        ]);
        let err = zones
            .node_zone(&ips(&["10.0.1.5", "10.0.2.5"]))
            .expect_err("ambiguous");
        let text = err.to_string();
        for part in ["10.0.1.5", "dc-a", "10.0.2.5", "dc-b", "/24"] {
            assert!(text.contains(part), "{part} in {text}");
        }
        // The families are compared by zone, never by prefix length: an IPv6 /24 is not more
        // specific than an IPv4 /16, so their disagreeing is a tie, and their agreeing is not.
        assert!(zones.node_zone(&ips(&["10.0.1.5", "fd00::1"])).is_err());
        assert!(
            zones.node_zone(&ips(&["10.0.9.5", "fd00::1"])).is_err(),
            "wide /16 v dc-b /24"
        );
        let agree = zones
            .node_zone(&ips(&["10.0.2.5", "fd00::1"]))
            .expect("one zone in both families");
        assert_eq!(agree.map(|(m, _)| m.zone), Some("dc-b"));
        // Two addresses in one zone, or a tie below the longest match, are not ambiguous.
        let one = zones
            .node_zone(&ips(&["10.0.1.5", "10.0.1.6"]))
            .expect("one zone");
        assert_eq!(one.map(|(m, _)| m.zone), Some("dc-a"));
    }

    #[test]
    fn a_network_in_two_zones_is_rejected_naming_both() {
        let nets = |n: &[&str]| n.iter().map(|n| n.parse().expect("cidr")).collect();
        let err = ZoneMap::new(BTreeMap::from([
            ("dc-a".to_string(), nets(&["10.0.1.0/24"])),
            ("dc-b".to_string(), nets(&["10.0.2.0/24", "10.0.1.0/24"])),
        ]))
        .expect_err("shared");
        assert_eq!(err.first, "dc-a");
        assert_eq!(err.second, ("dc-b".to_string(), 1));
        // Overlapping at different lengths is fine: the longer prefix wins.
        let ok = ZoneMap::new(BTreeMap::from([
            ("dc-a".to_string(), nets(&["10.0.0.0/16"])),
            ("dc-b".to_string(), nets(&["10.0.2.0/24"])),
        ]))
        .expect("nested networks");
        let ip = "10.0.2.1".parse().expect("ip");
        assert_eq!(ok.zone_of(ip).map(|m| m.zone), Some("dc-b"));
    }
}
