//! Absolute local names roam found lately that the kernel resolves by itself (they exist,
//! or are missing from a directory that exists, and no symlink on the way leads into roam):
//! asked about again, they cost no `fstatat` of roam's. A compiler asks about the same few
//! hundred names in every compile (headers, and glibc's `realpath` reads the link of every
//! prefix of each), so most stops of a build are such repeats.
//!
//! What could make a verdict wrong is a symlink into roam appearing on the way. A traced call
//! that adds or removes names clears every verdict at once; a change made by a process roam
//! does not trace is seen after at most [`TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a verdict holds without any traced change of names.
pub const TTL: Duration = Duration::from_secs(1);
/// Verdicts kept at most (then all are dropped and gathered again).
const MAX: usize = 1 << 16;

/// The verdicts, for calls that follow a symlink in the last component and for those that
/// do not (`[follow as usize]`).
#[derive(Default)]
pub struct NativeNames {
    seen: Mutex<[HashMap<Box<str>, Instant>; 2]>,
}

impl NativeNames {
    /// Whether `path` was found native less than [`TTL`] ago.
    pub fn recalls(&self, path: &str, follow: bool) -> bool {
        let seen = self.seen.lock().unwrap();
        seen[follow as usize]
            .get(path)
            .is_some_and(|at| at.elapsed() < TTL)
    }

    pub fn remember(&self, path: &str, follow: bool) {
        let mut seen = self.seen.lock().unwrap();
        let map = &mut seen[follow as usize];
        if map.len() >= MAX {
            map.clear();
        }
        map.insert(path.into(), Instant::now());
    }

    /// A traced call added or removed names: no verdict holds any more.
    pub fn forget_all(&self) {
        let mut seen = self.seen.lock().unwrap();
        seen.iter_mut().for_each(HashMap::clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_per_follow_and_go_at_once() {
        let names = NativeNames::default();
        assert!(!names.recalls("/usr/include/stdio.h", true));
        names.remember("/usr/include/stdio.h", true);
        assert!(names.recalls("/usr/include/stdio.h", true));
        assert!(!names.recalls("/usr/include/stdio.h", false));
        names.forget_all();
        assert!(!names.recalls("/usr/include/stdio.h", true));
    }
}
