//! Sizes and durations as people write them: `10G`, `512M`, `1.5GiB`, `4096`; `30s`, `5m`,
//! `1h30m`, `250ms`, `30`. Used by `roam.toml` (where a plain number keeps its old meaning:
//! bytes, seconds) and by the command line's flags.
//!
//! Sizes: `K`, `M`, `G`, `T` (optionally followed by `iB`) are powers of 1024, as in rclone
//! and `du -h`; `kB`, `MB`, `GB`, `TB` are powers of 1000; `B` or nothing is bytes.
//! Durations: `ms`, `s`, `m`, `h`, `d`; several may follow each other (`1h30m`); a bare
//! number is seconds.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A size or duration that could not be read, with what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError(String);

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnitError {}

/// A number of bytes (`max_size = "10G"`, `--cache-size 512M`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

/// A length of time (`t_write = "5m"`, `--t-write 30s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration);

impl std::str::FromStr for Size {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Size, UnitError> {
        parse_size(s).map(Size)
    }
}

impl std::str::FromStr for Span {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Span, UnitError> {
        parse_duration(s).map(Span)
    }
}

/// `"10G"` → 10 GiB in bytes.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let bad = |why: &str| {
        UnitError(format!(
            "size {text:?}: {why} (expected bytes, or a number with K, M, G, T: \"512M\", \"10G\")"
        ))
    };
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = (&s[..split], s[split..].trim());
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "ki" => 1 << 10,
        "m" | "mib" | "mi" => 1 << 20,
        "g" | "gib" | "gi" => 1 << 30,
        "t" | "tib" | "ti" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(bad("unknown unit")),
    };
    scale(number, factor as f64)
        .filter(|v| *v <= u64::MAX as f64)
        .map(|v| v.round() as u64)
        .ok_or_else(|| bad("not a number of bytes that fits"))
}

/// `"1h30m"` → 5400 s; `"30"` → 30 s.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let bad = |why: &str| {
        UnitError(format!(
            "duration {text:?}: {why} (expected seconds, or numbers with ms, s, m, h, d: \"30s\", \"5m\", \"1h30m\")"
        ))
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let mut rest = s;
    let mut secs = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let u = rest[n..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .map_or(rest.len(), |i| n + i);
        let unit = rest[n..u].trim();
        let factor = match unit {
            "" if u == s.len() && rest.len() == s.len() => 1.0,
            "ms" => 0.001,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(bad("unknown unit")),
        };
        secs += scale(&rest[..n], factor).ok_or_else(|| bad("not a number"))?;
        rest = &rest[u..];
    }
    Duration::try_from_secs_f64(secs).map_err(|_| bad("too long"))
}

/// `number × factor`, for a plain decimal number (no sign, exponent or `inf`).
fn scale(number: &str, factor: f64) -> Option<f64> {
    let plain = !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.matches('.').count() <= 1
        && number != ".";
    let v = number.parse::<f64>().ok().filter(|_| plain)? * factor;
    v.is_finite().then_some(v)
}

/// How `roam config` writes a size back: the largest binary unit that divides it.
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// How `roam config` writes a duration back (`90s` as `1m30s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.subsec_millis();
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, len) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if secs >= len {
            out += &format!("{}{unit}", secs / len);
            secs %= len;
        }
    }
    if secs > 0 || (out.is_empty() && ms == 0) {
        out += &format!("{secs}s");
    }
    if ms > 0 {
        out += &format!("{ms}ms");
    }
    out
}

/// A TOML value that is either a plain number (in `unit`s) or a text with units.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        match NumberOrText::deserialize(d)? {
            NumberOrText::Number(n) => Ok(Size(n)),
            NumberOrText::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        match NumberOrText::deserialize(d)? {
            NumberOrText::Number(n) => Ok(Span(Duration::from_secs(n))),
            NumberOrText::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        let ok = [
            ("4096", 4096),
            ("0", 0),
            ("512M", 512 << 20),
            ("10G", 10 << 30),
            ("10g", 10 << 30),
            ("1.5GiB", 3 << 29),
            ("2 T", 2 << 40),
            ("1K", 1024),
            ("1kB", 1000),
            ("3MB", 3_000_000),
            ("7B", 7),
        ];
        for (text, bytes) in ok {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in [
            "",
            "G",
            "-1G",
            "10X",
            "1e3",
            "1..2M",
            "inf",
            "NaN",
            "99999999999T",
            "10 G B",
        ] {
            let err = parse_size(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn durations_take_units_and_sequences() {
        let ok = [
            ("30", 30_000),
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("2d", 172_800_000),
            ("250ms", 250),
            ("1.5s", 1500),
            ("1m 30s", 90_000),
            ("0", 0),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        for bad in [
            "",
            "s",
            "5x",
            "5m3",
            "-5s",
            "1e9s",
            "1..5s",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formatting_reads_back() {
        for bytes in [0, 1, 1000, 1024, 512 << 20, 10 << 30, (10 << 30) + 1] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
        assert_eq!(format_size(10 << 30), "10G");
        for ms in [0, 250, 1000, 90_000, 5_400_000, 86_400_250] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{ms}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
    }

    #[test]
    fn toml_takes_numbers_and_texts() {
        #[derive(Deserialize)]
        struct T {
            size: Size,
            span: Span,
        }
        let t: T = toml::from_str("size = 1024\nspan = 30\n").unwrap();
        assert_eq!(
            (t.size, t.span),
            (Size(1024), Span(Duration::from_secs(30)))
        );
        let t: T = toml::from_str("size = \"10G\"\nspan = \"5m\"\n").unwrap();
        assert_eq!(
            (t.size, t.span),
            (Size(10 << 30), Span(Duration::from_secs(300)))
        );
        let err = toml::from_str::<T>("size = \"10Q\"\nspan = 1\n")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("10Q"), "{err}");
        assert!(toml::from_str::<T>("size = -1\nspan = 1\n").is_err());
    }
}
