//! What an answer to `GET /api/v1/namespaces/default/endpoints/kubernetes` says: the apiserver
//! addresses it lists, or why it is not a usable answer.
//!
//! Pure: status and bytes in, addresses out. Does not own fetching the answer (`discovery`) nor
//! what a good answer does to the backend list (`membership`).

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

use crate::https::BodyEnd;

/// The largest answer used: 1 MiB. The object lists one address per control-plane node (a few
/// hundred bytes for five); anything near this is not the object we asked for.
pub const MAX_ANSWER: usize = 1 << 20;

/// The most addresses an answer may list: 64. A control plane has 3 to 7 apiservers; an object
/// listing more is not one, and each backend costs a monitor with its probes.
pub const MAX_ADDRESSES: usize = 64;

/// Why an answer changes nothing. Each has its `readyprism_discovery_polls_total` result label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAnswer {
    /// The HTTP status was not 200.
    #[error("HTTP {0}")]
    Status(u16),
    /// Longer than [`MAX_ANSWER`].
    #[error("the answer is larger than 1 MiB")]
    TooLarge,
    /// The body broke off before its end (after `.0` bytes): the connection closed or failed.
    #[error("the answer was cut off after {0} bytes: {1}")]
    Cut(usize, String),
    /// More than [`MAX_ADDRESSES`] addresses (counted as `too_large`).
    #[error("the Endpoints object lists {0} addresses, more than {MAX_ADDRESSES}")]
    TooMany(usize),
    /// The body is not JSON.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// JSON, but not a `v1` `Endpoints` object.
    #[error("not an Endpoints object: {0}")]
    NotEndpoints(String),
    /// An Endpoints object without a single usable address × port.
    #[error("the Endpoints object lists no address with a usable port")]
    NoAddresses,
}

impl BadAnswer {
    /// The `result` label it is counted under.
    pub fn label(&self) -> &'static str {
        match self {
            BadAnswer::Status(_) => "bad_status",
            BadAnswer::TooLarge | BadAnswer::TooMany(_) => "too_large",
            BadAnswer::Cut(..) => "cut_off",
            BadAnswer::NotJson(_) => "not_json",
            BadAnswer::NotEndpoints(_) => "not_endpoints",
            BadAnswer::NoAddresses => "no_addresses",
        }
    }
}

/// The parts of a `v1.Endpoints` object we read.
#[derive(Debug, Deserialize)]
struct Endpoints {
    kind: Option<String>,
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    subsets: Vec<Subset>,
}

#[derive(Debug, Deserialize)]
struct Subset {
    #[serde(default)]
    addresses: Vec<Address>,
    #[serde(default)]
    ports: Vec<Port>,
}

#[derive(Debug, Deserialize)]
struct Address {
    ip: String,
}

#[derive(Debug, Deserialize)]
struct Port {
    name: Option<String>,
    port: u16,
    /// `TCP` when absent (the API's default); a `UDP` or `SCTP` port is no apiserver's.
    protocol: Option<String>,
}

impl Port {
    fn is_tcp(&self) -> bool {
        self.protocol.as_deref().is_none_or(|p| p == "TCP")
    }
}

/// The addresses an answer lists: each subset's ready addresses × its TCP port named `https` (or
/// its only TCP port), sorted, without duplicates. `end` says how the body ended: over
/// [`MAX_ANSWER`], or cut off before its end, it is not used. An address that is not an IP
/// makes the whole answer unusable: a half-read object must never shrink the list.
pub fn addresses(status: u16, body: &[u8], end: &BodyEnd) -> Result<Vec<SocketAddr>, BadAnswer> {
    if status != 200 {
        return Err(BadAnswer::Status(status));
    }
    match end {
        BodyEnd::OverLimit => return Err(BadAnswer::TooLarge),
        BodyEnd::Cut(why) => return Err(BadAnswer::Cut(body.len(), why.clone())),
        BodyEnd::Whole if body.len() > MAX_ANSWER => return Err(BadAnswer::TooLarge),
        BodyEnd::Whole => {}
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(body)
        .map_err(|e| BadAnswer::NotJson(e.to_string()))?;
    let ep: Endpoints =
        serde_json::from_slice(body).map_err(|e| BadAnswer::NotEndpoints(e.to_string()))?;
    if ep.kind.as_deref() != Some("Endpoints") || ep.api_version.as_deref() != Some("v1") {
        return Err(BadAnswer::NotEndpoints(format!(
            "kind {:?}, apiVersion {:?} (want Endpoints, v1)",
            ep.kind.unwrap_or_default(),
            ep.api_version.unwrap_or_default()
        )));
    }
    let mut out = Vec::new();
    for subset in &ep.subsets {
        let tcp: Vec<&Port> = subset.ports.iter().filter(|p| p.is_tcp()).collect();
        let port = match tcp.as_slice() {
            [only] => Some(*only),
            ports => ports
                .iter()
                .copied()
                .find(|p| p.name.as_deref() == Some("https")),
        };
        let Some(port) = port.filter(|p| p.port != 0) else {
            continue;
        };
        for a in &subset.addresses {
            let ip: IpAddr = a
                .ip
                .parse()
                .map_err(|_| BadAnswer::NotEndpoints(format!("address {:?} is not an IP", a.ip)))?;
            out.push(SocketAddr::new(ip, port.port));
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(BadAnswer::NoAddresses);
    }
    if out.len() > MAX_ADDRESSES {
        return Err(BadAnswer::TooMany(out.len()));
    }
    Ok(out)
}

/// An Endpoints object listing `addrs`, one subset per address (each with its own `https` port):
/// what the simulated apiserver serves, and test input.
pub fn endpoints_json(addrs: &[SocketAddr]) -> String {
    let subsets: Vec<serde_json::Value> = addrs
        .iter()
        .map(|a| {
            serde_json::json!({
                "addresses": [{ "ip": a.ip().to_string() }],
                "ports": [{ "name": "https", "port": a.port(), "protocol": "TCP" }],
            })
        })
        .collect();
    serde_json::json!({
        "kind": "Endpoints",
        "apiVersion": "v1",
        "metadata": { "name": "kubernetes", "namespace": "default" },
        "subsets": subsets,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("literal")
    }

    /// The object a real three-node control plane answers (trimmed): one subset, three
    /// addresses, the port named https.
    const REAL: &str = r#"{"kind":"Endpoints","apiVersion":"v1","metadata":{"name":"kubernetes","namespace":"default"},"subsets":[{"addresses":[{"ip":"10.0.3.10"},{"ip":"10.0.1.10"},{"ip":"10.0.2.10"}],"ports":[{"name":"https","port":6443,"protocol":"TCP"}]}]}"#;

    #[test]
    fn each_address_gets_the_https_port_sorted() {
        let got = addresses(200, REAL.as_bytes(), &BodyEnd::Whole).expect("good");
        assert_eq!(
            got,
            [
                sa("10.0.1.10:6443"),
                sa("10.0.2.10:6443"),
                sa("10.0.3.10:6443")
            ]
        );
    }

    #[test]
    fn a_subset_is_reached_on_its_https_port_or_else_its_only_port() {
        let body = r#"{"kind":"Endpoints","apiVersion":"v1","subsets":[
            {"addresses":[{"ip":"fd00::1"}],"ports":[{"name":"metrics","port":9000},{"name":"https","port":6443}]},
            {"addresses":[{"ip":"10.0.1.10"}],"ports":[{"port":443}]},
            {"addresses":[{"ip":"10.0.9.9"}],"ports":[{"name":"a","port":1},{"name":"b","port":2}]}]}"#;
        let got = addresses(200, body.as_bytes(), &BodyEnd::Whole).expect("good");
        assert_eq!(got, [sa("10.0.1.10:443"), sa("[fd00::1]:6443")]);
    }

    const W: BodyEnd = BodyEnd::Whole;

    #[test]
    fn every_bad_answer_is_named() {
        let cut = BodyEnd::Cut("connection closed before message completed".into());
        let cases: [(u16, &str, BodyEnd, &str); 10] = [
            (403, REAL, W, "bad_status"),
            (200, REAL, BodyEnd::OverLimit, "too_large"),
            (200, &REAL[..40], cut, "cut_off"),
            (
                200,
                r#"{"kind":"Endpoints","apiVersion":"v1","subsets":[{"addresses":[{"ip":"10.0.1.1"}],"ports":[{"port":53,"protocol":"UDP"}]}]}"#,
                W,
                "no_addresses",
            ),
            (200, "<html>", W, "not_json"),
            (
                200,
                r#"{"kind":"Status","apiVersion":"v1","code":403}"#,
                W,
                "not_endpoints",
            ),
            (
                200,
                r#"{"kind":"Endpoints","apiVersion":"v1","subsets":"x"}"#,
                W,
                "not_endpoints",
            ),
            (
                200,
                r#"{"kind":"Endpoints","apiVersion":"v1","subsets":[{"addresses":[{"ip":"a.b"}],"ports":[{"port":1}]}]}"#,
                W,
                "not_endpoints",
            ),
            (
                200,
                r#"{"kind":"Endpoints","apiVersion":"v1"}"#,
                W,
                "no_addresses",
            ),
            (
                200,
                r#"{"kind":"Endpoints","apiVersion":"v1","subsets":[{"addresses":[{"ip":"10.0.1.1"}],"ports":[]}]}"#,
                W,
                "no_addresses",
            ),
        ];
        for (status, body, end, want) in cases {
            let e = addresses(status, body.as_bytes(), &end).expect_err(body);
            assert_eq!(e.label(), want, "{body}: {e}");
        }
        let huge = vec![b' '; MAX_ANSWER + 1];
        assert_eq!(
            addresses(200, &huge, &BodyEnd::Whole),
            Err(BadAnswer::TooLarge)
        );
        let many: Vec<SocketAddr> = (1..=65u16)
            .map(|p| SocketAddr::from(([10, 0, 0, 1], p)))
            .collect();
        let e = addresses(200, endpoints_json(&many).as_bytes(), &BodyEnd::Whole);
        assert_eq!(
            e,
            Err(BadAnswer::TooMany(65)),
            "no more than 64 backends from one answer"
        );
        assert_eq!(e.expect_err("too many").label(), "too_large");
    }

    #[test]
    fn what_the_simulation_serves_reads_back() {
        let addrs = [sa("127.0.0.1:4001"), sa("[::1]:4002")];
        let json = endpoints_json(&addrs);
        assert_eq!(
            addresses(200, json.as_bytes(), &BodyEnd::Whole),
            Ok(addrs.to_vec())
        );
    }

    proptest::proptest! {
        #[test]
        fn any_listed_set_reads_back_as_a_sorted_set(
            raw in proptest::collection::vec((proptest::prelude::any::<[u8; 4]>(), 1u16..), 1..MAX_ADDRESSES)
        ) {
            let addrs: Vec<SocketAddr> = raw.iter().map(|(ip, port)| SocketAddr::from((*ip, *port))).collect();
            let mut want = addrs.clone();
            want.sort();
            want.dedup();
            proptest::prop_assert_eq!(addresses(200, endpoints_json(&addrs).as_bytes(), &BodyEnd::Whole), Ok(want));
        }

        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = addresses(200, &body, &BodyEnd::Whole);
        }
    }
}
