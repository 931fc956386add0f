//! The admin HTTP server: `/livez`, `/readyz`, `/status` (JSON), `/config` (the resolved config,
//! YAML), `/metrics` (Prometheus text) and `/` (a page for people).
//!
//! Reads the same snapshot the proxy does; owns no state of its own beyond the shutting-down flag.
//! `status` owns the `/status` document's type, `config_view` what it says of the config,
//! `status_file` keeping the document on disk, `page` the HTML page, `slots` the connection cap,
//! `host` which `Host` names it (every path but `/livez` and `/readyz`, which say one bit and
//! which kubelet's probes reach with whatever `Host` they were given, is refused to another).

pub mod config_view;
pub mod host;
pub mod page;
mod slots;
pub mod status;
pub mod status_file;
pub(crate) mod timestamp;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accept::Acceptor;
use crate::metrics::{self, Metrics};
use crate::table::Table;
use crate::tls::TlsSource;
use config_view::ConfigCell;
pub use status::StatusDoc;

/// A client must send a whole request head within this (and an idle keep-alive connection is
/// closed after it): a probe or a scrape sends theirs at once; a slow writer is an attack.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// No admin connection lives longer than this, whatever it does.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);

/// At most this many admin connections at once. Kubelet probes, a scraper and an operator need a
/// handful; the cap keeps a local process from spending the descriptors the proxy shares with the
/// admin server. At the cap a newcomer sheds the connection that has gone longest without
/// starting a request, so stalled connections cannot lock kubelet's probes out.
pub const MAX_CONNECTIONS: usize = 64;

/// The methods the admin endpoints answer (the `Allow` header of a 405).
const ALLOWED_METHODS: &str = "GET, HEAD";

/// What the admin endpoints read.
#[derive(Debug)]
pub(crate) struct Admin {
    /// Routing state.
    pub table: Arc<Table>,
    /// Metric registry.
    pub metrics: Arc<Metrics>,
    /// TLS material, for the client-certificate status.
    pub tls: Arc<TlsSource>,
    /// Set at the start of shutdown: `/readyz` answers 503 from then on.
    pub shutting_down: AtomicBool,
    /// The running config as `/status` and `/config` show it.
    pub config: ConfigCell,
}

impl Admin {
    /// Serves until `stop` is cancelled; open admin connections end with it.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, stop: CancellationToken) {
        let tasks = TaskTracker::new();
        let mut slots = slots::Slots::new(MAX_CONNECTIONS);
        let bound = listener.local_addr().ok().map(|a| a.ip());
        let mut acceptor = Acceptor::new("admin", listener, stop.clone());
        while let Some((stream, peer)) = acceptor.next().await {
            // The addresses this connection reached the server at: what its `Host` may name.
            let reached: Vec<IpAddr> = bound
                .into_iter()
                .chain(stream.local_addr().ok().map(|a| a.ip()))
                .collect();
            let (mut slot, shed) = slots.admit();
            if shed.is_some() {
                self.metrics.admin_shed.inc();
                tracing::debug!(%peer, "admin connection limit reached; shed the connection longest without a request");
            }
            let admin = self.clone();
            let stop = stop.clone();
            tasks.spawn(async move {
                let activity = slot.activity();
                let svc = service_fn(move |req| {
                    activity.request_started();
                    let admin = admin.clone();
                    let answer = admin.route(&req, &reached);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), svc);
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = slot.shed() => {}
                    _ = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
                    r = conn => if let Err(e) = r { tracing::debug!(error = %e, "admin connection error") },
                }
            });
            // Let the connection just accepted read the request it sent (and the shed one end)
            // before the next accept: a burst of connects cannot shed a newcomer unread, and at
            // most one shed connection outlives its slot.
            tokio::task::yield_now().await;
        }
        tasks.close();
        tasks.wait().await;
    }

    /// The `/status` document as of now.
    pub fn status(&self) -> StatusDoc {
        let tls = self.tls.current();
        StatusDoc::of(
            &self.table.load(),
            self.shutting_down.load(Ordering::Relaxed),
            (&tls.client_cert).into(),
            Some(self.config.get().status),
        )
        .with_expiry(&tls.client_cert, crate::tls::unix_now())
    }

    /// The answer to `req`, which reached the server at `reached`.
    fn route<B>(&self, req: &Request<B>, reached: &[IpAddr]) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
            resp.headers_mut().insert(
                header::ALLOW,
                header::HeaderValue::from_static(ALLOWED_METHODS),
            );
            return resp;
        }
        let guarded = !matches!(req.uri().path(), "/livez" | "/readyz");
        if let Some(refused) = guarded.then(|| named(req, reached).err()).flatten() {
            tracing::debug!(path = req.uri().path(), reason = %refused, "admin request refused");
            return respond(
                StatusCode::FORBIDDEN,
                "text/plain; charset=utf-8",
                format!("forbidden: {refused}\n"),
            );
        }
        match req.uri().path() {
            "/livez" => text(StatusCode::OK, "ok\n"),
            "/readyz" => {
                if self.shutting_down.load(Ordering::Relaxed) {
                    text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
                } else if self.table.load().any_ready() {
                    text(StatusCode::OK, "ok\n")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "no ready backend\n")
                }
            }
            "/status" => match serde_json::to_string(&self.status()) {
                Ok(body) => respond(StatusCode::OK, "application/json", body),
                Err(e) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    format!("cannot encode status: {e}\n"),
                ),
            },
            "/metrics" => respond(StatusCode::OK, metrics::CONTENT_TYPE, self.metrics.encode()),
            "/" => respond(
                StatusCode::OK,
                "text/html; charset=utf-8",
                page::render(&self.status(), &self.table.recent()),
            ),
            "/config" => match self.config.get().resolved {
                Ok(yaml) => respond(StatusCode::OK, "application/yaml", yaml),
                Err(e) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    format!("cannot print the config: {e}\n"),
                ),
            },
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try / /livez /readyz /status /config /metrics\n",
            ),
        }
    }
}

/// Whether `req` names this server ([`host::judge`]): its `Host` headers, and the authority of an
/// absolute-form target, which a client may send instead.
fn named<B>(req: &Request<B>, reached: &[IpAddr]) -> Result<(), host::Refused> {
    let hosts: Vec<&[u8]> = req
        .headers()
        .get_all(header::HOST)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    host::judge(&hosts, reached)?;
    match req.uri().authority() {
        Some(a) => host::judge(&[a.as_str().as_bytes()], reached),
        None => Ok(()),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    respond(status, "text/plain; charset=utf-8", body.to_string())
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}
