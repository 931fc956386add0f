//! `readyprism check`'s NotReady budget held against the composition it describes: a backend
//! that goes silent at the worst moment of its schedule (just after a probe started, at the
//! longest jitter draw), its escape routes answering just inside the probe timeout, stepped.
//! Each measured stretch stays within its own term, and the fall comes exactly at
//! `unready_after()`: a term dropped from the budget fails here.

use std::time::Duration;

use super::step::{Step, Truth, FALL, FAST_INTERVAL, INTERVAL, RISE, TIMEOUT};
use crate::backend::Routing;
use crate::cli::check::budget::Budget;
use crate::config::HealthConfig;
use crate::eviction::CloseReason;
use crate::health::JITTER_PERCENT;
use crate::verdict::State;

const DC_A: &str = "10.0.1.1:6443";
const DC_B: &str = "10.0.2.1:6443";
const WITNESS: &str = "10.0.3.1:6443";
const MS: Duration = Duration::from_millis(1);

#[test]
fn a_backend_going_silent_at_the_worst_moment_is_held_to_the_budget() {
    let health = HealthConfig {
        interval: INTERVAL,
        timeout: TIMEOUT,
        fast_interval: FAST_INTERVAL,
        rise: RISE,
        fall: FALL,
        ..crate::testing::fixtures::health_config()
    };
    let budget = Budget::of(&health, &Routing::in_zone("dc-b"));
    let mut h = Step::new(
        "dc-b",
        &[(DC_A, "dc-a"), (DC_B, "dc-b"), (WITNESS, "witness")],
        |r| r.failback_after = None,
    );
    // dc-b at the daemon's longest jitter draw; the routes pass just inside the timeout.
    let longest = crate::jitter::around(INTERVAL, f64::from(JITTER_PERCENT) / 100.0, 1.0);
    h.interval(DC_B, longest);
    for route in [DC_A, WITNESS] {
        h.set(route, Truth::Slow(TIMEOUT - 10 * MS));
    }
    // dc-b's probe at 0 has started (it passes); it goes silent right after, with 16
    // connections on it.
    h.run_to(MS);
    let bad = MS;
    h.connect(DC_B, 16);
    h.set(DC_B, Truth::Silent);
    h.run_to(Duration::from_secs(60));

    let unready = turned(&h, DC_B) - bad;
    assert!(
        unready <= budget.unready_after() && unready + 10 * MS >= budget.unready_after(),
        "marked unready {unready:?} after going bad; the budget says {:?}",
        budget.unready_after()
    );
    let bumped = h
        .bumps
        .iter()
        .find(|b| b.0 == DC_B && b.1 == CloseReason::TurnedUnready)
        .map(|b| b.2 - bad)
        .unwrap_or_else(|| panic!("dc-b's connections never closed: {:?}", h.bumps));
    let escape = bumped - unready;
    assert!(
        escape > Duration::ZERO && escape <= budget.escape,
        "its escape route confirmed {escape:?} after the fall; the budget says {:?}",
        budget.escape
    );
    assert_eq!(h.closed.len(), 16, "{:?}", h.closed);
    let last = h.closed.iter().map(|c| c.at - bad).max().expect("closes");
    let spread = last - bumped;
    assert!(
        spread > Duration::ZERO && spread <= budget.spread,
        "closed over {spread:?}; the budget says {:?}",
        budget.spread
    );
    assert!(last <= budget.cut_by() && last <= budget.worst_case());
}

/// When `backend` last turned unready, from the start.
fn turned(h: &Step, backend: &str) -> Duration {
    h.changes
        .iter()
        .rev()
        .find(|c| c.0 == backend && c.1 == State::Unready)
        .map(|c| c.2)
        .unwrap_or_else(|| panic!("{backend} never turned unready: {:?}", h.changes))
}
