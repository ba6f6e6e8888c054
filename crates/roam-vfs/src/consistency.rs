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
    wildcard(
        g,
        p,
        |c| *c == "**",
        |c, name| match_component(c.as_bytes(), name.as_bytes()),
    )
}

fn match_component(g: &[u8], s: &[u8]) -> bool {
    wildcard(g, s, |b| *b == b'*', |b, c| b == c)
}

/// Whether `items` match `pattern`, where an item of the pattern that `is_star` matches
/// any run of items and any other matches the one item `one` accepts. Backtracking to the
/// last star alone is enough for such patterns: time is at worst the product of the
/// lengths, where trying every split at every star took time exponential in their number
/// (a rule `/**/**/**/**/**/**/**/**/x` hung every lookup of a deep path).
fn wildcard<P, T>(
    pattern: &[P],
    items: &[T],
    is_star: impl Fn(&P) -> bool,
    one: impl Fn(&P, &T) -> bool,
) -> bool {
    let (mut pi, mut ti) = (0, 0);
    // Where to resume after a mismatch: past the last star, one more item consumed by it.
    let mut resume: Option<(usize, usize)> = None;
    while ti < items.len() {
        match pattern.get(pi) {
            Some(p) if is_star(p) => {
                resume = Some((pi + 1, ti));
                pi += 1;
            }
            Some(p) if one(p, &items[ti]) => (pi, ti) = (pi + 1, ti + 1),
            _ => match resume {
                Some((after_star, from)) => {
                    (pi, ti) = (after_star, from + 1);
                    resume = Some((after_star, from + 1));
                }
                None => return false,
            },
        }
    }
    pattern[pi..].iter().all(is_star)
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
        assert!(glob_matches("/a/**/b/*.c", "/a/x/b/y/b/z.c"));
        assert!(glob_matches("/*a*b/**", "/xaab"));
        assert!(!glob_matches("/*a*b/**", "/xaba"));
        assert!(glob_matches("/**", "/"));
        assert!(!glob_matches("/x/**/y", "/x"));
    }

    /// The definition the matcher must agree with: every split tried at every star.
    fn by_definition(g: &[u8], s: &[u8]) -> bool {
        match g.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|i| by_definition(rest, &s[i..])),
            Some((c, rest)) => s.first() == Some(c) && by_definition(rest, &s[1..]),
        }
    }

    proptest::proptest! {
        #![proptest_config(roam_testkit::fuzz::config())]

        #[test]
        fn stars_match_by_definition(glob in "[ab*]{0,10}", name in "[ab]{0,12}") {
            proptest::prop_assert_eq!(
                match_component(glob.as_bytes(), name.as_bytes()),
                by_definition(glob.as_bytes(), name.as_bytes())
            );
        }

        /// `**` components against the same definition, components spelled as letters.
        #[test]
        fn double_stars_match_by_definition(glob in "[ab*]{0,8}", path in "[ab]{0,10}") {
            let as_path = |s: &str| s.chars().map(|c| match c {
                '*' => "/**".to_string(),
                c => format!("/{c}"),
            }).collect::<String>();
            proptest::prop_assert_eq!(
                glob_matches(&as_path(&glob), &as_path(&path)),
                by_definition(glob.as_bytes(), path.as_bytes())
            );
        }
    }

    /// Found probing roam.toml for hangs (issue 14): globs of many stars took time exponential
    /// in their number.
    #[test]
    fn globs_of_many_stars_answer_quickly() {
        let start = std::time::Instant::now();
        let deep = format!("/{}", "a/".repeat(40));
        assert!(!glob_matches("/**/**/**/**/**/**/**/**/x", &deep));
        assert!(glob_matches("/**/**/**/**/**/**/**/**/a", &deep));
        let long = format!("/p/{}", "a".repeat(200));
        assert!(!glob_matches("/p/*a*a*a*a*a*a*a*a*b", &long));
        assert!(glob_matches("/p/*a*a*a*a*a*a*a*a*", &long));
        assert!(start.elapsed() < Duration::from_secs(1));
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
