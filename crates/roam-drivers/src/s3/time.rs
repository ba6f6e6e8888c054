//! The two date formats S3 uses besides HTTP dates: SigV4's `20130524T000000Z` and the
//! ISO 8601 `2013-05-24T00:00:00.000Z` of listings, through the shared [`crate::calendar`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::calendar::{civil_from_days, days_from_civil, SECS_PER_DAY};

const DAY: u64 = SECS_PER_DAY as u64;

/// `YYYYMMDDTHHMMSSZ`, the form of `x-amz-date`. Times before 1970 cannot occur (the
/// clock is the local one).
pub(super) fn amz_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (y, m, d) = civil_from_days((secs / DAY) as i64);
    let s = secs % DAY;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z` (or `+00:00`, or `UTC` as older SSO token caches
/// write it). Fractions of a second are dropped:
/// a `HEAD` reports whole seconds, and the two must agree for cache validation.
pub(super) fn parse_iso8601(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (date, time) = text.split_once('T')?;
    let mut ymd = date.splitn(3, '-');
    let y: i64 = ymd.next()?.parse().ok()?;
    let m: u32 = ymd.next()?.parse().ok()?;
    let d: u32 = ymd.next()?.parse().ok()?;
    let time = time
        .strip_suffix('Z')
        .or_else(|| time.strip_suffix("+00:00"))
        .or_else(|| time.strip_suffix("UTC"))?;
    let whole = time.split('.').next()?;
    let mut hms = whole.splitn(3, ':').map(|part| part.parse::<u64>().ok());
    let (hh, mm, ss) = (hms.next()??, hms.next()??, hms.next()??);
    // Four-digit years only: a hostile huge year overflows the calendar arithmetic.
    let valid_date = (0..=9999).contains(&y) && (1..=12).contains(&m) && (1..=31).contains(&d);
    if !valid_date || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(y, m, d)).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(days * DAY + hh * 3600 + mm * 60 + ss))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn formats_amz_dates() {
        assert_eq!(amz_date(at(0)), "19700101T000000Z");
        assert_eq!(amz_date(at(1_369_353_600)), "20130524T000000Z");
        // A leap day, one second before midnight.
        assert_eq!(amz_date(at(951_868_799)), "20000229T235959Z");
    }

    #[test]
    fn parses_listing_dates() {
        let expected = Some(at(1_369_353_600 + 3723));
        assert_eq!(parse_iso8601("2013-05-24T01:02:03.000Z"), expected);
        assert_eq!(parse_iso8601("2013-05-24T01:02:03.999Z"), expected);
        assert_eq!(parse_iso8601("2013-05-24T01:02:03Z"), expected);
        assert_eq!(parse_iso8601("2013-05-24T01:02:03+00:00"), expected);
        assert_eq!(parse_iso8601("2000-02-29T23:59:59Z"), Some(at(951_868_799)));
        for bad in [
            "",
            "2013-05-24",
            "2013-13-01T00:00:00Z",
            "x-05-24T01:02:03Z",
            // Found by fuzzing: a year this large overflowed `days_from_civil` (a panic).
            "9223372036854775807-03-01T00:00:00Z",
            "10000-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }
}
