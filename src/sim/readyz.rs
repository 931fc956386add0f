//! kube-apiserver's health endpoints (`/readyz`, `/healthz`, `/livez`) as the simulated apiserver
//! answers them: the named checks, each switchable, and the body rendered byte for byte as
//! k8s.io/apiserver does (`pkg/server/healthz/healthz.go`, `handleRootHealth`; the `shutdown`
//! check from `pkg/server/healthz.go`, `shutdownCheck`).
//!
//! Owns the check list and the pure rendering of one answer. Does not own what makes a check fail
//! (the switches, the etcd read, the shutdown phase: `apiserver::Control`, `routes`).
//!
//! The format, as `handleRootHealth` writes it:
//! - every check passes: `200 ok`; with `?verbose`, one line per check (`[+]ping ok`) and then
//!   `readyz check passed`;
//! - a check fails: `500`, always verbose: `[+]NAME ok` / `[-]NAME failed: reason withheld` (the
//!   error goes only to the apiserver's log), then `readyz check failed` (`http.Error` adds the
//!   last newline);
//! - `?exclude=NAME` (repeatable) leaves a check out, listed as `[+]NAME excluded: ok`; a name that
//!   matches no check adds `warn: some health checks cannot be excluded: no matches for "NAME"`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// kube-apiserver's `/readyz` checks, in its order (the `poststarthook/…` ones are two of its
/// many). The `shutdown` check is last: it is added with the readiness-only checks.
pub const CHECKS: [&str; 8] = [
    "ping",
    "log",
    "etcd",
    "etcd-readiness",
    "informer-sync",
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/rbac/bootstrap-roles",
    SHUTDOWN,
];

/// The check that fails from the start of a graceful shutdown (`--shutdown-delay-duration`).
pub const SHUTDOWN: &str = "shutdown";

/// The checks the etcd switch (`Control::set_ready`, the `--etcd` read) fails: kube-apiserver's
/// storage checks, `etcd` on every endpoint, `etcd-readiness` on `/readyz`.
pub const ETCD_CHECKS: [&str; 2] = ["etcd", "etcd-readiness"];

/// Checks only `/readyz` runs; `/healthz` and `/livez` run the others.
const READINESS_ONLY: [&str; 3] = ["etcd-readiness", "informer-sync", SHUTDOWN];

/// One of the health endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/readyz`: every check.
    Readyz,
    /// `/healthz` (deprecated in kube, still served): no readiness-only check.
    Healthz,
    /// `/livez`: no readiness-only check.
    Livez,
}

impl Endpoint {
    /// The endpoint of `path`, if it is one.
    pub fn of(path: &str) -> Option<Endpoint> {
        match path {
            "/readyz" => Some(Endpoint::Readyz),
            "/healthz" => Some(Endpoint::Healthz),
            "/livez" => Some(Endpoint::Livez),
            _ => None,
        }
    }

    /// The name its body ends with (`readyz check failed`).
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Readyz => "readyz",
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
        }
    }

    /// Whether it runs the check `name`.
    pub fn runs(self, name: &str) -> bool {
        self == Endpoint::Readyz || !READINESS_ONLY.contains(&name)
    }
}

/// What a request's query asks of a health endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// `verbose` is present (with any value, as Go's `r.URL.Query()["verbose"]` finds it).
    pub verbose: bool,
    /// The `exclude` values, decoded.
    pub exclude: BTreeSet<String>,
}

impl Query {
    /// Parses a URL query (`verbose&exclude=etcd&exclude=log`).
    pub fn parse(query: Option<&str>) -> Query {
        let mut q = Query::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match decode(key).as_str() {
                "verbose" => q.verbose = true,
                "exclude" => {
                    q.exclude.insert(decode(value));
                }
                _ => {}
            }
        }
        q
    }
}

/// A query component decoded as Go's `url.QueryUnescape` does for what a test sends: `+` is a
/// space, `%XX` a byte; a malformed escape stays as it is.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One answer of `endpoint`: status and body, from each check's result (`(name, passing)`, in
/// order; checks the endpoint does not run are skipped) and the request's `query`.
pub fn render(endpoint: Endpoint, checks: &[(&str, bool)], query: &Query) -> (u16, String) {
    let mut excluded = query.exclude.clone();
    let mut out = String::new();
    let mut failed = false;
    for &(name, passing) in checks.iter().filter(|(n, _)| endpoint.runs(n)) {
        if excluded.remove(name) {
            let _ = writeln!(out, "[+]{name} excluded: ok");
        } else if passing {
            let _ = writeln!(out, "[+]{name} ok");
        } else {
            let _ = writeln!(out, "[-]{name} failed: reason withheld");
            failed = true;
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
        let _ = writeln!(
            out,
            "warn: some health checks cannot be excluded: no matches for {}",
            quoted.join(",")
        );
    }
    let name = endpoint.name();
    if failed {
        // `http.Error(w, fmt.Sprintf("%s%s check failed", …), 500)`: Fprintln adds the newline.
        let _ = writeln!(out, "{name} check failed");
        (500, out)
    } else if query.verbose {
        let _ = writeln!(out, "{name} check passed");
        (200, out)
    } else {
        (200, "ok".to_string())
    }
}

#[cfg(test)]
mod tests;
