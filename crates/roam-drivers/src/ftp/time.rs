//! FTP's two ways of writing a time: the RFC 3659 `YYYYMMDDHHMMSS[.sss]` of MDTM, MFMT and
//! the `modify` fact (always UTC), and the calendar dates of LIST lines. Both are turned into
//! `SystemTime` through the proleptic Gregorian calendar, without a date crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SECS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Seconds since the epoch (negative before it) as a `SystemTime`.
fn from_unix(secs: i64) -> SystemTime {
    match u64::try_from(secs) {
        Ok(after) => UNIX_EPOCH + Duration::from_secs(after),
        Err(_) => UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()),
    }
}

/// Whole seconds since the epoch (negative before it), rounding down.
pub(super) fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => {
            let before = e.duration();
            -(before.as_secs() as i64) - i64::from(before.subsec_nanos() > 0)
        }
    }
}

/// A UTC civil time, validated (a server's "Feb 31" is no time at all).
pub(super) fn from_civil(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
) -> Option<SystemTime> {
    let valid = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && hour < 24
        && minute < 60
        && second < 61;
    let days = days_from_civil(year, month, day);
    // Round-tripping rejects days past the end of their month.
    if !valid || civil_from_days(days) != (year, month, day) {
        return None;
    }
    let secs = i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Some(from_unix(days * SECS_PER_DAY + secs))
}

/// Parses RFC 3659's `time-val`: `YYYYMMDDHHMMSS`, optionally `.fraction` (dropped: the
/// cache compares whole seconds, and not every server sends fractions).
pub(super) fn parse_timeval(text: &str) -> Option<SystemTime> {
    let digits = text.split('.').next()?;
    if digits.len() != 14 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |range: std::ops::Range<usize>| digits[range].parse::<u32>().ok();
    from_civil(
        i64::from(field(0..4)?),
        field(4..6)?,
        field(6..8)?,
        field(8..10)?,
        field(10..12)?,
        field(12..14)?,
    )
}

/// Formats a time as MFMT wants it: `YYYYMMDDHHMMSS` in UTC.
pub(super) fn format_timeval(t: SystemTime) -> String {
    let secs = unix_secs(t);
    let (year, month, day) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let rest = secs.rem_euclid(SECS_PER_DAY);
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The UTC calendar year of `t`.
pub(super) fn year_of(t: SystemTime) -> i64 {
    civil_from_days(unix_secs(t).div_euclid(SECS_PER_DAY)).0
}

/// The number (1-12) of an English month abbreviation, as `ls` prints it.
pub(super) fn month_number(name: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = name.to_ascii_lowercase();
    MONTHS
        .iter()
        .position(|m| *m == lower)
        .map(|i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timevals_round_trip() {
        let t = parse_timeval("20261122062914").unwrap();
        assert_eq!(unix_secs(t), 1_795_328_954);
        assert_eq!(format_timeval(t), "20261122062914");
        assert_eq!(parse_timeval("20261122062914.123"), Some(t));
        assert_eq!(format_timeval(UNIX_EPOCH), "19700101000000");
        let before = parse_timeval("19691231235959").unwrap();
        assert_eq!(unix_secs(before), -1);
        assert_eq!(format_timeval(before), "19691231235959");
        assert_eq!(
            unix_secs(parse_timeval("20000229120000").unwrap()),
            951_825_600
        );
    }

    #[test]
    fn bad_timevals_are_refused() {
        for bad in [
            "",
            "2026112206291",
            "2026112206291x",
            "20260231000000",
            "20261322000000",
        ] {
            assert_eq!(parse_timeval(bad), None, "{bad:?}");
        }
        assert_eq!(from_civil(2025, 2, 29, 0, 0, 0), None);
        assert!(from_civil(2024, 2, 29, 0, 0, 0).is_some());
    }

    #[test]
    fn years_and_months() {
        assert_eq!(year_of(parse_timeval("20261231235959").unwrap()), 2026);
        assert_eq!(year_of(UNIX_EPOCH), 1970);
        assert_eq!(month_number("Nov"), Some(11));
        assert_eq!(month_number("jan"), Some(1));
        assert_eq!(month_number("Novem"), None);
    }
}
