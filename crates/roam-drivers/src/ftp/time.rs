//! FTP's two ways of writing a time: the RFC 3659 `YYYYMMDDHHMMSS[.sss]` of MDTM, MFMT and
//! the `modify` fact (always UTC), and the calendar dates of LIST lines. Both are turned into
//! `SystemTime` through the shared [`crate::calendar`].

use std::time::SystemTime;

use crate::calendar::{civil_from_days, from_civil, unix_secs, SECS_PER_DAY};

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
    use std::time::UNIX_EPOCH;

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
