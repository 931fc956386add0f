//! The YAML shape of the config file: serde structs that mirror the keys one to one.
//!
//! Owns parsing of scalar values (durations, addresses) so that a bad value is reported by the YAML
//! parser with its line and column. Does not own cross-field rules or defaults: `config::resolve` does.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use ipnet::IpNet;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use crate::pick::WhenNoneReady;

/// The whole file. Every key is optional here so that defaults and "required" errors live in one place.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<Vec<String>>,
    pub admin: Option<String>,
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zones: Option<BTreeMap<ZoneName, Networks>>,
    pub backends: Option<Vec<RawBackend>>,
    pub health: Option<RawHealth>,
    pub tls: Option<RawTls>,
    pub connect_timeout: Option<DurationValue>,
    pub when_none_ready: Option<WhenNoneReady>,
    pub shutdown_grace: Option<DurationValue>,
    pub failback_after: Option<DurationValue>,
    pub dead_path_timeout: Option<DurationValue>,
    pub handoff_window: Option<DurationValue>,
    pub reentry_window: Option<DurationValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<RawDiscovery>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_remote_admin: Option<bool>,
    pub status_file: Option<String>,
}

/// The `discovery:` block.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    pub endpoints: Option<bool>,
    pub interval: Option<DurationValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// One `backends:` entry.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// The `health:` block.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    pub path: Option<String>,
    pub interval: Option<DurationValue>,
    pub timeout: Option<DurationValue>,
    pub fast_interval: Option<DurationValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_interval: Option<DurationValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_check_interval: Option<DurationValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_check_path: Option<String>,
    pub rise: Option<u32>,
    pub fall: Option<u32>,
}

/// The `tls:` block.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub ca: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key: Option<String>,
}

/// A duration written as an integer and a unit: `250ms`, `5s`, `1m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationValue(pub Duration);

impl DurationValue {
    /// Parses `<integer><ms|s|m>`; the error text is shown to the operator as is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use readyprism::config::DurationValue;
    ///
    /// assert_eq!(DurationValue::parse("250ms").map(|d| d.0), Ok(Duration::from_millis(250)));
    /// assert!(DurationValue::parse("5 sec").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        let digits_end = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits_end);
        let bad = || {
            format!("invalid duration {text:?}: expected an integer with a unit ms, s or m (e.g. 250ms, 5s, 1m)")
        };
        let n: u64 = number.parse().map_err(|_| bad())?;
        let d = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        Ok(DurationValue(d))
    }
}

impl fmt::Display for DurationValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms % 60_000 == 0 && ms > 0 {
            write!(f, "{}m", ms / 60_000)
        } else if ms % 1000 == 0 {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DurationValue::parse(&text).map_err(de::Error::custom)
    }
}

impl Serialize for DurationValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A `zones:` key: a zone name, not empty.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ZoneName(pub String);

impl<'de> Deserialize<'de> for ZoneName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name.trim().is_empty() {
            return Err(de::Error::custom("a zone name must not be empty"));
        }
        Ok(ZoneName(name))
    }
}

/// A zone's networks: at least one.
#[derive(Debug, Clone, Serialize)]
pub struct Networks(pub Vec<CidrValue>);

impl<'de> Deserialize<'de> for Networks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let nets = Vec::<CidrValue>::deserialize(d)?;
        if nets.is_empty() {
            return Err(de::Error::custom(
                "a zone needs at least one network (e.g. [\"10.0.1.0/24\"])",
            ));
        }
        Ok(Networks(nets))
    }
}

/// A network in CIDR form, `10.0.1.0/24` or `fd00:2::/64`, with no host bits set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CidrValue(pub IpNet);

impl CidrValue {
    /// Parses a CIDR network; the error text is shown to the operator as is.
    pub fn parse(text: &str) -> Result<Self, String> {
        let net: IpNet = text.parse().map_err(|_| {
            format!("{text:?} is not a network in CIDR form (e.g. 10.0.1.0/24 or fd00:2::/64)")
        })?;
        if net.trunc() != net {
            return Err(format!(
                "{text:?} has host bits set: the network is {}",
                net.trunc()
            ));
        }
        Ok(CidrValue(net))
    }
}

impl<'de> Deserialize<'de> for CidrValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        CidrValue::parse(&text).map_err(de::Error::custom)
    }
}

impl Serialize for CidrValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip_through_their_units() {
        for (text, want) in [
            ("250ms", Duration::from_millis(250)),
            ("5s", Duration::from_secs(5)),
            ("1m", Duration::from_secs(60)),
        ] {
            let d = DurationValue::parse(text).expect("valid");
            assert_eq!(d.0, want);
            assert_eq!(d.to_string(), text);
        }
        for bad in [
            "",
            "5",
            "s",
            "1.5s",
            "5 s",
            "-1s",
            "5h",
            "99999999999999999999m",
        ] {
            assert!(
                DurationValue::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }
}
