//! Starting the first tracee: fork, let the tracer seize the child *before* it runs any of
//! the program, install the seccomp filter, exec. Children of the tracee are attached by
//! the kernel (fork/clone events), and inherit the filter. With a listener, the child tells
//! roam the number of its listener fd and waits until roam has taken a copy
//! (`pidfd_getfd`): the child's own closes at exec.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::sys::ptrace;
use nix::unistd::{fork, pipe, ForkResult, Pid};

use super::seccomp::{self, Insn};

/// Forks and execs `program` (a path) with `argv` and `envp` under the tracer, with `filter`
/// (and a listener for its notifications if `listener`). Returns the child's pid, already
/// seized and running towards its `execve`, and roam's copy of the listener.
pub fn spawn(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    filter: &[Insn],
    listener: bool,
) -> nix::Result<(Pid, Option<OwnedFd>)> {
    let argv_ptrs = null_terminated(argv);
    let envp_ptrs = null_terminated(envp);
    // Without CAP_SYS_ADMIN a filter needs no_new_privs (setuid bits are then ignored).
    let no_new_privs = !nix::unistd::geteuid().is_root();
    let (go_r, go_w) = pipe()?;
    let (told_r, told_w) = pipe()?;
    // SAFETY: the child only makes async-signal-safe calls on memory prepared above.
    match unsafe { fork()? } {
        ForkResult::Child => unsafe {
            drop(told_r);
            child(
                (go_r, go_w, told_w),
                program,
                &argv_ptrs,
                &envp_ptrs,
                filter,
                (no_new_privs, listener),
            )
        },
        ForkResult::Parent { child } => {
            drop((go_r, told_w));
            let seized = ptrace::seize(child, super::ptrace::options());
            // Either way, let the child go on: it execs (traced) or fails loudly.
            let _ = nix::unistd::write(&go_w, &[u8::from(seized.is_ok())]);
            seized?;
            if !listener {
                return Ok((child, None));
            }
            // Without roam's copy, the notified calls would fail: the child must not run.
            let copy = take_listener(child, &told_r).ok_or(nix::errno::Errno::EBADF)?;
            let _ = nix::unistd::write(&go_w, &[1]);
            Ok((child, Some(copy)))
        }
    }
}

/// roam's copy of the child's listener, whose number the child writes on `told`.
fn take_listener(child: Pid, told: &OwnedFd) -> Option<OwnedFd> {
    let mut n = [0u8; 4];
    if nix::unistd::read(told, &mut n).ok()? != 4 {
        return None;
    }
    let fd = i32::from_ne_bytes(n);
    // SAFETY: pidfd_open and pidfd_getfd return new fds, owned here.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, child.as_raw(), 0);
        if pidfd < 0 {
            return None;
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as i32);
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        (copy >= 0).then(|| OwnedFd::from_raw_fd(copy as i32))
    }
}

fn null_terminated(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

unsafe fn child(
    (go_r, go_w, told_w): (OwnedFd, OwnedFd, OwnedFd),
    program: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    filter: &[Insn],
    (no_new_privs, listener): (bool, bool),
) -> ! {
    drop(go_w);
    let mut ok = [0u8; 1];
    if libc::read(go_r.as_raw_fd(), ok.as_mut_ptr().cast(), 1) != 1 || ok[0] != 1 {
        die(b"roam: could not attach to the new process\n");
    }
    // The tracer blocks signals it reads from a signalfd; the program must not inherit that.
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut all);
    libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    // Rust's runtime ignores SIGPIPE in roam; programs must start with the default
    // (`yes | head` ends by SIGPIPE, not by a write error).
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    let installed = seccomp::install(filter, no_new_privs, listener);
    if installed < 0 {
        die(b"roam: could not install the seccomp filter\n");
    }
    if listener {
        // Tell roam the listener's number; wait until it has its copy.
        let n = (installed as i32).to_ne_bytes();
        libc::write(told_w.as_raw_fd(), n.as_ptr().cast(), 4);
        if libc::read(go_r.as_raw_fd(), ok.as_mut_ptr().cast(), 1) != 1 {
            die(b"roam: the tracer went away\n");
        }
        libc::close(installed as i32);
    }
    drop((told_w, go_r));
    libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
    let err = *libc::__errno_location();
    let _ = libc::write(2, b"roam: exec failed: ".as_ptr().cast(), 19);
    let msg = libc::strerror(err);
    libc::write(2, msg.cast(), libc::strlen(msg));
    libc::write(2, b"\n".as_ptr().cast(), 1);
    libc::_exit(if err == libc::ENOENT { 127 } else { 126 });
}

unsafe fn die(msg: &[u8]) -> ! {
    libc::write(2, msg.as_ptr().cast(), msg.len());
    libc::_exit(126)
}
