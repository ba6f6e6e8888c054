//! How many requests of each kind the kernel sent, logged when the mount ends
//! (`RUST_LOG=roam_fuse=debug`). A FUSE round trip costs about ten microseconds of kernel
//! transport and two context switches, ten times roam's own answer, so the requests a
//! workload causes are the measure of this frontend's speed (docs/BENCHMARKS.md).

use std::sync::atomic::{AtomicU64, Ordering};

/// The requests roam answers (or is told of, like `FORGET`).
#[derive(Clone, Copy)]
pub enum Op {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Getxattr,
    Listxattr,
    Statfs,
    Create,
    Mknod,
    Fallocate,
}

/// The names in the log, in the order of [`Op`].
const NAMES: [&str; 27] = [
    "LOOKUP",
    "FORGET",
    "GETATTR",
    "SETATTR",
    "READLINK",
    "MKDIR",
    "UNLINK",
    "RMDIR",
    "SYMLINK",
    "RENAME",
    "LINK",
    "OPEN",
    "READ",
    "WRITE",
    "FLUSH",
    "RELEASE",
    "FSYNC",
    "OPENDIR",
    "READDIR",
    "READDIRPLUS",
    "RELEASEDIR",
    "GETXATTR",
    "LISTXATTR",
    "STATFS",
    "CREATE",
    "MKNOD",
    "FALLOCATE",
];

/// One counter per [`Op`].
#[derive(Default)]
pub struct Counts([AtomicU64; NAMES.len()]);

impl Counts {
    pub fn add(&self, op: Op) {
        self.0[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// `TOTAL n, LOOKUP n, ...`: the kinds that came, most frequent first.
    pub fn summary(&self) -> String {
        let mut seen: Vec<(&str, u64)> = NAMES
            .iter()
            .zip(&self.0)
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        seen.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let total: u64 = seen.iter().map(|(_, n)| n).sum();
        std::iter::once(format!("TOTAL {total}"))
            .chain(seen.iter().map(|(name, n)| format!("{name} {n}")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_lists_what_came_most_first() {
        let c = Counts::default();
        c.add(Op::Create);
        c.add(Op::Write);
        c.add(Op::Write);
        assert_eq!(c.summary(), "TOTAL 3, WRITE 2, CREATE 1");
        assert_eq!(NAMES[Op::Create as usize], "CREATE");
        assert_eq!(NAMES[Op::Lookup as usize], "LOOKUP");
    }
}
