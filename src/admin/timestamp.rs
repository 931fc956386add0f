//! A wall-clock time as the status document writes it: RFC 3339 in UTC to the second
//! (`2026-12-05T12:48:04Z`), so the JSON, the status file and the table read alike and sort as
//! text.
//!
//! Owns the conversion from milliseconds since the Unix epoch. Does not own reading the clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// `ms` milliseconds after the Unix epoch as `YYYY-MM-DDThh:mm:ssZ`; `None` for 0 (never).
pub fn rfc3339(ms: u64) -> Option<String> {
    if ms == 0 {
        return None;
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    Some(format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

/// Now, as [`rfc3339`] writes it.
pub fn now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    rfc3339(ms.max(1)).unwrap_or_default()
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_convert_to_civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn times_read_as_rfc3339_in_utc() {
        let cases = [
            (0, None),
            (1, Some("1970-01-01T00:00:00Z")),
            (951_782_400_000, Some("2000-02-29T00:00:00Z")),
            (1_709_251_199_999, Some("2024-02-29T23:59:59Z")),
            (1_796_474_884_000, Some("2026-12-05T12:48:04Z")),
            (4_102_444_800_000, Some("2100-01-01T00:00:00Z")),
        ];
        for (ms, want) in cases {
            assert_eq!(rfc3339(ms).as_deref(), want, "{ms}");
        }
    }
}
