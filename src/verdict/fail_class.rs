//! The class of a failed health check: a small fixed set, so that
//! `readyprism_health_checks_total{result="fail"}` can say *what kind* of failure without a label
//! per reason text.
//!
//! Owns the classes and their labels. Does not own deciding a failure's class: the probe knows
//! whether an answer came (`health::probe`), the dial error its kind (`dial::DialError::class`),
//! TLS its alert (`https::reason`).

/// What kind of failure a failed check was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailClass {
    /// An HTTP answer with a 5xx status (kube-apiserver's failing `/readyz` is a 500).
    Http5xx,
    /// An HTTP answer with any other status but 200 (401, 403, 404, a redirect).
    HttpOther,
    /// Nothing within the check's timeout, or the dial's SYNs went unanswered.
    Timeout,
    /// The dial was refused (RST to the SYN): nothing listens there.
    Refused,
    /// Any other dial failure: unreachable, reset, a name that does not resolve.
    Dial,
    /// TLS failed on the apiserver's side of it: a certificate we do not trust, a wrong name.
    Tls,
    /// The apiserver refused *our* client certificate (expired, revoked, unknown CA).
    ClientCert,
    /// Anything else: the connection broke before an answer, an HTTP protocol error.
    Other,
}

impl FailClass {
    /// Every class, in the order metrics export them (each from start-up, at 0).
    pub const ALL: [FailClass; 8] = [
        FailClass::Http5xx,
        FailClass::HttpOther,
        FailClass::Timeout,
        FailClass::Refused,
        FailClass::Dial,
        FailClass::Tls,
        FailClass::ClientCert,
        FailClass::Other,
    ];

    /// The metric label: `http_5xx`, `http_other`, `timeout`, `refused`, `dial`, `tls`,
    /// `client_cert`, `other`.
    pub fn label(self) -> &'static str {
        match self {
            FailClass::Http5xx => "http_5xx",
            FailClass::HttpOther => "http_other",
            FailClass::Timeout => "timeout",
            FailClass::Refused => "refused",
            FailClass::Dial => "dial",
            FailClass::Tls => "tls",
            FailClass::ClientCert => "client_cert",
            FailClass::Other => "other",
        }
    }

    /// The class of an HTTP answer's status that is not 200.
    pub fn of_status(code: u16) -> FailClass {
        if (500..600).contains(&code) {
            FailClass::Http5xx
        } else {
            FailClass::HttpOther
        }
    }

    /// Its position in [`FailClass::ALL`], for a counter per class.
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_its_own_label_at_its_place_in_all() {
        for (i, c) in FailClass::ALL.iter().enumerate() {
            assert_eq!(c.index(), i, "{c:?}");
        }
        let mut labels: Vec<_> = FailClass::ALL.iter().map(|c| c.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), FailClass::ALL.len());
        let table = [
            (500, FailClass::Http5xx),
            (503, FailClass::Http5xx),
            (599, FailClass::Http5xx),
            (401, FailClass::HttpOther),
            (404, FailClass::HttpOther),
            (302, FailClass::HttpOther),
            (600, FailClass::HttpOther),
        ];
        for (code, class) in table {
            assert_eq!(FailClass::of_status(code), class, "{code}");
        }
    }
}
