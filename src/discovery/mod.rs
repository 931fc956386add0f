//! Discovery: the backend list follows the cluster. A poll task asks, every `discovery.interval`
//! at this node's own phase of it (`phase`: a fleet's nodes poll spread out), the
//! `default/kubernetes` Endpoints object from the backend a new client connection
//! would get — a ready one, or while none is and connections fail open, the first they fail open
//! to (its answer may add backends, never remove one) — through the balancer's own pick and dial
//! path, with the kubelet's certificate, and sends the discovered list to the main loop when it
//! changes.
//!
//! A poll, not a watch: the Node authorizer lets a kubelet's identity GET this one object but not
//! list or watch EndpointSlices. One GET per interval, no retries in between, bounded by the
//! health timeout.
//!
//! `answer` reads an answer (pure), `membership` decides who is in (pure), `cache` keeps the list
//! on disk, `list` is what the app holds (the members, the task, the merge with the static
//! backends). This file owns the poll loop. Does not own applying the list (`App::set_discovered`).

pub mod answer;
pub mod cache;
mod list;
pub mod membership;
pub mod phase;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::BackendSpec;
use crate::config::own;
use crate::jitter::Jitter;
use crate::metrics::Metrics;
use crate::pick::Pick;
use crate::table::Table;
use crate::tls::TlsSource;
use answer::{BadAnswer, MAX_ANSWER};
pub use list::Discovered;
pub(crate) use list::Parts;
use membership::{Member, Membership};

/// The object polled: every apiserver of the cluster, as the apiservers themselves keep it.
pub const PATH: &str = "/api/v1/namespaces/default/endpoints/kubernetes";

/// The wait for a first ready backend (at most one interval) varies by up to this many percent
/// either way; the polls after the first keep the node's phase (`phase`).
const POLL_JITTER_PERCENT: u32 = 10;

/// What one poll came to; counted by [`Poll::label`] in `readyprism_discovery_polls_total`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// A good answer that changed the list.
    Changed,
    /// A good answer that changed nothing.
    Unchanged,
    /// No backend to ask (none is ready and connections are refused, or there are none).
    NoReadyBackend,
    /// The connection or the request failed before an answer (dial, TLS, HTTP).
    DialFailed(String),
    /// No answer within the health timeout.
    Timeout,
    /// An answer that is not a usable Endpoints object.
    Bad(BadAnswer),
}

impl Poll {
    /// One poll of each kind that has a label of its own: every `result` of
    /// `readyprism_discovery_polls_total` is one of theirs, exported (at 0) from start-up.
    pub const ALL: [Poll; 11] = [
        Poll::Changed,
        Poll::Unchanged,
        Poll::NoReadyBackend,
        Poll::DialFailed(String::new()),
        Poll::Timeout,
        Poll::Bad(BadAnswer::Status(500)),
        Poll::Bad(BadAnswer::NotJson(String::new())),
        Poll::Bad(BadAnswer::NotEndpoints(String::new())),
        Poll::Bad(BadAnswer::TooLarge),
        Poll::Bad(BadAnswer::Cut(0, String::new())),
        Poll::Bad(BadAnswer::NoAddresses),
    ];

    /// Every `result` label, once each.
    pub fn labels() -> impl Iterator<Item = &'static str> {
        let all = Poll::ALL;
        all.each_ref().map(Poll::label).into_iter()
    }

    /// The `result` label: one of [`Poll::labels`].
    pub fn label(&self) -> &'static str {
        match self {
            Poll::Changed => "changed",
            Poll::Unchanged => "unchanged",
            Poll::NoReadyBackend => "no_ready_backend",
            Poll::DialFailed(_) => "dial_failed",
            Poll::Timeout => "timeout",
            Poll::Bad(b) => b.label(),
        }
    }

    fn is_good(&self) -> bool {
        matches!(self, Poll::Changed | Poll::Unchanged)
    }

    fn reason(&self) -> String {
        match self {
            Poll::Changed | Poll::Unchanged => String::new(),
            Poll::NoReadyBackend => "no backend is ready to ask".to_string(),
            Poll::DialFailed(r) => r.clone(),
            Poll::Timeout => "no answer in time".to_string(),
            Poll::Bad(b) => b.to_string(),
        }
    }
}

/// The poll task: everything it reads and where it sends the list.
pub(crate) struct Poller {
    /// The snapshot to pick from.
    pub table: Arc<Table>,
    /// The kubelet's certificate and the CA.
    pub tls: Arc<TlsSource>,
    /// Time between polls (±10 %).
    pub interval: Duration,
    /// Bound on one poll: the health timeout.
    pub timeout: Duration,
    /// Written after each change.
    pub cache: Option<PathBuf>,
    /// The static backends' addresses and the listeners as bound, updated on reload: never
    /// members.
    pub never: watch::Receiver<list::Never>,
    /// This balancer's own addresses the last answer listed (refused; said once).
    pub own_listed: Vec<SocketAddr>,
    /// The main loop, which applies each new list.
    pub updates: mpsc::Sender<Vec<Member>>,
    /// Counts polls by result.
    pub metrics: Arc<Metrics>,
    /// Who is in, from the cache or the previous task.
    pub membership: Membership,
}

impl Poller {
    /// Polls once a backend is ready (or after one interval), then every interval, until
    /// cancelled. A bad spell is said once (WARN) and its end once (INFO).
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut jitter = Jitter::seeded("discovery", POLL_JITTER_PERCENT);
        let phase = phase::of(&phase::identity());
        let mut rr = 0usize;
        let mut bad_spell = false;
        // The cache write after the last change failed: tried again at each poll until it works.
        let mut unwritten = false;
        let mut next = Instant::now() + jitter.around(self.interval);
        let mut generations = self.table.subscribe();
        while !self.table.load().any_ready() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(next) => break,
                changed = generations.changed() => if changed.is_err() { return },
            }
        }
        loop {
            let (poll, asked) = tokio::select! {
                _ = cancel.cancelled() => return,
                p = self.poll(rr) => p,
            };
            rr = rr.wrapping_add(1);
            self.metrics.discovery_poll(poll.label());
            let asked = asked.as_ref().map_or("", |b| b.id.as_str());
            if poll.is_good() {
                if std::mem::take(&mut bad_spell) {
                    tracing::info!(backend = asked, "discovery answers again");
                }
            } else if !std::mem::replace(&mut bad_spell, true) {
                let (result, reason) = (poll.label(), poll.reason());
                tracing::warn!(
                    backend = asked,
                    result,
                    reason,
                    "discovery poll failed; the backend list stays as it is"
                );
            }
            let changed = poll == Poll::Changed;
            if changed || unwritten {
                let members = self.membership.members();
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    w = self.write_cache(&members, unwritten) => unwritten = w,
                }
                if changed && self.updates.send(members).await.is_err() {
                    return;
                }
            }
            // At this node's phase of the interval on the wall clock: a fleet polls spread out.
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            next = Instant::now() + phase::delay(wall, self.interval, phase);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// One GET to the first backend in pick order (the first ready one, or the first that
    /// connections fail open to); answers what came of it and whom it asked.
    async fn poll(&mut self, rr: usize) -> (Poll, Option<Arc<BackendSpec>>) {
        let (spec, live, ready) = {
            let snap = self.table.load();
            let pick = snap.pick(rr);
            let (first, ready) = match &pick {
                Pick::Ready(order) => (order.first(), true),
                Pick::NoneReady(order) => (order.first(), false),
                Pick::Refuse => (None, false),
            };
            match first.map(|&i| &snap.backends[i]) {
                Some(b) => (b.spec.clone(), b.live.clone(), ready),
                None => return (Poll::NoReadyBackend, None),
            }
        };
        let tls = self.tls.current();
        let get = crate::https::get_once(&spec, &live, &tls, PATH, self.timeout, MAX_ANSWER);
        let poll = match tokio::time::timeout(self.timeout, get).await {
            Err(_) => Poll::Timeout,
            Ok(Err(reason)) => Poll::DialFailed(reason),
            Ok(Ok(got)) => match answer::addresses(got.status.as_u16(), &got.body, &got.end) {
                Err(bad) => Poll::Bad(bad),
                Ok(listed) => {
                    let never = self.never.borrow().clone();
                    // Read live: an address the node gained since the last reload counts too.
                    let host = tokio::task::spawn_blocking(own::host_addresses)
                        .await
                        .expect("listing addresses does not panic");
                    let (own, listed): (Vec<SocketAddr>, Vec<SocketAddr>) =
                        listed.into_iter().partition(|a| never.is_own(*a, &host));
                    if own != self.own_listed && !own.is_empty() {
                        let addresses: Vec<String> = own.iter().map(ToString::to_string).collect();
                        tracing::warn!(backend = %spec.id, addresses = addresses.join(","), "discovery lists this balancer's own address; refused (it would relay to itself)");
                    }
                    self.own_listed = own;
                    let changed = if ready {
                        self.membership.observe(&listed, &never.seeds)
                    } else {
                        self.membership.observe_unready(&listed, &never.seeds)
                    };
                    if changed {
                        Poll::Changed
                    } else {
                        Poll::Unchanged
                    }
                }
            },
        };
        (poll, Some(spec))
    }

    /// Writes the cache off the runtime thread; true when it failed and is to be tried again (at
    /// the next poll: at most one write per interval). A failure is said once per spell (WARN),
    /// its end once (INFO); a file that is not a cache is said and left alone.
    async fn write_cache(&self, members: &[Member], retrying: bool) -> bool {
        let Some(path) = self.cache.clone() else {
            return false;
        };
        let addrs: Vec<SocketAddr> = members.iter().map(|m| m.addr).collect();
        let file = path.clone();
        let failed = match tokio::task::spawn_blocking(move || cache::store(&path, &addrs)).await {
            Ok(Ok(())) => {
                if retrying {
                    tracing::info!(file = %file.display(), "the discovery cache is written again");
                }
                return false;
            }
            Ok(Err(e)) if !e.retryable() => {
                tracing::warn!(error = %e, "the discovery cache was not written");
                return false;
            }
            Ok(Err(e)) => e,
            Err(e) => cache::WriteError::Io {
                path: file,
                cause: std::io::Error::other(e),
            },
        };
        if !retrying {
            tracing::warn!(
                error = %failed,
                "the discovery cache was not written; trying again at each poll"
            );
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_poll_result_has_one_label_in_the_declared_set() {
        let labels: Vec<&str> = Poll::labels().collect();
        let mut distinct = labels.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            labels.len(),
            "one kind per label: {labels:?}"
        );
        // The kinds that share a label with one in the set.
        let too_many = Poll::Bad(BadAnswer::TooMany(65));
        assert!(labels.contains(&too_many.label()));
    }
}
