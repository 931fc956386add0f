//! Validation: the raw YAML shape → a typed [`Config`], with defaults and cross-field rules.
//!
//! Owns the rules (what is required, what must be unique, which durations relate). Does not own
//! scalar parsing (`raw`) or how a line is found for an error (`locate`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use rustls_pki_types::ServerName;

use super::raw::{DurationValue, Networks, RawBackend, RawConfig, RawTls, ZoneName};
use super::zones::ZoneMap;
use super::{locate, own};
use super::{Config, ConfigError, TlsFiles, DEFAULT_ADMIN, DEFAULT_LISTEN};
use crate::backend::{BackendId, BackendSource, BackendSpec, NodeZone, Routing, ZoneSource};
use crate::pick::WhenNoneReady;

mod dead_path;
pub(super) mod files;
mod health;

// (default, maximum) of every duration. The maxima are far beyond any sensible setting and keep
// every later sum of durations (deadlines, drain bounds) clear of overflow. The `health:` block's
// are in `health`.
/// `connect_timeout`: 1 s, at most 1 minute (a client waits this long per unreachable backend).
const CONNECT_TIMEOUT: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));
/// `failback_after`: 60 s, at most 1 hour; 0 s turns failback off.
const FAILBACK_AFTER: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(3600));
/// `handoff_window`: 5 s, at most 10 minutes; 0 s closes a draining backend's connections at
/// once. Must be shorter than the apiservers' `--shutdown-delay-duration` (not known here).
const HANDOFF_WINDOW: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(600));
/// `reentry_window`: 0 s (off), at most 10 minutes.
const REENTRY_WINDOW: (Duration, Duration) = (
    crate::backend::DEFAULT_REENTRY_WINDOW,
    Duration::from_secs(600),
);
/// `shutdown_grace`: 5 s, at most 10 minutes (a drain longer than that is a liability).
const SHUTDOWN_GRACE: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(600));

/// Where the status file is kept unless `status_file` says otherwise: a directory the Talos
/// static pod and extension mount writable.
pub const DEFAULT_STATUS_FILE: &str = "/var/lib/readyprism/status.json";

/// Turns the raw shape into a [`Config`], naming file, line and field in every error.
pub(super) struct Resolver<'a> {
    pub(super) src: &'a str,
    pub(super) file: &'a str,
    /// This host's interface addresses (none when the config is not judged on its node): a
    /// static backend at one of them on a listen or admin port is this balancer's own.
    pub(super) host: &'a [IpAddr],
}

impl Resolver<'_> {
    pub(super) fn invalid(
        &self,
        line: Option<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_string(),
            line: line.unwrap_or(1),
            field: field.into(),
            message: message.into(),
        }
    }

    fn key(&self, key: &str) -> Option<usize> {
        locate::key_line(self.src, key, 1)
    }

    fn socket_addr(&self, field: &str, key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
        text.parse().map_err(|_| {
            let line = locate::value_line(self.src, text, 0).or_else(|| self.key(key));
            self.invalid(
                line,
                field,
                format!("{text:?} is not an IP socket address (e.g. 127.0.0.1:7445 or [::1]:7445)"),
            )
        })
    }

    pub(super) fn resolve(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let listen_text = raw
            .listen
            .unwrap_or_else(|| vec![DEFAULT_LISTEN.to_string()]);
        if listen_text.is_empty() {
            return Err(self.invalid(self.key("listen"), "listen", "needs at least one address"));
        }
        let listen = listen_text
            .iter()
            .enumerate()
            .map(|(i, t)| self.socket_addr(&format!("listen[{i}]"), "listen", t))
            .collect::<Result<Vec<_>, _>>()?;
        // Port 0 (any free port, as in tests) never collides; any other address once only.
        for (i, a) in listen.iter().enumerate() {
            if a.port() != 0 && listen[..i].contains(a) {
                let line =
                    locate::value_line(self.src, &listen_text[i], 1).or_else(|| self.key("listen"));
                return Err(self.invalid(
                    line,
                    format!("listen[{i}]"),
                    format!("{a} is listed twice"),
                ));
            }
        }
        let admin = self.socket_addr(
            "admin",
            "admin",
            raw.admin.as_deref().unwrap_or(DEFAULT_ADMIN),
        )?;
        let allow_remote_admin = raw.allow_remote_admin.unwrap_or(false);
        if !admin.ip().is_loopback() && !allow_remote_admin {
            return Err(self.invalid(
                self.key("admin"),
                "admin",
                format!("{admin} is not a loopback address: /status and /metrics would be open to the network; set allow_remote_admin: true if that is meant"),
            ));
        }
        if admin.port() != 0 && listen.contains(&admin) {
            return Err(self.invalid(
                self.key("admin"),
                "admin",
                format!("{admin} is also a listen address; the admin server needs its own"),
            ));
        }
        let zone = match raw.zone {
            Some(z) if z.trim().is_empty() => {
                return Err(self.invalid(self.key("zone"), "zone", "must not be empty"))
            }
            z => z.map(|name| NodeZone {
                name,
                source: ZoneSource::Config,
            }),
        };

        let zones = self.zones(raw.zones)?;
        let sockets = own::Sockets {
            listen: listen.clone(),
            admin: Some(admin),
        };
        let backends = self.backends(raw.backends, &zones, &sockets)?;
        let health = self.health(raw.health.unwrap_or_default())?;
        let tls = self.tls(raw.tls)?;
        let connect_timeout =
            self.positive("connect_timeout", raw.connect_timeout, CONNECT_TIMEOUT)?;
        let shutdown_grace =
            self.duration("shutdown_grace", raw.shutdown_grace, SHUTDOWN_GRACE, true)?;
        let failback_after =
            self.duration("failback_after", raw.failback_after, FAILBACK_AFTER, true)?;
        let handoff_window =
            self.duration("handoff_window", raw.handoff_window, HANDOFF_WINDOW, true)?;
        let reentry_window =
            self.duration("reentry_window", raw.reentry_window, REENTRY_WINDOW, true)?;
        let discovery = self.discovery(raw.discovery)?;
        let status_file_set = raw.status_file.is_some();
        let status_file = self.status_file(raw.status_file)?;
        self.distinct_files(
            status_file.as_deref(),
            status_file_set,
            discovery.cache.as_deref(),
        )?;
        let mut routing = Routing {
            when_none_ready: raw.when_none_ready.unwrap_or(WhenNoneReady::FailOpen),
            connect_timeout,
            failback_after: (!failback_after.is_zero()).then_some(failback_after),
            dead_path_timeout: self.dead_path_timeout(raw.dead_path_timeout)?,
            handoff_window,
            probe_interval: health.interval,
            reentry_window,
            ..Routing::default()
        };
        routing.zone = zone;
        Ok(Config {
            listen,
            admin,
            routing,
            zones,
            backends,
            health,
            tls,
            shutdown_grace,
            allow_remote_admin,
            discovery,
            zone_ambiguous: None,
            status_file,
        })
    }

    /// A duration in `(0, max]` (`[0, max]` when `zero_ok`); `default` when absent.
    fn duration(
        &self,
        field: &str,
        v: Option<DurationValue>,
        (default, max): (Duration, Duration),
        zero_ok: bool,
    ) -> Result<Duration, ConfigError> {
        let d = v.map_or(default, |d| d.0);
        let key = field.rsplit('.').next().unwrap_or(field);
        if d.is_zero() && !zero_ok {
            return Err(self.invalid(self.key(key), field, "must be greater than zero"));
        }
        if d > max {
            return Err(self.invalid(
                self.key(key),
                field,
                format!(
                    "{} is more than the maximum of {}",
                    DurationValue(d),
                    DurationValue(max)
                ),
            ));
        }
        Ok(d)
    }

    fn positive(
        &self,
        field: &str,
        v: Option<DurationValue>,
        limits: (Duration, Duration),
    ) -> Result<Duration, ConfigError> {
        self.duration(field, v, limits, false)
    }

    /// The `zones:` map; a network under two zones is an error at its second listing.
    fn zones(&self, raw: Option<BTreeMap<ZoneName, Networks>>) -> Result<ZoneMap, ConfigError> {
        let zones = raw
            .unwrap_or_default()
            .into_iter()
            .map(|(z, n)| (z.0, n.0.into_iter().map(|c| c.0).collect()))
            .collect();
        ZoneMap::new(zones).map_err(|e| {
            let (zone, i) = &e.second;
            let line = self
                .key("zones")
                .and_then(|at| locate::key_line(self.src, zone, at));
            self.invalid(
                line,
                format!("zones.{zone}[{i}]"),
                format!(
                    "{} is also a network of zone {}: a network belongs to one zone",
                    e.net, e.first
                ),
            )
        })
    }

    fn backends(
        &self,
        raw: Option<Vec<RawBackend>>,
        zones: &ZoneMap,
        sockets: &own::Sockets,
    ) -> Result<Vec<BackendSpec>, ConfigError> {
        let raw = raw.ok_or_else(|| {
            self.invalid(
                None,
                "backends",
                "is required: list the apiservers as `- address: host:port`",
            )
        })?;
        if raw.is_empty() {
            return Err(self.invalid(
                self.key("backends"),
                "backends",
                "needs at least one backend",
            ));
        }
        let mut seen = HashSet::new();
        let mut occurrences = HashMap::<&str, usize>::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, b) in raw.iter().enumerate() {
            let nth = occurrences.entry(b.address.as_str()).or_insert(0);
            let line = locate::value_line(self.src, &b.address, *nth);
            *nth += 1;
            let field = format!("backends[{i}].address");
            let (host, port) =
                split_host_port(&b.address).map_err(|m| self.invalid(line, &field, m))?;
            let dialed = host.parse().ok().map(|ip| SocketAddr::new(ip, port));
            if let Some(own) = dialed.and_then(|a| own::own(a, sockets, self.host)) {
                let what = match own {
                    own::Own::Listener => "it would relay to itself",
                    own::Own::Admin => "it would relay clients to its admin server",
                };
                return Err(self.invalid(
                    line,
                    field,
                    format!(
                        "{:?} is this balancer's own {} address (its port on an address this host answers on); {what}",
                        b.address,
                        own.field()
                    ),
                ));
            }
            if !seen.insert(b.address.clone()) {
                return Err(self.invalid(
                    line,
                    field,
                    format!("{:?} is listed twice; addresses must be unique", b.address),
                ));
            }
            let name_text = b.server_name.clone().unwrap_or_else(|| host.clone());
            let server_name = ServerName::try_from(name_text.clone()).map_err(|_| {
                let line = b
                    .server_name
                    .as_ref()
                    .and_then(|n| locate::value_line(self.src, n, 0))
                    .or(line);
                self.invalid(
                    line,
                    format!("backends[{i}].server_name"),
                    format!("{name_text:?} is not a valid TLS server name"),
                )
            })?;
            if b.zone.as_deref().is_some_and(|z| z.trim().is_empty()) {
                return Err(self.invalid(line, format!("backends[{i}].zone"), "must not be empty"));
            }
            // A backend without a zone gets the zone of its IP; a DNS name stays without one.
            let zone = b.zone.clone().or_else(|| {
                let ip = host.parse::<IpAddr>().ok()?;
                zones.zone_of(ip).map(|m| m.zone.to_string())
            });
            out.push(BackendSpec {
                id: BackendId::new(&b.address),
                host,
                port,
                zone,
                server_name,
                source: BackendSource::Config,
            });
        }
        Ok(out)
    }

    fn tls(&self, raw: Option<RawTls>) -> Result<TlsFiles, ConfigError> {
        let raw = raw.ok_or_else(|| {
            self.invalid(
                None,
                "tls.ca",
                "is required: the cluster CA that signs the apiserver certificates",
            )
        })?;
        let nonempty = |field: &str, key: &str, v: Option<String>| match v {
            Some(p) if p.trim().is_empty() => {
                Err(self.invalid(self.key(key), field, "must not be empty"))
            }
            v => Ok(v.map(PathBuf::from)),
        };
        let ca = nonempty("tls.ca", "ca", raw.ca)?.ok_or_else(|| {
            self.invalid(
                self.key("tls"),
                "tls.ca",
                "is required: the cluster CA that signs the apiserver certificates",
            )
        })?;
        let client_cert = nonempty("tls.client_cert", "client_cert", raw.client_cert)?;
        let client_key = nonempty("tls.client_key", "client_key", raw.client_key)?;
        if client_key.is_some() && client_cert.is_none() {
            return Err(self.invalid(
                self.key("client_key"),
                "tls.client_key",
                "is set but tls.client_cert is not",
            ));
        }
        let client_key = client_key.or_else(|| client_cert.clone());
        Ok(TlsFiles {
            ca,
            client_cert,
            client_key,
        })
    }
}

/// Splits `host:port`, `[v6]:port`; rejects unbracketed IPv6 and missing or zero ports.
fn split_host_port(text: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, port) = rest
            .split_once("]:")
            .ok_or_else(|| format!("{text:?}: expected [IPv6]:port"))?;
        host.parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("{text:?}: {host:?} is not an IPv6 address"))?;
        (host, port)
    } else {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?}: expected host:port (e.g. 10.0.1.10:6443)"))?;
        if host.contains(':') {
            return Err(format!(
                "{text:?}: IPv6 addresses need brackets, e.g. [fd00::1]:6443"
            ));
        }
        (host, port)
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{text:?}: port must be 1-65535"))?;
    let valid_name = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
    if !valid_name {
        return Err(format!(
            "{text:?}: {host:?} is not an IP address or DNS name"
        ));
    }
    Ok((host.to_string(), port))
}
