//! How an apiserver's failure reads in `/status` and the log: a failed `/readyz` that lists its
//! checks by the checks' names (`readyz 500: etcd, etcd-readiness failed`), any other answer by its
//! first line (`HTTP 500: <line>`, escaped and bounded), and TLS and HTTP errors in words (`TLS:
//! unknown issuer`, not a Rust debug dump).
//!
//! A refusal of our own client certificate (a TLS alert such as `certificate expired` or
//! `unknown ca`) reads as ours: `the apiserver refused our client certificate: certificate
//! expired`; a name mismatch names the name expected and the ones the certificate holds.
//!
//! Does not own the client (`https`), dial errors (`dial::DialError`, worded there) or parsing
//! the checks (`verdict::FailingChecks`).

use crate::tls::Left;
use crate::verdict::{FailClass, FailingChecks};
use crate::visible::escaped;

/// The most characters of a body line a reason keeps (after escaping).
pub const MAX_LINE: usize = 200;

/// The line an operator wants from a failed `/readyz` that names no check: the first `[-]` line,
/// else the first line; control characters escaped, at most [`MAX_LINE`] characters.
pub fn first_line(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("[-]"))
        .or_else(|| lines.next())?;
    Some(escaped(line).chars().take(MAX_LINE).collect())
}

/// The endpoint a kube-apiserver body speaks for, from its last line `<NAME> check failed`
/// (`readyz`, `healthz`, `livez`); `readyz` when it has none.
fn endpoint(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(|l| l.strip_suffix(" check failed"))
        .filter(|n| !n.is_empty() && n.len() <= 16 && n.bytes().all(|b| b.is_ascii_lowercase()))
        .unwrap_or("readyz")
        .to_string()
}

/// An HTTP answer other than 200 in words. A body that names failing checks (`checks`, parsed from
/// it) reads `readyz 500: etcd, etcd-readiness failed`; any other `HTTP 500: <first line>` (the
/// first `[-]` line when none of them could be named).
/// kube-apiserver verifies client certificates after the handshake, so an expired one is not a
/// TLS alert but a `401`: with `ours` expired, the reason says so and the failure is our
/// certificate's.
pub fn answer_reason(code: u16, body: &[u8], checks: &FailingChecks, ours: Option<Left>) -> Reason {
    let text = match first_line(body) {
        _ if checks.any_named() => format!("{} {code}: {checks} failed", endpoint(body)),
        Some(line) => format!("HTTP {code}: {line}"),
        None => format!("HTTP {code}"),
    };
    match ours {
        Some(left @ Left::Expired(_)) if code == 401 => Reason::new(
            format!("{text}; our client certificate {left}"),
            FailClass::ClientCert,
        ),
        _ => Reason::new(text, FailClass::of_status(code)),
    }
}

/// A failure in words, with the class of failed check it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// For `/status` and the log.
    pub text: String,
    /// For `readyprism_health_checks_total{result="fail"}`.
    pub class: FailClass,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Reason {
    fn new(text: String, class: FailClass) -> Reason {
        Reason { text, class }
    }
}

/// A failed TLS handshake in words.
pub fn tls_reason(e: &std::io::Error) -> Reason {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(r) => rustls_reason(r),
        None => Reason::new(format!("TLS: {e}"), FailClass::Tls),
    }
}

fn rustls_reason(e: &rustls::Error) -> Reason {
    let text = match e {
        // With TLS 1.3 the server rejects our client certificate after the handshake: the alert
        // (`certificate expired`, `unknown ca`) surfaces on the first request. Ours to fix, not
        // the apiserver's: said so.
        rustls::Error::AlertReceived(a) if refuses_our_certificate(*a) => {
            return Reason::new(
                format!(
                    "the apiserver refused our client certificate: {}",
                    alert_words(*a)
                ),
                FailClass::ClientCert,
            );
        }
        rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => format!(
            "TLS: the apiserver's certificate is not valid for {}; it names {}",
            expected.to_str(),
            if presented.is_empty() {
                "nothing".to_string()
            } else {
                presented.join(", ")
            }
        ),
        // Variants carrying their own detail (`Other`, `Unknown(n)`) keep rustls' wording.
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(_))
        | rustls::Error::AlertReceived(rustls::AlertDescription::Unknown(_)) => format!("TLS: {e}"),
        rustls::Error::InvalidCertificate(c) => format!("TLS: {}", words(&format!("{c:?}"))),
        rustls::Error::AlertReceived(a) => format!("TLS: alert received: {}", alert_words(*a)),
        other => format!("TLS: {other}"),
    };
    Reason::new(text, FailClass::Tls)
}

/// Alerts a server sends about the certificate the client presented (RFC 8446 6.2): ours.
fn refuses_our_certificate(a: rustls::AlertDescription) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        a,
        A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired
            | A::AccessDenied
    )
}

/// `CertificateExpired` → `certificate expired`; `UnknownCA` → `unknown ca`.
fn alert_words(a: rustls::AlertDescription) -> String {
    words(&format!("{a:?}"))
}

/// A hyper error, with the TLS cause named when there is one (`connection error` alone is useless).
pub fn http_reason(e: &hyper::Error) -> Reason {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<rustls::Error>() {
            return rustls_reason(r);
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if let Some(r) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return rustls_reason(r);
            }
        }
        source = s.source();
    }
    let text = match std::error::Error::source(e) {
        Some(cause) => format!("HTTP: {e}: {cause}"),
        None => format!("HTTP: {e}"),
    };
    Reason::new(text, FailClass::Other)
}

/// `UnknownIssuer` → `unknown issuer`; `NotValidForNameContext { .. }` → `not valid for name`.
fn words(debug: &str) -> String {
    let name = debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or(debug);
    let name = name.strip_suffix("Context").unwrap_or(name);
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.extend(c.to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_read_as_words() {
        assert_eq!(words("UnknownIssuer"), "unknown issuer");
        assert_eq!(
            words("NotValidForNameContext { expected: x, presented: [] }"),
            "not valid for name"
        );
        assert_eq!(words("Expired"), "expired");
        assert_eq!(words("UnknownCA"), "unknown ca");
    }

    #[test]
    fn tls_alerts_read_as_ours_only_when_they_refuse_our_certificate() {
        use rustls::AlertDescription as A;
        use rustls::Error::AlertReceived;
        let ours = "the apiserver refused our client certificate: ";
        let table = [
            (A::CertificateExpired, "certificate expired", true),
            (A::BadCertificate, "bad certificate", true),
            (A::CertificateRevoked, "certificate revoked", true),
            (A::UnknownCA, "unknown ca", true),
            (A::CertificateRequired, "certificate required", true),
            (A::UnsupportedCertificate, "unsupported certificate", true),
            (A::CertificateUnknown, "certificate unknown", true),
            (A::AccessDenied, "access denied", true),
            (A::HandshakeFailure, "handshake failure", false),
            (A::ProtocolVersion, "protocol version", false),
        ];
        for (alert, words, is_ours) in table {
            let r = rustls_reason(&AlertReceived(alert));
            if is_ours {
                assert_eq!(r.text, format!("{ours}{words}"));
                assert_eq!(r.class, FailClass::ClientCert, "{words}");
            } else {
                assert_eq!(r.text, format!("TLS: alert received: {words}"));
                assert_eq!(r.class, FailClass::Tls, "{words}");
            }
        }
    }

    #[test]
    fn a_name_mismatch_names_the_expected_name_beside_the_presented_ones() {
        let e =
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
                expected: rustls_pki_types::ServerName::try_from("10.0.1.10")
                    .expect("name")
                    .to_owned(),
                presented: vec![
                    "DnsName(\"kubernetes\")".into(),
                    "IpAddress(127.0.0.1)".into(),
                ],
            });
        let r = rustls_reason(&e);
        assert_eq!(
            r.text,
            "TLS: the apiserver's certificate is not valid for 10.0.1.10; it names DnsName(\"kubernetes\"), IpAddress(127.0.0.1)"
        );
        assert_eq!(r.class, FailClass::Tls);
    }

    #[test]
    fn a_401_while_our_certificate_has_expired_is_ours() {
        let expired = Some(Left::Expired(3600));
        let table = [
            (
                401,
                expired,
                "HTTP 401: Unauthorized; our client certificate EXPIRED 1h ago",
                FailClass::ClientCert,
            ),
            (
                401,
                Some(Left::Soon(3600)),
                "HTTP 401: Unauthorized",
                FailClass::HttpOther,
            ),
            (401, None, "HTTP 401: Unauthorized", FailClass::HttpOther),
            (500, expired, "HTTP 500: Unauthorized", FailClass::Http5xx),
        ];
        for (code, ours, text, class) in table {
            let r = answer_reason(code, b"Unauthorized\n", &FailingChecks::none(), ours);
            assert_eq!((r.text.as_str(), r.class), (text, class), "{code} {ours:?}");
        }
    }

    /// The reason of an answer `code` with `body`, as the probe makes it.
    fn reason_of(code: u16, body: &str) -> String {
        let checks = FailingChecks::parse(body.as_bytes());
        answer_reason(code, body.as_bytes(), &checks, None).text
    }

    #[test]
    fn a_body_listing_failed_checks_reads_as_their_names() {
        let kube = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n\
            [-]etcd-readiness failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n";
        assert_eq!(
            reason_of(500, kube),
            "readyz 500: etcd, etcd-readiness failed"
        );
        let one = "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n";
        assert_eq!(reason_of(500, one), "readyz 500: shutdown failed");
        assert_eq!(
            reason_of(
                500,
                "[-]etcd failed: reason withheld\nhealthz check failed\n"
            ),
            "healthz 500: etcd failed",
            "the endpoint as the body names it"
        );
        assert_eq!(reason_of(503, "[-]etcd failed"), "readyz 503: etcd failed");
        assert_eq!(
            reason_of(
                500,
                "[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[-]x_y failed\n"
            ),
            "readyz 500: poststarthook/rbac/bootstrap-roles, 1 more failed",
            "k8s.io/apiserver's `/` names kept; one it cannot name counted"
        );
    }

    #[test]
    fn a_body_naming_no_check_reads_as_its_first_line() {
        assert_eq!(
            reason_of(500, "Internal Server Error\nmore"),
            "HTTP 500: Internal Server Error"
        );
        assert_eq!(
            reason_of(
                500,
                "[+]ping ok\n[-]Etcd\u{1b}[31m failed: reason withheld\n"
            ),
            "HTTP 500: [-]Etcd\\x1b[31m failed: reason withheld",
            "a name our parse cannot keep: the line as sent, escaped"
        );
        assert_eq!(reason_of(502, ""), "HTTP 502");
    }

    #[test]
    fn a_first_line_is_escaped_then_cut_to_two_hundred_characters() {
        assert_eq!(
            reason_of(500, "\x1b]0;owned\x07\u{202e}x"),
            "HTTP 500: \\x1b]0;owned\\x07\\u{202e}x"
        );
        let long = format!("{}\x1b", "y".repeat(300));
        assert_eq!(
            first_line(long.as_bytes()).map(|l| l.chars().count()),
            Some(MAX_LINE)
        );
        let escapes = "\x1b".repeat(100);
        let cut = first_line(escapes.as_bytes()).expect("a line");
        assert_eq!(
            cut.chars().count(),
            MAX_LINE,
            "escapes count toward the bound"
        );
        assert!(cut.starts_with("\\x1b\\x1b"), "{cut}");
    }

    #[test]
    fn failed_check_line_is_preferred() {
        let body = b"[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n";
        assert_eq!(
            first_line(body).as_deref(),
            Some("[-]etcd failed: reason withheld")
        );
        assert_eq!(
            first_line(b"\n  lost quorum \n").as_deref(),
            Some("lost quorum")
        );
        assert_eq!(first_line(b""), None);
    }
}
