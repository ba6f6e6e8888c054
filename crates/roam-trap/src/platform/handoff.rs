//! Handing a traced process over to another tracer (Parrot §2: debuggers inside the
//! agent). A thread has one tracer, and roam is every tracee's, so a debugger's
//! `PTRACE_TRACEME`/`ATTACH`/`SEIZE` would fail. Instead roam lets go of the debugger's
//! target and keeps serving its names without ptrace: the target installs a second
//! filter ([`seccomp::notify_only`]) whose calls go to a listener of roam's (answered
//! from afar, see `kernel::afar`), roam takes a copy of the listener, and detaches. The
//! debugger's request then finds an untraced process, and the debugger gets every ptrace
//! feature the kernel has (breakpoints, single steps, its own seccomp filters).
//!
//! The filter is installed once per process, for all its threads at once
//! (`SECCOMP_FILTER_FLAG_TSYNC`): from then on every thread's calls reach the listener
//! (the notification outranks roam's stops), and each thread is let go when a debugger
//! asks for it (gdb attaches the threads of a process one by one).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::unistd::Pid;

use super::attach::{as_the_kernel_would_resume, filter_on_stack};
use super::remote_call::{run_syscall, sys, syscall_insn, wait_for, CallError, Seen, Want};
use super::seccomp::Insn;

/// The stop the target is in when roam hands it over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A seccomp stop of the target's own call, which it makes again once handed over
    /// (the debuggee's `PTRACE_TRACEME`).
    Seccomp,
    /// An interrupt or group-stop (`PTRACE_EVENT_STOP`): a process a debugger attaches to.
    Event,
    /// The syscall-entry stop of the target's own call, taken over from roam's listener:
    /// the call goes on into the kernel once the thread is handed over (it needs no filter
    /// then: its calls reach roam's listener already).
    Entry,
}

/// Installs `filter` (if given: the first thread of its process roam lets go) with a
/// listener for every thread of `tid`'s process, takes roam's copy of the listener, and
/// detaches from `tid`, which resumes where it was. Returns the listener. On failure the
/// thread stays roam's, ready to be resumed: an interrupted one where it was, one stopped
/// at its own call with that call failing with EPERM.
pub fn hand_over(
    tid: Pid,
    stop: Stop,
    filter: Option<&[Insn]>,
) -> Result<Option<OwnedFd>, CallError> {
    let saved = ptrace::getregs(tid).map_err(sys(tid, "PTRACE_GETREGS"))?;
    let (resume_at, if_failed) = match stop {
        Stop::Seccomp => {
            let mut again = saved;
            (again.rip, again.rax, again.orig_rax) = (saved.rip - 2, saved.orig_rax, u64::MAX);
            let mut failed = saved;
            (failed.rax, failed.orig_rax) = (-(libc::EPERM as i64) as u64, u64::MAX);
            (again, failed)
        }
        Stop::Event => {
            let again = as_the_kernel_would_resume(saved);
            (again, again)
        }
        Stop::Entry => (saved, saved),
    };
    let installed = match filter {
        Some(filter) => install(tid, stop, saved, filter).map(|(l, held)| (Some(l), held)),
        None => Ok((None, 0)),
    };
    let back = if installed.is_ok() {
        resume_at
    } else {
        if_failed
    };
    ptrace::setregs(tid, back).map_err(sys(tid, "PTRACE_SETREGS"))?;
    let (listener, held) = installed?;
    let held = nix::sys::signal::Signal::try_from(held).ok();
    ptrace::detach(tid, held).map_err(sys(tid, "PTRACE_DETACH"))?;
    Ok(listener)
}

/// Makes stopped thread `tid` (registers `saved`) install `filter` with a new listener;
/// returns roam's copy of it and a signal that arrived meanwhile.
fn install(
    tid: Pid,
    stop: Stop,
    saved: libc::user_regs_struct,
    filter: &[Insn],
) -> Result<(OwnedFd, i32), CallError> {
    let mut seen = Seen::default();
    if stop == Stop::Seccomp {
        // Skip the call for now (to its exit stop): it is made again after the detach.
        let mut skip = saved;
        skip.orig_rax = u64::MAX;
        ptrace::setregs(tid, skip).map_err(sys(tid, "PTRACE_SETREGS"))?;
        ptrace::syscall(tid, None).map_err(sys(tid, "PTRACE_SYSCALL"))?;
        wait_for(tid, &mut seen, Want::SyscallStop)?;
    }
    let mut base = saved;
    base.rip = syscall_insn(tid, &saved)?;
    let fprog = filter_on_stack(tid, &mut base, filter)?;
    let mut call = |nr: i64, args: [u64; 3], what: &'static str| {
        let r = run_syscall(
            tid,
            &base,
            nr,
            [args[0], args[1], args[2], 0, 0, 0],
            &mut seen,
        )?;
        // A raw call's failure is `-errno` in its result register.
        if (-4095..0).contains(&r) {
            return Err(sys(tid, what)(Errno::from_raw(-r as i32)));
        }
        Ok(r)
    };
    // For every thread (TSYNC; with a listener, a failure must be ESRCH, not a thread id).
    let flags = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
        | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
        | libc::SECCOMP_FILTER_FLAG_TSYNC
        | libc::SECCOMP_FILTER_FLAG_TSYNC_ESRCH
        | super::seccomp::SPEC_ALLOW;
    let set = libc::SECCOMP_SET_MODE_FILTER as u64;
    // EBUSY: the process has a listener already (ROAM_NOTIFY=1), and may have only one.
    let fd = call(
        libc::SYS_seccomp,
        [set, flags, fprog],
        "seccomp(NEW_LISTENER)",
    )? as i32;
    let copy = copy_fd(process_of(tid), fd);
    // The target's own copy would keep the listener alive after roam's is gone.
    call(libc::SYS_close, [fd as u64, 0, 0], "close")?;
    Ok((copy.map_err(sys(tid, "pidfd_getfd"))?, seen.held))
}

/// roam's copy of fd `fd` of process `pid` (`pidfd_getfd`).
pub fn copy_fd(pid: Pid, fd: i32) -> nix::Result<OwnedFd> {
    // SAFETY: pidfd_open and pidfd_getfd return new fds, owned here.
    unsafe {
        let pidfd = Errno::result(libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0))?;
        let pidfd = OwnedFd::from_raw_fd(pidfd as i32);
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        Ok(OwnedFd::from_raw_fd(Errno::result(copy)? as i32))
    }
}

/// The process (thread group) of thread `tid`.
pub fn process_of(tid: Pid) -> Pid {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|t| t.trim().parse().ok())
        .map_or(tid, Pid::from_raw)
}

/// Names one process for its whole life (a pid is reused; a pid and its start time are
/// not): its thread-group id and start time (`/proc/PID/stat`, field 22).
pub fn process_key(tid: Pid) -> Option<(Pid, u64)> {
    let pid = process_of(tid);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may itself hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let start = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((pid, start))
}
