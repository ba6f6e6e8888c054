//! How stale a cached answer may be (Ufo's T_read), per name: a number of seconds, or a
//! percentage of the file's age (Alex: a file untouched for a year will not change in the
//! next minute; one written a minute ago may). Rules match virtual names by glob (`*` within
//! a component, `**` across components); the first matching rule wins, else the default.

use std::time::{Duration, SystemTime};

use crate::{Error, Result};

/// One T_read: fixed, or a share of the age of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TRead {
    Fixed(Duration),
    /// Per cent of (now − mtime), at least one second and at most a day.
    AgePercent(u32),
}

impl TRead {
    /// `"30"`, `"30s"` or `"10%"`.
    pub fn parse(s: &str) -> Result<TRead> {
        let s = s.trim();
        let bad = || {
            Error::Config(format!("T_read {s:?}: expected seconds (\"30\") or a percentage of the file's age (\"10%\")"))
        };
        if let Some(p) = s.strip_suffix('%') {
            return p.trim().parse().map(TRead::AgePercent).map_err(|_| bad());
        }
        s.trim_end_matches('s')
            .parse()
            .map(|n| TRead::Fixed(Duration::from_secs(n)))
            .map_err(|_| bad())
    }

    /// The T_read of an object last modified at `mtime` (unknown: as if just modified).
    pub fn for_mtime(self, mtime: Option<SystemTime>) -> Duration {
        match self {
            TRead::Fixed(d) => d,
            TRead::AgePercent(p) => {
                let age = mtime
                    .and_then(|m| SystemTime::now().duration_since(m).ok())
                    .unwrap_or_default();
                (age * p / 100).clamp(Duration::from_secs(1), Duration::from_secs(86_400))
            }
        }
    }
}

/// The default and the per-name rules.
#[derive(Clone, Debug)]
pub struct Consistency {
    default: TRead,
    rules: Vec<(String, TRead)>,
}

impl Consistency {
    pub fn new(default: TRead, rules: Vec<(String, TRead)>) -> Consistency {
        Consistency { default, rules }
    }

    /// The T_read for `virt`.
    pub fn t_read(&self, virt: &str) -> TRead {
        self.rules
            .iter()
            .find(|(glob, _)| glob_matches(glob, virt))
            .map_or(self.default, |(_, t)| *t)
    }
}

/// Whether `path` matches `glob`: `*` any run within one component, `**` any run of
/// components (including none), anything else literally.
pub fn glob_matches(glob: &str, path: &str) -> bool {
    let g: Vec<&str> = glob
        .trim_matches('/')
        .split('/')
        .filter(|c| !c.is_empty())
        .collect();
    let p: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|c| !c.is_empty())
        .collect();
    match_components(&g, &p)
}

fn match_components(g: &[&str], p: &[&str]) -> bool {
    match g.split_first() {
        None => p.is_empty(),
        Some((&"**", rest)) => (0..=p.len()).any(|i| match_components(rest, &p[i..])),
        Some((first, rest)) => {
            !p.is_empty()
                && match_component(first.as_bytes(), p[0].as_bytes())
                && match_components(rest, &p[1..])
        }
    }
}

fn match_component(g: &[u8], s: &[u8]) -> bool {
    match g.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| match_component(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && match_component(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_matches(
            "/http/*/docs/**",
            "/http/example.org/docs/a/b.html"
        ));
        assert!(glob_matches("/http/*/docs/**", "/http/example.org/docs"));
        assert!(!glob_matches(
            "/http/*/docs/**",
            "/http/example.org/src/docs"
        ));
        assert!(glob_matches("**/*.c", "/proj/src/main.c"));
        assert!(!glob_matches("**/*.c", "/proj/src/main.h"));
        assert!(glob_matches("/s3/bucket", "/s3/bucket"));
    }

    #[test]
    fn t_read_values() {
        assert_eq!(
            TRead::parse("30").unwrap(),
            TRead::Fixed(Duration::from_secs(30))
        );
        assert_eq!(
            TRead::parse("5s").unwrap(),
            TRead::Fixed(Duration::from_secs(5))
        );
        assert_eq!(TRead::parse("10%").unwrap(), TRead::AgePercent(10));
        assert!(TRead::parse("soon").is_err());
        let day_old = SystemTime::now() - Duration::from_secs(86_400);
        assert_eq!(
            TRead::AgePercent(10).for_mtime(Some(day_old)).as_secs(),
            8640
        );
        assert_eq!(
            TRead::AgePercent(10).for_mtime(None),
            Duration::from_secs(1)
        );
        let c = Consistency::new(
            TRead::Fixed(Duration::from_secs(30)),
            vec![("/http/*/live/**".into(), TRead::Fixed(Duration::ZERO))],
        );
        assert_eq!(c.t_read("/http/h/live/x"), TRead::Fixed(Duration::ZERO));
        assert_eq!(
            c.t_read("/http/h/other"),
            TRead::Fixed(Duration::from_secs(30))
        );
    }
}
