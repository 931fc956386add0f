//! What the app holds of discovery: the discovered backends, the poll task that finds them, and
//! the merge with the static backends into the list the table is configured with.
//!
//! Owns the task's lifecycle across reloads (restarted when `discovery:` or `health.timeout`
//! changes, told the new static addresses otherwise) and turning a discovered address into a
//! backend. Does not own the poll (`Poller`) nor the table (`App` configures it, one writer as
//! for a reload).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::answer::MAX_ADDRESSES;
use super::membership::{Member, Membership};
use super::{cache, Poller};
use crate::backend::{BackendId, BackendSource, BackendSpec};
use crate::config::own::{self, Sockets};
use crate::config::{Config, DiscoveryConfig};
use crate::metrics::Metrics;
use crate::table::Table;
use crate::tls::TlsSource;

/// The running poll task and what it was started with.
struct Running {
    /// The `discovery:` block and the health timeout (the poll's bound) it runs with.
    config: (DiscoveryConfig, Duration),
    never: watch::Sender<Never>,
    stop: CancellationToken,
}

/// Addresses that are never discovered backends: the static backends' (backends already) and
/// this balancer's own (one there would relay to itself, or to the admin server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Never {
    /// The static backends given as IP:port.
    pub seeds: Vec<SocketAddr>,
    /// The client listeners and the admin listener as bound.
    pub own: Sockets,
}

impl Never {
    fn of(config: &Config, own: &Sockets) -> Never {
        Never {
            seeds: seeds(config),
            own: own.clone(),
        }
    }

    /// Whether `addr` is this balancer's own ([`own::own`]) on a host with the interface
    /// addresses `host`.
    pub fn is_own(&self, addr: SocketAddr, host: &[IpAddr]) -> bool {
        own::own(addr, &self.own, host).is_some()
    }
}

/// Discovery as the app holds it: the members and the task (none while discovery is off).
pub struct Discovered {
    members: Vec<Member>,
    /// The listeners as bound: never members.
    own: Sockets,
    /// This host's interface addresses as read at start-up or the last reload: never members on
    /// an own port (the poll task reads them again for every answer).
    host: Vec<IpAddr>,
    running: Option<Running>,
    parts: Parts,
    updates: mpsc::Sender<Vec<Member>>,
    incoming: mpsc::Receiver<Vec<Member>>,
}

/// What the poll task needs from the app.
pub(crate) struct Parts {
    /// The routing table.
    pub table: Arc<Table>,
    /// The TLS cell.
    pub tls: Arc<TlsSource>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The app's task set.
    pub tasks: TaskTracker,
    /// The app's background token (the task is a child of it).
    pub background: CancellationToken,
}

impl Discovered {
    /// With `config.discovery.endpoints`: the cache (if any) read (blocks: a small file, once at
    /// start-up), its backends with source `cache`, and the poll task started; else nothing.
    /// `own` are the listeners as bound, `host` this host's interface addresses.
    pub(crate) fn start(
        config: &Config,
        parts: Parts,
        own: &Sockets,
        host: Vec<IpAddr>,
    ) -> Discovered {
        let (updates, incoming) = mpsc::channel(4);
        let members = match (&config.discovery.cache, config.discovery.endpoints) {
            (Some(path), true) => cached(path, &Never::of(config, own), &host),
            _ => Vec::new(),
        };
        let mut d = Discovered {
            members,
            own: own.clone(),
            host: host.clone(),
            running: None,
            parts,
            updates,
            incoming,
        };
        d.follow(config, own, host);
        d
    }

    /// The static backends, then the discovered ones not equal to a static one: what the table
    /// is configured with.
    pub fn backends(&self, config: &Config) -> Vec<Arc<BackendSpec>> {
        merge(
            config,
            &self.members,
            &Never::of(config, &self.own),
            &self.host,
        )
    }

    /// Starts, restarts or stops the poll task for `config` (start-up and reload), `own` being
    /// the listeners as bound for it and `host` this host's interface addresses. Discovery
    /// turned off forgets the discovered backends; otherwise they are kept.
    pub(crate) fn follow(&mut self, config: &Config, own: &Sockets, host: Vec<IpAddr>) {
        self.own = own.clone();
        self.host = host;
        let never = Never::of(config, own);
        let parts = &self.parts;
        let d = &config.discovery;
        if let Some(r) = &self.running {
            if r.config == (d.clone(), config.health.timeout) {
                r.never.send_replace(never);
                return;
            }
            r.stop.cancel();
            self.running = None;
        }
        if !d.endpoints {
            self.members.clear();
            return;
        }
        let (never_tx, never_rx) = watch::channel(never);
        let stop = parts.background.child_token();
        let poller = Poller {
            table: parts.table.clone(),
            tls: parts.tls.clone(),
            interval: d.interval,
            timeout: config.health.timeout,
            cache: d.cache.clone(),
            never: never_rx,
            own_listed: Vec::new(),
            updates: self.updates.clone(),
            metrics: parts.metrics.clone(),
            membership: Membership::new(&self.members),
        };
        parts.tasks.spawn(poller.run(stop.clone()));
        self.running = Some(Running {
            config: (d.clone(), config.health.timeout),
            never: never_tx,
            stop,
        });
    }

    /// The next list the poll task found (pending while discovery is off or nothing changes).
    pub async fn next(&mut self) -> Vec<Member> {
        match self.incoming.recv().await {
            Some(list) => list,
            None => std::future::pending().await, // never: `self.updates` keeps it open
        }
    }

    /// Takes `members` as the discovered list and logs what changed; false (and ignored) when
    /// discovery is off meanwhile: a list the stopped task sent before a reload turned it off.
    pub fn set(&mut self, members: Vec<Member>) -> bool {
        if self.running.is_none() {
            return false;
        }
        let has = |list: &[Member], a: &SocketAddr| list.iter().any(|m| m.addr == *a);
        let text = |a: Vec<String>| a.join(",");
        let new = members
            .iter()
            .map(|m| m.addr)
            .filter(|a| !has(&self.members, a));
        let gone = self
            .members
            .iter()
            .map(|m| m.addr)
            .filter(|a| !has(&members, a));
        let added = text(new.map(|a| a.to_string()).collect());
        let removed = text(gone.map(|a| a.to_string()).collect());
        tracing::info!(added, removed, "discovered backends changed");
        self.members = members;
        true
    }
}

/// [`Discovered::backends`] for `members`: never one of `never` on a host with the interface
/// addresses `host`.
fn merge(
    config: &Config,
    members: &[Member],
    never: &Never,
    host: &[IpAddr],
) -> Vec<Arc<BackendSpec>> {
    let discovered = members
        .iter()
        .filter(|m| !never.seeds.contains(&m.addr) && !never.is_own(m.addr, host))
        .map(|m| spec(m, config));
    let all = config.backends.iter().cloned().chain(discovered);
    all.map(Arc::new).collect()
}

/// The static backends given as IP:port (a DNS-named one never equals a discovered IP).
fn seeds(config: &Config) -> Vec<SocketAddr> {
    config
        .backends
        .iter()
        .filter_map(|b| Some(SocketAddr::new(b.host.parse::<IpAddr>().ok()?, b.port)))
        .collect()
}

/// A discovered backend: id `IP:port` (`[v6]:port`), zone from the `zones:` map by its IP, TLS
/// name `discovery.server_name` or its IP.
pub fn spec(m: &Member, config: &Config) -> BackendSpec {
    let ip = m.addr.ip();
    BackendSpec {
        id: BackendId::new(&m.addr.to_string()),
        host: ip.to_string(),
        port: m.addr.port(),
        zone: config.zones.zone_of(ip).map(|z| z.zone.to_string()),
        server_name: config
            .discovery
            .server_name
            .clone()
            .unwrap_or(ServerName::IpAddress(ip.into())),
        source: m.source,
    }
}

/// The cache's backends (minus the static ones) as members with source `cache`: each address
/// once, at most [`MAX_ADDRESSES`] (an answer's cap) of them, each breach said with a WARN. A
/// missing or unusable cache is said once and ignored.
fn cached(path: &std::path::Path, never: &Never, host: &[IpAddr]) -> Vec<Member> {
    match cache::load(path) {
        Ok(mut addrs) => {
            let read = addrs.len();
            let mut seen = std::collections::BTreeSet::new();
            addrs.retain(|a| seen.insert(*a));
            if addrs.len() < read {
                tracing::warn!(file = %path.display(), repeated = read - addrs.len(), "the discovery cache lists an address more than once; each is one backend");
            }
            addrs.retain(|a| !never.seeds.contains(a));
            let own: Vec<String> = addrs
                .iter()
                .filter(|a| never.is_own(**a, host))
                .map(ToString::to_string)
                .collect();
            if !own.is_empty() {
                tracing::warn!(file = %path.display(), addresses = own.join(","), "the discovery cache lists this balancer's own address; refused (it would relay to itself)");
                addrs.retain(|a| !never.is_own(*a, host));
            }
            if addrs.len() > MAX_ADDRESSES {
                tracing::warn!(file = %path.display(), listed = addrs.len(), "the discovery cache lists more than {MAX_ADDRESSES} backends; only the first {MAX_ADDRESSES} are used");
                addrs.truncate(MAX_ADDRESSES);
            }
            let members: Vec<Member> = addrs
                .into_iter()
                .map(|addr| Member {
                    addr,
                    source: BackendSource::Cache,
                })
                .collect();
            tracing::info!(file = %path.display(), backends = members.len(), "discovery cache read");
            members
        }
        Err(cache::LoadError::Missing) => {
            tracing::info!(file = %path.display(), "no discovery cache yet; starting from the config's backends");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "discovery cache ignored; starting from the config's backends");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config zoning fd00:2::/64 as dc-b, and a discovered member in it.
    fn discovered_in_dc_b() -> (Config, Member) {
        let yaml = "zones: { dc-b: [\"fd00:2::/64\"] }\nbackends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\n";
        let config = Config::parse(yaml, "node.yaml").expect("valid");
        let m = Member {
            addr: "[fd00:2::10]:6443".parse().expect("literal"),
            source: BackendSource::Discovered,
        };
        (config, m)
    }

    #[test]
    fn a_discovered_backend_is_named_ip_port_in_the_zone_its_ip_maps_to() {
        let (config, m) = discovered_in_dc_b();
        let b = spec(&m, &config);
        assert_eq!(b.id.as_str(), "[fd00:2::10]:6443");
        assert_eq!((b.host.as_str(), b.port), ("fd00:2::10", 6443));
        assert_eq!(b.zone.as_deref(), Some("dc-b"));
    }

    #[test]
    fn a_discovered_backend_is_verified_by_its_ip_unless_a_server_name_is_set() {
        let (mut config, m) = discovered_in_dc_b();
        let b = spec(&m, &config);
        assert_eq!(
            crate::config::server_name_text(&b.server_name),
            "fd00:2::10"
        );
        config.discovery.server_name = Some(ServerName::try_from("kubernetes").expect("name"));
        assert_eq!(
            crate::config::server_name_text(&spec(&m, &config).server_name),
            "kubernetes"
        );
    }

    #[test]
    fn an_address_equal_to_a_static_backend_or_this_balancers_own_is_not_listed() {
        let yaml = "backends:\n  - address: 10.0.1.10:6443\ntls:\n  ca: /ca.crt\n";
        let config = Config::parse(yaml, "node.yaml").expect("valid");
        let member = |a: &str| Member {
            addr: a.parse().expect("literal"),
            source: BackendSource::Discovered,
        };
        let own = Sockets {
            listen: vec!["0.0.0.0:7445".parse().expect("literal")],
            admin: Some("127.0.0.1:7446".parse().expect("literal")),
        };
        let members = [
            member("10.0.1.10:6443"),
            member("10.0.2.10:6443"),
            member("127.0.0.1:7445"),
            member("[::1]:7445"),
            member("[::ffff:127.0.0.1]:7445"),
            member("10.0.0.5:7445"),
            member("127.0.0.1:7446"),
        ];
        let host = ["10.0.0.5".parse().expect("literal")];
        let ids: Vec<_> = merge(&config, &members, &Never::of(&config, &own), &host)
            .iter()
            .map(|b| (b.id.to_string(), b.source))
            .collect();
        assert_eq!(
            ids,
            [
                ("10.0.1.10:6443".to_string(), BackendSource::Config),
                ("10.0.2.10:6443".to_string(), BackendSource::Discovered)
            ]
        );
    }
}
