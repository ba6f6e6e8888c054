//! close: when the last writer of a changed remote file closes it, the change is uploaded
//! before `close` returns, and an upload failure is `close`'s error (Ufo's T_write = 0). The
//! fd is closed either way, as POSIX requires. Closes of every other fd cost one `readlink`.
//! fsync/fdatasync on a changed remote file are durability points: they upload first, and
//! fail with the upload's error. A `dup2`/`dup3` over an fd that holds a changed copy
//! closes that fd: for its last writer, the change is uploaded first, as at `close` (a
//! shell's `echo x > f` points stdout at the file, then puts it back with `dup2`); the
//! `dup2` itself succeeds, an upload failure is told on stderr.

use nix::unistd::Pid;
use roam_vfs::Flushed;

use super::table::{Family, Spec};
use super::{copy_behind, later_on, single_node, Decision, Job, Kernel, Served, Triage};
use crate::platform::ptrace::Syscall;

pub(super) fn triage(k: &Kernel, tid: Pid, spec: &'static Spec, call: Syscall) -> Triage {
    let fd = call.args[0] as i32;
    match copy_behind(k, tid, fd) {
        // Not only dirty files: a writer may have joined a copy while it was being uploaded.
        Some(node) if fd_writable(tid, fd) => later_on(tid, call, spec, node),
        _ => Triage::Done(Decision::Continue),
    }
}

/// dup2/dup3: the fd it replaces (register 1) may be a changed copy's last writer.
pub(super) fn triage_dup(k: &Kernel, tid: Pid, spec: &'static Spec, call: Syscall) -> Triage {
    match replaced_copy(k, tid, &call) {
        Some(node) => later_on(tid, call, spec, node),
        None => super::read::triage(k, tid, spec, call),
    }
}

pub(super) fn serve_dup(k: &Kernel, job: &Job) -> Served {
    if replaced_copy(k, job.tid, &job.call).is_none() {
        return super::read::serve(k, job);
    }
    // Told already; a dup2 that ran cannot fail.
    match serve_closing(k, job, job.call.args[1] as i32)? {
        Decision::RunThenReturn(_) => Ok(Decision::Continue),
        d => Ok(d),
    }
}

/// The changed copy open for writing at the fd a `dup2(old, new)` replaces.
fn replaced_copy(k: &Kernel, tid: Pid, call: &Syscall) -> Option<roam_vfs::Node> {
    let (old, new) = (call.args[0] as i32, call.args[1] as i32);
    if old == new || !fd_writable(tid, new) {
        return None;
    }
    copy_behind(k, tid, new)
}

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    serve_closing(k, job, job.call.args[0] as i32)
}

/// A close (or fsync) of `fd`, one of the program's fds on a copy.
fn serve_closing(k: &Kernel, job: &Job, fd: i32) -> Served {
    let Some((_, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    let syncing = job.spec.family == Family::Sync;
    let closing = (job.tid, fd);
    if !syncing && !writers(k, node.virt(), Some(closing)).is_empty() {
        return Ok(Decision::Continue);
    }
    warn_if_cache_full(k);
    if !syncing {
        // The last writer closed it: a whole version, whenever it is uploaded.
        k.vfs()
            .seal(node.virt(), false)
            .map_err(|e| (node.clone(), e))?;
    }
    // An fsync'ing writer keeps its fd: the change stays journaled for its close.
    let still_written = || syncing || !writers(k, node.virt(), Some(closing)).is_empty();
    // A close leaves the upload for later under T_write > 0; an fsync is a durability point.
    let done = match syncing {
        true => k.vfs().deliver_now(node.virt(), &still_written),
        false => k.vfs().last_close(node.virt(), &still_written),
    };
    match done {
        Ok(flushed) => {
            tell_conflict(k, node.virt(), flushed);
            Ok(Decision::Continue)
        }
        Err(e) if e.is_kept() => {
            k.report.error(
                job.tid,
                job.spec.name,
                node.virt(),
                e.errno(),
                &e.to_string(),
            );
            Ok(Decision::RunThenReturn(-(e.errno() as i64)))
        }
        Err(e) => {
            // The program hears of it now; roam keeps trying in the background.
            let why = format!("{e}; roam keeps it journaled and tries again");
            k.report
                .error(job.tid, job.spec.name, node.virt(), e.errno(), &why);
            Ok(Decision::RunThenReturn(-(e.errno() as i64)))
        }
    }
}

/// A program's writes to its copy fail with ENOSPC (from the kernel, unseen by roam) when
/// the cache's disk is full: say so where the user looks, once.
fn warn_if_cache_full(k: &Kernel) {
    let root = k.vfs().cache_root();
    if nix::sys::statvfs::statvfs(root).is_ok_and(|s| s.blocks_available() == 0) {
        k.report.once(
            "cache full".into(),
            format!("the cache disk at {} is full: programs' writes there fail with ENOSPC (free space, or set [cache] dir in roam.toml)", root.display()),
        );
    }
}

/// Tells the user where a delivery that met a conflict put this version.
pub(super) fn tell_conflict(k: &Kernel, virt: &str, flushed: Flushed) {
    if let Flushed::Conflict(beside) = flushed {
        k.report.once(
            format!("conflict {virt}"),
            roam_vfs::conflict(virt, &beside),
        );
    }
}

/// The traced threads that hold `virt`'s copy open for writing (other than the fd being
/// closed, which every thread sharing the closer's fd table shows too).
pub(super) fn writers(k: &Kernel, virt: &str, except: Option<(Pid, i32)>) -> Vec<Pid> {
    let data = k.vfs().copy_path(virt);
    let tracees: Vec<Pid> = k.tracees.lock().unwrap().iter().copied().collect();
    tracees
        .into_iter()
        .filter(|&tid| {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{tid}/fd")) else {
                return false;
            };
            fds.flatten().any(|e| {
                let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    return false;
                };
                !except.is_some_and(|(t, f)| f == fd && same_fd_table(t, tid))
                    && std::fs::read_link(e.path()).is_ok_and(|t| t == data)
                    && fd_writable(tid, fd)
            })
        })
        .collect()
}

/// Whether threads `a` and `b` share one fd table (`kcmp(KCMP_FILES)`; a tracer may ask).
fn same_fd_table(a: Pid, b: Pid) -> bool {
    const KCMP_FILES: libc::c_long = 2;
    // SAFETY: kcmp only compares kernel objects of the two tasks.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a.as_raw(), b.as_raw(), KCMP_FILES, 0, 0) };
    a == b || r == 0
}

/// Whether `fd` was opened with write access (`flags:` in `/proc/TID/fdinfo/FD`, octal).
fn fd_writable(tid: Pid, fd: i32) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")) else {
        return false;
    };
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & libc::O_ACCMODE != libc::O_RDONLY)
}
