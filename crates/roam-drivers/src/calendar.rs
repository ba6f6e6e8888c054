//! Civil (proleptic Gregorian, UTC) dates and times to and from Unix time, without a date
//! crate: the FTP and S3 drivers both read and write calendar times, and this is all the
//! calendar they need. After Howard Hinnant's `days_from_civil` / `civil_from_days`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) const SECS_PER_DAY: i64 = 86_400;

/// Days since 1970-01-01 of a civil date.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date (year, month, day) of a day count since 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
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
pub(crate) fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => {
            let before = e.duration();
            -(before.as_secs() as i64) - i64::from(before.subsec_nanos() > 0)
        }
    }
}

/// A UTC civil time, validated (a server's "Feb 31" is no time at all).
pub(crate) fn from_civil(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_many_days() {
        for day in (0..80_000).step_by(37) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
        }
    }

    #[test]
    fn invalid_days_are_refused() {
        assert_eq!(from_civil(2025, 2, 29, 0, 0, 0), None);
        assert!(from_civil(2024, 2, 29, 0, 0, 0).is_some());
    }
}
