//! Two futures polled together until one ends: a relayed connection's relay and its stop.
//!
//! `tokio::select!` does the same with a poller and branch flags beside the two futures (24 B
//! with padding), in every idle connection's task. Does not own what either future does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// Runs `work` until it ends or `stop` does, whichever is first: `stop` is polled first, so
    /// a connection that always has bytes to move still hears its stop at every wake-up.
    pub(super) struct Race<W, S> {
        #[pin]
        stop: S,
        #[pin]
        work: W,
    }
}

/// Which of the two ended first, with what it returned.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum First<W, S> {
    Work(W),
    Stop(S),
}

/// `work` raced against `stop`.
pub(super) fn race<W: Future, S: Future>(work: W, stop: S) -> Race<W, S> {
    Race { stop, work }
}

impl<W: Future, S: Future> Future for Race<W, S> {
    type Output = First<W::Output, S::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(s) = this.stop.poll(cx) {
            return Poll::Ready(First::Stop(s));
        }
        this.work.poll(cx).map(First::Work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ready_stop_wins_a_tie() {
        assert_eq!(race(async { 1 }, async { 2 }).await, First::Stop(2));
    }

    #[tokio::test]
    async fn the_first_to_end_wins() {
        let never = std::future::pending::<()>;
        assert_eq!(race(async { 1 }, never()).await, First::Work(1));
        assert_eq!(race(never(), async { 2 }).await, First::Stop(2));
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let woken = tokio::spawn(race(never(), rx));
        tx.send(3).expect("the race is waiting");
        assert!(matches!(woken.await.expect("joined"), First::Stop(Ok(3))));
    }
}
