//! Keeping the log's cause current through a long outage, so that the latest lines of a node's
//! log (`talosctl logs`, when kubectl cannot reach the node) always say why: a WARN when an
//! unready backend's failure reason changes (once per change, never per probe), and, while no
//! backend is ready, a reminder every [`NONE_READY_REMINDER`] listing each backend's reason.
//!
//! Owns the pure decisions ([`on_health`], [`next_reminder`]) and the reminder's wording
//! ([`reasons`]). Does not own the state-change lines (`health`) nor the no-ready alarm itself
//! (`transitions`); the writer applies what these decide.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backend, BackendId, Snapshot};
use crate::verdict::{Health, Reach, State};

/// While no backend is ready, the reasons are logged again this often. Five minutes: well inside
/// a log window anyone reads back (`talosctl logs --tail`), a dozen lines an hour per node, and
/// long enough that a short blink never repeats itself.
pub const NONE_READY_REMINDER: Duration = Duration::from_secs(5 * 60);

/// At most this many backends are named in one reminder; the rest are counted.
pub const REMINDER_BACKENDS: usize = 16;

/// A reason is cut to this many characters in a reminder.
pub const REMINDER_REASON: usize = 200;

/// What a new health means for the reason the log last gave for a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Nothing to say or remember.
    Nothing,
    /// The state-change line just gave this reason: remember it, say nothing more.
    Remember(Arc<str>),
    /// An unready backend fails for another reason than the log last gave: say it (WARN), and
    /// remember it. `was` is the reason last given, if any.
    Changed {
        /// The reason the log gave before.
        was: Option<Arc<str>>,
        /// The reason now.
        now: Arc<str>,
    },
    /// Not unready any more: forget the reason.
    Forget,
}

/// The decision for one backend's new health, given the reason the log last gave for it
/// (`said`) and its state before. A pass while unready (a rise under way) clears the health's
/// reason but changes nothing here: the next failure is compared with what was said.
pub fn on_health(said: Option<&Arc<str>>, before: State, after: &Health) -> Note {
    if after.state != State::Unready {
        return if said.is_some() {
            Note::Forget
        } else {
            Note::Nothing
        };
    }
    let Some(now) = after.last_failure.as_ref().map(|f| f.reason.clone()) else {
        return Note::Nothing;
    };
    if before != State::Unready {
        return Note::Remember(now);
    }
    match said {
        Some(was) if **was == *now => Note::Nothing,
        was => Note::Changed {
            was: was.cloned(),
            now,
        },
    }
}

/// When the next reminder is due: [`NONE_READY_REMINDER`] after the alarm went up or the last
/// reminder; never while the alarm is down.
pub fn next_reminder(announced: bool, last: Option<Instant>) -> Option<Instant> {
    match (announced, last) {
        (true, Some(at)) => Some(at + NONE_READY_REMINDER),
        _ => None,
    }
}

/// Each backend's failing checks as one line, for the WARN of a cluster-wide event:
/// `10.0.1.10:6443: etcd, shutdown; 10.0.2.10:6443: no answer`, at most [`REMINDER_BACKENDS`] of
/// them (then `and N more`). `none named` for an answer that named no check.
pub fn checks(snap: &Snapshot) -> String {
    per_backend(snap, |b| {
        let checks = match &b.health.last_failure {
            None => "none failing".to_string(),
            Some(_) if !b.health.reach.is_some_and(Reach::is_answered) => "no answer".to_string(),
            Some(f) if f.checks.is_empty() => "none named".to_string(),
            Some(f) => f.checks.to_string(),
        };
        format!("{}: {checks}", b.spec.id)
    })
}

/// Each backend's reason as one line: `10.0.1.10:6443 unready: readyz 500: etcd failed;
/// 10.0.2.10:6443 unready: dial: timeout after 1s`, at most [`REMINDER_BACKENDS`] of them (then
/// `and N more`), each reason on one line and cut at [`REMINDER_REASON`] characters.
pub fn reasons(snap: &Snapshot) -> String {
    per_backend(snap, |b| {
        let reason = b.health.last_error().unwrap_or("no failure yet");
        let one_line: String = reason
            .split('\n')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ");
        let cut: String = if one_line.chars().count() > REMINDER_REASON {
            one_line
                .chars()
                .take(REMINDER_REASON - 1)
                .chain(['…'])
                .collect()
        } else {
            one_line
        };
        format!("{} {}: {cut}", b.spec.id, b.health.state.as_str())
    })
}

/// `part` of each of the first [`REMINDER_BACKENDS`] backends, then `and N more` for the rest,
/// joined by `; `.
fn per_backend(snap: &Snapshot, part: impl Fn(&Backend) -> String) -> String {
    let mut parts: Vec<String> = snap
        .backends
        .iter()
        .take(REMINDER_BACKENDS)
        .map(part)
        .collect();
    if snap.backends.len() > REMINDER_BACKENDS {
        parts.push(format!(
            "and {} more",
            snap.backends.len() - REMINDER_BACKENDS
        ));
    }
    parts.join("; ")
}

/// The reasons the log last gave, per unready backend (the writer's memory for [`on_health`]).
pub type Said = HashMap<BackendId, Arc<str>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::CheckFailure;

    fn health(state: State, reason: Option<&str>) -> Health {
        Health {
            state,
            reach: reason.map(|_| Reach::answered(500, std::time::Duration::ZERO)),
            last_failure: reason.map(|r| CheckFailure {
                reason: r.into(),
                checks: crate::verdict::FailingChecks::none(),
            }),
            ..Health::UNKNOWN
        }
    }

    #[test]
    fn an_unready_backends_changed_reason_is_said_once() {
        use State::*;
        let etcd: Arc<str> = "readyz 500: etcd failed".into();
        let timeout: Arc<str> = "timeout after 3s".into();
        let e = Some(&etcd);
        let cases: Vec<(Option<&Arc<str>>, State, Health, Note)> = vec![
            // The state change gave the reason: remembered, not said again.
            (
                None,
                Ready,
                health(Unready, Some(&etcd)),
                Note::Remember(etcd.clone()),
            ),
            (
                None,
                Unknown,
                health(Unready, Some(&etcd)),
                Note::Remember(etcd.clone()),
            ),
            // The same reason probe after probe: nothing.
            (e, Unready, health(Unready, Some(&etcd)), Note::Nothing),
            // Another reason: said once (then remembered by the writer).
            (
                e,
                Unready,
                health(Unready, Some(&timeout)),
                Note::Changed {
                    was: Some(etcd.clone()),
                    now: timeout.clone(),
                },
            ),
            // A pass during a rise clears the health's reason, not what was said.
            (e, Unready, health(Unready, None), Note::Nothing),
            // Unready with nothing said (a reason never seen by this writer): said.
            (
                None,
                Unready,
                health(Unready, Some(&timeout)),
                Note::Changed {
                    was: None,
                    now: timeout.clone(),
                },
            ),
            // Ready again: forgotten; a ready backend's failures (a fall under way) say nothing.
            (e, Unready, health(Ready, None), Note::Forget),
            (None, Ready, health(Ready, Some(&etcd)), Note::Nothing),
        ];
        for (i, (said, before, after, want)) in cases.into_iter().enumerate() {
            assert_eq!(on_health(said, before, &after), want, "case {i}");
        }
    }

    fn snapshot(n: usize, reason: &str) -> Snapshot {
        use crate::backend::{Backend, BackendLive};
        let backends = (0..n)
            .map(|i| Backend {
                live: Arc::new(BackendLive::default()),
                spec: crate::testing::fixtures::spec(&format!("10.0.0.{i}:6443"), None),
                health: health(State::Unready, Some(reason)),
                evict_epoch: 0,
                degraded: None,
            })
            .collect();
        Snapshot {
            backends,
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_reminder_names_each_backend_on_one_bounded_line() {
        let two = reasons(&snapshot(2, "HTTP 500: [+]ping ok\n[-]etcd failed"));
        assert_eq!(
            two,
            "10.0.0.0:6443 unready: HTTP 500: [+]ping ok; [-]etcd failed; \
             10.0.0.1:6443 unready: HTTP 500: [+]ping ok; [-]etcd failed"
        );
        let many = reasons(&snapshot(REMINDER_BACKENDS + 3, &"x".repeat(1000)));
        assert!(many.ends_with("; and 3 more"), "{many}");
        assert_eq!(many.matches('…').count(), REMINDER_BACKENDS);
        assert!(many.chars().count() < REMINDER_BACKENDS * (REMINDER_REASON + 40));
    }

    #[test]
    fn the_reminder_is_due_every_five_minutes_while_nothing_is_ready() {
        let t0 = Instant::now();
        assert_eq!(next_reminder(false, None), None);
        assert_eq!(next_reminder(false, Some(t0)), None);
        assert_eq!(next_reminder(true, None), None);
        assert_eq!(
            next_reminder(true, Some(t0)),
            Some(t0 + NONE_READY_REMINDER)
        );
    }
}
