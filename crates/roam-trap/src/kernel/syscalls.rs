//! Every x86_64 system call that takes a path, as the kernel defines them
//! (`arch/x86/entry/syscalls/syscall_64.tbl` for the numbers, the `SYSCALL_DEFINE`s for
//! the arguments): number, name, and the registers holding the paths (with their dirfds).
//! This is data about the kernel, not about roam: `table.rs` must serve every call here
//! (a test checks it), so a new path-taking call cannot pass roam names to the kernel
//! unnoticed.
//!
//! Not here, because their strings are not names of the file tree: `mq_open`/`mq_unlink`
//! (the mqueue file system's own names), `fsconfig` (keys and values of a file-system
//! context that only `fsopen` makes), `bind`/`connect` (socket addresses), `bpf`'s pinned
//! paths (inside a structure).

#[cfg(test)]
use super::table::PathArg;

/// Calls newer than the `libc` crate's table (Linux 6.13 and 6.17).
pub const SYS_SETXATTRAT: i64 = 463;
pub const SYS_GETXATTRAT: i64 = 464;
pub const SYS_LISTXATTRAT: i64 = 465;
pub const SYS_REMOVEXATTRAT: i64 = 466;
pub const SYS_OPEN_TREE_ATTR: i64 = 467;
pub const SYS_FILE_GETATTR: i64 = 468;
pub const SYS_FILE_SETATTR: i64 = 469;

/// A path-taking call of the kernel.
#[cfg(test)]
pub struct PathCall {
    pub nr: i64,
    pub name: &'static str,
    pub paths: &'static [PathArg],
}

#[cfg(test)]
const fn p(path: usize) -> PathArg {
    PathArg { path, dirfd: None }
}

#[cfg(test)]
const fn at(dirfd: usize, path: usize) -> PathArg {
    PathArg {
        path,
        dirfd: Some(dirfd),
    }
}

#[cfg(test)]
macro_rules! call {
    ($nr:expr, $name:literal, [$($pa:expr),*]) => {
        PathCall { nr: $nr, name: $name, paths: &[$($pa),*] }
    };
}

/// The kernel's path-taking calls (x86_64), by number.
#[cfg(test)]
pub static PATH_CALLS: &[PathCall] = &[
    call!(2, "open", [p(0)]),
    call!(4, "stat", [p(0)]),
    call!(6, "lstat", [p(0)]),
    call!(21, "access", [p(0)]),
    call!(59, "execve", [p(0)]),
    call!(76, "truncate", [p(0)]),
    call!(80, "chdir", [p(0)]),
    call!(82, "rename", [p(0), p(1)]),
    call!(83, "mkdir", [p(0)]),
    call!(84, "rmdir", [p(0)]),
    call!(85, "creat", [p(0)]),
    call!(86, "link", [p(0), p(1)]),
    call!(87, "unlink", [p(0)]),
    // The target (register 0) is text stored in the link, not resolved.
    call!(88, "symlink", [p(1)]),
    call!(89, "readlink", [p(0)]),
    call!(90, "chmod", [p(0)]),
    call!(92, "chown", [p(0)]),
    call!(94, "lchown", [p(0)]),
    call!(132, "utime", [p(0)]),
    call!(133, "mknod", [p(0)]),
    call!(134, "uselib", [p(0)]),
    call!(137, "statfs", [p(0)]),
    call!(155, "pivot_root", [p(0), p(1)]),
    call!(161, "chroot", [p(0)]),
    call!(163, "acct", [p(0)]),
    call!(165, "mount", [p(0), p(1)]),
    call!(166, "umount2", [p(0)]),
    call!(167, "swapon", [p(0)]),
    call!(168, "swapoff", [p(0)]),
    // The special file (a block device's path), register 1.
    call!(179, "quotactl", [p(1)]),
    call!(188, "setxattr", [p(0)]),
    call!(189, "lsetxattr", [p(0)]),
    call!(191, "getxattr", [p(0)]),
    call!(192, "lgetxattr", [p(0)]),
    call!(194, "listxattr", [p(0)]),
    call!(195, "llistxattr", [p(0)]),
    call!(197, "removexattr", [p(0)]),
    call!(198, "lremovexattr", [p(0)]),
    call!(235, "utimes", [p(0)]),
    call!(254, "inotify_add_watch", [p(1)]),
    call!(257, "openat", [at(0, 1)]),
    call!(258, "mkdirat", [at(0, 1)]),
    call!(259, "mknodat", [at(0, 1)]),
    call!(260, "fchownat", [at(0, 1)]),
    call!(261, "futimesat", [at(0, 1)]),
    call!(262, "newfstatat", [at(0, 1)]),
    call!(263, "unlinkat", [at(0, 1)]),
    call!(264, "renameat", [at(0, 1), at(2, 3)]),
    call!(265, "linkat", [at(0, 1), at(2, 3)]),
    call!(266, "symlinkat", [at(1, 2)]),
    call!(267, "readlinkat", [at(0, 1)]),
    call!(268, "fchmodat", [at(0, 1)]),
    call!(269, "faccessat", [at(0, 1)]),
    call!(280, "utimensat", [at(0, 1)]),
    call!(301, "fanotify_mark", [at(3, 4)]),
    call!(303, "name_to_handle_at", [at(0, 1)]),
    call!(316, "renameat2", [at(0, 1), at(2, 3)]),
    call!(322, "execveat", [at(0, 1)]),
    call!(332, "statx", [at(0, 1)]),
    call!(428, "open_tree", [at(0, 1)]),
    call!(429, "move_mount", [at(0, 1), at(2, 3)]),
    call!(433, "fspick", [at(0, 1)]),
    call!(437, "openat2", [at(0, 1)]),
    call!(439, "faccessat2", [at(0, 1)]),
    call!(442, "mount_setattr", [at(0, 1)]),
    call!(452, "fchmodat2", [at(0, 1)]),
    call!(SYS_SETXATTRAT, "setxattrat", [at(0, 1)]),
    call!(SYS_GETXATTRAT, "getxattrat", [at(0, 1)]),
    call!(SYS_LISTXATTRAT, "listxattrat", [at(0, 1)]),
    call!(SYS_REMOVEXATTRAT, "removexattrat", [at(0, 1)]),
    call!(SYS_OPEN_TREE_ATTR, "open_tree_attr", [at(0, 1)]),
    call!(SYS_FILE_GETATTR, "file_getattr", [at(0, 1)]),
    call!(SYS_FILE_SETATTR, "file_setattr", [at(0, 1)]),
];
