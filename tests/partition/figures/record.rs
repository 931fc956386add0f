//! From what was recorded (the client's JSON lines, the balancer's logged state changes) to a
//! scenario's [`Timeline`], times relative to the fault. Pure. It does not compute the figures of
//! a phase (`figures.rs`) or print or save them (`report.rs`).

use std::collections::BTreeMap;

use super::StreamDialError;
use crate::partition::balancer_log::Change;
use crate::partition::cast::{ClientEvent, Exchange};
use crate::partition::netlab::Host;
use crate::partition::timeline::{LeaseAttempt, Request, StateChange, StreamSegment, Timeline};

/// The record of a run, times relative to `fault_at` (wall clock).
pub fn timeline(
    scenario: &str,
    title: &str,
    fault: &str,
    fault_at: f64,
    heal_at: Option<f64>,
    events: &[ClientEvent],
    changes: &[Change],
) -> (Timeline, Vec<StreamDialError>) {
    let rel = |t: f64| t - fault_at;
    let mut requests = Vec::new();
    let (mut leases, mut slow) = (Vec::new(), Vec::new());
    let mut segments: BTreeMap<u32, StreamSegment> = BTreeMap::new();
    let mut ends: BTreeMap<u32, (f64, String)> = BTreeMap::new();
    let mut dial_errors = Vec::new();
    for e in events {
        match e {
            ClientEvent::Req(r) => requests.push(request(r, &rel)),
            ClientEvent::Line { t, c, site } => {
                let seg = segments.entry(*c).or_insert_with(|| StreamSegment {
                    conn: *c,
                    site: site.clone(),
                    first: rel(*t),
                    last: rel(*t),
                    end: None,
                    reason: None,
                });
                seg.last = rel(*t);
            }
            ClientEvent::End { t, c, reason } => {
                ends.insert(*c, (rel(*t), reason.clone()));
            }
            ClientEvent::DialError { t, error, .. } => dial_errors.push(StreamDialError {
                t: rel(*t),
                error: error.clone(),
            }),
            ClientEvent::Lease {
                t0,
                t1,
                ok,
                site,
                attempt,
                conn,
                error,
            } => leases.push(LeaseAttempt {
                start: rel(*t0),
                end: rel(*t1),
                ok: *ok,
                site: site.clone(),
                attempt: *attempt,
                conn: conn.clone(),
                error: error.clone(),
            }),
            ClientEvent::Slow(r) => slow.push(request(r, &rel)),
        }
    }
    for (c, (t, reason)) in ends {
        if let Some(seg) = segments.get_mut(&c) {
            seg.end = Some(t);
            seg.reason = Some(reason);
        }
    }
    requests.sort_by(|a, b| a.start.total_cmp(&b.start));
    let states = changes
        .iter()
        .map(|c| StateChange {
            t: rel(c.t),
            site: c.site.name().to_string(),
            from: c.from.clone(),
            to: c.to.clone(),
            reason: c.reason.clone(),
        })
        .collect();
    let t = Timeline {
        scenario: scenario.to_string(),
        title: title.to_string(),
        fault: fault.to_string(),
        heal_at: heal_at.map(rel),
        sites: [Host::DcA, Host::DcB, Host::Witness]
            .iter()
            .map(|h| h.name().to_string())
            .collect(),
        requests,
        stream: segments.into_values().collect(),
        states,
        phases: Vec::new(),
        leases,
        slow,
    };
    (t, dial_errors)
}

/// A client's request on the figure's clock (`rel`: seconds since the figure's start).
fn request(r: &Exchange, rel: &impl Fn(f64) -> f64) -> Request {
    Request {
        start: rel(r.t0),
        end: rel(r.t1),
        site: r.site.clone(),
        ok: r.ok,
        attempts: r.attempts,
        error: r.error.clone(),
    }
}
