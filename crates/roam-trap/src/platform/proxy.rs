//! Running a privileged program (setuid, setgid, file capabilities) untraced, in place of
//! the tracee that asked to exec it: a traced process can never gain privileges, and roam
//! must never trace one that has them. roam starts the program itself, as a child of its
//! own (unfiltered) process, with the tracee's arguments, environment, open fds (copied
//! with `pidfd_getfd`), cwd, umask, signal mask, ignored signals, limits and process group;
//! the tracee waits, stopped at its `execve`, and exits with the program's status.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

/// Everything the privileged program inherits from the tracee, gathered before the fork.
struct Inherited {
    /// (fd in roam, number in the tracee), for the tracee's fds not marked close-on-exec.
    fds: Vec<(OwnedFd, RawFd)>,
    cwd: OwnedFd,
    umask: libc::mode_t,
    blocked: libc::sigset_t,
    ignored: Vec<i32>,
    limits: Vec<(Resource, libc::rlimit)>,
    pgid: libc::pid_t,
}

/// Starts `path` with `argv` and `envp` as the tracee `tid` would have, untraced; returns
/// the new process.
pub fn spawn_untraced(
    tid: Pid,
    path: &[u8],
    argv: &[Vec<u8>],
    envp: &[Vec<u8>],
) -> Result<Pid, Errno> {
    let cstrs = |v: &[Vec<u8>]| -> Result<Vec<CString>, Errno> {
        v.iter()
            .map(|s| CString::new(s.clone()).map_err(|_| Errno::EINVAL))
            .collect()
    };
    let path = CString::new(path.to_vec()).map_err(|_| Errno::EINVAL)?;
    let (argv, envp) = (cstrs(argv)?, cstrs(envp)?);
    let argv_p = null_terminated(&argv);
    let envp_p = null_terminated(&envp);
    let inh = inherit(tid)?;
    // SAFETY: the child makes only async-signal-safe system calls on memory prepared above,
    // then execs or exits.
    match unsafe { nix::unistd::fork()? } {
        nix::unistd::ForkResult::Child => unsafe { child(&inh, &path, &argv_p, &envp_p) },
        nix::unistd::ForkResult::Parent { child } => Ok(child),
    }
}

fn null_terminated(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

fn inherit(tid: Pid) -> Result<Inherited, Errno> {
    let status =
        std::fs::read_to_string(format!("/proc/{tid}/status")).map_err(|_| Errno::ESRCH)?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("0")
            .to_owned()
    };
    let mask = |name: &str| u64::from_str_radix(&field(name), 16).unwrap_or(0);
    // SAFETY: an all-zero sigset is valid; sigaddset fills it.
    let mut blocked: libc::sigset_t = unsafe { std::mem::zeroed() };
    let (blk, ign) = (mask("SigBlk:"), mask("SigIgn:"));
    let mut ignored = Vec::new();
    for sig in 1..=64 {
        if blk & (1 << (sig - 1)) != 0 {
            // SAFETY: a valid sigset and signal number.
            unsafe { libc::sigaddset(&mut blocked, sig) };
        }
        if ign & (1 << (sig - 1)) != 0 {
            ignored.push(sig);
        }
    }
    let cwd = open_path(&format!("/proc/{tid}/cwd"))?;
    Ok(Inherited {
        fds: tracee_fds(tid)?,
        cwd,
        umask: libc::mode_t::from_str_radix(&field("Umask:"), 8).unwrap_or(0o022),
        blocked,
        ignored,
        limits: limits(tid),
        // SAFETY: getpgid has no memory effects.
        pgid: unsafe { libc::getpgid(tid.as_raw()) },
    })
}

fn open_path(p: &str) -> Result<OwnedFd, Errno> {
    let c = CString::new(p).map_err(|_| Errno::EINVAL)?;
    // SAFETY: a valid C string; the fd returned is owned here.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    Errno::result(fd).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Copies of the tracee's fds that survive an exec (no `FD_CLOEXEC`).
fn tracee_fds(tid: Pid) -> Result<Vec<(OwnedFd, RawFd)>, Errno> {
    // SAFETY: pidfd_open/pidfd_getfd return new fds owned here.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid.as_raw(), 0) };
    let pidfd = unsafe { OwnedFd::from_raw_fd(Errno::result(pidfd)? as RawFd) };
    let mut out = Vec::new();
    let dir = std::fs::read_dir(format!("/proc/{tid}/fd")).map_err(|_| Errno::ESRCH)?;
    for entry in dir.flatten() {
        let Some(n) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<RawFd>().ok())
        else {
            continue;
        };
        if closes_on_exec(tid, n) {
            continue;
        }
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), n, 0) };
        if let Ok(fd) = Errno::result(fd) {
            out.push((unsafe { OwnedFd::from_raw_fd(fd as RawFd) }, n));
        }
    }
    Ok(out)
}

/// `O_CLOEXEC` (octal 02000000) in the `flags:` line of `/proc/TID/fdinfo/FD`.
fn closes_on_exec(tid: Pid, fd: RawFd) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
        })
        .is_some_and(|flags| flags & libc::O_CLOEXEC != 0)
}

/// A resource number as `prlimit`/`setrlimit` take it: glibc has a type of its own.
#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

fn limits(tid: Pid) -> Vec<(Resource, libc::rlimit)> {
    // Linux's 16 resources, RLIMIT_CPU (0) to RLIMIT_RTTIME (15).
    (0..16)
        .filter_map(|r| {
            let mut old = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: reading another process's limit into a local struct.
            let rc = unsafe { libc::prlimit(tid.as_raw(), r, std::ptr::null(), &mut old) };
            (rc == 0).then_some((r, old))
        })
        .collect()
}

unsafe fn child(
    inh: &Inherited,
    path: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> ! {
    // The tracee's process group, so job control and the terminal treat it as the tracee.
    libc::setpgid(0, inh.pgid);
    libc::umask(inh.umask);
    if libc::fchdir(inh.cwd.as_raw_fd()) != 0 {
        libc::_exit(126);
    }
    // Move every copy above both its own number and every target first, so no target is
    // overwritten early; then close everything of roam's below, and put the copies in place.
    let base = inh
        .fds
        .iter()
        .map(|(fd, t)| fd.as_raw_fd().max(*t))
        .max()
        .unwrap_or(0)
        + 1;
    let mut moved = Vec::with_capacity(inh.fds.len());
    for (fd, target) in &inh.fds {
        moved.push((libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, base), *target));
    }
    libc::syscall(libc::SYS_close_range, 0, (base - 1) as u32, 0);
    for (from, to) in &moved {
        libc::dup2(*from, *to);
    }
    libc::syscall(libc::SYS_close_range, base as u32, u32::MAX, 0);
    // Limits last: a lower RLIMIT_NOFILE must not stop the shuffle above.
    for (r, lim) in &inh.limits {
        libc::setrlimit(*r, lim);
    }
    for sig in 1..=64 {
        let disp = if inh.ignored.contains(&sig) {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        libc::signal(sig, disp);
    }
    libc::sigprocmask(libc::SIG_SETMASK, &inh.blocked, std::ptr::null_mut());
    libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
    libc::_exit(if *libc::__errno_location() == libc::ENOENT {
        127
    } else {
        126
    })
}
