//! What the simulated apiserver answers: `/readyz`, `/healthz` and `/livez` (kube-apiserver's
//! named checks, rendered by `readyz`: switches, a script, a fixed answer, a real linearizable
//! etcd read, the graceful shutdown), `/whoami` and `/name` (which site this
//! is), `/version`, `/watch`, a long-lived stream like a kubelet's watch, the `default/kubernetes`
//! Endpoints object discovery polls (whatever the test or demo set), `PUT` of a node lease (500
//! where its etcd read fails), priority and fairness's `429` and a loaded request path (every
//! path but the health endpoints'), and `/slow` (answered after 2 s). Plus the raw echo protocol for
//! relay tests.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::apiserver::{Control, Phase};
use super::readyz::{self, Endpoint, Query, ETCD_CHECKS};

/// A response body: a whole answer or an endless stream.
pub(super) type AnyBody = BoxBody<Bytes, Infallible>;

/// How often `/watch` sends an event: often enough that a client notices a dead stream within a
/// second.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Where node leases are renewed (`PUT <LEASES><node>`).
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/";

/// How long `/slow` holds its answer.
pub const SLOW_HOLD: Duration = Duration::from_secs(2);

pub(super) async fn answer<B>(
    req: &Request<B>,
    control: &Control,
    peer_cert: Option<Arc<Vec<u8>>>,
) -> Response<AnyBody> {
    let path = req.uri().path();
    let is_health = Endpoint::of(path).is_some();
    if !is_health && *control.phase.borrow() == Phase::Rejecting {
        return retry_after();
    }
    if !is_health {
        let delay = control.request_delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_micros(delay)).await;
        }
        if control.throttled.load(Ordering::SeqCst) {
            return too_many_requests();
        }
    }
    // What a graceful shutdown with `--shutdown-send-retry-after` waits for: every request in
    // flight but the health endpoints and the long-running watch.
    let _in_flight = (!is_health && path != "/watch").then(|| InFlight::enter(control));
    let (status, body) = match path {
        "/readyz" if control.readyz_trickle_us.load(Ordering::SeqCst) > 0 => {
            let every = Duration::from_micros(control.readyz_trickle_us.load(Ordering::SeqCst));
            control.readyz_hits.fetch_add(1, Ordering::SeqCst);
            // A slowloris: status and headers at once, then 1000 bytes one per tick.
            let body = Ticking::new(every, |n| (n <= 1000).then(|| Bytes::from_static(b"x")));
            return Response::new(body.boxed());
        }
        path @ ("/readyz" | "/healthz" | "/livez") => {
            let endpoint = Endpoint::of(path).unwrap_or(Endpoint::Readyz);
            let (status, body) = health(endpoint, req.uri().query(), control, peer_cert).await;
            let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
            *resp.status_mut() = status;
            // As Go's `http.Error` and `handleRootHealth` set them.
            let headers = resp.headers_mut();
            headers.insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            headers.insert(
                hyper::header::X_CONTENT_TYPE_OPTIONS,
                hyper::header::HeaderValue::from_static("nosniff"),
            );
            if status == StatusCode::TOO_MANY_REQUESTS {
                // A 429 set by a test: kube-apiserver's come with `Retry-After` (its shutdown's
                // `with_retry_after.go`, and priority and fairness).
                headers.insert(
                    hyper::header::RETRY_AFTER,
                    hyper::header::HeaderValue::from_static("5"),
                );
            }
            return resp;
        }
        crate::discovery::PATH => {
            control.endpoints_hits.fetch_add(1, Ordering::SeqCst);
            match control.endpoints.load_full() {
                Some(answer) if control.endpoints_cut.load(Ordering::SeqCst) => {
                    // The head announces the whole body; half of it comes, then the end.
                    let (code, body) = (*answer).clone();
                    let all = Bytes::from(body.into_bytes());
                    let whole = all.len();
                    let mut sent = Some(all.slice(..whole / 2));
                    // A body of unknown size, so the announced length is the head's.
                    let body = Ticking::new(Duration::from_millis(1), move |_| sent.take());
                    let mut resp = Response::new(body.boxed());
                    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
                    resp.headers_mut()
                        .insert(hyper::header::CONTENT_LENGTH, whole.into());
                    return resp;
                }
                Some(answer) => {
                    let (code, body) = (*answer).clone();
                    let code =
                        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    (code, body)
                }
                None => (
                    StatusCode::NOT_FOUND,
                    "endpoints \"kubernetes\" not found".to_string(),
                ),
            }
        }
        "/name" | "/whoami" => (StatusCode::OK, control.name.clone()),
        "/version" => {
            control.version_gets.fetch_add(1, Ordering::SeqCst);
            (StatusCode::OK, format!("{{\"major\":\"1\",\"minor\":\"32\",\"gitVersion\":\"v1.32.0-fake\",\"platform\":\"{}\"}}", control.name))
        }
        p if p.starts_with(LEASES) && req.method() == hyper::Method::PUT => {
            // A node lease renewal: written to etcd, so it fails where a write would.
            match control.etcd.load_full() {
                Some(url) if super::etcd::linearizable_read(&url).await.is_err() => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "etcdserver: request timed out".to_string(),
                ),
                _ => (StatusCode::OK, format!("{{\"kind\":\"Lease\",\"apiVersion\":\"coordination.k8s.io/v1\",\"metadata\":{{\"name\":\"{}\"}},\"from\":\"{}\"}}", &p[LEASES.len()..], control.name)),
            }
        }
        "/slow" => {
            // A request the apiserver holds open: in flight, deterministically.
            tokio::time::sleep(SLOW_HOLD).await;
            (StatusCode::OK, control.name.clone())
        }
        "/watch" => {
            // One JSON line per tick, naming the site, until the client goes away.
            let name = control.name.clone();
            let stream = Ticking::new(WATCH_EVERY, move |n| {
                let line = format!("{{\"type\":\"BOOKMARK\",\"n\":{n},\"from\":\"{name}\"}}\n");
                Some(Bytes::from(line))
            });
            return Response::new(stream.boxed());
        }
        _ => (StatusCode::NOT_FOUND, "not found".to_string()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = status;
    resp
}

/// kube-apiserver's answer to a new request once its shutdown delay is over, with
/// `--shutdown-send-retry-after` (k8s.io/apiserver v0.37.2 `pkg/server/filters/with_retry_after.go`;
/// `http.Error` sets the type and adds the newline).
/// Priority and fairness refusing a request (k8s.io/apiserver `filters/maxinflight.go`
/// `tooManyRequests`: `Retry-After: 1` and `http.Error`'s text).
fn too_many_requests() -> Response<AnyBody> {
    let body = "Too many requests, please try again later.\n";
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = resp.headers_mut();
    headers.insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn retry_after() -> Response<AnyBody> {
    let body = "The apiserver is shutting down, please try again later.\n";
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = resp.headers_mut();
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    headers.insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("5"),
    );
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// One request in flight, counted in [`Control::in_flight`] until dropped.
struct InFlight<'a>(&'a Control);

impl<'a> InFlight<'a> {
    fn enter(control: &'a Control) -> InFlight<'a> {
        control.in_flight.send_modify(|n| *n += 1);
        InFlight(control)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A health endpoint's answer: a fixed one if set, else each check's result rendered as
/// kube-apiserver does (`readyz`). `/readyz` and `/healthz` also count the hit and record the
/// client certificate.
async fn health(
    endpoint: Endpoint,
    query: Option<&str>,
    control: &Control,
    peer_cert: Option<Arc<Vec<u8>>>,
) -> (StatusCode, String) {
    let delay = control.readyz_delay_us.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_micros(delay)).await;
    }
    if endpoint != Endpoint::Livez {
        control.last_client_cert.store(peer_cert);
    }
    let script = control.scripted();
    let query = Query::parse(query);
    // kube-apiserver's etcd checks, one after another, each rate-limited (`etcd_check`); a check
    // the endpoint does not run, or the query excludes, is not run.
    let mut read_failed = [false; 2];
    if let Some(url) = control.etcd.load_full() {
        for (i, name) in ETCD_CHECKS.iter().enumerate() {
            if !endpoint.runs(name) || query.exclude.contains(*name) {
                continue;
            }
            if let Err(e) = control.etcd_checks[i].run(&url).await {
                // As kube-apiserver: the reason goes to the log, the body withholds it.
                tracing::debug!(name = %control.name, check = name, error = %e, "etcd check failed");
                read_failed[i] = true;
            }
        }
    }
    if endpoint != Endpoint::Livez {
        control.readyz_hits.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(answer) = control.readyz_answer.load_full() {
        let (code, body) = (*answer).clone();
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (code, body);
    }
    // A scripted pass overrides the switches, not a failed etcd read.
    let results = control.check_results(script == Some(false));
    let checks: Vec<(&str, bool)> = results
        .iter()
        .map(|(name, passing)| {
            let read = ETCD_CHECKS.iter().position(|c| c == name);
            let failed_read = read.is_some_and(|i| read_failed[i]);
            let passing = (*passing || script == Some(true)) && !failed_read;
            (name.as_str(), passing)
        })
        .collect();
    let (code, body) = readyz::render(endpoint, &checks, &query);
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, body)
}

/// A body that sends `chunk(n)` on the n-th tick (from 1) and ends when it returns `None`:
/// `/watch`'s endless stream and the slowloris `/readyz`.
struct Ticking<F> {
    tick: tokio::time::Interval,
    n: u64,
    chunk: F,
}

impl<F: FnMut(u64) -> Option<Bytes>> Ticking<F> {
    fn new(every: Duration, chunk: F) -> Self {
        Ticking {
            tick: tokio::time::interval(every),
            n: 0,
            chunk,
        }
    }
}

impl<F: FnMut(u64) -> Option<Bytes> + Unpin> Body for Ticking<F> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.tick.poll_tick(cx).is_pending() {
            return Poll::Pending;
        }
        self.n += 1;
        let n = self.n;
        Poll::Ready((self.chunk)(n).map(|b| Ok(Frame::data(b))))
    }
}

/// `RAW\n` protocol: greet with the name, echo everything (or, when told to stall, only the first
/// bytes; when told to reset, nothing: the client's first bytes get a reset; while told to hold,
/// nothing yet: what was read is echoed once released), and on EOF say `bye\n` and close.
pub(super) async fn raw_echo(mut stream: TcpStream, control: &Control) {
    let mut hello = [0u8; 4];
    if stream.read_exact(&mut hello).await.is_err()
        || stream
            .write_all(format!("{}\n", control.name).as_bytes())
            .await
            .is_err()
    {
        return;
    }
    if control.raw_reset.load(Ordering::SeqCst) {
        // Closed with its bytes unread and a zero linger: the kernel sends a reset. (A peek
        // waits for bytes; readiness alone may be left over from the hello.)
        let _ = stream.peek(&mut [0u8; 1]).await;
        let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
        return;
    }
    let stall_after = match control.raw_stall_after.load(Ordering::SeqCst) {
        0 => u64::MAX,
        n => n,
    };
    let mut echoed = 0u64;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if echoed >= stall_after {
            // Stalled mid-response: the socket stays open, unread and unwritten, until the
            // fake's shutdown drops this task.
            return std::future::pending().await;
        }
        let room = usize::try_from(stall_after - echoed).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        match stream.read(&mut buf[..want]).await {
            Ok(0) => {
                let _ = stream.write_all(b"bye\n").await;
                let _ = stream.shutdown().await;
                return;
            }
            Ok(n) => {
                // Only the sender's drop ends the wait otherwise, and `control` holds it.
                let _ = control.raw_hold.subscribe().wait_for(|held| !held).await;
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                echoed += n as u64;
            }
            Err(_) => return,
        }
    }
}
