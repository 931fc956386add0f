//! How far one check got: the one value carried from the wire (`https`) through the probe,
//! rise/fall, the snapshot's rules and the picker.
//!
//! Owns the classification only. Does not own what a failing check's answer says (`checks`) or
//! why it failed (`fail_class`).

use std::time::Duration;

/// How far a check got: no connection, a connection but no answer, or an HTTP answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The dial got no connection: refused, or its SYNs went unanswered. New connections fail.
    Unreached,
    /// The dial connected but no HTTP answer came: TLS failed, or none within the timeout (a
    /// real kube-apiserver without etcd quorum answers `/readyz` after about 4 s, over the 3 s
    /// probe timeout). It takes connections: failing open prefers it to an unreached one.
    Connected,
    /// An HTTP answer arrived: the apiserver is alive, ready or not.
    Answered(Answer),
}

/// An HTTP answer to a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// Its HTTP status; 200 passes.
    pub status: u16,
    /// Request→response time on an established connection.
    pub latency: Duration,
    /// Its only failing check is `shutdown` (or a `429` with `Retry-After`): a graceful
    /// shutdown, a planned hand-off.
    pub draining: bool,
}

impl Reach {
    /// An answer with `status` in `latency`, not draining.
    pub fn answered(status: u16, latency: Duration) -> Reach {
        Reach::Answered(Answer {
            status,
            latency,
            draining: false,
        })
    }

    /// A `[-]shutdown`-only answer (`status` 500 or 429) in `latency`.
    pub fn draining(status: u16, latency: Duration) -> Reach {
        Reach::Answered(Answer {
            status,
            latency,
            draining: true,
        })
    }

    /// The answer, if one arrived.
    pub fn answer(self) -> Option<Answer> {
        match self {
            Reach::Answered(a) => Some(a),
            Reach::Unreached | Reach::Connected => None,
        }
    }

    /// An HTTP answer arrived, whatever its status.
    pub fn is_answered(self) -> bool {
        self.answer().is_some()
    }

    /// The dial connected, answered or not.
    pub fn connected(self) -> bool {
        self != Reach::Unreached
    }

    /// The answer was a pass (HTTP 200).
    pub fn passed(self) -> bool {
        self.answer().is_some_and(|a| a.status == 200)
    }

    /// The answer says the apiserver is draining.
    pub fn is_draining(self) -> bool {
        self.answer().is_some_and(|a| a.draining)
    }

    /// The request→response time, when an answer arrived.
    pub fn latency(self) -> Option<Duration> {
        self.answer().map(|a| a.latency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn only_an_answer_has_a_latency_and_only_a_200_passes() {
        assert_eq!(Reach::Unreached.latency(), None);
        assert_eq!(Reach::Connected.latency(), None);
        assert_eq!(Reach::answered(500, MS).latency(), Some(MS));
        assert!(Reach::answered(200, MS).passed());
        assert!(!Reach::answered(500, MS).passed());
        assert!(!Reach::draining(429, MS).passed());
    }

    #[test]
    fn connected_is_every_reach_but_unreached() {
        assert!(!Reach::Unreached.connected());
        assert!(Reach::Connected.connected());
        assert!(!Reach::Connected.is_answered());
        assert!(Reach::draining(500, MS).connected());
        assert!(Reach::draining(500, MS).is_draining());
        assert!(!Reach::answered(500, MS).is_draining());
    }
}
