//! From what the client and the balancer recorded to a scenario's [`Timeline`] and the figures of
//! each phase: when requests and the stream reached a good backend, errors, the slowest request.
//! No processes, no clock; only [`save`] writes a file.
//!
//! This file computes a phase's figures ([`phase`]) and holds their tests; `figures/record.rs`
//! builds the [`Timeline`] from the records ([`timeline`]), `figures/report.rs` prints and saves
//! it ([`report`], [`save`]).

use super::cast::{ClientEvent, Exchange, CONNECT_TIMEOUT};
use super::lease;
use super::netlab::Host;
use super::timeline::{Phase, Request, StreamSegment, Timeline};

mod record;
mod report;

pub use record::timeline;
pub use report::{report, results_dir, save};

/// A stream connection with an event this recently counts as alive (four of its 250 ms events).
pub const RECENT: f64 = 1.0;

/// A stream dial that failed (a client-visible error), relative to the fault.
#[derive(Clone, Debug)]
pub struct StreamDialError {
    pub t: f64,
    pub error: String,
}

/// The figures of the window `(from, to]` (relative to the fault) with `good` as good backends.
///
/// The stream counts as on good backends at the window's end only if its connection then was
/// alive: not ended by `to`, and an event within [`RECENT`] before `to` or any time after it.
/// The latter needs a record that goes on after the window: on a lossy link a live stream can
/// be silent for seconds (TCP's retransmission back-off), so the runner lets the client run
/// until the stream has delivered again. A connection on a good backend silent past the client's
/// own silence limit (30 s of back-off, seen on scenario 6's 20 % loss) counts too when the
/// client's re-dial lands on a good backend: the balancer kept the stream on good backends.
pub fn phase(
    t: &Timeline,
    dial_errors: &[StreamDialError],
    name: &str,
    (from, to): (f64, f64),
    good: &[Host],
) -> Phase {
    let good: Vec<String> = good.iter().map(|h| h.name().to_string()).collect();
    let is_good = |r: &Request| r.ok && r.site.as_ref().is_some_and(|s| good.contains(s));
    let window: Vec<&Request> = t
        .requests
        .iter()
        .filter(|r| r.end > from && r.end <= to)
        .collect();
    let first_good = window.iter().find(|r| is_good(r)).map(|r| r.end - from);
    let all_good = match window.iter().rposition(|r| !is_good(r)) {
        None => window.first().map(|r| r.end - from),
        Some(i) => window.get(i + 1).map(|r| r.end - from),
    };
    // The stream: the run of connections on good backends that reaches the end of the window
    // (still open then, and alive); from the first event of that run.
    let segments: Vec<&StreamSegment> = t.stream.iter().filter(|s| s.first <= to).collect();
    let alive = |s: &StreamSegment| s.end.is_none_or(|e| e > to) && s.last > to - RECENT;
    // Or held silent on a good backend across the end until the client itself gave up on it
    // (its silence limit) and re-dialed, again to a good backend: on a lossy link TCP's
    // retransmission back-off can hold a live stream silent that long, and the stream never left
    // good backends. A stream hung on a bad backend's dead path stays "not on good".
    let given_up_on_good = |s: &StreamSegment| {
        let next = t.stream.iter().find(|n| n.first > to);
        good.contains(&s.site)
            && s.end.is_some_and(|e| e > to)
            && s.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("silent for"))
            && next.is_some_and(|n| good.contains(&n.site))
    };
    let open_at_end = segments
        .last()
        .is_some_and(|s| alive(s) || given_up_on_good(s));
    let good_run = segments
        .iter()
        .rev()
        .take_while(|s| good.contains(&s.site))
        .last();
    let stream_good = good_run
        .filter(|_| open_at_end)
        .map(|s| (s.first - from).max(0.0));
    // The longest the stream went without an event in the window: between connections.
    let stream_gap = segments
        .windows(2)
        .filter(|w| w[1].first > from && w[0].last < to)
        .map(|w| w[1].first - w[0].last)
        .fold(0.0, f64::max);
    let failed: Vec<&&Request> = window.iter().filter(|r| !r.ok).collect();
    let stream_errors: Vec<&StreamDialError> = dial_errors
        .iter()
        .filter(|e| e.t > from && e.t <= to)
        .collect();
    let mut error_samples: Vec<String> = failed
        .iter()
        .map(|r| {
            format!(
                "request at {:+.2} s: {}",
                r.start,
                r.error.as_deref().unwrap_or("?")
            )
        })
        .chain(
            stream_errors
                .iter()
                .map(|e| format!("stream dial at {:+.2} s: {}", e.t, e.error)),
        )
        .collect();
    error_samples.truncate(5);
    let slowest = window
        .iter()
        .max_by(|a, b| (a.end - a.start).total_cmp(&(b.end - b.start)));
    Phase {
        name: name.to_string(),
        from,
        to,
        good: good.clone(),
        requests: window.len(),
        first_good,
        all_good,
        stream_good,
        stream_gap,
        errors: failed.len() + stream_errors.len(),
        error_samples,
        retried: window.iter().filter(|r| r.attempts > 1).count(),
        slow: window
            .iter()
            .filter(|r| r.end - r.start >= CONNECT_TIMEOUT.as_secs_f64())
            .count(),
        slowest: slowest.map(|r| r.end - r.start).unwrap_or(0.0),
        slowest_site: slowest.and_then(|r| r.site.clone()),
        changes: t
            .states
            .iter()
            .filter(|c| c.t > from && c.t <= to)
            .map(|c| format!("{} {:+.1}s {}", c.site, c.t, c.to))
            .collect(),
        lease_gap: lease::longest_gap(&t.leases, (from, to)),
        lease_failures: lease::failures(&t.leases, (from, to)),
        inflight_good: lease::inflight_good(&t.slow, &good, (from, to)),
        inflight_errors: t
            .slow
            .iter()
            .filter(|r| !r.ok && r.end > from && r.end <= to)
            .count(),
    }
}

/// The stream figure, on records made up here: no lab needed.
mod tests {
    use super::*;

    const FAULT_AT: f64 = 1000.0;

    /// One stream connection to the witness with an event every 250 ms over `spans` (seconds
    /// relative to the fault), and a request to it every 200 ms over the first span's start to
    /// the last span's end.
    fn record(spans: &[(f64, f64)]) -> Vec<ClientEvent> {
        let at = |i: u32, step: f64, from: f64| FAULT_AT + from + f64::from(i) * step;
        let mut events = Vec::new();
        for &(from, to) in spans {
            let n = ((to - from) / 0.25) as u32;
            events.extend((0..=n).map(|i| ClientEvent::Line {
                t: at(i, 0.25, from),
                c: 1,
                site: "witness".to_string(),
            }));
        }
        let (first, last) = (spans[0].0, spans[spans.len() - 1].1);
        let n = ((last - first) / 0.2) as u32;
        events.extend((0..n).map(|i| {
            ClientEvent::Req(Exchange {
                t0: at(i, 0.2, first),
                t1: at(i, 0.2, first) + 0.01,
                ok: true,
                site: Some("witness".to_string()),
                attempts: 1,
                error: None,
            })
        }));
        events
    }

    /// The stream figure of the window (0, `to`] with the witness good.
    fn stream_good(events: &[ClientEvent], to: f64) -> Option<f64> {
        let (t, dial_errors) = timeline("s", "s", "f", FAULT_AT, None, events, &[]);
        phase(&t, &dial_errors, "fault", (0.0, to), &[Host::Witness]).stream_good
    }

    #[test]
    fn a_stream_silent_across_the_window_end_is_on_good_once_it_delivers_again() {
        // Scenario 6's lossy link: one event waits out TCP's retransmission back-off (2 s here;
        // 3.1 s was seen) just as the window ends at +60 s. The connection carries on.
        let events = record(&[(-5.0, 59.0), (61.0, 62.0)]);
        assert_eq!(stream_good(&events, 60.0), Some(0.0));
        // Cut off at the window's end, as the record was taken before, the same run read as
        // "stream on good never": why the runner waits for the stream to deliver again.
        let cut: Vec<ClientEvent> = events
            .into_iter()
            .filter(|e| !matches!(e, ClientEvent::Line { t, .. } if *t > FAULT_AT + 60.0))
            .collect();
        assert_eq!(stream_good(&cut, 60.0), None);
    }

    /// `events` with the witness connection ended by the client's silence limit at `end` and a
    /// second connection, to `site`, delivering from just after it.
    fn given_up_at(mut events: Vec<ClientEvent>, end: f64, site: &str) -> Vec<ClientEvent> {
        events.push(ClientEvent::End {
            t: FAULT_AT + end,
            c: 1,
            reason: "silent for 30 s".to_string(),
        });
        events.extend((0..8).map(|i| ClientEvent::Line {
            t: FAULT_AT + end + 0.1 + f64::from(i) * 0.25,
            c: 2,
            site: site.to_string(),
        }));
        events
    }

    #[test]
    fn a_stream_silent_on_a_good_backend_until_the_client_gave_up_stayed_on_good() {
        // Scenario 6 in a head-to-head run: silent from +50 s on the lossy link, the client ends
        // the connection at its 30 s limit after the window and re-dials to a good backend.
        let events = given_up_at(record(&[(-5.0, 50.0)]), 80.0, "witness");
        assert_eq!(stream_good(&events, 60.0), Some(0.0));
        // ... but not when the re-dial lands on a bad backend, nor for an ordinary error.
        let bad = given_up_at(record(&[(-5.0, 50.0)]), 80.0, "dc-b");
        assert_eq!(stream_good(&bad, 60.0), None);
        let reset: Vec<ClientEvent> = given_up_at(record(&[(-5.0, 50.0)]), 80.0, "witness")
            .into_iter()
            .map(|e| match e {
                ClientEvent::End { t, c, .. } => ClientEvent::End {
                    t,
                    c,
                    reason: "reset".to_string(),
                },
                e => e,
            })
            .collect();
        assert_eq!(stream_good(&reset, 60.0), None);
    }

    #[test]
    fn a_stream_hung_before_the_window_end_is_not_on_good() {
        // The last event 1.5 s before the end and none after it: the connection is open but
        // delivers nothing (a dead path).
        let events = record(&[(-5.0, 58.5)]);
        assert_eq!(stream_good(&events, 60.0), None);
    }
}
