//! The simulated apiserver's graceful shutdown, as kube-apiserver's `--shutdown-delay-duration`:
//! at once `/readyz` fails with only `[-]shutdown failed` while everything else is still served
//! and new connections are still accepted; after the delay the listener closes; after the grace
//! the connections still open are closed. With `--shutdown-send-retry-after`, after the delay the
//! listener stays open while requests in flight drain, and every new request but the health
//! endpoints is answered `429` (k8s.io/apiserver v0.37.2 `pkg/server/genericapiserver.go`
//! `RunWithContext`, `pkg/server/filters/with_retry_after.go`).
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
    /// After the delay, with `--shutdown-send-retry-after`: new requests other than the health
    /// endpoints get `429` with `Retry-After`, until the requests in flight have drained.
    Rejecting,
    /// The listener is closed (new dials are refused); open connections are still served.
    Unlistened,
    /// Every connection has been told to close.
    Closed,
}

/// How a graceful shutdown goes: kube-apiserver's `--shutdown-delay-duration`, how long open
/// connections are still served once the listener closed, `--shutdown-send-retry-after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// How long `/readyz` fails only `shutdown` while everything is served.
    pub delay: Duration,
    /// After the listener closed, how long open connections are still served.
    pub grace: Duration,
    /// After the delay, answer new requests `429` until those in flight drain, then close.
    pub send_retry_after: bool,
}

/// The timeline of one graceful shutdown: `Draining` at once; after `delay`, with
/// `send_retry_after`, `Rejecting` until no request is in flight; then the listener closed
/// (`unlisten`), every connection (`stop`) after `grace` more. Ends early, at `Closed`, when
/// `stop` is cancelled by someone else.
pub(super) async fn timeline(
    control: Arc<Control>,
    plan: Plan,
    (stop, unlisten): (CancellationToken, CancellationToken),
) {
    let Plan {
        delay,
        grace,
        send_retry_after,
    } = plan;
    control
        .phase
        .send_if_modified(|p| advance(p, Phase::Draining));
    tracing::info!(name = %control.name, delay = ?delay, grace = ?grace, "graceful shutdown: /readyz fails the shutdown check");
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(delay) => {
            if send_retry_after {
                control.phase.send_if_modified(|p| advance(p, Phase::Rejecting));
                tracing::info!(name = %control.name, "graceful shutdown: new requests get 429 until those in flight drain");
                let mut in_flight = control.in_flight.subscribe();
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = in_flight.wait_for(|n| *n == 0) => {}
                }
            }
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
