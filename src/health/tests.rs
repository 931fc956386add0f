//! The monitor's schedule and passive health, on a paused clock with a scripted probe.

use super::*;
use crate::backend::News;
use crate::verdict::Reach;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A probe that answers from a script and notes when it was called and reset.
struct Scripted {
    calls: Arc<Mutex<Vec<Instant>>>,
    /// Pass (`Some(true)`), fail, or inconclusive (`None`: a shortage on this node).
    script: VecDeque<Option<bool>>,
    resets: Arc<std::sync::atomic::AtomicUsize>,
    /// How long each probe takes.
    takes: Duration,
    /// Failures are dials that got no connection (SYNs unanswered), not HTTP 500 answers.
    unreached: bool,
    /// When each request check's `GET` began; each takes `check_takes` and finds no kept
    /// connection (no verdict).
    gets: Arc<Mutex<Vec<Instant>>>,
    check_takes: Duration,
}

impl Scripted {
    fn new(calls: &Arc<Mutex<Vec<Instant>>>, script: &[bool]) -> Self {
        Scripted {
            calls: calls.clone(),
            script: script.iter().map(|&p| Some(p)).collect(),
            resets: Arc::default(),
            takes: Duration::from_millis(10),
            unreached: false,
            gets: Arc::default(),
            check_takes: Duration::ZERO,
        }
    }
}

impl Probe for Scripted {
    fn probe(
        &mut self,
        _timeout: Duration,
    ) -> impl std::future::Future<Output = Result<Outcome, Inconclusive>> + Send {
        self.calls.lock().expect("calls").push(Instant::now());
        let next = self.script.pop_front().unwrap_or(Some(true));
        let takes = self.takes;
        let unreached = self.unreached;
        async move {
            tokio::time::sleep(takes).await; // probes take time too
            let pass = next.ok_or_else(|| Inconclusive("Too many open files".into()))?;
            let latency = Duration::from_millis(1);
            Ok(if pass {
                Outcome::Pass { latency }
            } else if unreached {
                Outcome::Fail {
                    reason: "dial: timeout: 3 attempts unanswered".into(),
                    class: crate::verdict::FailClass::Timeout,
                    checks: crate::verdict::FailingChecks::none(),
                    reach: Reach::Unreached,
                }
            } else {
                Outcome::failed_answer(
                    "HTTP 500".into(),
                    crate::verdict::FailClass::Http5xx,
                    crate::verdict::FailingChecks::none(),
                    500,
                    latency,
                )
            })
        }
    }

    fn reset(&mut self) {
        self.resets
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn get(
        &mut self,
        _path: &str,
        _timeout: Duration,
    ) -> impl std::future::Future<Output = Result<crate::https::Answer, probe::Unanswered>> + Send
    {
        self.gets.lock().expect("gets").push(Instant::now());
        let takes = self.check_takes;
        async move {
            tokio::time::sleep(takes).await;
            Err(probe::Unanswered::NotKept)
        }
    }
}

fn monitor(tx: mpsc::Sender<TableCmd>) -> Monitor {
    let spec = crate::testing::fixtures::spec("a:1", None);
    Monitor {
        // The remote cadence at 15 s, used only once the test says the backend may wait.
        health: HealthConfig {
            remote_interval: Duration::from_secs(15),
            request_check_interval: Duration::from_secs(30),
            request_check_path: "/version".into(),
            ..crate::testing::fixtures::health_config()
        },
        live: Arc::new(BackendLive::default()),
        spec,
        initial: Health::UNKNOWN,
        degraded: None,
        table: tx,
    }
}

async fn next_health(rx: &mut mpsc::Receiver<TableCmd>) -> Health {
    // Paused clock: ten minutes of it pass at once if the monitor never publishes.
    let cmd = tokio::time::timeout(Duration::from_secs(600), rx.recv())
        .await
        .expect("no health published within 10 minutes of the paused clock");
    let TableCmd::Health { health, .. } = cmd.expect("result") else {
        panic!("health")
    };
    health
}

#[tokio::test(start_paused = true)]
async fn the_first_probe_is_at_once_then_the_jittered_interval_or_fast_while_pending() {
    let (tx, mut rx) = mpsc::channel(64);
    let task = monitor(tx);
    let calls = Arc::new(Mutex::new(Vec::new()));
    // pass (decides ready), pass, fail (pending), fail (unready), pass (pending), pass (ready)
    let script = [true, true, false, false, true, true];
    let start = Instant::now();
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(Scripted::new(&calls, &script), cancel.clone()));
    let mut states = Vec::new();
    for _ in 0..6 {
        states.push(next_health(&mut rx).await.state);
    }
    cancel.cancel();
    handle.await.expect("task ends on cancel");
    use State::*;
    assert_eq!(states, [Ready, Ready, Ready, Unready, Unready, Ready]);
    let t: Vec<Duration> = calls
        .lock()
        .expect("calls")
        .iter()
        .map(|i| *i - start)
        .collect();
    assert_eq!(t[0], Duration::ZERO, "first probe at once");
    let gap = |i: usize| t[i] - t[i - 1];
    // Paused time is exact up to the timer wheel's 1 ms granularity.
    let about = |d: Duration, want: Duration| d.abs_diff(want) <= Duration::from_millis(1);
    for i in [1, 2, 4] {
        let g = gap(i);
        assert!(
            g >= Duration::from_millis(4499) && g <= Duration::from_millis(5501),
            "interval ±10 %: gap {i} = {g:?}"
        );
    }
    assert!(
        about(gap(3), Duration::from_secs(1)),
        "fast_interval while a fall is pending: {t:?}"
    );
    assert!(
        about(gap(5), Duration::from_secs(1)),
        "fast_interval while a rise is pending: {t:?}"
    );
    assert!(gap(1) != gap(2) || gap(2) != gap(4), "jitter varies: {t:?}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_client_dial_counts_as_a_failed_check_that_drops_the_kept_connection() {
    let (tx, mut rx) = mpsc::channel(64);
    let task = monitor(tx);
    let live = task.live.clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let probe = Scripted::new(&calls, &[true, true, true]);
    let resets = probe.resets.clone();
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(probe, cancel.clone()));
    assert_eq!(next_health(&mut rx).await.state, State::Ready);
    let start = Instant::now();

    // One refused dial: a failed check (pending), the kept connection dropped, a probe soon.
    live.inbox
        .tell(News::DialFailed("dial: connection refused".into()));
    let h = next_health(&mut rx).await;
    assert_eq!(h.state, State::Ready, "one failure of fall 2");
    assert_eq!(h.last_error(), Some("dial: connection refused"));
    assert_eq!(h.reach, Some(Reach::Unreached));
    assert_eq!(resets.load(std::sync::atomic::Ordering::SeqCst), 1);
    let h = next_health(&mut rx).await; // the probe it brought forward passes
    assert_eq!((h.state, h.last_error()), (State::Ready, None));
    let t = *calls.lock().expect("calls").last().expect("probed");
    assert!(
        t - start <= Duration::from_millis(1001),
        "fast_interval, not interval"
    );

    // Two at once (fall 2): unready, exactly like two failed probes.
    live.inbox
        .tell(News::DialFailed("dial: timeout after 1s".into()));
    live.inbox
        .tell(News::DialFailed("dial: timeout after 1s".into()));
    let h = next_health(&mut rx).await;
    assert_eq!(h.state, State::Unready);
    assert_eq!(h.last_error(), Some("dial: timeout after 1s"));
    assert_eq!(resets.load(std::sync::atomic::Ordering::SeqCst), 2);
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

#[tokio::test(start_paused = true)]
async fn a_client_dial_failing_during_a_request_check_drops_the_kept_connection_too() {
    let (tx, mut rx) = mpsc::channel(64);
    let task = monitor(tx);
    let live = task.live.clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut probe = Scripted::new(&calls, &[true; 20]);
    probe.check_takes = Duration::from_secs(2);
    let (resets, gets) = (probe.resets.clone(), probe.gets.clone());
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(probe, cancel.clone()));
    assert_eq!(next_health(&mut rx).await.state, State::Ready);
    // The first check is due within 30 s, right after a probe; it takes 2 s.
    let deadline = Instant::now() + Duration::from_secs(60);
    while gets.lock().expect("gets").is_empty() {
        assert!(Instant::now() < deadline, "no request check within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    live.inbox
        .tell(News::DialFailed("dial: connection refused".into()));
    // Every probe so far published its result too: the failure is the first with an error.
    let mut h = next_health(&mut rx).await;
    for _ in 0..20 {
        if h.last_error().is_some() {
            break;
        }
        h = next_health(&mut rx).await;
    }
    assert_eq!(
        h.last_error(),
        Some("dial: connection refused"),
        "counted at once"
    );
    let began = *gets.lock().expect("gets").last().expect("a check");
    assert!(
        Instant::now() < began + Duration::from_secs(2),
        "during the check"
    );
    let probes = calls.lock().expect("calls").len();
    while calls.lock().expect("calls").len() == probes {
        assert!(Instant::now() < deadline, "no probe after the check");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        resets.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the next probe dials afresh"
    );
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

/// A monitor whose probes go: ready; one failure (pending); three not made; a pass; a failure;
/// not made. Returns the first five healths it published (state, last error) and the probe
/// start times up to then.
async fn with_unmade_probes() -> (Vec<(State, Option<String>)>, Vec<Instant>) {
    let (tx, mut rx) = mpsc::channel(64);
    let task = monitor(tx);
    let calls = Arc::new(Mutex::new(Vec::new()));
    // ready; one failure (pending); three probes not made; a pass; a failure; not made.
    let script = [
        Some(true),
        Some(true),
        Some(false),
        None,
        None,
        None,
        Some(true),
        Some(false),
        None,
    ];
    let probe = Scripted {
        script: script.into_iter().collect(),
        ..Scripted::new(&calls, &[])
    };
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(probe, cancel.clone()));
    let mut seen = Vec::new();
    for _ in 0..5 {
        let h = next_health(&mut rx).await;
        seen.push((h.state, h.last_error().map(|e| e.to_string())));
    }
    let calls = calls.lock().expect("calls").clone();
    cancel.cancel();
    handle.await.expect("task ends on cancel");
    (seen, calls)
}

#[tokio::test(start_paused = true)]
async fn probes_this_node_could_not_make_leave_health_alone() {
    let (seen, _) = with_unmade_probes().await;
    // Had the shortage counted as failures, the first one after the failure made it unready.
    let fail = || Some("HTTP 500".to_string());
    use State::*;
    assert_eq!(
        seen,
        [
            (Ready, None),
            (Ready, None),
            (Ready, fail()),
            (Ready, None),
            (Ready, fail())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn probes_this_node_could_not_make_are_retried_at_the_fast_interval() {
    let (_, calls) = with_unmade_probes().await;
    for w in calls[2..7].windows(2) {
        assert_eq!(
            w[1] - w[0],
            Duration::from_secs(1),
            "fast_interval: {calls:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn failed_dials_count_at_once_even_while_a_probe_is_in_flight() {
    let (tx, mut rx) = mpsc::channel(64);
    let task = monitor(tx);
    let live = task.live.clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    // Every probe hangs for 3 s, as one dialing into a black hole until its timeout.
    let probe = Scripted {
        takes: Duration::from_secs(3),
        ..Scripted::new(&calls, &[true, true])
    };
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(probe, cancel.clone()));
    assert_eq!(next_health(&mut rx).await.state, State::Ready);
    // Now t = 3 s; the second probe runs from 4.5-5.5 s for 3 s: at t = 6 s it is in flight.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        calls.lock().expect("calls").len(),
        2,
        "a probe is in flight"
    );
    let before = Instant::now();
    live.inbox
        .tell(News::DialFailed("dial: timeout after 1s".into()));
    live.inbox
        .tell(News::DialFailed("dial: timeout after 1s".into()));
    let h = next_health(&mut rx).await;
    assert_eq!(
        h.state,
        State::Unready,
        "fall reached without waiting for the probe"
    );
    assert!(
        Instant::now() - before < Duration::from_secs(1),
        "at once, not after the probe"
    );
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

/// A monitor with `fall` (high: the failures below keep a change pending) and a probe that
/// passes in `takes`, ready after its first probe; the time of that probe's end.
async fn ready_monitor(
    fall: u32,
    takes: Duration,
) -> (
    Arc<BackendLive>,
    Arc<Mutex<Vec<Instant>>>,
    mpsc::Receiver<TableCmd>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = mpsc::channel(1024);
    let mut task = monitor(tx);
    task.health.fall = fall;
    let live = task.live.clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let probe = Scripted {
        takes,
        ..Scripted::new(&calls, &[])
    };
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(probe, cancel.clone()));
    assert_eq!(next_health(&mut rx).await.state, State::Ready);
    (live, calls, rx, cancel, handle)
}

#[tokio::test(start_paused = true)]
async fn a_passive_failure_brings_a_probe_at_once_not_at_the_next_interval() {
    let (live, calls, _rx, cancel, handle) = ready_monitor(2, Duration::from_millis(10)).await;
    // 2 s after the first probe: the next is due at 4.5-5.5 s, the early-probe gap is over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let failed_at = Instant::now();
    live.inbox.tell(News::DialFailed(
        "relay: backend stopped acknowledging".into(),
    ));
    poll_calls(&calls, 2).await;
    let probed = calls.lock().expect("calls")[1];
    assert!(
        probed - failed_at <= Duration::from_millis(1),
        "probed {:?} after the failure",
        probed - failed_at
    );
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

/// 2 s after a monitor turned ready, a failure every 100 ms for 10 s. Returns when the
/// failures began.
async fn burst_of_failures(live: &BackendLive) -> Instant {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from = Instant::now();
    for _ in 0..100 {
        live.inbox
            .tell(News::DialFailed("dial: timeout after 1s".into()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    from
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_passive_failures_makes_one_probe_in_flight() {
    // Probes hang for 3 s (a black hole); a failure every 100 ms for 10 s, fall high enough that
    // the change stays pending.
    let takes = Duration::from_secs(3);
    let (live, calls, _rx, cancel, handle) = ready_monitor(1000, takes).await;
    let from = burst_of_failures(&live).await;
    let starts: Vec<Instant> = calls.lock().expect("calls").clone();
    for w in starts.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= takes,
            "a probe started while one was in flight: {gap:?}"
        );
    }
    // 10 s of failures: probes back to back, one per 3 s, never one per failure.
    let during = starts.iter().filter(|t| **t >= from).count();
    assert!(
        (3..=4).contains(&during),
        "{during} probes for 100 failures"
    );
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_passive_failures_makes_at_most_one_early_probe_a_second() {
    // Quick probes: the rate limit is what holds, one early probe per second.
    let (live, calls, _rx, cancel, handle) = ready_monitor(1000, Duration::from_millis(10)).await;
    burst_of_failures(&live).await;
    let starts: Vec<Instant> = calls.lock().expect("calls")[1..].to_vec();
    for w in starts.windows(2) {
        assert!(w[1] - w[0] >= EARLY_PROBE_GAP, "{:?}", w[1] - w[0]);
    }
    assert!(
        (9..=11).contains(&starts.len()),
        "one probe a second for 10 s, not 100: {}",
        starts.len()
    );
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

/// The fall was called off (still ready) if a dial connected between its two failures, else it
/// fell.
fn assert_called_off_only_if_connected(h: &Health, connected_between: bool) {
    let want = if connected_between {
        State::Ready
    } else {
        State::Unready
    };
    assert_eq!(h.state, want, "connected between: {connected_between}");
}

/// A monitor (fall 2) whose probe passes once, then fails (`unreached`: its dial got no
/// connection; else an HTTP 500), then passes; started and ready after its first probe.
async fn pass_then_fail(
    unreached: bool,
) -> (
    Arc<BackendLive>,
    mpsc::Receiver<TableCmd>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = mpsc::channel(64);
    let task = monitor(tx);
    let live = task.live.clone();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let probe = Scripted {
        unreached,
        ..Scripted::new(&calls, &[true, false])
    };
    let cancel = CancellationToken::new();
    let handle = tokio::spawn(task.run(probe, cancel.clone()));
    assert_eq!(next_health(&mut rx).await.state, State::Ready);
    (live, rx, cancel, handle)
}

#[tokio::test(start_paused = true)]
async fn a_client_dial_that_connects_calls_off_a_fall_that_failed_dials_started() {
    // fall 2. A failed dial (a lost SYN on a lossy link, or a black hole), then the early probe
    // fails too: without a connected dial between them that is the fall.
    for connected_between in [true, false] {
        let (live, mut rx, cancel, handle) = pass_then_fail(false).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        live.inbox
            .tell(News::DialFailed("dial: timeout after 1s".into()));
        assert_eq!(next_health(&mut rx).await.state, State::Ready, "pending");
        if connected_between {
            live.inbox.tell(News::Connected); // while the early probe is in flight
        }
        let h = next_health(&mut rx).await;
        assert_eq!(h.last_error(), Some("HTTP 500"), "the early probe");
        assert_called_off_only_if_connected(&h, connected_between);
        cancel.cancel();
        handle.await.expect("task ends on cancel");
    }
}

#[tokio::test(start_paused = true)]
async fn a_probe_whose_dial_got_no_connection_leaves_a_fall_that_a_connecting_dial_calls_off() {
    // fall 2. The probe's own SYNs go unanswered (a lossy link loses them as often as a
    // client's), then a client dial fails: without a dial that connected between them that is
    // the fall; with one, the probe's failure is refuted and the client's counts alone.
    for connected_between in [true, false] {
        let (live, mut rx, cancel, handle) = pass_then_fail(true).await;
        let h = next_health(&mut rx).await;
        assert_eq!(
            (h.state, h.last_error()),
            (State::Ready, Some("dial: timeout: 3 attempts unanswered")),
            "pending"
        );
        if connected_between {
            live.inbox.tell(News::Connected);
        }
        live.inbox
            .tell(News::DialFailed("dial: timeout after 1s".into()));
        let h = next_health(&mut rx).await;
        assert_eq!(
            h.last_error(),
            Some("dial: timeout after 1s"),
            "the client's"
        );
        assert_called_off_only_if_connected(&h, connected_between);
        cancel.cancel();
        handle.await.expect("task ends on cancel");
    }
}

/// Waits (on the paused clock, at most 10 minutes of it) until the probe has been called `n`
/// times.
async fn poll_calls(calls: &Arc<Mutex<Vec<Instant>>>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while calls.lock().expect("calls").len() < n {
        assert!(
            Instant::now() < deadline,
            "probe {n} never came in 10 minutes: {:?}",
            calls.lock().expect("calls")
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The time between probes `i - 1` and `i`.
fn gap(calls: &Arc<Mutex<Vec<Instant>>>, i: usize) -> Duration {
    let c = calls.lock().expect("calls");
    c[i] - c[i - 1]
}

/// Probe `i` (from 0) started at `at`, to the paused clock's millisecond.
fn assert_probed_at(calls: &Arc<Mutex<Vec<Instant>>>, i: usize, at: Instant, what: &str) {
    let probed = calls.lock().expect("calls")[i];
    let late = probed.saturating_duration_since(at);
    assert!(
        probed >= at && late <= Duration::from_millis(1),
        "{what}: probe {i} {late:?} late"
    );
}

/// The gap before probe `i` is `around` ±10 % (the jitter).
fn assert_gap_around(calls: &Arc<Mutex<Vec<Instant>>>, i: usize, around: Duration, what: &str) {
    let g = gap(calls, i);
    let slack = around / 10 + Duration::from_millis(1);
    assert!(g + slack >= around && g <= around + slack, "{what}: {g:?}");
}

#[tokio::test(start_paused = true)]
async fn a_remote_cadence_waits_its_interval_and_ends_at_once_when_wanted() {
    let (live, calls, _rx, cancel, handle) = ready_monitor(2, Duration::from_millis(10)).await;
    live.inbox.set_remote(true);
    // The wait under way when the writer said so keeps `interval`; the next one is remote.
    poll_calls(&calls, 3).await;
    assert_gap_around(&calls, 2, Duration::from_secs(15), "remote_interval");
    // 7 s into the next remote wait, the writer ends it: over `interval` since the probe began,
    // so the next probe is at once, and the one after it at `interval`.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let wanted = Instant::now();
    live.inbox.set_remote(false);
    poll_calls(&calls, 5).await;
    assert_probed_at(&calls, 3, wanted, "wanted again");
    assert_gap_around(&calls, 4, Duration::from_secs(5), "interval again");
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

#[tokio::test(start_paused = true)]
async fn a_first_connection_ends_a_remote_cadence() {
    let (live, calls, _rx, cancel, handle) = ready_monitor(2, Duration::from_millis(10)).await;
    live.inbox.set_remote(true);
    poll_calls(&calls, 2).await; // the remote wait begins
    tokio::time::sleep(Duration::from_secs(6)).await;
    let connected = Instant::now();
    let guard = live.count_active();
    poll_calls(&calls, 3).await;
    assert_probed_at(&calls, 2, connected, "its first connection");
    assert!(!live.inbox.is_remote(), "at `interval` from now on");
    drop(guard);
    cancel.cancel();
    handle.await.expect("task ends on cancel");
}

#[test]
fn the_next_probe_is_due_by_interval_fast_interval_or_a_passive_failure() {
    let last = Instant::now();
    let ms = Duration::from_millis;
    // (pending, passive failure after `last`, due after `last`)
    let table: &[(bool, Option<u64>, u64, &str)] = &[
        (false, None, 5_200, "steady: the jittered interval"),
        (true, None, 1_000, "a change pending: fast_interval"),
        (false, Some(3_000), 3_000, "a passive failure: at once"),
        (
            false,
            Some(200),
            1_000,
            "but never sooner than the gap after the last probe",
        ),
        (
            true,
            Some(200),
            1_000,
            "pending too: the gap is fast_interval here",
        ),
        (
            false,
            Some(6_000),
            5_200,
            "never later than it was due anyway",
        ),
    ];
    for &(pending, failure, want, why) in table {
        let due = Due {
            last,
            pending,
            interval: ms(5_200),
            fast_interval: ms(1_000),
            passive_failure: failure.map(|f| last + ms(f)),
        };
        assert_eq!(next_probe_due(&due) - last, ms(want), "{why}");
    }
    let slow = Due {
        last,
        pending: true,
        interval: ms(5_200),
        fast_interval: ms(3_000),
        passive_failure: Some(last + ms(100)),
    };
    assert_eq!(
        next_probe_due(&slow) - last,
        EARLY_PROBE_GAP,
        "a slow fast_interval is brought forward to the gap"
    );
}

mod confirm;
