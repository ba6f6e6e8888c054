//! Reads of a large remote file that arrives in ranges. Its copy is opened at a watched fd
//! number (≥ `WATCHED_FD_BASE`), so the seccomp filter stops only reads on such fds. A read
//! whose bytes are already in the copy runs natively; otherwise a worker waits for them
//! (fetching a chunk, or letting the stream catch up), then the read runs natively.
//! Duplicating a watched fd (`dup*`, `fcntl(F_DUPFD)`, e.g. a shell's `< file`) may give an
//! unwatched number, so it waits for the whole file first.

use nix::unistd::Pid;

use super::table::Spec;
use super::{copy_behind, later_on, single_node, Decision, Job, Kernel, Served, Triage};
use crate::platform::{memory, ptrace::Syscall};

/// Bytes a read of unknown extent is assumed to want (readv/sendfile without counts).
const DEFAULT_SPAN: u64 = 1 << 20;

pub(super) fn triage(k: &Kernel, tid: Pid, spec: &'static Spec, call: Syscall) -> Triage {
    let fd = call.args[spec.aux] as i32;
    let Some(node) = copy_behind(k, tid, fd) else {
        return Triage::Done(Decision::Continue);
    };
    match wanted(tid, fd, &call) {
        Some((off, len)) if k.vfs().range_missing(node.virt(), off, len) => {
            later_on(tid, call, spec, node)
        }
        _ => Triage::Done(Decision::Continue),
    }
}

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    let Some((_, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    let fd = job.call.args[job.spec.aux] as i32;
    let Some((off, len)) = wanted(job.tid, fd, &job.call) else {
        return Ok(Decision::Continue);
    };
    k.vfs()
        .ensure_range(node.virt(), off, len)
        .map_err(|e| (node.clone(), e))?;
    Ok(Decision::Continue)
}

/// The byte range a read-family call is about to read: (offset, length).
fn wanted(tid: Pid, fd: i32, call: &Syscall) -> Option<(u64, u64)> {
    let a = &call.args;
    let pos = || fd_pos(tid, fd);
    let at = |ptr: u64| if ptr == 0 { pos() } else { read_u64(tid, ptr) };
    Some(match call.nr {
        libc::SYS_read => (pos()?, a[2]),
        libc::SYS_pread64 => (a[3], a[2]),
        libc::SYS_readv => (pos()?, DEFAULT_SPAN),
        libc::SYS_preadv => (a[3], DEFAULT_SPAN),
        libc::SYS_preadv2 if a[3] as i64 == -1 => (pos()?, DEFAULT_SPAN),
        libc::SYS_preadv2 => (a[3], DEFAULT_SPAN),
        // A mapping may be read anywhere, any time: it needs the whole file.
        libc::SYS_mmap => (0, u64::MAX),
        libc::SYS_sendfile => (at(a[2])?, a[3]),
        libc::SYS_copy_file_range | libc::SYS_splice => (at(a[1])?, a[4]),
        // The new fd would not be watched: it may only read a whole copy.
        libc::SYS_dup | libc::SYS_dup2 | libc::SYS_dup3 => (0, u64::MAX),
        libc::SYS_fcntl if matches!(a[1] as i32, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) => {
            (0, u64::MAX)
        }
        _ => return None,
    })
}

/// The file position of an fd (`pos:` in `/proc/TID/fdinfo/FD`).
pub(super) fn fd_pos(tid: Pid, fd: i32) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("pos:"))
        .and_then(|p| p.trim().parse().ok())
}

fn read_u64(tid: Pid, addr: u64) -> Option<u64> {
    let mut word = [0u8; 8];
    memory::read(tid, addr, &mut word).ok()?;
    Some(u64::from_ne_bytes(word))
}
