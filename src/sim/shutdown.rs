//! The simulated apiserver's graceful shutdown, as kube-apiserver's `--shutdown-delay-duration`:
//! at once `/readyz` fails with only `[-]shutdown failed` while everything else is still served
//! and new connections are still accepted; after the delay the listener closes; after the grace
//! the connections still open are closed.
//!
//! Owns the phases and their timeline. Does not own what a phase changes in an answer
//! (`control`, `readyz`) or the listener and connections (`apiserver`).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::control::Control;

/// Where a graceful shutdown is; each step follows the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// No shutdown: `shutdown` passes.
    Serving,
    /// `shutdown` fails; everything else is served and new connections are accepted.
    Draining,
    /// The listener is closed (new dials are refused); open connections are still served.
    Unlistened,
    /// Every connection has been told to close.
    Closed,
}

/// The timeline of one graceful shutdown: `Draining` at once, the listener closed (`unlisten`)
/// after `delay`, every connection (`stop`) after `grace` more. Ends early, at `Closed`, when
/// `stop` is cancelled by someone else.
pub(super) async fn timeline(
    control: Arc<Control>,
    (delay, grace): (Duration, Duration),
    (stop, unlisten): (CancellationToken, CancellationToken),
) {
    control
        .phase
        .send_if_modified(|p| advance(p, Phase::Draining));
    tracing::info!(name = %control.name, delay = ?delay, grace = ?grace, "graceful shutdown: /readyz fails the shutdown check");
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(delay) => {
            unlisten.cancel();
            // The listener is gone only once the accept loop has dropped it.
            let mut listening = control.listening.subscribe();
            let _ = listening.wait_for(|l| !l).await;
            control.phase.send_if_modified(|p| advance(p, Phase::Unlistened));
            tracing::info!(name = %control.name, "graceful shutdown: the listener is closed");
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(grace) => {}
            }
        }
    }
    stop.cancel();
    control
        .phase
        .send_if_modified(|p| advance(p, Phase::Closed));
}

/// Moves `phase` forward to `to`; never back (a second shutdown does not restart the first).
fn advance(phase: &mut Phase, to: Phase) -> bool {
    let moved = to > *phase;
    if moved {
        *phase = to;
    }
    moved
}

#[cfg(test)]
mod tests;
