//! The table of system calls roam traps (x86_64): for each, the family that gives it its
//! meaning and where its path arguments are. Everything not in this table runs natively.
//! The seccomp filter is built from this table, so the two can never disagree. Every call
//! of the kernel that takes a path (`syscalls.rs`) is here.

use super::syscalls::{
    SYS_FILE_GETATTR, SYS_FILE_SETATTR, SYS_GETXATTRAT, SYS_LISTXATTRAT, SYS_REMOVEXATTRAT,
    SYS_SETXATTRAT,
};

/// What a call does with its names, which decides how a roam name is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// open/openat/openat2: the fetched file or a filled skeleton directory.
    Open,
    /// Reads metadata only (stat, access, xattr reads, statfs ...): the skeleton entry.
    Inspect,
    /// access-like: `Inspect`, but asking for write access to a read-only mount is EROFS.
    Access,
    /// readlink: `Inspect`, plus the virtual names of `/proc/self/{cwd,exe,fd/N}`.
    Readlink,
    Chdir,
    Getcwd,
    Exec,
    /// Changes the file system: done by the driver, or in place for the local driver;
    /// EROFS on read-only mounts, EXDEV across mounts.
    Mutate,
    /// Changes an object given by fd (fchmod ...) on one of roam's copies.
    MutateFd,
    /// Meaningless on a remote name (chroot, mount ...): refused with a message.
    Unsupported,
    /// A path-taking call roam does not serve on its names (yet): ENOSYS, with a message
    /// naming the call, rather than the kernel's ENOENT for a name it cannot see.
    Unserved,
    /// bind/connect: a unix socket named by a path (a `sockaddr_un` at register 1, its
    /// length at register 2) that is a roam name is bound or found where the kernel can
    /// reach it; every other address runs as given.
    Socket,
    /// io_uring would bypass the trap: ENOSYS, so programs fall back to plain calls.
    NoUring,
    /// ptrace: roam is every tracee's tracer, so a debugger's request to trace one of them
    /// hands that process over (served from afar by roam from then on).
    Ptrace,
    /// close: the last writer's close of a changed remote file uploads it.
    Close,
    /// fsync/fdatasync: a durability point; a changed remote file is uploaded first.
    Sync,
    /// dup2/dup3: as `Read` for the fd copied (register 0); replacing an fd that holds a
    /// changed copy (register 1) closes it, as `Close` does (a shell puts its redirected
    /// stdout back this way).
    Dup,
    /// getdents64 of a watched fd: a local directory holding mount points lists them.
    Dents,
    /// Reads from a watched fd (a large file arriving in ranges): wait for the bytes.
    /// Trapped only when the fd is one roam watches (see `Spec::fd_gate`).
    Read,
}

/// Where one name argument is: the register holding the path and, for `*at` calls, the one
/// holding the directory fd it is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathArg {
    pub path: usize,
    pub dirfd: Option<usize>,
}

const fn p(path: usize) -> PathArg {
    PathArg { path, dirfd: None }
}

const fn at(dirfd: usize, path: usize) -> PathArg {
    PathArg {
        path,
        dirfd: Some(dirfd),
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub nr: i64,
    pub name: &'static str,
    pub family: Family,
    pub paths: &'static [PathArg],
    /// For `Open`: the register with the flags (for openat2, the `open_how` pointer).
    /// For `Access`: the register with the mode. For `Readlink`: the buffer register.
    /// For `Read`: the register with the fd.
    pub aux: usize,
    /// `Some(r)`: trapped only when the fd in register `r` is a watched one (one of roam's
    /// copies); every other call of this number runs natively.
    pub gate: Option<usize>,
}

macro_rules! spec {
    // A call newer than the `libc` crate: its number from `syscalls.rs`.
    ($nr:ident = $name:literal, $fam:ident, [$($pa:expr),*]) => {
        Spec { nr: super::syscalls::$nr, name: $name, family: Family::$fam, paths: &[$($pa),*], aux: 0, gate: None }
    };
    ($nr:ident, $fam:ident, [$($pa:expr),*]) => { spec!($nr, $fam, [$($pa),*], 0) };
    ($nr:ident, $fam:ident, [$($pa:expr),*], $aux:expr) => {
        Spec { nr: libc::$nr, name: stringify!($nr), family: Family::$fam, paths: &[$($pa),*], aux: $aux, gate: None }
    };
}

/// A call trapped only on watched fds (the fd in register `fd`).
macro_rules! gated {
    ($nr:ident, $fam:ident, $fd:expr) => {
        Spec {
            nr: libc::$nr,
            name: stringify!($nr),
            family: Family::$fam,
            paths: &[],
            aux: $fd,
            gate: Some($fd),
        }
    };
}

/// Every trapped call. Numbers are x86_64 (`libc::SYS_*`).
pub static TABLE: &[Spec] = &[
    spec!(SYS_open, Open, [p(0)], 1),
    spec!(SYS_openat, Open, [at(0, 1)], 2),
    spec!(SYS_openat2, Open, [at(0, 1)], 2),
    spec!(SYS_creat, Open, [p(0)]),
    spec!(SYS_stat, Inspect, [p(0)]),
    spec!(SYS_lstat, Inspect, [p(0)]),
    spec!(SYS_newfstatat, Inspect, [at(0, 1)]),
    spec!(SYS_statx, Inspect, [at(0, 1)]),
    spec!(SYS_statfs, Inspect, [p(0)]),
    spec!(SYS_getxattr, Inspect, [p(0)]),
    spec!(SYS_lgetxattr, Inspect, [p(0)]),
    spec!(SYS_listxattr, Inspect, [p(0)]),
    spec!(SYS_llistxattr, Inspect, [p(0)]),
    spec!(SYS_inotify_add_watch, Inspect, [p(1)]),
    spec!(SYS_GETXATTRAT = "getxattrat", Inspect, [at(0, 1)]),
    spec!(SYS_LISTXATTRAT = "listxattrat", Inspect, [at(0, 1)]),
    spec!(SYS_FILE_GETATTR = "file_getattr", Inspect, [at(0, 1)]),
    spec!(SYS_access, Access, [p(0)], 1),
    spec!(SYS_faccessat, Access, [at(0, 1)], 2),
    spec!(SYS_faccessat2, Access, [at(0, 1)], 2),
    spec!(SYS_readlink, Readlink, [p(0)], 1),
    spec!(SYS_readlinkat, Readlink, [at(0, 1)], 2),
    spec!(SYS_chdir, Chdir, [p(0)]),
    spec!(SYS_getcwd, Getcwd, []),
    spec!(SYS_execve, Exec, [p(0)]),
    spec!(SYS_execveat, Exec, [at(0, 1)]),
    spec!(SYS_mkdir, Mutate, [p(0)]),
    spec!(SYS_mkdirat, Mutate, [at(0, 1)]),
    spec!(SYS_rmdir, Mutate, [p(0)]),
    spec!(SYS_unlink, Mutate, [p(0)]),
    spec!(SYS_unlinkat, Mutate, [at(0, 1)]),
    spec!(SYS_rename, Mutate, [p(0), p(1)]),
    spec!(SYS_renameat, Mutate, [at(0, 1), at(2, 3)]),
    spec!(SYS_renameat2, Mutate, [at(0, 1), at(2, 3)]),
    spec!(SYS_link, Mutate, [p(0), p(1)]),
    spec!(SYS_linkat, Mutate, [at(0, 1), at(2, 3)]),
    spec!(SYS_symlink, Mutate, [p(1)]),
    spec!(SYS_symlinkat, Mutate, [at(1, 2)]),
    spec!(SYS_chmod, Mutate, [p(0)]),
    spec!(SYS_fchmodat, Mutate, [at(0, 1)]),
    spec!(SYS_fchmodat2, Mutate, [at(0, 1)]),
    spec!(SYS_chown, Mutate, [p(0)]),
    spec!(SYS_lchown, Mutate, [p(0)]),
    spec!(SYS_fchownat, Mutate, [at(0, 1)]),
    spec!(SYS_truncate, Mutate, [p(0)]),
    spec!(SYS_utime, Mutate, [p(0)]),
    spec!(SYS_utimes, Mutate, [p(0)]),
    spec!(SYS_futimesat, Mutate, [at(0, 1)]),
    spec!(SYS_utimensat, Mutate, [at(0, 1)]),
    spec!(SYS_setxattr, Mutate, [p(0)]),
    spec!(SYS_lsetxattr, Mutate, [p(0)]),
    spec!(SYS_removexattr, Mutate, [p(0)]),
    spec!(SYS_lremovexattr, Mutate, [p(0)]),
    spec!(SYS_SETXATTRAT = "setxattrat", Mutate, [at(0, 1)]),
    spec!(SYS_REMOVEXATTRAT = "removexattrat", Mutate, [at(0, 1)]),
    spec!(SYS_mknod, Mutate, [p(0)]),
    spec!(SYS_mknodat, Mutate, [at(0, 1)]),
    spec!(SYS_fchmod, MutateFd, []),
    spec!(SYS_fchown, MutateFd, []),
    spec!(SYS_fsetxattr, MutateFd, []),
    spec!(SYS_fremovexattr, MutateFd, []),
    spec!(SYS_chroot, Unsupported, [p(0)]),
    spec!(SYS_name_to_handle_at, Unsupported, [at(0, 1)]),
    spec!(SYS_uselib, Unsupported, [p(0)]),
    spec!(SYS_acct, Unsupported, [p(0)]),
    spec!(SYS_swapon, Unsupported, [p(0)]),
    spec!(SYS_swapoff, Unsupported, [p(0)]),
    spec!(SYS_mount, Unsupported, [p(0), p(1)]),
    spec!(SYS_umount2, Unsupported, [p(0)]),
    spec!(SYS_pivot_root, Unsupported, [p(0), p(1)]),
    spec!(SYS_fanotify_mark, Unsupported, [at(3, 4)]),
    spec!(SYS_open_tree, Unsupported, [at(0, 1)]),
    spec!(SYS_fspick, Unsupported, [at(0, 1)]),
    spec!(SYS_mount_setattr, Unsupported, [at(0, 1)]),
    spec!(SYS_move_mount, Unsupported, [at(0, 1), at(2, 3)]),
    spec!(
        SYS_OPEN_TREE_ATTR = "open_tree_attr",
        Unsupported,
        [at(0, 1)]
    ),
    spec!(SYS_quotactl, Unsupported, [p(1)]),
    spec!(SYS_FILE_SETATTR = "file_setattr", Unserved, [at(0, 1)]),
    spec!(SYS_bind, Socket, []),
    spec!(SYS_connect, Socket, []),
    spec!(SYS_io_uring_setup, NoUring, []),
    spec!(SYS_ptrace, Ptrace, []),
    // Roam's copies (files being written, large files arriving in ranges) are opened at
    // watched fd numbers; only calls on those need roam.
    gated!(SYS_close, Close, 0),
    gated!(SYS_fsync, Sync, 0),
    gated!(SYS_fdatasync, Sync, 0),
    gated!(SYS_read, Read, 0),
    gated!(SYS_pread64, Read, 0),
    gated!(SYS_readv, Read, 0),
    gated!(SYS_preadv, Read, 0),
    gated!(SYS_preadv2, Read, 0),
    gated!(SYS_mmap, Read, 4),
    gated!(SYS_sendfile, Read, 1),
    gated!(SYS_copy_file_range, Read, 0),
    gated!(SYS_splice, Read, 0),
    // A copy of a watched fd at an unwatched number would read holes: these need the whole file.
    gated!(SYS_dup, Read, 0),
    gated!(SYS_fcntl, Read, 0),
    // Always trapped: the fd they replace may be a changed copy at an unwatched number.
    spec!(SYS_dup2, Dup, []),
    spec!(SYS_dup3, Dup, []),
    // A local directory holding mount points is opened at a watched number too.
    gated!(SYS_getdents64, Dents, 0),
];

/// The spec of a trapped call number.
pub fn lookup(nr: i64) -> Option<&'static Spec> {
    // A linear scan over ~70 entries costs less than the ptrace stop that led here.
    TABLE.iter().find(|s| s.nr == nr)
}

/// Whether a call adds or removes names, so that a symlink into roam may appear where a
/// local name was found native (see `native_names`).
pub fn changes_names(spec: &Spec) -> bool {
    matches!(
        spec.nr,
        libc::SYS_rmdir
            | libc::SYS_unlink
            | libc::SYS_unlinkat
            | libc::SYS_rename
            | libc::SYS_renameat
            | libc::SYS_renameat2
            | libc::SYS_link
            | libc::SYS_linkat
            | libc::SYS_symlink
            | libc::SYS_symlinkat
    )
}

/// Whether a call follows a symlink in the last component of its names (argument
/// registers `args`); calls that act on a link itself (lstat, unlink, rename ...) do not.
pub fn follows_last(spec: &Spec, args: &[u64; 6]) -> bool {
    let has = |r: usize, bit: i32| (args[r] as i32) & bit != 0;
    let open_follows = |flags: u64| {
        let f = flags as i32;
        f & libc::O_NOFOLLOW == 0
            && f & (libc::O_CREAT | libc::O_EXCL) != libc::O_CREAT | libc::O_EXCL
    };
    match spec.nr {
        libc::SYS_linkat => has(4, libc::AT_SYMLINK_FOLLOW),
        // Calls that add or remove names act on the last component itself.
        _ if changes_names(spec) => false,
        libc::SYS_lstat
        | libc::SYS_lgetxattr
        | libc::SYS_llistxattr
        | libc::SYS_lsetxattr
        | libc::SYS_lremovexattr
        | libc::SYS_lchown
        | libc::SYS_readlink
        | libc::SYS_readlinkat
        | libc::SYS_mkdir
        | libc::SYS_mkdirat
        | libc::SYS_mknod
        | libc::SYS_mknodat => false,
        libc::SYS_newfstatat | libc::SYS_utimensat | libc::SYS_fchmodat2 | libc::SYS_faccessat2 => {
            !has(3, libc::AT_SYMLINK_NOFOLLOW)
        }
        libc::SYS_statx => !has(2, libc::AT_SYMLINK_NOFOLLOW),
        SYS_SETXATTRAT | SYS_GETXATTRAT | SYS_LISTXATTRAT | SYS_REMOVEXATTRAT => {
            !has(2, libc::AT_SYMLINK_NOFOLLOW)
        }
        SYS_FILE_GETATTR | SYS_FILE_SETATTR => !has(4, libc::AT_SYMLINK_NOFOLLOW),
        libc::SYS_fchownat => !has(4, libc::AT_SYMLINK_NOFOLLOW),
        libc::SYS_open => open_follows(args[1]),
        libc::SYS_openat => open_follows(args[2]),
        _ => true,
    }
}

/// Numbers the seccomp filter always traps.
pub fn traced_numbers() -> Vec<i64> {
    TABLE
        .iter()
        .filter(|s| s.gate.is_none())
        .map(|s| s.nr)
        .collect()
}

/// Numbers the filter traps only for watched fds, with the register holding the fd.
pub fn gated_numbers() -> Vec<(i64, usize)> {
    TABLE.iter().filter_map(|s| Some((s.nr, s.gate?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_and_args_in_range() {
        let mut seen = std::collections::HashSet::new();
        for s in TABLE {
            assert!(seen.insert(s.nr), "{} twice", s.name);
            for pa in s.paths {
                assert!(pa.path < 6 && pa.dirfd.is_none_or(|d| d < 6), "{}", s.name);
            }
        }
        assert_eq!(lookup(libc::SYS_openat).unwrap().family, Family::Open);
        assert!(lookup(libc::SYS_write).is_none());
        assert!(
            !traced_numbers().contains(&libc::SYS_read),
            "reads are gated, never always trapped"
        );
        assert!(gated_numbers().contains(&(libc::SYS_mmap, 4)));
    }

    /// A call of the kernel that takes a path and is missing here would hand roam names
    /// to the kernel, which fails them with ENOENT: each must be served (or refused with a
    /// message), with its names where the kernel has them.
    #[test]
    fn every_path_taking_call_of_the_kernel_is_served() {
        for call in super::super::syscalls::PATH_CALLS {
            let spec = lookup(call.nr).unwrap_or_else(|| {
                panic!(
                    "{} ({}) takes a path but is not in the table",
                    call.name, call.nr
                )
            });
            assert_eq!(
                spec.name.trim_start_matches("SYS_"),
                call.name,
                "number {}",
                call.nr
            );
            assert_eq!(spec.paths, call.paths, "the names of {}", call.name);
        }
    }
}
