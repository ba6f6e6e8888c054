//! The inode table: one stable inode number per virtual name while that name exists.
//!
//! The kernel names files by inode number; roam-vfs names them by virtual path. A name keeps
//! its number across lookups (so `find` and `tar` see stable `st_ino`), and loses it when it
//! is removed or renamed over: a file created later under the same name gets a new number,
//! so an unlinked-but-open file and its successor never share a kernel inode.
//!
//! A file served in place may have several names (hard links): they share one number, found
//! by the local file's own identity, so the kernel sees one inode (same `st_ino`, one page
//! cache) and the file stays reachable by any name left when one goes.

use std::collections::HashMap;
use std::time::SystemTime;

/// The inode number of the mount's root, fixed by FUSE.
pub const ROOT: u64 = 1;

/// What the kernel may hold of a file: size and mtime of the version it cached.
pub type Version = (u64, Option<SystemTime>);

struct Inode {
    /// The name roam serves it by: one that exists while any does.
    virt: String,
    /// Its other names (hard links of a file served in place).
    links: Vec<String>,
    /// The version whose pages the kernel may keep in its page cache.
    cached: Option<Version>,
    /// The version roam last told the kernel about (size, mtime from the server).
    seen: Option<(Option<u64>, Option<SystemTime>)>,
}

/// Inode numbers ↔ virtual names.
pub struct Inodes {
    by_ino: HashMap<u64, Inode>,
    by_virt: HashMap<String, u64>,
    /// Local files (device, inode) ↔ their number, for hard links.
    by_file: HashMap<(u64, u64), u64>,
    next: u64,
}

/// A local file's identity: its device and inode numbers.
pub type FileId = (u64, u64);

impl Inodes {
    /// A table whose root is the virtual name `root`.
    pub fn new(root: &str) -> Inodes {
        let mut t = Inodes {
            by_ino: HashMap::new(),
            by_virt: HashMap::new(),
            by_file: HashMap::new(),
            next: ROOT,
        };
        t.ino_of(root);
        t
    }

    /// The number of `virt`, made on first use.
    pub fn ino_of(&mut self, virt: &str) -> u64 {
        if let Some(&ino) = self.by_virt.get(virt) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_virt.insert(virt.to_owned(), ino);
        self.by_ino.insert(
            ino,
            Inode {
                virt: virt.to_owned(),
                links: Vec::new(),
                cached: None,
                seen: None,
            },
        );
        ino
    }

    /// The number of `virt`, a local file that is `file`: the number of its other names
    /// where it has several (`links`, its link count, above 1), so hard links share one.
    pub fn ino_of_file(&mut self, virt: &str, file: FileId, links: u64) -> u64 {
        if let Some(&ino) = self.by_virt.get(virt) {
            return ino;
        }
        let known = self.by_file.get(&file).copied();
        match known.filter(|ino| links > 1 && self.by_ino.contains_key(ino)) {
            Some(ino) => {
                self.link(ino, virt);
                ino
            }
            None => {
                let ino = self.ino_of(virt);
                self.by_file.insert(file, ino);
                ino
            }
        }
    }

    /// `virt` is now another name of `ino` (a hard link). It becomes the name roam serves
    /// it by: it exists now, while an older name may have gone behind roam's back.
    pub fn link(&mut self, ino: u64, virt: &str) {
        let Some(i) = self.by_ino.get_mut(&ino) else {
            return;
        };
        let older = std::mem::replace(&mut i.virt, virt.to_owned());
        i.links.push(older);
        self.by_virt.insert(virt.to_owned(), ino);
    }

    /// The virtual name of `ino` (its last name, for a removed file still open).
    pub fn virt(&self, ino: u64) -> Option<String> {
        self.by_ino.get(&ino).map(|i| i.virt.clone())
    }

    /// `virt` no longer exists: a new file of that name gets a new number, and a file with
    /// other names is served by one of those.
    pub fn detach(&mut self, virt: &str) {
        let Some(ino) = self.by_virt.remove(virt) else {
            return;
        };
        let Some(i) = self.by_ino.get_mut(&ino) else {
            return;
        };
        i.links.retain(|l| l != virt);
        if i.virt == virt {
            if let Some(other) = i.links.pop() {
                i.virt = other;
            }
        }
    }

    /// `from` (and everything under it) is now called `to`.
    pub fn rename(&mut self, from: &str, to: &str) {
        self.detach(to);
        let moved: Vec<(String, String, u64)> = self
            .by_virt
            .iter()
            .filter_map(|(v, &ino)| {
                let rest = v.strip_prefix(from)?;
                (rest.is_empty() || rest.starts_with('/'))
                    .then(|| (v.clone(), format!("{to}{rest}"), ino))
            })
            .collect();
        for (old, new, ino) in moved {
            if let Some(i) = self.by_ino.get_mut(&ino) {
                self.by_virt.remove(&old);
                match i.links.iter_mut().find(|l| **l == old) {
                    Some(link) => link.clone_from(&new),
                    None => i.virt.clone_from(&new),
                }
            }
            self.by_virt.insert(new, ino);
        }
    }

    /// Records that the kernel caches `version` of `ino`; says whether it already did, so
    /// its pages may be kept (FOPEN_KEEP_CACHE).
    pub fn cache_version(&mut self, ino: u64, version: Version) -> bool {
        let Some(i) = self.by_ino.get_mut(&ino) else {
            return false;
        };
        let same = i.cached == Some(version);
        i.cached = Some(version);
        same
    }

    /// Records what the server says `ino` is now; `true` when that differs from what it
    /// said before, so the kernel's pages of the old version must go.
    pub fn saw(&mut self, ino: u64, size: Option<u64>, mtime: Option<SystemTime>) -> bool {
        let Some(i) = self.by_ino.get_mut(&ino) else {
            return false;
        };
        let changed = i.seen.is_some_and(|s| s != (size, mtime));
        if changed {
            i.cached = None;
        }
        i.seen = Some((size, mtime));
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_until_the_name_goes() {
        let mut t = Inodes::new("/");
        assert_eq!(t.ino_of("/"), ROOT);
        let a = t.ino_of("/a");
        assert_eq!(t.ino_of("/a"), a);
        t.detach("/a");
        assert_ne!(t.ino_of("/a"), a);
        assert_eq!(t.virt(a).as_deref(), Some("/a"));
    }

    #[test]
    fn rename_moves_a_subtree() {
        let mut t = Inodes::new("/");
        let d = t.ino_of("/d");
        let f = t.ino_of("/d/f");
        let other = t.ino_of("/dx");
        let target = t.ino_of("/e");
        t.rename("/d", "/e");
        assert_eq!(t.virt(d).as_deref(), Some("/e"));
        assert_eq!(t.virt(f).as_deref(), Some("/e/f"));
        assert_eq!(t.virt(other).as_deref(), Some("/dx"));
        assert_eq!(t.ino_of("/e"), d);
        assert_ne!(t.ino_of("/d"), d);
        assert_eq!(
            t.virt(target).as_deref(),
            Some("/e"),
            "the replaced file keeps its name"
        );
    }

    #[test]
    fn hard_links_share_a_number_and_outlive_a_name() {
        let mut t = Inodes::new("/");
        let a = t.ino_of_file("/a", (1, 7), 1);
        assert_eq!(t.ino_of_file("/b", (1, 7), 2), a, "found by the file");
        t.detach("/b");
        assert_eq!(t.virt(a).as_deref(), Some("/a"));
        t.link(a, "/c");
        t.detach("/a");
        assert_eq!(t.virt(a).as_deref(), Some("/c"), "served by the name left");
        t.rename("/c", "/d");
        assert_eq!(t.virt(a).as_deref(), Some("/d"));
        assert_ne!(t.ino_of_file("/e", (1, 8), 2), a, "another file");
    }

    #[test]
    fn keep_cache_only_for_the_same_version() {
        let mut t = Inodes::new("/");
        let f = t.ino_of("/f");
        assert!(!t.cache_version(f, (3, None)));
        assert!(t.cache_version(f, (3, None)));
        assert!(!t.saw(f, Some(3), None));
        assert!(t.saw(f, Some(4), None));
        assert!(
            !t.cache_version(f, (3, None)),
            "a remote change drops the pages"
        );
    }
}
