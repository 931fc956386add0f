//! The config file: YAML text → validated, typed [`Config`]. Downstream code never sees YAML.
//!
//! Every error names the file, the field and the line (and column when the YAML parser knows it).
//! `raw` owns the serde shape and scalar parsing, `locate` finds lines for cross-field errors.

mod locate;
mod raw;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::ServerName;

use crate::backend::BackendSpec;
pub use raw::{DurationValue, WhenNoneReady};
use raw::{RawBackend, RawConfig, RawHealth, RawTls};

/// Default client listener: KubePrism's port, so kubelet config needs no change beyond the switch.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7445";
/// Default admin listener.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:7446";

/// A config error, already formatted for the operator: `file:line[:column]: field: message`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read config: {cause}")]
    Read {
        /// Config file path.
        file: String,
        /// Underlying I/O error.
        cause: std::io::Error,
    },
    /// YAML syntax, an unknown key, a wrong type or a bad scalar; position from the parser.
    #[error("{file}:{line}:{column}: {message}")]
    Parse {
        /// Config file path.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// Parser message, prefixed with the field path.
        message: String,
    },
    /// A rule across fields or a value the parser accepted but we do not.
    #[error("{file}:{line}: {field}: {message}")]
    Invalid {
        /// Config file path.
        file: String,
        /// 1-based line of the offending key or value (1 when the key is absent).
        line: usize,
        /// Dotted field path, e.g. `health.timeout` or `backends[1].address`.
        field: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

/// The `health:` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// HTTP path probed on every backend.
    pub path: String,
    /// Time between probes in steady state (±10 % jitter).
    pub interval: Duration,
    /// Bound on one probe: connect + TLS + response.
    pub timeout: Duration,
    /// Time between probes while a state change is pending.
    pub fast_interval: Duration,
    /// Consecutive passes to turn unready → ready.
    pub rise: u32,
    /// Consecutive failures to turn ready → unready.
    pub fall: u32,
}

/// The `tls:` block: file paths; `tls` loads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Cluster CA bundle that verifies the apiservers.
    pub ca: PathBuf,
    /// Client certificate (may also hold the key, as kubelet's file does).
    pub client_cert: Option<PathBuf>,
    /// Client key; defaults to `client_cert`.
    pub client_key: Option<PathBuf>,
}

/// A validated config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Client listeners.
    pub listen: Vec<SocketAddr>,
    /// Admin listener.
    pub admin: SocketAddr,
    /// This node's zone (after `--zone` / `READYPRISM_ZONE` overrides).
    pub zone: Option<String>,
    /// Backends in config order.
    pub backends: Vec<BackendSpec>,
    /// Probe settings.
    pub health: HealthConfig,
    /// Certificate files.
    pub tls: TlsFiles,
    /// Per-attempt dial timeout.
    pub connect_timeout: Duration,
    /// Behaviour with no ready backend.
    pub when_none_ready: WhenNoneReady,
    /// How long established connections may finish after SIGTERM.
    pub shutdown_grace: Duration,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
            file: file.clone(),
            cause,
        })?;
        Config::parse(&src, &file)
    }

    /// Validates config text; `file` is only used to name the source in errors.
    pub fn parse(src: &str, file: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = if src.trim().is_empty() {
            RawConfig::default()
        } else {
            yaml_serde::from_str(src).map_err(|e| parse_error(src, file, &e))?
        };
        Resolver { src, file }.resolve(raw)
    }

    /// The resolved config as YAML, with every default written out (what `check` prints).
    pub fn to_yaml(&self) -> String {
        let d = |d: Duration| Some(DurationValue(d));
        let raw = RawConfig {
            listen: Some(self.listen.iter().map(|a| a.to_string()).collect()),
            admin: Some(self.admin.to_string()),
            zone: self.zone.clone(),
            backends: Some(
                self.backends
                    .iter()
                    .map(|b| RawBackend {
                        address: b.address.clone(),
                        zone: b.zone.clone(),
                        server_name: Some(server_name_text(&b.server_name)),
                    })
                    .collect(),
            ),
            health: Some(RawHealth {
                path: Some(self.health.path.clone()),
                interval: d(self.health.interval),
                timeout: d(self.health.timeout),
                fast_interval: d(self.health.fast_interval),
                rise: Some(self.health.rise),
                fall: Some(self.health.fall),
            }),
            tls: Some(RawTls {
                ca: Some(self.tls.ca.display().to_string()),
                client_cert: self
                    .tls
                    .client_cert
                    .as_ref()
                    .map(|p| p.display().to_string()),
                client_key: self
                    .tls
                    .client_key
                    .as_ref()
                    .map(|p| p.display().to_string()),
            }),
            connect_timeout: d(self.connect_timeout),
            when_none_ready: Some(self.when_none_ready),
            shutdown_grace: d(self.shutdown_grace),
        };
        yaml_serde::to_string(&raw).unwrap_or_else(|e| format!("# cannot print config: {e}\n"))
    }
}

/// The text form of a TLS server name.
pub fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

fn parse_error(src: &str, file: &str, e: &yaml_serde::Error) -> ConfigError {
    let text = e.to_string();
    let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
    // The parser writes " at line L column C" into the text; we put the position first instead.
    let message = text.replace(&format!(" at line {line} column {column}"), "");
    let message = name_field(src, line, message);
    ConfigError::Parse {
        file: file.to_string(),
        line,
        column,
        message,
    }
}

/// The parser's path stops at the parent for errors in scalar values (`health: invalid duration`);
/// add the key written on the error's line so the message names the field itself.
fn name_field(src: &str, line: usize, message: String) -> String {
    let Some(key) = locate::key_at(src, line) else {
        return message;
    };
    let (path, rest) = match message.split_once(": ") {
        Some((p, rest))
            if !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || "_.[]".contains(c)) =>
        {
            (Some(p), rest)
        }
        _ => (None, message.as_str()),
    };
    if path.is_some_and(|p| p == key || p.ends_with(&format!(".{key}")))
        || rest.contains(&format!("`{key}`"))
    {
        return message;
    }
    match path {
        Some(p) => format!("{p}.{key}: {rest}"),
        None => format!("{key}: {rest}"),
    }
}

struct Resolver<'a> {
    src: &'a str,
    file: &'a str,
}

impl Resolver<'_> {
    fn invalid(
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

    fn resolve(&self, raw: RawConfig) -> Result<Config, ConfigError> {
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
        let admin = self.socket_addr(
            "admin",
            "admin",
            raw.admin.as_deref().unwrap_or(DEFAULT_ADMIN),
        )?;
        let zone = match raw.zone {
            Some(z) if z.trim().is_empty() => {
                return Err(self.invalid(self.key("zone"), "zone", "must not be empty"))
            }
            z => z,
        };
        let backends = self.backends(raw.backends)?;
        let health = self.health(raw.health.unwrap_or_default())?;
        let tls = self.tls(raw.tls)?;
        let connect_timeout = self.positive(
            "connect_timeout",
            raw.connect_timeout,
            Duration::from_secs(1),
        )?;
        Ok(Config {
            listen,
            admin,
            zone,
            backends,
            health,
            tls,
            connect_timeout,
            when_none_ready: raw.when_none_ready.unwrap_or(WhenNoneReady::FailOpen),
            shutdown_grace: raw.shutdown_grace.map_or(Duration::from_secs(5), |d| d.0),
        })
    }

    fn positive(
        &self,
        field: &str,
        v: Option<DurationValue>,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        let d = v.map_or(default, |d| d.0);
        if d.is_zero() {
            let key = field.rsplit('.').next().unwrap_or(field);
            return Err(self.invalid(self.key(key), field, "must be greater than zero"));
        }
        Ok(d)
    }

    fn backends(&self, raw: Option<Vec<RawBackend>>) -> Result<Vec<BackendSpec>, ConfigError> {
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
        let mut occurrences = std::collections::HashMap::<&str, usize>::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, b) in raw.iter().enumerate() {
            let nth = occurrences.entry(b.address.as_str()).or_insert(0);
            let line = locate::value_line(self.src, &b.address, *nth);
            *nth += 1;
            let field = format!("backends[{i}].address");
            let (host, port) =
                split_host_port(&b.address).map_err(|m| self.invalid(line, &field, m))?;
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
            out.push(BackendSpec {
                address: b.address.clone(),
                host,
                port,
                zone: b.zone.clone(),
                server_name,
            });
        }
        Ok(out)
    }

    fn health(&self, raw: RawHealth) -> Result<HealthConfig, ConfigError> {
        let path = raw.path.unwrap_or_else(|| "/readyz".to_string());
        if !path.starts_with('/') || path.contains(char::is_whitespace) {
            return Err(self.invalid(
                self.key("path"),
                "health.path",
                format!("{path:?} must start with '/' and contain no spaces"),
            ));
        }
        let interval = self.positive("health.interval", raw.interval, Duration::from_secs(5))?;
        let timeout = self.positive("health.timeout", raw.timeout, Duration::from_secs(3))?;
        let fast_interval = self.positive(
            "health.fast_interval",
            raw.fast_interval,
            Duration::from_secs(1),
        )?;
        if timeout >= interval {
            let line = self.key("timeout").or_else(|| self.key("interval"));
            return Err(self.invalid(
                line,
                "health.timeout",
                format!(
                    "{} must be less than health.interval ({})",
                    DurationValue(timeout),
                    DurationValue(interval)
                ),
            ));
        }
        if fast_interval > interval {
            let line = self.key("fast_interval").or_else(|| self.key("interval"));
            return Err(self.invalid(
                line,
                "health.fast_interval",
                format!(
                    "{} must not exceed health.interval ({})",
                    DurationValue(fast_interval),
                    DurationValue(interval)
                ),
            ));
        }
        let count = |field: &str, key: &str, v: Option<u32>| match v {
            Some(0) => Err(self.invalid(self.key(key), field, "must be at least 1")),
            v => Ok(v.unwrap_or(2)),
        };
        Ok(HealthConfig {
            path,
            interval,
            timeout,
            fast_interval,
            rise: count("health.rise", "rise", raw.rise)?,
            fall: count("health.fall", "fall", raw.fall)?,
        })
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

#[cfg(test)]
mod tests;
