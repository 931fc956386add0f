//! A step harness over the writer's composition, with no runtime: a fake clock advanced to the
//! next deadline, scripted monitors (each backend answers as its [`Truth`] says, probed on the
//! daemon's schedule through the real rise/fall machine, a confirm ask answered at most once per
//! interval), the real [`Writer`] and its effects applied to a real [`Table`], and connections
//! that hear bumps and call-offs through their backend's real `Eviction` and close at the turn
//! [`Closing`] says. The chaos lab's schedules, minutes long, become unit tests of milliseconds.
//!
//! Left out, on purpose: jitter (probes every interval exactly), the hand-off's quiet wait (a
//! connection closes at its turn), dials and their failures (the monitors alone judge).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, BackendLive, BackendSpec, News, Routing};
use crate::eviction::turn::Closing;
use crate::eviction::{CloseReason, EvictionWatch, Stop};
use crate::health::rise_fall::{Outcome, RiseFall};
use crate::health::{next_probe_due, Due};
use crate::metrics::Metrics;
use crate::table::{Effect, Effects, Table, TableCmd, Writer};
use crate::verdict::{FailClass, FailingChecks, Health, Reach, State};

/// The daemon's health defaults (docs/config.md).
pub const INTERVAL: Duration = Duration::from_secs(5);
/// The daemon's default `remote_interval`: `INTERVAL` (the remote cadence off).
pub const REMOTE_INTERVAL: Duration = INTERVAL;
/// The daemon's default `fast_interval`.
pub const FAST_INTERVAL: Duration = Duration::from_secs(1);
/// The daemon's default probe timeout.
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// The daemon's default `rise`.
pub const RISE: u32 = 2;
/// The daemon's default `fall`.
pub const FALL: u32 = 2;
/// More events than any scripted run has (a probe per backend per second for an hour is 10,800):
/// past it, an event is due again at the same instant without end, and the run fails.
const MAX_STEPS: u32 = 100_000;
/// How long an answering apiserver takes to answer `/readyz`.
const ANSWER: Duration = Duration::from_millis(10);

/// How a backend answers its probes from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// 200.
    Ready,
    /// 500 naming `etcd` (alive, not ready).
    Unready,
    /// 500 naming only `shutdown` (draining).
    Draining,
    /// Nothing: the probe times out.
    Silent,
    /// 200, after this long.
    Slow(Duration),
}

impl Truth {
    fn answer(self) -> (Duration, Outcome) {
        let named = |check: &str| {
            Outcome::failed_answer(
                format!("readyz 500: {check} failed").into(),
                FailClass::Http5xx,
                FailingChecks::of(&[check]),
                500,
                ANSWER,
            )
        };
        match self {
            Truth::Ready => (ANSWER, Outcome::Pass { latency: ANSWER }),
            Truth::Slow(latency) => (latency, Outcome::Pass { latency }),
            Truth::Unready => (ANSWER, named("etcd")),
            Truth::Draining => (ANSWER, named("shutdown")),
            Truth::Silent => (
                TIMEOUT,
                Outcome::Fail {
                    reason: "timeout after 3s".into(),
                    class: FailClass::Timeout,
                    checks: FailingChecks::none(),
                    reach: Reach::Connected,
                },
            ),
        }
    }
}

/// One backend's scripted monitor.
struct Monitor {
    id: BackendId,
    truth: Truth,
    /// Its probe interval (the daemon draws it around `INTERVAL`; here it is fixed); while the
    /// writer says it may wait ([`super::super::cadence`]), `REMOTE_INTERVAL`.
    interval: Duration,
    /// Its live state, whose inbox the writer tells the cadence.
    live: Arc<BackendLive>,
    /// When its latest probe started.
    last: Instant,
    machine: RiseFall,
    /// When the next scheduled probe starts.
    next: Instant,
    /// The probe in flight: when it started, when it ends, what it finds.
    flight: Option<(Instant, Instant, Outcome)>,
    /// A confirm ask not yet taken.
    asked: bool,
    confirmed: Option<Instant>,
}

/// One relayed connection.
struct Conn {
    seq: u32,
    live: Arc<BackendLive>,
    backend: BackendId,
    watch: EvictionWatch,
    closing: Option<Closing>,
}

/// A connection the balancer closed: which, on what backend, why, when (from the start).
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    /// The connection's sequence number.
    pub seq: u32,
    /// Its backend.
    pub backend: String,
    /// The turn that stood.
    pub why: CloseReason,
    /// When, from the harness's start.
    pub at: Duration,
}

/// The writer, the monitors and the connections, on one fake clock.
pub struct Step {
    t0: Instant,
    now: Instant,
    table: Arc<Table>,
    writer: Writer,
    monitors: Vec<Monitor>,
    conns: Vec<Conn>,
    next_seq: u32,
    /// Every close so far, in order.
    pub closed: Vec<Closed>,
    /// Every bump so far: backend, reason, when (from the start).
    pub bumps: Vec<(String, CloseReason, Duration)>,
    /// Every change of state a monitor decided: backend, new state, when (from the start).
    pub changes: Vec<(String, State, Duration)>,
}

impl Step {
    /// A node in `zone` with `backends` (address, zone), all of them [`Truth::Ready`] and
    /// probed at once; `routing` tweaks the zone's default routing.
    pub fn new(zone: &str, backends: &[(&str, &str)], routing: impl FnOnce(&mut Routing)) -> Step {
        let t0 = Instant::now();
        let mut r = Routing::in_zone(zone);
        r.probe_interval = INTERVAL;
        routing(&mut r);
        let specs: Vec<Arc<BackendSpec>> = backends
            .iter()
            .map(|&(address, zone)| crate::testing::fixtures::spec(address, Some(zone)))
            .collect();
        let table = Table::new();
        let mut writer = Writer::new(table.load(), Arc::new(Metrics::default()));
        let (done, _) = tokio::sync::oneshot::channel();
        let cmd = TableCmd::Configure {
            routing: r,
            backends: specs.clone(),
            done,
        };
        table.apply(writer.handle(cmd, t0));
        let snap = table.load();
        let monitors = snap
            .backends
            .iter()
            .map(|b| Monitor {
                id: b.spec.id.clone(),
                truth: Truth::Ready,
                interval: INTERVAL,
                live: b.live.clone(),
                last: t0,
                machine: RiseFall::new(RISE, FALL, Health::UNKNOWN),
                next: t0,
                flight: None,
                asked: false,
                confirmed: None,
            })
            .collect();
        Step {
            t0,
            now: t0,
            table,
            writer,
            monitors,
            conns: Vec::new(),
            next_seq: 0,
            closed: Vec::new(),
            bumps: Vec::new(),
            changes: Vec::new(),
        }
    }

    /// `address` answers as `truth` from now on (a probe in flight keeps what it found).
    pub fn set(&mut self, address: &str, truth: Truth) {
        self.monitor(address).truth = truth;
    }

    /// `address` is probed every `interval` from its next probe on (a jitter draw, fixed).
    pub fn interval(&mut self, address: &str, interval: Duration) {
        self.monitor(address).interval = interval;
    }

    fn monitor(&mut self, address: &str) -> &mut Monitor {
        let id = BackendId::new(address);
        self.monitors
            .iter_mut()
            .find(|m| m.id == id)
            .expect("a configured backend")
    }

    /// Opens `n` connections to `address`, picked from the snapshot published now.
    pub fn connect(&mut self, address: &str, n: u32) {
        let id = BackendId::new(address);
        let snap = self.table.load();
        let i = snap.position(&id).expect("a configured backend");
        let b = &snap.backends[i];
        for _ in 0..n {
            let watch = b
                .live
                .eviction
                .watch_from(b.evict_epoch)
                .expect("not evicted");
            // As `BackendLive::count_active`: a first connection ends a remote cadence.
            if b.live.active.fetch_add(1, Ordering::Relaxed) == 0 {
                b.live.inbox.tell(News::Wanted);
            }
            self.conns.push(Conn {
                seq: self.next_seq,
                live: b.live.clone(),
                backend: id.clone(),
                watch,
                closing: None,
            });
            self.next_seq += 1;
        }
        self.heed_wanted();
    }

    /// A monitor whose remote cadence ended probes at its interval from its latest probe's
    /// start, as `Monitor::wait` does.
    fn heed_wanted(&mut self) {
        for mon in &mut self.monitors {
            if mon.live.inbox.take_wanted() {
                mon.next = mon.next.min(mon.last + mon.interval);
            }
        }
    }

    /// `address`'s request check finds it degraded for `reason` (`None`: healthy again), as its
    /// monitor tells the writer.
    pub fn degrade(&mut self, address: &str, reason: Option<&str>) {
        let cmd = TableCmd::Degraded {
            id: BackendId::new(address),
            degraded: reason.map(Into::into),
        };
        let fx = self.writer.handle(cmd, self.now);
        self.apply(fx);
    }

    /// Connections open on `address` now.
    pub fn open_on(&self, address: &str) -> usize {
        let id = BackendId::new(address);
        self.conns.iter().filter(|c| c.backend == id).count()
    }

    /// Where a new connection with re-entry `draw` would go now: the first of its dial order
    /// (paced as the proxy paces it), and whether every ready backend paces it (it would wait).
    pub fn first_pick(&self, draw: f64) -> (String, bool) {
        let snap = self.table.load();
        let order = snap.order(0, self.now, draw);
        let first = order.pick().order()[0];
        let len = snap.routing.reentry_window;
        let waits = matches!(order.pick(), crate::pick::Pick::Ready(o)
            if o.iter().all(|&i| snap.backends[i].live.reentry.paces(len, self.now, draw)));
        (snap.backends[first].spec.id.to_string(), waits)
    }

    /// The time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// The state of `address` in the published snapshot.
    pub fn state(&self, address: &str) -> State {
        let snap = self.table.load();
        let i = snap.position(&BackendId::new(address)).expect("configured");
        snap.backends[i].health.state
    }

    /// Runs in 10 ms steps until `done` holds; fails naming `what` if it does not by `limit`
    /// (from the start).
    pub fn run_until(&mut self, what: &str, limit: Duration, done: impl Fn(&Step) -> bool) {
        let step = Duration::from_millis(10);
        while !done(self) {
            let next = self.elapsed() + step;
            assert!(next < limit, "{what}: not by {limit:?}");
            self.run_to(next);
        }
    }

    /// Runs every event up to `at` (from the start), in time order, and stops the clock there.
    pub fn run_to(&mut self, at: Duration) {
        let end = self.t0 + at;
        let mut steps = 0u32;
        while let Some(next) = self.next_event().filter(|&t| t <= end) {
            steps += 1;
            assert!(
                steps <= MAX_STEPS,
                "over {MAX_STEPS} events before {at:?}: an event that never passes, at {:?}",
                next - self.t0
            );
            self.now = self.now.max(next);
            self.step();
        }
        self.now = self.now.max(end);
    }

    /// The soonest of the writer's deadline, a probe's start or end, a connection's turn.
    fn next_event(&self) -> Option<Instant> {
        let probes = self.monitors.iter().map(|m| match &m.flight {
            Some((_, ends, _)) => *ends,
            None if m.asked => self.now,
            None => m.next,
        });
        let turns = self
            .conns
            .iter()
            .filter_map(|c| c.closing.and_then(|c| c.turn()).map(|t| t.due));
        probes.chain(turns).chain(self.writer.poll_timeout()).min()
    }

    /// Does everything due now.
    fn step(&mut self) {
        let now = self.now;
        if self.writer.poll_timeout().is_some_and(|at| at <= now) {
            let fx = self.writer.handle_timeout(now);
            self.apply(fx);
        }
        for m in 0..self.monitors.len() {
            self.probe(m);
        }
        let (due, open): (Vec<Conn>, Vec<Conn>) =
            std::mem::take(&mut self.conns).into_iter().partition(|c| {
                c.closing
                    .and_then(|c| c.turn())
                    .is_some_and(|t| t.due <= now)
            });
        self.conns = open;
        for c in due {
            let turn = c.closing.and_then(|c| c.turn()).expect("due");
            c.live.active.fetch_sub(1, Ordering::Relaxed);
            self.closed.push(Closed {
                seq: c.seq,
                backend: c.backend.to_string(),
                why: turn.why,
                at: now - self.t0,
            });
        }
    }

    /// Ends monitor `m`'s probe if it is due, and starts the next one if that is due.
    fn probe(&mut self, m: usize) {
        let now = self.now;
        let mon = &mut self.monitors[m];
        if let Some((started, _, outcome)) = mon.flight.take_if(|(_, ends, _)| *ends <= now) {
            let step = mon.machine.observe(&outcome);
            if let Some((_, to)) = step.changed {
                self.changes.push((mon.id.to_string(), to, now - self.t0));
            }
            let steady = if mon.live.inbox.is_remote() {
                REMOTE_INTERVAL
            } else {
                mon.interval
            };
            mon.next = next_probe_due(&Due {
                last: started,
                pending: step.pending,
                interval: steady,
                fast_interval: FAST_INTERVAL,
                passive_failure: None,
            });
            let cmd = TableCmd::Health {
                id: mon.id.clone(),
                health: mon.machine.health().clone(),
                started,
            };
            let fx = self.writer.handle(cmd, now);
            self.apply(fx);
        }
        let mon = &mut self.monitors[m];
        if mon.flight.is_some() {
            return;
        }
        if std::mem::take(&mut mon.asked) && mon.confirmed.is_none_or(|at| now >= at + mon.interval)
        {
            mon.confirmed = Some(now);
            mon.next = now;
        }
        if mon.next <= now {
            mon.last = now;
            let (takes, outcome) = mon.truth.answer();
            mon.flight = Some((now, now + takes, outcome));
        }
    }

    /// Applies the writer's effects to the table, notes the confirm asks, and lets every
    /// connection hear its backend's bumps and call-offs.
    fn apply(&mut self, fx: Effects) {
        let snap = self.writer.snapshot().clone();
        let name = |live: &Arc<BackendLive>| {
            snap.backends
                .iter()
                .find(|b| Arc::ptr_eq(&b.live, live))
                .map(|b| b.spec.id.clone())
        };
        for e in &fx {
            match e {
                Effect::Confirm(live) => {
                    let id = name(live);
                    if let Some(m) = self
                        .monitors
                        .iter_mut()
                        .find(|m| Some(&m.id) == id.as_ref())
                    {
                        m.asked = true;
                    }
                }
                Effect::Bump(live, _, why) => {
                    let id = name(live).map_or_else(String::new, |id| id.to_string());
                    self.bumps.push((id, *why, self.now - self.t0));
                }
                _ => {}
            }
        }
        self.table.apply(fx);
        self.heed_wanted();
        let (now, handoff) = (self.now, self.writer.snapshot().routing.handoff_window);
        for c in &mut self.conns {
            let eviction = &c.live.eviction;
            loop {
                if let Some(closing) = &mut c.closing {
                    if closing.hears_call_off() && eviction.is_called_off(c.watch) {
                        closing.called_off();
                    }
                }
                match eviction.stop_now(&mut c.watch) {
                    Some(Stop::Evicted(why, by)) => {
                        match &mut c.closing {
                            Some(closing) => closing.bumped(why, now, c.seq, handoff),
                            None => c.closing = Some(Closing::evicted(why, now, c.seq, handoff)),
                        }
                        c.watch = by;
                    }
                    Some(Stop::Shutdown) | None => break,
                }
            }
        }
    }
}
