//! The two date formats S3 uses besides HTTP dates: SigV4's `20130524T000000Z` and the
//! ISO 8601 `2013-05-24T00:00:00.000Z` of listings. Civil-date arithmetic after Howard
//! Hinnant's `days_from_civil` / `civil_from_days` (proleptic Gregorian, UTC), which is
//! all the calendar these need.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAY: u64 = 86_400;

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

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z` (or `+00:00`). Fractions of a second are dropped:
/// a `HEAD` reports whole seconds, and the two must agree for cache validation.
pub(super) fn parse_iso8601(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (date, time) = text.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|part| part.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let time = time
        .strip_suffix('Z')
        .or_else(|| time.strip_suffix("+00:00"))?;
    let whole = time.split('.').next()?;
    let mut hms = whole.splitn(3, ':').map(|part| part.parse::<u64>().ok());
    let (hh, mm, ss) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(y, m, d)).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(days * DAY + hh * 3600 + mm * 60 + ss))
}

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }

    #[test]
    fn round_trips_many_days() {
        for day in (0..80_000).step_by(37) {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, i64::from(m), i64::from(d)), day);
        }
    }
}
