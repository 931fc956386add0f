//! The lab's four hosts (node, dc-a, dc-b, witness: names, sites, addresses) and the round trips
//! between their sites. Plain values: it does not build namespaces or add delays (`topology.rs`).

use std::net::Ipv4Addr;
use std::time::Duration;

/// One of the lab's four hosts, each in its own network namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// The worker node running the balancer; it sits in dc-b.
    Node,
    DcA,
    DcB,
    Witness,
}

impl Host {
    pub const ALL: [Host; 4] = [Host::Node, Host::DcA, Host::DcB, Host::Witness];
    pub const SITES: [Host; 3] = [Host::DcA, Host::DcB, Host::Witness];

    /// `node`, `dc-a`, `dc-b`, `witness` (also the zone names and the etcd member names).
    pub fn name(self) -> &'static str {
        match self {
            Host::Node => "node",
            Host::DcA => "dc-a",
            Host::DcB => "dc-b",
            Host::Witness => "witness",
        }
    }

    /// The site a host is in: the node is in dc-b.
    pub fn site(self) -> Host {
        match self {
            Host::Node => Host::DcB,
            other => other,
        }
    }

    /// The host's address; it exists only inside the lab's namespaces (the same in every lab).
    pub fn ip(self) -> Ipv4Addr {
        match self {
            Host::Node => Ipv4Addr::new(10, 77, 2, 10),
            Host::DcA => Ipv4Addr::new(10, 77, 1, 1),
            Host::DcB => Ipv4Addr::new(10, 77, 2, 1),
            Host::Witness => Ipv4Addr::new(10, 77, 3, 1),
        }
    }
}

/// Round-trip times between the sites; hosts in the same site get no added delay.
#[derive(Clone, Copy, Debug)]
pub struct Rtts {
    pub dca_dcb: Duration,
    pub dca_witness: Duration,
    pub dcb_witness: Duration,
}

impl Rtts {
    /// The field report: dc-b↔witness 23 ms, dc-a↔witness 43 ms, dc-a↔dc-b 43 ms.
    pub const FIELD: Rtts = Rtts {
        dca_dcb: Duration::from_millis(43),
        dca_witness: Duration::from_millis(43),
        dcb_witness: Duration::from_millis(23),
    };

    /// The added round trip between two hosts (zero within a site).
    pub fn between(&self, a: Host, b: Host) -> Duration {
        let mut pair = [a.site(), b.site()];
        pair.sort();
        match pair {
            [Host::DcA, Host::DcB] => self.dca_dcb,
            [Host::DcA, Host::Witness] => self.dca_witness,
            [Host::DcB, Host::Witness] => self.dcb_witness,
            _ => Duration::ZERO,
        }
    }
}
