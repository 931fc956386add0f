//! The knobs and counters of one simulated apiserver, shared by its tasks: which checks fail,
//! scripted answers, delays, misbehaviours, and the graceful-shutdown phase.
//!
//! Owns the switches and what one `/readyz` answer's checks are. Does not own serving
//! (`apiserver`), rendering (`readyz`) or the shutdown timeline (`shutdown`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::watch;

use super::readyz::{CHECKS, ETCD_CHECKS, SHUTDOWN};
use super::shutdown::Phase;

/// One named check and whether its switch lets it pass.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Check {
    name: String,
    passing: bool,
}

/// How the fake treats new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Behaviour {
    /// TLS and HTTP as a real apiserver.
    Serve = 0,
    /// Accept TCP and never say anything (a process stuck before TLS).
    Hang = 1,
    /// Accept TCP and reset at once.
    Reset = 2,
    /// Complete TLS, then never answer HTTP (a process stuck behind its TLS terminator).
    HangHttp = 3,
}

/// The knobs and counters of a running fake, shared with its tasks.
#[derive(Debug)]
pub struct Control {
    /// Name returned by `/name` and the raw echo greeting.
    pub name: String,
    /// kube-apiserver's checks in its order, each switched on or off ([`Control::set_check`]).
    checks: ArcSwap<Vec<Check>>,
    /// Where a graceful shutdown is: the `shutdown` check fails from `Draining` on.
    pub(super) phase: watch::Sender<Phase>,
    /// False once the accept loop has ended and dropped its listener.
    pub(super) listening: watch::Sender<bool>,
    /// Requests in flight that a graceful shutdown waits for: all but the health endpoints and
    /// the long-running `/watch` (kube-apiserver's `NonLongRunningRequestWaitGroup`).
    pub(super) in_flight: watch::Sender<usize>,
    mode: AtomicU8,
    pub(super) readyz_delay_us: AtomicU64,
    /// When non-zero, `/readyz` answers 200 at once and then its body one byte per this many µs.
    pub(super) readyz_trickle_us: AtomicU64,
    /// When non-zero, a `RAW\n` connection echoes this many bytes, then neither reads nor writes.
    pub(super) raw_stall_after: AtomicU64,
    /// When set, a `RAW\n` connection greets, then resets at the client's first bytes.
    pub(super) raw_reset: AtomicBool,
    /// While true, `RAW\n` connections read what the client sends but hold its echo (their
    /// answer) until it turns false.
    pub(super) raw_hold: watch::Sender<bool>,
    fail_next: AtomicU64,
    pass_next: AtomicU64,
    handshake_delay_us: AtomicU64,
    pub(super) accepting: AtomicBool,
    /// `/readyz` requests answered.
    pub readyz_hits: AtomicU64,
    /// Completed TLS handshakes.
    pub handshakes: AtomicU64,
    /// A fixed `/readyz` answer (status, body) replacing the checks: redirects, huge bodies.
    pub readyz_answer: ArcSwapOption<(u16, String)>,
    /// The answer (status, body) to `GET /api/v1/namespaces/default/endpoints/kubernetes`;
    /// unset: 404, as an apiserver without the object. See [`Control::set_endpoints`].
    pub endpoints: ArcSwapOption<(u16, String)>,
    /// Endpoints requests answered.
    pub endpoints_hits: AtomicU64,
    /// The Endpoints answer is cut off: its head announces the whole body, half of it is sent,
    /// then the connection closes.
    pub endpoints_cut: AtomicBool,
    /// DER of the client certificate presented on the latest `/readyz` (None: anonymous).
    pub last_client_cert: ArcSwapOption<Vec<u8>>,
    /// When set, `/readyz` also needs a linearizable read from this etcd client URL to pass.
    pub(super) etcd: ArcSwapOption<String>,
    /// While set, every request but the health endpoints' is refused `429` with `Retry-After:
    /// 1`, as priority and fairness refuses what a saturated priority level cannot queue.
    pub(super) throttled: AtomicBool,
    /// Every request but the health endpoints' waits this long first (a loaded request path).
    pub(super) request_delay_us: AtomicU64,
    /// `/version` requests answered (the request check's default path).
    pub version_gets: AtomicU64,
    /// kube-apiserver's two rate-limited etcd checks on that URL: `etcd`, `etcd-readiness`.
    pub(super) etcd_checks: [super::etcd_check::EtcdCheck; 2],
}

impl Control {
    /// A fake's knobs: every check passing, serving, no script.
    pub(super) fn new(name: &str) -> Control {
        let checks = CHECKS
            .iter()
            .map(|&n| Check {
                name: n.to_string(),
                passing: true,
            })
            .collect();
        Control {
            name: name.to_string(),
            checks: ArcSwap::from_pointee(checks),
            phase: watch::Sender::new(Phase::Serving),
            listening: watch::Sender::new(true),
            in_flight: watch::Sender::new(0),
            mode: AtomicU8::new(Behaviour::Serve as u8),
            readyz_delay_us: AtomicU64::new(0),
            readyz_trickle_us: AtomicU64::new(0),
            raw_stall_after: AtomicU64::new(0),
            raw_reset: AtomicBool::new(false),
            raw_hold: watch::Sender::new(false),
            fail_next: AtomicU64::new(0),
            pass_next: AtomicU64::new(0),
            handshake_delay_us: AtomicU64::new(0),
            accepting: AtomicBool::new(true),
            readyz_hits: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            readyz_answer: ArcSwapOption::empty(),
            endpoints: ArcSwapOption::empty(),
            endpoints_hits: AtomicU64::new(0),
            endpoints_cut: AtomicBool::new(false),
            last_client_cert: ArcSwapOption::empty(),
            etcd: ArcSwapOption::empty(),
            etcd_checks: Default::default(),
            throttled: AtomicBool::new(false),
            request_delay_us: AtomicU64::new(0),
            version_gets: AtomicU64::new(0),
        }
    }

    /// Makes `/readyz` answer 200 (`true`) or 500 with its etcd checks failing (`false`:
    /// `[-]etcd failed`, `[-]etcd-readiness failed`, as an apiserver whose etcd lost quorum).
    pub fn set_ready(&self, ready: bool) {
        for name in ETCD_CHECKS {
            self.set_check(name, ready);
        }
    }

    /// Whether every check's switch lets it pass and no shutdown has begun (the scripted answers
    /// and the etcd read aside).
    pub fn is_ready(&self) -> bool {
        self.checks.load().iter().all(|c| c.passing) && *self.phase.borrow() == Phase::Serving
    }

    /// Makes the check `name` pass or fail on every health endpoint that runs it. A name
    /// kube-apiserver does not have is added before `shutdown`.
    pub fn set_check(&self, name: &str, passing: bool) {
        self.checks.rcu(|checks| {
            let mut checks = Vec::clone(checks);
            match checks.iter_mut().find(|c| c.name == name) {
                Some(c) => c.passing = passing,
                None => {
                    let at = checks
                        .iter()
                        .position(|c| c.name == SHUTDOWN)
                        .unwrap_or(checks.len());
                    let name = name.to_string();
                    checks.insert(at, Check { name, passing });
                }
            }
            checks
        });
    }

    /// Each check's result for one answer, in order: its switch, the etcd checks failed by
    /// `etcd_failed` (a failed read or a scripted failure), `shutdown` failed once a shutdown
    /// began.
    pub(super) fn check_results(&self, etcd_failed: bool) -> Vec<(String, bool)> {
        let shutting_down = *self.phase.borrow() != Phase::Serving;
        self.checks
            .load()
            .iter()
            .map(|c| {
                let failed = (etcd_failed && ETCD_CHECKS.contains(&c.name.as_str()))
                    || (shutting_down && c.name == SHUTDOWN);
                (c.name.clone(), c.passing && !failed)
            })
            .collect()
    }

    /// The graceful-shutdown phase, to wait on (`wait_for(|p| *p == Phase::Unlistened)`).
    pub fn shutdown_phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Refuses (`true`) every request but the health endpoints' with `429`, as a saturated
    /// priority level does; `/readyz` still passes (it is exempt).
    pub fn set_throttled(&self, throttled: bool) {
        self.throttled.store(throttled, Ordering::SeqCst);
    }

    /// Delays every request but the health endpoints' by `d` (a loaded request path; `/readyz`
    /// stays fast).
    pub fn set_request_delay(&self, d: Duration) {
        self.request_delay_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Delays every `/readyz` answer by `d` (simulated distance or load).
    pub fn set_readyz_delay(&self, d: Duration) {
        self.readyz_delay_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// The next `n` `/readyz` answers fail their etcd checks, whatever [`Control::set_ready`]
    /// says.
    pub fn fail_next(&self, n: u64) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    /// The next `n` `/readyz` answers pass, whatever the checks say.
    pub fn pass_next(&self, n: u64) {
        self.pass_next.store(n, Ordering::SeqCst);
    }

    /// This answer's script, if any is left: `Some(false)` fails the etcd checks, `Some(true)`
    /// passes the whole answer; `None`: the checks decide.
    pub(super) fn scripted(&self) -> Option<bool> {
        let take = |c: &AtomicU64| {
            c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if take(&self.fail_next) {
            Some(false)
        } else if take(&self.pass_next) {
            Some(true)
        } else {
            None
        }
    }

    /// Makes `/readyz` depend on a linearizable read from the etcd member at `client_url`, as
    /// kube-apiserver's etcd checks do: without quorum, 500 `[-]etcd failed`.
    pub fn set_etcd(&self, client_url: &str) {
        self.etcd.store(Some(Arc::new(client_url.to_string())));
    }

    /// Serves an Endpoints object listing `addrs` (each with an `https` port), as a cluster with
    /// these apiservers would.
    pub fn set_endpoints(&self, addrs: &[SocketAddr]) {
        let body = crate::discovery::answer::endpoints_json(addrs);
        self.endpoints.store(Some(Arc::new((200, body))));
    }

    /// Answers the Endpoints request with `status` and `body` as given (the bad answers).
    pub fn set_endpoints_answer(&self, status: u16, body: String) {
        self.endpoints.store(Some(Arc::new((status, body))));
    }

    /// Cuts the Endpoints answer off mid-body (`true`) or sends it whole again.
    pub fn set_endpoints_cut(&self, cut: bool) {
        self.endpoints_cut.store(cut, Ordering::SeqCst);
    }

    /// Makes `/readyz` a slowloris: status and headers at once, then a 1000-byte body one byte
    /// every `d`.
    pub fn set_readyz_trickle(&self, d: Duration) {
        self.readyz_trickle_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Makes new `RAW\n` connections stall mid-response: echo the first `bytes`, then hold the
    /// connection without reading or writing until the fake stops (0: never stall).
    pub fn set_raw_stall_after(&self, bytes: u64) {
        self.raw_stall_after.store(bytes, Ordering::SeqCst);
    }

    /// Makes new `RAW\n` connections abort mid-stream: greet, then reset (RST, not FIN) when the
    /// client's first bytes arrive, unread, as an apiserver that crashes or aborts a stream does.
    pub fn set_raw_reset(&self, reset: bool) {
        self.raw_reset.store(reset, Ordering::SeqCst);
    }

    /// Holds (`true`) the echo of what `RAW\n` connections read from now on, new and open ones
    /// alike, until released (`false`): an answer the backend is still working on.
    pub fn set_raw_hold(&self, hold: bool) {
        self.raw_hold.send_replace(hold);
    }

    /// Delays every TLS handshake by `d` (a far or slow site: must not count as `/readyz` latency).
    pub fn set_handshake_delay(&self, d: Duration) {
        self.handshake_delay_us
            .store(d.as_micros() as u64, Ordering::SeqCst);
    }

    /// Stops (`false`) or resumes calling `accept`: with the backlog full, new dials then hang in
    /// the SYN stage, like a black-holed site.
    pub fn set_accepting(&self, accepting: bool) {
        self.accepting.store(accepting, Ordering::SeqCst);
    }

    /// Changes how new connections are treated.
    pub fn set_mode(&self, mode: Behaviour) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    pub(super) fn mode(&self) -> Behaviour {
        match self.mode.load(Ordering::SeqCst) {
            1 => Behaviour::Hang,
            2 => Behaviour::Reset,
            3 => Behaviour::HangHttp,
            _ => Behaviour::Serve,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks failing in an answer, in order.
    fn failing(control: &Control, etcd_failed: bool) -> Vec<String> {
        let results = control.check_results(etcd_failed);
        results
            .into_iter()
            .filter(|(_, p)| !p)
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn not_ready_fails_the_etcd_checks() {
        let control = Control::new("a");
        assert!(failing(&control, false).is_empty());
        control.set_ready(false);
        assert_eq!(failing(&control, false), ["etcd", "etcd-readiness"]);
        assert!(!control.is_ready());
        control.set_ready(true);
        assert_eq!(
            failing(&control, true),
            ["etcd", "etcd-readiness"],
            "a failed read"
        );
    }

    #[test]
    fn each_check_switches_on_its_own() {
        let control = Control::new("a");
        control.set_check("informer-sync", false);
        control.set_check("kms-providers", false);
        assert_eq!(failing(&control, false), ["informer-sync", "kms-providers"]);
        let names: Vec<String> = control
            .check_results(false)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names.last().map(String::as_str),
            Some(SHUTDOWN),
            "a new check goes before shutdown"
        );
        control.set_check("informer-sync", true);
        assert_eq!(failing(&control, false), ["kms-providers"]);
    }

    #[test]
    fn a_shutdown_fails_the_shutdown_check() {
        let control = Control::new("a");
        control.phase.send_replace(Phase::Draining);
        assert_eq!(failing(&control, false), [SHUTDOWN]);
        assert!(!control.is_ready());
    }
}
