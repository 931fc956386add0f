//! The running balancer: [`App::start`] binds the listeners and starts the table writer, the TLS
//! watcher, one health monitor per backend, discovery, the address poll (`zone`), the proxy, the
//! admin server and the status file's writer; [`App::run`] (`run`) is its one control loop, which applies discovery's
//! lists, this node's addresses and reloads (`reload`) until the end, then shuts down in order.
//!
//! Every task is tracked here and cancellable. Does not own installing signal handlers
//! (`signals`) or any behaviour of the parts it wires together.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::config_view::ConfigCell;
use crate::admin::{Admin, StatusDoc};
use crate::backend::BackendSpec;
use crate::config::{own, Config, ListenField};
use crate::discovery::membership::Member;
use crate::discovery::{Discovered, Parts};
use crate::health::Monitor;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::table::{self, Table, TableCmd};
use crate::tls::{self, Applied, TlsSource};

mod error;
mod handle;
mod reload;
mod run;
mod zone;

pub use error::{ApplyError, Placed};
pub use handle::Handle;
pub use run::{ConfigFile, Control, End};

struct Listener {
    configured: SocketAddr,
    bound: SocketAddr,
    stop: CancellationToken,
}

/// A running [`Monitor`] task and the spec it checks.
struct MonitorHandle {
    spec: Arc<BackendSpec>,
    stop: CancellationToken,
}

/// A running balancer.
pub struct App {
    config: Config,
    table: Arc<Table>,
    metrics: Arc<Metrics>,
    tls: Arc<TlsSource>,
    proxy: Arc<Proxy>,
    admin: Arc<Admin>,
    writer: mpsc::Sender<TableCmd>,
    tasks: TaskTracker,
    background: CancellationToken,
    monitors: Vec<MonitorHandle>,
    discovered: Discovered,
    addresses: zone::AddressPoll,
    listeners: Vec<Listener>,
    admin_listener: Listener,
    admin_tasks: TaskTracker,
}

async fn bind(
    field: ListenField,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ApplyError> {
    let err = |cause| ApplyError::Bind { field, addr, cause };
    let listener = match field {
        // With the client leg's socket options, which every accepted connection inherits.
        ListenField::Listen => crate::proxy::listen(addr),
        ListenField::Admin => TcpListener::bind(addr).await,
    }
    .map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// This node's addresses leave its zone unknown (`tie` says which zones and why): one WARN at
/// start-up, and on a reload or a change of the addresses that changes it.
fn warn_zone_tie(tie: &str) {
    tracing::warn!(
        reason = tie,
        "this node's addresses are in two zones, neither network more specific; zone unknown"
    );
}

impl App {
    /// Loads certificates, binds every address, then starts everything. Nothing is started if any
    /// step fails.
    pub async fn start(config: Config) -> Result<App, ApplyError> {
        let tls_state = TlsSource::load(&config.tls)?;
        let mut bound = Vec::new();
        for &addr in &config.listen {
            bound.push((addr, bind(ListenField::Listen, addr).await?));
        }
        let (admin_l, admin_bound) = bind(ListenField::Admin, config.admin).await?;

        let table = Table::new();
        let snapshots = table.clone();
        let metrics = Arc::new(Metrics::new(Box::new(move || snapshots.load())));
        metrics.declare_discovery_results(crate::discovery::Poll::labels());
        tls::publish_client_cert(&metrics, &tls_state.client_cert);
        let tls = TlsSource::new(tls_state);
        let (writer, rx) = mpsc::channel(256);
        let tasks = TaskTracker::new();
        let background = CancellationToken::new();
        tasks.spawn(table::run_writer(
            table.clone(),
            metrics.clone(),
            rx,
            background.clone(),
        ));
        tasks.spawn(tls.clone().watch(metrics.clone(), background.clone()));
        let proxy = Proxy::new(table.clone(), metrics.clone());
        let admin = Arc::new(Admin {
            table: table.clone(),
            metrics: metrics.clone(),
            tls: tls.clone(),
            shutting_down: false.into(),
            config: ConfigCell::new(&config),
        });
        tasks.spawn(crate::admin::status_file::keep(
            admin.clone(),
            background.clone(),
        ));
        let parts = Parts {
            table: table.clone(),
            tls: tls.clone(),
            metrics: metrics.clone(),
            tasks: tasks.clone(),
            background: background.clone(),
        };
        let admin_tasks = TaskTracker::new();
        let admin_stop = CancellationToken::new();
        admin_tasks.spawn(admin.clone().serve(admin_l, admin_stop.clone()));

        let own = own::Sockets {
            listen: bound.iter().map(|(_, (_, b))| *b).collect(),
            admin: Some(admin_bound),
        };
        let mut app = App {
            config: config.clone(),
            table,
            metrics,
            tls,
            proxy,
            admin,
            writer,
            tasks,
            background,
            monitors: Vec::new(),
            discovered: Discovered::start(&config, parts, &own, own::host_addresses()),
            addresses: zone::AddressPoll::new(),
            listeners: Vec::new(),
            admin_listener: Listener {
                configured: config.admin,
                bound: admin_bound,
                stop: admin_stop,
            },
            admin_tasks,
        };
        if let Err(e) = app.configure_table(&config).await {
            app.background.cancel();
            app.admin_listener.stop.cancel();
            return Err(e);
        }
        app.reconcile_monitors(&config, false);
        app.addresses.follow(&config, &app.tasks, &app.background);
        for (configured, (listener, bound)) in bound {
            app.spawn_listener(configured, listener, bound);
        }
        if !admin_bound.ip().is_loopback() {
            tracing::warn!(admin = %admin_bound, "the admin server listens beyond loopback (allow_remote_admin): /status and /metrics are open to the network");
        }
        tls::warn_if_key_exposed(&config.tls);
        let listen: Vec<String> = app.listen_addrs().iter().map(ToString::to_string).collect();
        let zone = config.routing.zone.clone();
        if let Some(tie) = &config.zone_ambiguous {
            warn_zone_tie(tie);
        } else if zone.is_none() && !config.zones.is_empty() {
            tracing::warn!("no zone matches this node's addresses; zone unknown");
        }
        let zone_source = zone.as_ref().map(|z| z.source.to_string());
        tracing::info!(listen = %listen.join(","), admin = %admin_bound, backends = config.backends.len(), zone = zone.as_ref().map_or("", |z| z.name.as_str()), zone_source = zone_source.as_deref().unwrap_or(""), version = crate::metrics::VERSION, commit = crate::metrics::COMMIT, "readyprism started");
        Ok(app)
    }

    /// The bound client listener addresses (real ports when configured with port 0).
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.bound).collect()
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_listener.bound
    }

    /// What an operator sees of this app while it runs: `/status`, `/metrics`, the table's
    /// generations. Cheap to clone; it stays valid while [`App::run`] owns the app.
    pub fn handle(&self) -> Handle {
        Handle {
            admin: self.admin.clone(),
        }
    }

    /// The `/status` document as of now: what an operator sees, and what tests observe.
    pub fn status(&self) -> StatusDoc {
        self.admin.status()
    }

    /// Notified with the generation of every published snapshot, so a caller can wait for a
    /// change instead of sleeping.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.table.subscribe()
    }

    /// The `/metrics` text as of now.
    pub fn metrics_text(&self) -> String {
        self.metrics.encode()
    }

    /// The running config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Applies a new config: certificates and listeners first (any failure leaves the running
    /// config untouched), then backends. Unchanged backends keep their state and connections.
    pub async fn reload(&mut self, new: Config) -> Result<(), ApplyError> {
        let files = new.tls.clone();
        let tls_state = tokio::task::spawn_blocking(move || TlsSource::load(&files))
            .await
            .expect("loading TLS files does not panic")?;
        let mut fresh = Vec::new();
        for &addr in new
            .listen
            .iter()
            .filter(|a| !self.config.listen.contains(a))
        {
            fresh.push((addr, bind(ListenField::Listen, addr).await?));
        }
        let new_admin = if new.admin != self.config.admin {
            Some(bind(ListenField::Admin, new.admin).await?)
        } else {
            None
        };

        let kept = self
            .listeners
            .iter()
            .filter(|l| new.listen.contains(&l.configured));
        let own = own::Sockets {
            listen: kept
                .map(|l| l.bound)
                .chain(fresh.iter().map(|(_, (_, b))| *b))
                .collect(),
            admin: Some(
                new_admin
                    .as_ref()
                    .map_or(self.admin_listener.bound, |(_, b)| *b),
            ),
        };
        let host = tokio::task::spawn_blocking(own::host_addresses)
            .await
            .expect("listing addresses does not panic");
        self.discovered.follow(&new, &own, host);
        self.configure_table(&new).await?;
        match self.tls.apply(tls_state) {
            Applied::Replaced { client_cert, .. } => {
                tracing::info!(client_cert = client_cert.as_str(), "certificates reloaded");
                tls::publish_client_cert(&self.metrics, &client_cert);
            }
            Applied::Kept { gone } => {
                tracing::warn!(client_cert = %gone.display(), "the client certificate file is gone; keeping the one loaded before");
            }
            Applied::Unchanged => {}
        }
        let restart_all = new.health != self.config.health;
        self.reconcile_monitors(&new, restart_all);
        self.reconcile_listeners(&new, fresh, new_admin);
        if let Some(tie) = new.zone_ambiguous.as_deref() {
            if new.zone_ambiguous != self.config.zone_ambiguous {
                warn_zone_tie(tie);
            }
        }
        self.addresses.follow(&new, &self.tasks, &self.background);
        self.config = new;
        Ok(())
    }

    /// Stops listeners no longer configured (their connections stay), starts the freshly bound
    /// ones, and moves the admin server when its address changed.
    fn reconcile_listeners(
        &mut self,
        new: &Config,
        fresh: Vec<(SocketAddr, (TcpListener, SocketAddr))>,
        new_admin: Option<(TcpListener, SocketAddr)>,
    ) {
        self.listeners.retain(|l| {
            let keep = new.listen.contains(&l.configured);
            if !keep {
                tracing::info!(addr = %l.bound, "listener removed; established connections stay");
                l.stop.cancel();
            }
            keep
        });
        for (configured, (listener, bound)) in fresh {
            self.spawn_listener(configured, listener, bound);
        }
        if let Some((listener, bound)) = new_admin {
            self.admin_listener.stop.cancel();
            let stop = CancellationToken::new();
            self.admin_tasks
                .spawn(self.admin.clone().serve(listener, stop.clone()));
            self.admin_listener = Listener {
                configured: new.admin,
                bound,
                stop,
            };
        }
    }

    /// Readiness 503 → stop accepting → `shutdown_grace` for connections to end → cut the rest →
    /// stop probes → admin last.
    pub async fn shutdown(self) {
        self.admin.shutting_down.store(true, Ordering::Relaxed);
        for l in &self.listeners {
            l.stop.cancel();
        }
        self.proxy.drain(self.config.shutdown_grace).await;
        for m in &self.monitors {
            m.stop.cancel();
        }
        self.background.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        self.admin_listener.stop.cancel();
        self.admin_tasks.close();
        self.admin_tasks.wait().await;
        tracing::info!("stopped");
    }

    /// Applies a discovered list: the table gets static ∪ discovered (removed backends have their
    /// connections closed, reason removed), new backends get monitors and are probed at once.
    async fn set_discovered(&mut self, members: Vec<Member>) -> Result<(), ApplyError> {
        if self.discovered.set(members) {
            let config = self.config.clone();
            self.configure_table(&config).await?;
            self.reconcile_monitors(&config, false);
        }
        Ok(())
    }

    async fn configure_table(&self, config: &Config) -> Result<(), ApplyError> {
        let (done, wait) = oneshot::channel();
        self.writer
            .send(TableCmd::Configure {
                routing: config.routing.clone(),
                backends: self.discovered.backends(config),
                done,
            })
            .await
            .map_err(|_| ApplyError::TableGone)?;
        wait.await.map_err(|_| ApplyError::TableGone)
    }

    /// Stops the monitors of backends no longer configured or whose spec changed (all of them
    /// when `restart_all`), and starts monitors for backends without one, each from the health
    /// the table already holds.
    fn reconcile_monitors(&mut self, config: &Config, restart_all: bool) {
        let specs = self.discovered.backends(config);
        self.monitors.retain(|m| {
            let keep = !restart_all && specs.iter().any(|b| b.probed_alike(&m.spec));
            if !keep {
                m.stop.cancel();
            }
            keep
        });
        let snap = self.table.load();
        for b in &snap.backends {
            if self.monitors.iter().any(|m| m.spec.id == b.spec.id) {
                continue;
            }
            let stop = self.background.child_token();
            let monitor = Monitor {
                spec: b.spec.clone(),
                health: config.health.clone(),
                initial: b.health.clone(),
                degraded: b.degraded.clone(),
                table: self.writer.clone(),
                live: b.live.clone(),
            };
            let probe = monitor.https_probe(self.tls.clone());
            self.tasks.spawn(monitor.run(probe, stop.clone()));
            self.monitors.push(MonitorHandle {
                spec: b.spec.clone(),
                stop,
            });
        }
    }

    fn spawn_listener(&mut self, configured: SocketAddr, listener: TcpListener, bound: SocketAddr) {
        let stop = CancellationToken::new();
        self.tasks
            .spawn(self.proxy.clone().serve(listener, stop.clone()));
        self.listeners.push(Listener {
            configured,
            bound,
            stop,
        });
    }
}

/// Loads the CA, client certificate and key exactly as [`App::start`] does (a client certificate
/// file that does not exist yet is fine: probes are anonymous), without binding or starting
/// anything: what `readyprism check` verifies.
pub fn check_files(config: &Config) -> Result<(), ApplyError> {
    TlsSource::load(&config.tls)?;
    Ok(())
}

/// How long [`App::shutdown`] may take at most: the grace period plus a second to cut and stop.
pub fn shutdown_bound(config: &Config) -> Duration {
    config.shutdown_grace + Duration::from_secs(1)
}
