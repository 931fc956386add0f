//! Our client certificate's expiry: `notAfter` read out of the DER (just enough DER for the
//! metric, without a full X.509 parser), and how its time left reads (`expires in 6d`,
//! `EXPIRED 1h ago`) with the rule for warning about it ([`WARN_WITHIN`]).
//!
//! Does not own when it is read or said (`tls`'s load, the watcher, a reload, `/status`).

use std::fmt;
use std::time::Duration;

/// Warn when our client certificate expires within this: kubelet rotates at 70–90 % of a
/// certificate's life (a year by default), so a week left means rotation has failed for weeks.
pub const WARN_WITHIN: Duration = Duration::from_secs(7 * 86_400);

/// Our client certificate's time left at one moment, as an operator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// `notAfter` has passed: the apiservers refuse it. Seconds since.
    Expired(u64),
    /// Valid for less than [`WARN_WITHIN`]: seconds left.
    Soon(u64),
    /// Valid for longer: seconds left.
    Valid(u64),
}

impl Left {
    /// The time left at `now` (both Unix seconds) of a certificate valid until `not_after`.
    pub fn at(not_after: i64, now: i64) -> Left {
        match u64::try_from(not_after.saturating_sub(now)) {
            Ok(0) | Err(_) => Left::Expired(now.saturating_sub(not_after).unsigned_abs()),
            Ok(secs) if secs < WARN_WITHIN.as_secs() => Left::Soon(secs),
            Ok(secs) => Left::Valid(secs),
        }
    }

    /// Whether this is worth a WARN at load time.
    pub fn warns(self) -> bool {
        !matches!(self, Left::Valid(_))
    }
}

/// `expires in 6d`, `expires in 3h`, `EXPIRED 1h ago`: the largest whole unit, rounded down.
impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Left::Expired(ago) => write!(f, "EXPIRED {} ago", Span(ago)),
            Left::Soon(left) | Left::Valid(left) => write!(f, "expires in {}", Span(left)),
        }
    }
}

/// A span of seconds in its largest whole unit: `6d`, `23h`, `5m`, `0s`.
struct Span(u64);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        match s {
            86_400.. => write!(f, "{}d", s / 86_400),
            3_600.. => write!(f, "{}h", s / 3_600),
            60.. => write!(f, "{}m", s / 60),
            _ => write!(f, "{s}s"),
        }
    }
}

/// Now in Unix seconds (0 on a clock before 1970, which no certificate check survives anyway).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

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

    /// The time every expiry in `table` is read at.
    const NOW: i64 = 1_800_000_000;

    /// (not after, how the time left reads at `NOW`, whether it warns).
    fn table() -> [(i64, &'static str, bool); 9] {
        let now = NOW;
        let day = 86_400;
        [
            (now + 300 * day, "expires in 300d", false),
            (now + 7 * day, "expires in 7d", false),
            (now + 7 * day - 1, "expires in 6d", true),
            (now + 3 * 3600 + 59, "expires in 3h", true),
            (now + 61, "expires in 1m", true),
            (now + 1, "expires in 1s", true),
            (now, "EXPIRED 0s ago", true),
            (now - 3600, "EXPIRED 1h ago", true),
            (now - 2 * day - 5, "EXPIRED 2d ago", true),
        ]
    }

    #[test]
    fn time_left_reads_in_its_largest_whole_unit() {
        for (not_after, reads, _) in table() {
            let left = Left::at(not_after, NOW);
            assert_eq!(left.to_string(), reads, "{not_after}");
        }
        assert_eq!(
            Left::at(i64::MIN, i64::MAX),
            Left::Expired(i64::MAX.unsigned_abs())
        );
    }

    #[test]
    fn time_left_warns_within_seven_days() {
        for (not_after, reads, warns) in table() {
            assert_eq!(Left::at(not_after, NOW).warns(), warns, "{reads}");
        }
    }

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
