//! Passive health: what the proxy's client dials say about a backend, folded into its rise/fall
//! machine. The one place the rule lives:
//!
//! - a failed client dial, or a relay TCP gave up on (a dead path; not a backend that stopped
//!   reading, `stall`), counts as a failed check at
//!   once (a kept-alive probe connection proves nothing about new connections), at most `fall`
//!   of them per report, so one burst from a site's kubelets cannot count for more;
//! - while a fall is pending whose latest failure is a dial that got no connection (a client's,
//!   or the probe's own), a dial that connects (a client's, or a probe's) calls it off: a new
//!   connection that worked refutes "new connections fail", so lost SYNs on a lossy link (a
//!   dial fails when all of its attempts lose a packet) are not taken for a black hole;
//! - a probe that gets an HTTP answer, or that leaves no change pending, ends that: the backend
//!   is judged by its answer from then on.
//!
//! The proxy tells the backend's lock-free [`Inbox`]; the monitor reads the dials through this
//! type only. Does not own the probe schedule (`health`) nor the hysteresis (`rise_fall`).

use std::sync::Arc;

use crate::backend::{BackendId, BackendLive, Inbox};
use crate::verdict::Reach;

use super::rise_fall::{Outcome, RiseFall, Step};

/// One backend's passive health, owned by its monitor.
#[derive(Debug)]
pub(crate) struct Passive {
    id: BackendId,
    live: Arc<BackendLive>,
    fall: u32,
}

impl Passive {
    /// Reads what the proxy reports for backend `id` (through `live`); `fall` bounds what one
    /// report counts.
    pub fn new(id: BackendId, live: Arc<BackendLive>, fall: u32) -> Self {
        let fall = fall.max(1);
        Passive { id, live, fall }
    }

    fn reports(&self) -> &Inbox {
        &self.live.inbox
    }

    /// Folds into `machine` what the proxy reported since the last call. `Some(step)` when
    /// failures were counted; a connected dial that calls off a fall changes no published health
    /// and returns `None`.
    pub fn fold(&self, machine: &mut RiseFall) -> Option<Step> {
        if self.reports().take_connected() && machine.call_off_fall() {
            self.reports().set_suspect(false);
            tracing::debug!(backend = %self.id, "a client dial connected: the pending fall from failed dials is called off");
        }
        let (failed, reason) = self.reports().take_failed()?;
        // As a probe's result is (`record` in `health`): failed client dials count as failures.
        tracing::debug!(backend = %self.id, passed = false, checks = "", failed, "probe");
        let mut step = Step::default();
        for _ in 0..failed.min(self.fall) {
            step = step.then(machine.observe(&Outcome::dial_failed(reason.clone())));
        }
        // A fall under way from failed dials: a client dial that connects now calls it off.
        self.reports().set_suspect(step.pending);
        Some(step)
    }

    /// A probe's `outcome` was folded in with `step`: a backend that answered HTTP is judged by
    /// its answer, and with nothing pending there is no fall to call off. A probe whose own dial
    /// got no connection leaves a fall pending that a connecting dial calls off, as a failed
    /// client dial does: on a lossy link the probe's SYNs are lost as often as a client's.
    pub fn probed(&self, outcome: &Outcome, step: Step) {
        let reach = outcome.reach();
        if reach.is_answered() || !step.pending {
            self.reports().set_suspect(false);
        } else if reach == Reach::Unreached {
            self.reports().set_suspect(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::News;
    use crate::verdict::{Health, State};
    use std::time::Duration;

    fn ready(rise_fall: u32) -> (Passive, RiseFall, Arc<BackendLive>) {
        let live = Arc::new(BackendLive::default());
        let passive = Passive::new(BackendId::new("a:1"), live.clone(), rise_fall);
        let mut machine = RiseFall::new(rise_fall, rise_fall, Health::UNKNOWN);
        let pass = Outcome::Pass {
            latency: Duration::from_millis(1),
        };
        machine.observe(&pass);
        (passive, machine, live)
    }

    #[test]
    fn failed_dials_count_as_failed_checks_at_most_fall_per_report() {
        let (passive, mut machine, live) = ready(3);
        assert_eq!(passive.fold(&mut machine), None, "nothing reported");
        for _ in 0..10 {
            live.inbox
                .tell(News::DialFailed("dial: connection refused".into()));
        }
        let step = passive.fold(&mut machine).expect("counted");
        assert_eq!(step.changed, Some((State::Ready, State::Unready)));
        assert_eq!(
            machine.health().last_error(),
            Some("dial: connection refused")
        );
        live.inbox
            .tell(News::DialFailed("dial: connection refused".into()));
        let step = passive.fold(&mut machine).expect("counted");
        assert_eq!(
            (step.changed, step.pending),
            (None, false),
            "ten counted as three"
        );
    }

    #[test]
    fn a_connected_dial_calls_off_only_a_fall_that_failed_dials_started() {
        let (passive, mut machine, live) = ready(2);
        live.inbox
            .tell(News::DialFailed("dial: timeout after 1s".into()));
        assert!(passive.fold(&mut machine).is_some_and(|s| s.pending));
        live.inbox.tell(News::Connected);
        assert_eq!(passive.fold(&mut machine), None, "no health to publish");
        live.inbox
            .tell(News::DialFailed("dial: timeout after 1s".into()));
        let step = passive.fold(&mut machine).expect("counted");
        assert_eq!(
            (step.changed, step.pending),
            (None, true),
            "the count started again: one failure, not two"
        );

        // A probe that answers HTTP (not ready) judges the backend from then on: a connected
        // dial calls nothing off and is not even reported.
        let (passive, mut machine, live) = ready(3);
        live.inbox
            .tell(News::DialFailed("dial: timeout after 1s".into()));
        let step = passive.fold(&mut machine).expect("counted");
        let answered = Outcome::failed_answer(
            "readyz 500: etcd failed".into(),
            crate::verdict::FailClass::Http5xx,
            crate::verdict::FailingChecks::of(&["etcd"]),
            500,
            Duration::from_millis(2),
        );
        let step = step.then(machine.observe(&answered));
        assert_eq!((step.changed, step.pending), (None, true));
        passive.probed(&answered, step);
        live.inbox.tell(News::Connected);
        assert_eq!(passive.fold(&mut machine), None);
        assert_eq!(
            machine.observe(&answered).changed,
            Some((State::Ready, State::Unready)),
            "the third failure in a row falls"
        );
    }
}
