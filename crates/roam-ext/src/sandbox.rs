//! The confinement of extension child processes (fork and worker technologies), after
//! Sprockets §3.3: an address-space limit and a seccomp whitelist of system calls.
//!
//! The whitelist lets the child manage memory and exit, and (worker) read its request pipe,
//! write its reply pipe and fork the child of each call (which narrows it to writing the
//! reply before the extension runs); every other call fails with EPERM, so an extension that tries to open,
//! exec or close something gets an error and its host data is out of reach. Everything here
//! that runs in the child allocates nothing (the filter is built in the parent).

use crate::Fault;
use std::time::{Duration, Instant};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

const ALWAYS: &[libc::c_long] = &[
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_mprotect,
    libc::SYS_futex,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_sched_yield,
    libc::SYS_getrandom,
    libc::SYS_clock_gettime,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL: u32 = 0x8000_0000;
// Offsets in struct seccomp_data: nr, arch, args[0] (low half, little endian).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0: u32 = 16;

/// A seccomp program: the whitelist plus `io`, (system call, descriptor) pairs allowed only on
/// that descriptor.
pub(crate) struct Filter(Vec<libc::sock_filter>);

impl Filter {
    pub(crate) fn new(io: &[(libc::c_long, i32)]) -> Filter {
        Filter::with(&[], io)
    }

    /// [`Filter::new`], also allowing the calls `extra` whatever their arguments.
    pub(crate) fn with(extra: &[libc::c_long], io: &[(libc::c_long, i32)]) -> Filter {
        let op = |code, k, jt, jf| libc::sock_filter { code, jt, jf, k };
        // A foreign architecture's calls have other numbers: kill rather than misjudge.
        let mut p = vec![
            op(LD_W_ABS, ARCH, 0, 0),
            op(JEQ_K, AUDIT_ARCH, 1, 0),
            op(RET_K, RET_KILL, 0, 0),
        ];
        p.push(op(LD_W_ABS, NR, 0, 0));
        for nr in ALWAYS.iter().chain(extra) {
            p.extend([op(JEQ_K, *nr as u32, 0, 1), op(RET_K, RET_ALLOW, 0, 0)]);
        }
        for (nr, fd) in io {
            // nr? then load arg0, compare with fd: allow, else reload nr and go on.
            p.extend([
                op(JEQ_K, *nr as u32, 0, 4),
                op(LD_W_ABS, ARG0, 0, 0),
                op(JEQ_K, *fd as u32, 0, 1),
                op(RET_K, RET_ALLOW, 0, 0),
                op(LD_W_ABS, NR, 0, 0),
            ]);
        }
        p.push(op(RET_K, RET_ERRNO | libc::EPERM as u32, 0, 0));
        Filter(p)
    }

    /// Adds `filter` on top of the ones this process has (seccomp filters stack: a call
    /// must pass all of them). Allocates nothing.
    pub(crate) fn install(&self) -> bool {
        let prog = libc::sock_fprog {
            len: self.0.len() as u16,
            filter: self.0.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` outlives the call, and the kernel copies the filter.
        unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) == 0 }
    }

    /// Restores default crash signals, limits the address space to its current size plus
    /// `memory`, disables core dumps and installs the filter.
    /// Runs in the child; on failure the child must not run the extension.
    pub(crate) fn confine(&self, memory: usize) -> Result<(), ()> {
        let limit = vm_size().ok_or(())? + memory as u64;
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // A crashing extension must not cost a core dump.
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain system calls on valid arguments.
        let ok = unsafe {
            // roam's (and wasmtime's) fault handlers would need system calls the filter refuses:
            // a crash must simply kill the child.
            [
                libc::SIGSEGV,
                libc::SIGBUS,
                libc::SIGILL,
                libc::SIGFPE,
                libc::SIGABRT,
            ]
            .iter()
            .all(|sig| libc::signal(*sig, libc::SIG_DFL) != libc::SIG_ERR)
                && libc::setrlimit(libc::RLIMIT_AS, &rl) == 0
                && libc::setrlimit(libc::RLIMIT_CORE, &no_core) == 0
                && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
        } && self.install();
        ok.then_some(()).ok_or(())
    }
}

/// This process's virtual size in bytes, read from /proc/self/statm without allocating.
fn vm_size() -> Option<u64> {
    let mut buf = [0u8; 64];
    // SAFETY: the path is NUL-terminated; `buf` is writable for its length; fd is closed.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/self/statm".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    let pages = text
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0u64, |a, b| a * 10 + u64::from(b - b'0'));
    // SAFETY: sysconf has no preconditions.
    Some(pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64)
}

/// Waits for child `pid` until `deadline`; on timeout kills and reaps it. Returns the wait status.
pub(crate) fn wait(pid: libc::pid_t, timeout: Duration) -> Result<i32, Fault> {
    let deadline = Instant::now() + timeout;
    // SAFETY: pidfd_open on our own child; the descriptor is closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if pidfd < 0 {
        kill(pid);
        return Err(Fault::host(std::io::Error::last_os_error()));
    }
    let exited = poll_readable(pidfd, deadline);
    // SAFETY: pidfd is ours and open.
    unsafe { libc::close(pidfd) };
    if !exited {
        kill(pid);
        return Err(Fault::Timeout(timeout));
    }
    reap(pid)
}

/// Polls `fd` for input until `deadline`; false on timeout.
pub(crate) fn poll_readable(fd: i32, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut pfd, 1, ms) } {
            1.. => return true,
            0 => return false,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
                continue
            }
            _ => return false,
        }
    }
}

/// Kills and reaps child `pid`.
pub(crate) fn kill(pid: libc::pid_t) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = reap(pid);
}

fn reap(pid: libc::pid_t) -> Result<i32, Fault> {
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child into a valid int.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Fault::host(err));
        }
    }
}
