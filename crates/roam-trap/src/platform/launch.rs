//! Starting the first tracee: fork, let the tracer seize the child *before* it runs any of
//! the program, install the seccomp filter, exec. Children of the tracee are attached by
//! the kernel (fork/clone events), and inherit the filter.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::ptrace;
use nix::unistd::{fork, pipe, ForkResult, Pid};

use super::seccomp::{self, Insn};

/// Forks and execs `program` (a path) with `argv` and `envp` under the tracer, with `filter`.
/// Returns the child's pid, already seized and running towards its `execve`.
pub fn spawn(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    filter: &[Insn],
) -> nix::Result<Pid> {
    let argv_ptrs = null_terminated(argv);
    let envp_ptrs = null_terminated(envp);
    // Without CAP_SYS_ADMIN a filter needs no_new_privs (setuid bits are then ignored).
    let no_new_privs = !nix::unistd::geteuid().is_root();
    let (go_r, go_w) = pipe()?;
    // SAFETY: the child only makes async-signal-safe calls on memory prepared above.
    match unsafe { fork()? } {
        ForkResult::Child => unsafe {
            child(
                go_r,
                go_w,
                program,
                &argv_ptrs,
                &envp_ptrs,
                filter,
                no_new_privs,
            )
        },
        ForkResult::Parent { child } => {
            drop(go_r);
            let seized = ptrace::seize(child, super::ptrace::options());
            // Either way, let the child go on: it execs (traced) or fails loudly.
            let _ = nix::unistd::write(&go_w, &[u8::from(seized.is_ok())]);
            seized.map(|_| child)
        }
    }
}

fn null_terminated(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

unsafe fn child(
    go_r: OwnedFd,
    go_w: OwnedFd,
    program: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    filter: &[Insn],
    no_new_privs: bool,
) -> ! {
    drop(go_w);
    let mut ok = [0u8; 1];
    if libc::read(go_r.as_raw_fd(), ok.as_mut_ptr().cast(), 1) != 1 || ok[0] != 1 {
        die(b"roam: could not attach to the new process\n");
    }
    drop(go_r);
    // The tracer blocks signals it reads from a signalfd; the program must not inherit that.
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut all);
    libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    // Rust's runtime ignores SIGPIPE in roam; programs must start with the default
    // (`yes | head` ends by SIGPIPE, not by a write error).
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    if seccomp::install(filter, no_new_privs) != 0 {
        die(b"roam: could not install the seccomp filter\n");
    }
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
