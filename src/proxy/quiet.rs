//! When an evicted connection is closed once its turn has come: at once, unless it is handed off
//! (`handoff`) mid-exchange: then at its next quiet moment, by the window's end at the latest.
//!
//! A hand-off is planned, so it can wait for a moment that cuts nothing: a connection whose
//! latest bytes went to the backend has a request outstanding, and closing it then fails that
//! request. It is closed once its answer has come back and been written to the client, and the
//! backend → client way has then been silent for [`SETTLE`] (the rest of the answer); a
//! connection idle or answered at its turn is closed at once, as before, and so is every
//! connection evicted for another reason. The balancer sees bytes, not requests (TLS passes
//! through): a client that sends more after its answer (an HTTP/2 window update) looks
//! mid-exchange and waits, at most to the window's end. The rule is [`Quiet::look`], pure;
//! [`turn`] applies it, reading the way and the count the relay keeps ([`Moved`]): no lock, no
//! message on the relay's path.
//!
//! Does not own the turn's spread over the window nor the waits beside it (a later bump, the
//! shutdown cut: `proxy`), nor what the relay counts (`relay`).

use std::time::Duration;

use tokio::time::Instant;

use crate::eviction::CloseReason;
use crate::relay::{Moved, Way};

/// How long the backend → client way must stay silent, once the outstanding request's answer
/// has begun to come back, for the answer to be taken as whole: the relay's own measure of a
/// transfer gone quiet ([`crate::relay::IDLE_RELEASE`], "long enough to span the gaps of a
/// transfer"). An answer leaves the apiserver in one burst, its segments at most a round trip
/// apart (a large one growing its congestion window), well under this within a site; closing at
/// the first bytes back would cut any answer longer than one read. A look every [`SETTLE`]
/// costs a waiting connection ten wake-ups a second, for at most the window.
pub(super) const SETTLE: Duration = crate::relay::IDLE_RELEASE;

/// What one look at a connection sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Look {
    /// The way its latest bytes went; `None` before any.
    pub(super) latest: Option<Way>,
    /// Bytes written to the client so far.
    pub(super) to_client: u64,
}

impl Look {
    /// A look at the connection whose tally is `moved`, now.
    fn at(moved: &Moved) -> Look {
        Look {
            latest: moved.latest.way(),
            to_client: moved.to_client.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// Where a hand-off's close stands, between looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Quiet {
    /// Its turn has come; not looked at yet.
    Turn,
    /// Waiting: at the last look a request was outstanding or the answer still coming, with
    /// `to_client` bytes written to the client by then.
    Waiting {
        /// Bytes written to the client at the last look.
        to_client: u64,
    },
}

/// What to do after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Close it now.
    Close,
    /// Look again then.
    LookAt(Instant),
}

impl Quiet {
    /// Looks at a handed-off connection that `seen` describes, `now`, with the window ending at
    /// `end`: at or past `end`, close whatever is going on; at the turn, close unless a request
    /// is outstanding (the latest bytes went to the backend); after that, close once the latest
    /// bytes went to the client and none was written to it since the last look ([`SETTLE`]
    /// ago); else look again a [`SETTLE`] later (no later than `end`).
    pub(super) fn look(&mut self, seen: Look, now: Instant, end: Instant) -> Next {
        if now >= end {
            return Next::Close;
        }
        let answered = seen.latest != Some(Way::ToBackend);
        let settled = match *self {
            Quiet::Turn => answered,
            Quiet::Waiting { to_client } => answered && seen.to_client == to_client,
        };
        if settled {
            return Next::Close;
        }
        *self = Quiet::Waiting {
            to_client: seen.to_client,
        };
        Next::LookAt((now + SETTLE).min(end))
    }
}

/// Completes when a connection evicted for `why` at `evicted` is to be closed: at its turn `due`
/// (spread into the reason's `window`), and for a hand-off at its first quiet moment from then on
/// ([`Quiet::look`] on its tally `moved`), by the window's end at the latest.
pub(super) async fn turn(
    why: CloseReason,
    (evicted, due): (Instant, Instant),
    window: Duration,
    moved: &Moved,
) {
    let end = evicted + window;
    tokio::time::sleep_until(due).await;
    if why != CloseReason::Handoff {
        return;
    }
    let mut quiet = Quiet::Turn;
    loop {
        let was = quiet;
        let now = Instant::now();
        match quiet.look(Look::at(moved), now, end) {
            Next::Close => return,
            Next::LookAt(then) => {
                if was == Quiet::Turn {
                    tracing::debug!(
                        within_ms = end.saturating_duration_since(now).as_millis() as u64,
                        "hand-off: a request is outstanding at the connection's turn; closing it once answered"
                    );
                }
                tokio::time::sleep_until(then).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    const SECOND: Duration = Duration::from_secs(1);

    /// What a connection looks like: the way of its latest bytes and its count to the client.
    fn seen(latest: Option<Way>, to_client: u64) -> Look {
        Look { latest, to_client }
    }

    #[test]
    fn a_look_closes_at_a_quiet_moment_or_at_the_windows_end() {
        let t = Instant::now();
        let end = t + Duration::from_secs(5);
        let waiting = |to_client| Quiet::Waiting { to_client };
        let again = |after: Duration| Next::LookAt(t + after);
        let (up, down) = (Some(Way::ToBackend), Some(Way::ToClient));
        #[rustfmt::skip]
        let cases = [
            // (state, seen, now, next, state after, why)
            (Quiet::Turn, seen(None, 0), t, Next::Close, Quiet::Turn,
                "nothing relayed yet: idle"),
            (Quiet::Turn, seen(down, 900), t, Next::Close, Quiet::Turn,
                "answered (or a watch event) last: closed at once, as before"),
            (Quiet::Turn, seen(up, 900), t, again(SETTLE), waiting(900),
                "a request outstanding at the turn: waits for its answer"),
            (waiting(900), seen(up, 900), t, again(SETTLE), waiting(900),
                "still outstanding"),
            (waiting(900), seen(down, 1400), t, again(SETTLE), waiting(1400),
                "the answer is coming back: waits for it to go quiet"),
            (waiting(1400), seen(down, 1400), t, Next::Close, waiting(1400),
                "answered, and nothing more to the client for a look: quiet"),
            (waiting(900), seen(up, 1400), t, again(SETTLE), waiting(1400),
                "answered, and the next request went out: waits for that one"),
            (waiting(1400), seen(up, 1400), t, again(SETTLE), waiting(1400),
                "bytes to the backend after the answer: a new request, outstanding"),
            (Quiet::Turn, seen(up, 900), end - SETTLE / 2, Next::LookAt(end), waiting(900),
                "the last look is at the window's end, not past it"),
            (waiting(900), seen(up, 900), end, Next::Close, waiting(900),
                "the window is over: closed, outstanding or not"),
            (waiting(900), seen(down, 1400), end + SETTLE, Next::Close, waiting(900),
                "past the window: closed mid-answer"),
            (Quiet::Turn, seen(up, 900), end, Next::Close, Quiet::Turn,
                "a turn at the window's end (a zero window) closes at once"),
        ];
        for (before, look, now, next, after, why) in cases {
            let mut quiet = before;
            assert_eq!(quiet.look(look, now, end), next, "{why}");
            assert_eq!(quiet, after, "{why}: the state after");
        }
    }

    /// Awaits `closing`, which must complete within a minute of paused time (far past any
    /// window here): a wait that never ends fails the test rather than hanging it.
    async fn closes(closing: impl std::future::Future<Output = ()>) {
        tokio::time::timeout(Duration::from_secs(60), closing)
            .await
            .expect("closed at all");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handed_off_connection_waits_for_its_answer_and_its_quiet() {
        let moved = Moved::default();
        moved.latest.wrote(Way::ToBackend);
        let start = Instant::now();
        // Its turn at once, its answer at 1 s: the close comes once a look sees it quiet.
        let closing = turn(CloseReason::Handoff, (start, start), 5 * SECOND, &moved);
        let answer = async {
            tokio::time::sleep(SECOND).await;
            moved.to_client.store(5000, Relaxed);
            moved.latest.wrote(Way::ToClient);
            std::future::pending::<()>().await
        };
        tokio::select! {
            () = closes(closing) => {}
            () = answer => unreachable!("pending"),
        }
        let took = start.elapsed();
        assert!(
            took > SECOND && took <= SECOND + 2 * SETTLE,
            "closed {took:?} after the turn: after the answer, within two looks of it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_hand_off_closes_at_the_windows_end_and_other_reasons_at_the_turn() {
        let moved = Moved::default();
        moved.latest.wrote(Way::ToBackend);
        let (spread, window) = (2 * SECOND, 5 * SECOND);
        // How long a connection evicted now, its turn `spread` away, takes to close for `why`.
        let moved = &moved;
        let closing_takes = |why| async move {
            let start = Instant::now();
            closes(turn(why, (start, start + spread), window, moved)).await;
            start.elapsed()
        };
        let took = closing_takes(CloseReason::Handoff).await;
        assert!(
            took >= window && took < window + SETTLE,
            "outstanding to the end: closed at the window's end, after {took:?}"
        );
        let took = closing_takes(CloseReason::TurnedUnready).await;
        assert!(
            took >= spread && took < spread + SETTLE,
            "urgent: at the turn, outstanding or not; after {took:?}"
        );
    }
}
