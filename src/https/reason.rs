//! How an apiserver's failure reads in `/status` and the log: the first `[-]` line of a
//! `/readyz` body, and TLS and HTTP errors in words (`TLS: unknown issuer`, not a Rust debug dump).
//!
//! Does not own the client (`https`) or dial errors (`dial::DialError`, worded there).

/// The line an operator wants from a failed `/readyz`: the first `[-]` check, else the first line.
pub fn first_line(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("[-]"))
        .or_else(|| lines.next())?;
    Some(line.chars().take(200).collect())
}

pub fn tls_reason(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(r) => rustls_reason(r),
        None => format!("TLS: {e}"),
    }
}

fn rustls_reason(e: &rustls::Error) -> String {
    match e {
        // Variants carrying their own detail (`Other`, `Unknown(n)`) keep rustls' wording.
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(_))
        | rustls::Error::AlertReceived(rustls::AlertDescription::Unknown(_)) => format!("TLS: {e}"),
        rustls::Error::InvalidCertificate(c) => format!("TLS: {}", words(&format!("{c:?}"))),
        // With TLS 1.3 the server rejects our client certificate after the handshake: the alert
        // (`unknown ca`, `certificate required`) surfaces on the first request.
        rustls::Error::AlertReceived(a) => {
            format!("TLS: alert received: {}", words(&format!("{a:?}")))
        }
        other => format!("TLS: {other}"),
    }
}

/// A hyper error, with the TLS cause named when there is one (`connection error` alone is useless).
pub fn http_reason(e: &hyper::Error) -> String {
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
    match std::error::Error::source(e) {
        Some(cause) => format!("HTTP: {e}: {cause}"),
        None => format!("HTTP: {e}"),
    }
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
