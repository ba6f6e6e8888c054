//! Local directories that hold roam's mount points (`/` holds `/http`, `/s3` ...; `/a`
//! holds a mount at `/a/b`): a listing of one shows them, as a listing shows the mount
//! points of the kernel's mounts. The kernel lists the local directory; roam adds the
//! names of its mounts that are not local names there.
//!
//! An `O_DIRECTORY` open of such a directory (how `opendir` opens) is moved to a watched
//! fd number, so its `getdents64` stops. The first one of a listing (the fd's position is
//! 0: a new open, or `rewinddir`) runs natively, and at its exit roam appends its entries
//! behind the kernel's, where the program's buffer has room (a buffer the directory's own
//! entries fill would miss them; `/` fills about 1 KiB of glibc's 32 KiB). No state is
//! kept: the position says where a listing is.

use nix::unistd::Pid;

use super::table::Spec;
use super::{AfterExit, Decision, Kernel, Triage};
use crate::platform::ptrace::Syscall;
use crate::platform::{memory, ptrace};

/// An open of a local directory holding mount points: at a watched fd number.
pub(super) fn open(k: &Kernel, tid: Pid, spec: &Spec, call: &Syscall) -> Option<Decision> {
    let flags = match call.nr {
        libc::SYS_open => call.args[1],
        libc::SYS_openat => call.args[2],
        _ => return None,
    } as i32;
    if flags & libc::O_DIRECTORY == 0 {
        return None;
    }
    let pa = spec.paths.first()?;
    let raw = memory::read_cstr(tid, call.args[pa.path]).ok()?;
    let dir = absolute(k, tid, pa.dirfd.map(|r| call.args[r] as i32), &raw)?;
    if k.vfs().mount_names_under(&dir).is_empty() {
        return None;
    }
    Some(Decision::OpenWatched {
        arg: pa.path,
        path: raw,
        cloexec: flags & libc::O_CLOEXEC != 0,
        virt: dir,
    })
}

/// The absolute name `raw` (relative to `dirfd` or the cwd) opens, when it may be a
/// directory holding mount points: absolute, `.`/`..`, or ending in the name of one. The
/// base directory is read only for those, so other relative opens (`find`, `ls -R`) cost
/// nothing more.
fn absolute(k: &Kernel, tid: Pid, dirfd: Option<i32>, raw: &[u8]) -> Option<String> {
    let raw = std::str::from_utf8(raw).ok()?;
    if raw.starts_with('/') {
        return Some(roam_vfs::path::normalize(raw));
    }
    let last = raw.trim_end_matches('/').rsplit('/').next()?;
    let parents = k.vfs().mount_parents();
    let named = |d: &String| roam_vfs::path::split_name(d).1 == last;
    if !matches!(last, "" | "." | "..") && !parents.iter().any(named) {
        return None;
    }
    let base = match dirfd {
        Some(fd) if fd != libc::AT_FDCWD => super::resolve::fd_target(tid, fd)?,
        _ => std::fs::read_link(format!("/proc/{tid}/cwd"))
            .ok()?
            .to_str()?
            .to_owned(),
    };
    Some(roam_vfs::path::join(&base, raw))
}

/// `getdents64(fd, buf, count)` on a watched fd: the first of a listing of a directory
/// holding mount points gets their entries behind the kernel's.
pub(super) fn triage(k: &Kernel, tid: Pid, call: &Syscall) -> Triage {
    let fd = call.args[0] as i32;
    let at_start = super::read::fd_pos(tid, fd) == Some(0);
    let names = match super::resolve::fd_target(tid, fd) {
        Some(dir) if at_start => k.vfs().mount_names_under(&dir),
        _ => Vec::new(),
    };
    if names.is_empty() {
        return Triage::Done(Decision::Continue);
    }
    Triage::Done(Decision::RewriteThen {
        args: Vec::new(),
        after: AfterExit::Append {
            buf: call.args[1],
            room: call.args[2],
            data: dirents(&names),
        },
    })
}

/// At the exit of a `getdents64` that listed `ret` bytes into `buf` (of `room` bytes):
/// `data` after them, if it fits.
pub(super) fn append(tid: Pid, buf: u64, room: u64, data: &[u8]) -> nix::Result<()> {
    let ret = ptrace::return_value(tid)?;
    let Ok(used) = u64::try_from(ret) else {
        return Ok(());
    };
    if used + data.len() as u64 > room {
        tracing::debug!(%tid, "no room for roam's mount points in a listing");
        return Ok(());
    }
    memory::write(tid, buf + used, data)?;
    ptrace::set_return(tid, ret + data.len() as i64)
}

/// `struct linux_dirent64` records of directories: inode, name.
fn dirents(names: &[(String, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, ino) in names {
        // d_ino, d_off, d_reclen, d_type, then the name and its NUL, padded to 8 bytes.
        let len = (8 + 8 + 2 + 1 + name.len() + 1).next_multiple_of(8);
        out.extend_from_slice(&ino.to_ne_bytes());
        // The offset after it: the end of the listing, as a seekdir there would be.
        out.extend_from_slice(&i64::MAX.to_ne_bytes());
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.push(libc::DT_DIR);
        out.extend_from_slice(name.as_bytes());
        out.resize(out.len() + len - (19 + name.len()), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirents_are_aligned_records() {
        let d = dirents(&[("http".into(), 7), ("s3".into(), 9)]);
        // 19 + 5 → 24; 19 + 3 → 24.
        assert_eq!(d.len(), 48);
        assert_eq!(u64::from_ne_bytes(d[0..8].try_into().unwrap()), 7);
        assert_eq!(u16::from_ne_bytes(d[16..18].try_into().unwrap()), 24);
        assert_eq!((d[18], &d[19..24]), (libc::DT_DIR, &b"http\0"[..]));
        assert_eq!(&d[24 + 19..24 + 22], b"s3\0");
    }
}
