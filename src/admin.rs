//! The admin HTTP server: `/livez`, `/readyz`, `/status` (JSON) and `/metrics` (Prometheus text).
//!
//! Reads the same snapshot the proxy does; owns no state of its own beyond the shutting-down flag.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Snapshot, State};
use crate::metrics::{self, Metrics};
use crate::pick::Pick;
use crate::table::Table;
use crate::tls::TlsSource;

/// What the admin endpoints read.
#[derive(Debug)]
pub struct Admin {
    /// Routing state.
    pub table: Arc<Table>,
    /// Metric registry.
    pub metrics: Arc<Metrics>,
    /// TLS material, for the client-certificate status.
    pub tls: Arc<TlsSource>,
    /// Set at the start of shutdown: `/readyz` answers 503 from then on.
    pub shutting_down: AtomicBool,
}

impl Admin {
    /// Serves until `stop` is cancelled; open admin connections end with it.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, stop: CancellationToken) {
        let tasks = TaskTracker::new();
        loop {
            let (stream, _) = tokio::select! {
                _ = stop.cancelled() => break,
                a = listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin accept failed");
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => continue,
                        }
                    }
                },
            };
            let admin = self.clone();
            let stop = stop.clone();
            tasks.spawn(async move {
                let svc = service_fn(move |req| {
                    let admin = admin.clone();
                    async move { Ok::<_, Infallible>(admin.route(&req)) }
                });
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                tokio::select! {
                    _ = stop.cancelled() => {}
                    r = conn => if let Err(e) = r { tracing::debug!(error = %e, "admin connection error") },
                }
            });
        }
        tasks.close();
        tasks.wait().await;
    }

    fn route<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        }
        match req.uri().path() {
            "/livez" => text(StatusCode::OK, "ok\n"),
            "/readyz" => {
                let snap = self.table.load();
                if self.shutting_down.load(Ordering::Relaxed) {
                    text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
                } else if snap.any_ready() {
                    text(StatusCode::OK, "ok\n")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "no ready backend\n")
                }
            }
            "/status" => {
                let body = status_json(
                    &self.table.load(),
                    self.shutting_down.load(Ordering::Relaxed),
                    self.tls.current().client_cert.as_str(),
                );
                respond(StatusCode::OK, "application/json", body.to_string())
            }
            "/metrics" => respond(StatusCode::OK, metrics::CONTENT_TYPE, self.metrics.encode()),
            _ => text(
                StatusCode::NOT_FOUND,
                "not found: try /livez /readyz /status /metrics\n",
            ),
        }
    }
}

/// The `/status` document. `rank` is the position in the current pick order (null: not a
/// candidate); `mode` is `normal`, `fail_open` (routing to backends failing their checks),
/// `refuse`, or `starting` (nothing ready yet; trying backends not yet checked).
pub fn status_json(snap: &Snapshot, shutting_down: bool, client_cert: &str) -> serde_json::Value {
    let pick = snap.pick(0);
    let failing = |i: &usize| snap.backends[*i].health.state == State::Unready;
    let mode = match &pick {
        Pick::Ready(_) => "normal",
        Pick::Panic(order) if order.iter().any(failing) => "fail_open",
        // Nothing ready yet, but backends not yet checked are tried (start-up, just added).
        Pick::Panic(_) => "starting",
        Pick::Refuse => "refuse",
    };
    let backends: Vec<serde_json::Value> = snap
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            json!({
                "address": b.spec.address,
                "zone": b.spec.zone,
                "state": b.health.state.as_str(),
                "latency_ms": b.health.latency.map(|l| (l.as_secs_f64() * 1e5).round() / 100.0),
                "last_error": b.health.last_error.as_deref(),
                "active_connections": b.live.metrics.active.get(),
                "rank": pick.order().iter().position(|&j| j == i),
            })
        })
        .collect();
    json!({
        "zone": snap.zone,
        "ready": snap.any_ready() && !shutting_down,
        "mode": mode,
        "shutting_down": shutting_down,
        "client_cert": client_cert,
        "generation": snap.generation,
        "backends": backends,
    })
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::{Backend, BackendLive, BackendSpec, Health};
    use crate::config::WhenNoneReady;

    fn snapshot(states: &[State], policy: WhenNoneReady) -> Snapshot {
        let metrics = Metrics::new();
        let backends = states
            .iter()
            .enumerate()
            .map(|(i, &state)| Backend {
                spec: Arc::new(BackendSpec {
                    address: format!("10.0.0.{i}:6443"),
                    host: format!("10.0.0.{i}"),
                    port: 6443,
                    zone: None,
                    server_name: rustls_pki_types::ServerName::try_from("kubernetes")
                        .expect("name"),
                }),
                health: Health {
                    state,
                    ..Health::UNKNOWN
                },
                live: Arc::new(BackendLive::new(
                    metrics.backend(&format!("10.0.0.{i}:6443")),
                )),
                evict_epoch: 0,
            })
            .collect();
        Snapshot {
            generation: 1,
            zone: None,
            backends,
            when_none_ready: policy,
            connect_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn mode_says_what_new_connections_get() {
        use State::*;
        use WhenNoneReady::*;
        let cases = [
            (vec![Ready, Unready], FailOpen, "normal"),
            (vec![Unready, Unready], FailOpen, "fail_open"),
            (vec![Unknown, Unready], FailOpen, "fail_open"),
            (vec![Unknown, Unknown], FailOpen, "starting"),
            (vec![Unknown, Unready], Refuse, "starting"),
            (vec![Unready, Unready], Refuse, "refuse"),
        ];
        for (states, policy, want) in cases {
            let v = status_json(&snapshot(&states, policy), false, "none");
            assert_eq!(v["mode"], want, "{states:?} {policy:?}");
        }
    }
}
