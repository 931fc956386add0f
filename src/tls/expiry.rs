//! Reads `notAfter` out of an X.509 certificate: just enough DER to export the client cert's
//! expiry as a metric without pulling in a full X.509 parser.

/// `notAfter` of a DER certificate as Unix seconds, or `None` if the DER is not what we expect.
pub fn not_after(cert_der: &[u8]) -> Option<i64> {
    let (_, cert, _) = tlv(cert_der)?; // Certificate SEQUENCE
    let (_, tbs, _) = tlv(cert)?; // tbsCertificate SEQUENCE
    let mut rest = tbs;
    let (tag, _, after) = tlv(rest)?;
    if tag == 0xa0 {
        rest = after; // [0] EXPLICIT version
    }
    for _ in 0..3 {
        rest = tlv(rest)?.2; // serialNumber, signature, issuer
    }
    let (_, validity, _) = tlv(rest)?;
    let (_, _, after_not_before) = tlv(validity)?;
    let (tag, time, _) = tlv(after_not_before)?;
    parse_time(tag, std::str::from_utf8(time).ok()?)
}

/// One DER tag-length-value: (tag, contents, remaining input).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, after) = rest.split_at(n);
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime (`YYYYMMDDHHMMSSZ`, tag 0x18).
fn parse_time(tag: u8, s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, s.get(2..)?)
        }
        0x18 if s.len() == 14 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    let num = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, min, sec) = (num(0)?, num(2)?, num(4)?, num(6)?, num(8)?);
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_convert_to_unix_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(parse_time(0x17, "491231235959Z"), Some(2_524_607_999));
        assert_eq!(parse_time(0x18, "20260101000000Z"), Some(1_767_225_600));
    }

    // rcgen comes with the `sim` feature; the daemon-only build tests the rest.
    #[cfg(feature = "sim")]
    #[test]
    fn not_after_is_read_from_a_generated_certificate() {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).expect("params");
        params.not_after = rcgen::date_time_ymd(2031, 7, 15);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("cert");
        assert_eq!(
            not_after(cert.der()),
            Some(days_from_civil(2031, 7, 15) * 86_400)
        );
        assert_eq!(not_after(b"garbage"), None);
    }
}
