//! The text forms of the Chirp protocol: how a path travels in a request line, and the stat
//! record the server sends after `stat`, `lstat`, `open` and each `getlongdir` entry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Kind, Meta};

/// The longest request line `chirp_server` reads (`CHIRP_LINE_MAX`, with its newline).
pub(crate) const LINE_MAX: usize = 1024;

/// A path as a request argument. Arguments are separated by spaces and the server
/// percent-decodes each path, so every byte but the few that are surely plain is escaped
/// (the server decodes any `%XX`; `cctools`' own client escapes fewer).
pub(crate) fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether `target` can travel as the target of `symlink`: the server takes it verbatim
/// (it does not percent-decode it) as one space-separated word.
pub(crate) fn is_plain_word(target: &str) -> bool {
    !target.is_empty()
        && !target
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
}

/// The fields of a Chirp stat record that roam uses. On the wire it is thirteen integers:
/// `dev ino mode nlink uid gid rdev size blksize blocks atime mtime ctime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) ino: u64,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    pub(crate) atime: i64,
    pub(crate) mtime: i64,
}

const S_IFMT: u32 = 0o170_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

impl Stat {
    pub(crate) fn parse(line: &str) -> Option<Stat> {
        let fields: Vec<i64> = line
            .split_ascii_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let &[_dev, ino, mode, _nlink, _uid, _gid, _rdev, size, _blksize, _blocks, atime, mtime, _ctime] =
            fields.as_slice()
        else {
            return None;
        };
        Some(Stat {
            ino: u64::try_from(ino).ok()?,
            mode: u32::try_from(mode).ok()?,
            size: u64::try_from(size).ok()?,
            atime,
            mtime,
        })
    }

    pub(crate) fn kind(&self) -> Kind {
        match self.mode & S_IFMT {
            S_IFDIR => Kind::Dir,
            S_IFLNK => Kind::Symlink,
            // Fifos and devices read like files through Chirp.
            _ => Kind::File,
        }
    }

    /// The metadata roam keeps. Chirp times have whole seconds, so two versions of a file
    /// written within one second can share size and mtime; the inode number in the
    /// validator tells them apart when the new one was renamed into place (as `put` does).
    pub(crate) fn meta(&self, symlink_target: Option<String>) -> Meta {
        Meta {
            kind: self.kind(),
            size: Some(self.size),
            mtime: Some(time_of(self.mtime)),
            mode: Some(self.mode & 0o7777),
            etag: Some(format!("{}-{}-{}", self.ino, self.size, self.mtime)),
            symlink_target,
            nlink: None,
            atime: None,
            fresh_for: None,
        }
    }
}

/// The `SystemTime` of a count of seconds since the epoch (negative before it).
pub(crate) fn time_of(secs: i64) -> SystemTime {
    let magnitude = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

/// Whole seconds since the epoch, rounded down (Chirp's `utime` has no finer unit).
pub(crate) fn secs_of(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let d = before.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            -whole - i64::from(d.subsec_nanos() > 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_escaped_into_one_word() {
        assert_eq!(encode_path("/a/b-c_d.e~"), "/a/b-c_d.e~");
        assert_eq!(encode_path("/a b%c"), "/a%20b%25c");
        assert_eq!(encode_path("/\u{fc}\n"), "/%C3%BC%0A");
        assert!(is_plain_word("../x%20y"));
        for bad in ["", "a b", "a\tb", "a\nb", "a\u{7f}"] {
            assert!(!is_plain_word(bad), "{bad:?}");
        }
    }

    #[test]
    fn stat_records_become_metadata() {
        let file = "65024 9979007 33188 1 65534 0 0 6 4096 8 1000 2000 3000";
        let st = Stat::parse(file).unwrap();
        let m = st.meta(None);
        assert_eq!((m.kind, m.size, m.mode), (Kind::File, Some(6), Some(0o644)));
        assert_eq!(m.mtime, Some(UNIX_EPOCH + Duration::from_secs(2000)));
        assert_eq!(m.etag.as_deref(), Some("9979007-6-2000"));
        assert_eq!(st.atime, 1000);

        let dir = Stat::parse("1 2 16877 3 0 0 0 4096 4096 8 1 2 3\n").unwrap();
        assert_eq!(dir.kind(), Kind::Dir);
        let link = Stat::parse("1 2 41471 1 0 0 0 9 4096 0 1 -5 3").unwrap();
        assert_eq!(link.kind(), Kind::Symlink);
        assert_eq!(time_of(link.mtime), UNIX_EPOCH - Duration::from_secs(5));

        for bad in [
            "",
            "1 2 3",
            "1 2 x 4 5 6 7 8 9 10 11 12 13",
            "1 2 3 4 5 6 7 8 9 10 11 12 13 14",
        ] {
            assert_eq!(Stat::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Stat::parse("1 -2 3 4 5 6 7 8 9 10 11 12 13"), None);
    }

    #[test]
    fn times_round_down_to_seconds() {
        assert_eq!(secs_of(UNIX_EPOCH + Duration::from_millis(2500)), 2);
        assert_eq!(secs_of(UNIX_EPOCH - Duration::from_millis(2500)), -3);
        assert_eq!(secs_of(UNIX_EPOCH - Duration::from_secs(4)), -4);
        assert_eq!(
            time_of(secs_of(UNIX_EPOCH + Duration::from_secs(7))),
            UNIX_EPOCH + Duration::from_secs(7)
        );
    }
}
