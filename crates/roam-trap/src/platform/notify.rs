//! Seccomp user notification: the calls roam sees (under `roam run` on Linux 6.6+, all of
//! them) reach roam through a listener instead of a ptrace stop. The thread waits in the kernel while a
//! roam thread reads the call and answers: "run it as it is" (`CONTINUE`: a local name, the
//! usual case), a result (an errno, or data written into the program's memory), or — for a
//! call that needs the tracer (a roam name whose path must be rewritten) — a restart: the
//! tracer interrupts the thread, then answers `-ERESTARTNOINTR`, so the thread stops on its
//! way back and the tracer catches the call made again at its syscall-entry stop (see the
//! tracer's takeover).
//!
//! Once roam has read a notification the thread waits for the answer as for a local disk:
//! only a fatal signal ends the wait (`SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`). Other
//! signals wait for the answer, so a call roam has begun (a remote `mkdir`) is never cut
//! off with `EINTR` after it took effect, nor made twice when a handler restarts it.
//!
//! A notification costs two context switches and no ptrace requests: with synchronous
//! wake-ups (below) a local `stat` costs 7.5 µs against 9.5 µs for a seccomp ptrace stop
//! pinned to one CPU, and 8 µs against 21 µs unpinned.
//!
//! An answer with data (a `struct stat`, a link's text) writes into the waiting thread's
//! memory first, which must never reach a thread that stopped waiting (a signal handler
//! may be running on that stack) or a process that is no longer the caller (another
//! thread's exec, a reused thread id): see [`Listener::answer_with_data`].

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, RwLock};

use nix::errno::Errno;
use nix::unistd::Pid;

use super::ptrace::Syscall;

/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS` (`SECCOMP_IOW(4, __u64)`) and its one flag,
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`; not in the libc crate.
const SECCOMP_IOCTL_NOTIF_SET_FLAGS: libc::Ioctl = 0x4008_2104u32 as libc::Ioctl;
const SYNC_WAKE_UP: u64 = 1;

/// The kernel's "make the call again" (never seen by programs: the restart happens on
/// the way back to user space, which a pending interrupt guarantees).
const ERESTARTNOINTR: i32 = 513;

/// One notified call.
#[derive(Clone)]
pub struct Notice {
    id: u64,
    pub tid: Pid,
    pub call: Syscall,
}

/// roam's end of the filter's notifications.
pub struct Listener {
    fd: OwnedFd,
    /// Notifications read and not yet answered, with the thread waiting on each.
    unanswered: Mutex<HashMap<u64, Pid>>,
    /// Held (shared) by each write into a waiting thread's memory, and taken whole by the
    /// tracer before it acts on a stop ([`Listener::settle`]).
    writes: RwLock<()>,
}

impl Listener {
    /// Takes `fd` as roam's end, asking the kernel for synchronous wake-ups (Linux 6.6+):
    /// a notifying thread then hands its CPU straight to the roam thread waiting in
    /// [`Listener::recv`], and the answer hands it back, as a pair of threads pinned to one
    /// CPU would. Without it every notification woke a sleeping vCPU: a local `stat`
    /// under the listener took 53–57 µs unpinned, 7.6–8.3 µs with it. Older kernels
    /// refuse the flag (EINVAL): the listener works as before.
    pub fn new(fd: OwnedFd) -> Listener {
        // SAFETY: SET_FLAGS takes its flags by value.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), SECCOMP_IOCTL_NOTIF_SET_FLAGS, SYNC_WAKE_UP) };
        if r != 0 {
            tracing::debug!("seccomp listener without sync wake-ups: {}", Errno::last());
        }
        Listener {
            fd,
            unanswered: Mutex::default(),
            writes: RwLock::new(()),
        }
    }

    /// Whether `tid` waits for the answer to a call roam has read: it runs no code of its
    /// own until it is answered.
    pub fn holds(&self, tid: Pid) -> bool {
        self.unanswered.lock().unwrap().values().any(|&t| t == tid)
    }

    /// Lets the thread of `n` go without making the call: it makes it again once back
    /// in user space. The thread must have a stop pending (`PTRACE_INTERRUPT`), which it
    /// takes before the call is made again.
    pub fn restart(&self, n: &Notice) {
        self.send(n.id, 0, -ERESTARTNOINTR, 0);
    }

    /// One of the listener's ioctls, whose argument is a struct it reads or fills.
    fn ioctl<T>(&self, request: libc::Ioctl, arg: &mut T) -> nix::Result<()> {
        // SAFETY: each caller passes the struct its request reads or writes.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request, arg as *mut T) };
        Errno::result(r).map(drop)
    }

    /// The notified calls, one after another (skipping those that went away meanwhile),
    /// until the listener fails or, with `until_unused`, no process uses the filter any
    /// more (see [`Listener::wait`]). `who` names the listener in the log.
    pub fn notices<'a>(
        &'a self,
        who: &'a str,
        until_unused: bool,
    ) -> impl Iterator<Item = Notice> + 'a {
        std::iter::from_fn(move || loop {
            if until_unused && !self.wait() {
                return None;
            }
            match self.recv() {
                Ok(Some(n)) => return Some(n),
                Ok(None) => continue,
                Err(e) => {
                    tracing::debug!("{who}: {e}");
                    return None;
                }
            }
        })
    }

    /// Waits for the next notified call. `Ok(None)`: one that went away meanwhile.
    ///
    /// It sleeps in the kernel rather than polling as the tracer does: a polling listener
    /// took a CPU from the program's own threads (`make -j2` on two CPUs ran 10% slower).
    fn recv(&self) -> nix::Result<Option<Notice>> {
        // SAFETY: an all-zero seccomp_notif is what RECV expects to fill.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        match self.ioctl(libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) {
            Ok(_) => {}
            // The caller was interrupted (or died) before roam read the notification.
            Err(Errno::ENOENT) | Err(Errno::EINTR) => return Ok(None),
            Err(e) => return Err(e),
        }
        self.unanswered
            .lock()
            .unwrap()
            .insert(n.id, Pid::from_raw(n.pid as i32));
        Ok(Some(Notice {
            id: n.id,
            tid: Pid::from_raw(n.pid as i32),
            call: Syscall {
                arch: n.data.arch,
                nr: n.data.nr as i64,
                args: n.data.args,
                // Not told; only the tracer writes on a thread's stack.
                sp: 0,
            },
        }))
    }

    /// Lets the call run as the program made it. Always true (for chaining with senders
    /// that can fail).
    pub fn run_as_is(&self, n: &Notice) -> bool {
        self.send(n.id, 0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32);
        true
    }

    /// Makes the call return `ret` (a value, or `-errno`) without running. Always true.
    pub fn answer(&self, n: &Notice, ret: i64) -> bool {
        let (val, error) = if ret < 0 { (0, ret as i32) } else { (ret, 0) };
        self.send(n.id, val, error, 0);
        true
    }

    /// Makes the call return a new fd: a copy of roam's `fd` installed in the thread's
    /// process (at number `at`, replacing what is there, if given). Always true.
    pub fn answer_with_fd(&self, n: &Notice, fd: &OwnedFd, cloexec: bool, at: Option<i32>) -> bool {
        let mut flags = libc::SECCOMP_ADDFD_FLAG_SEND as u32;
        if at.is_some() {
            flags |= libc::SECCOMP_ADDFD_FLAG_SETFD as u32;
        }
        let mut add = libc::seccomp_notif_addfd {
            id: n.id,
            flags,
            srcfd: fd.as_raw_fd() as u32,
            newfd: at.unwrap_or(0) as u32,
            newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
        };
        // With SEND, ADDFD also answers the call.
        self.unanswered.lock().unwrap().remove(&n.id);
        if let Err(e) = self.ioctl(libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut add) {
            tracing::debug!("seccomp notification fd answer: {e}");
            if e != Errno::ENOENT {
                return self.answer(n, -(e as i64));
            }
        }
        true
    }

    /// Writes `data` at `addr` in the notifying thread's memory, then makes the call return
    /// `ret` (`-errno` if the write failed). Always true.
    ///
    /// The write goes through `/proc/TID/mem` opened *before* the kernel confirms that the
    /// call still waits (`SECCOMP_IOCTL_NOTIF_ID_VALID`): the file stays bound to the
    /// memory the thread had then, even if another thread's exec or a reused id gives the
    /// number to a new program (the check seccomp_unotify(2) prescribes). A thread that
    /// stops waiting after the check (a signal) reaches a ptrace stop before it runs a line
    /// of its own, and the tracer does not act on a stop while a write is under way
    /// ([`Listener::settle`]): the bytes land while the call is still the program's. A
    /// thread roam does not trace (handed over to a debugger) has no such stop to wait at.
    /// Unlike the kernel, the file writes into a read-only buffer too (`FOLL_FORCE`): only a
    /// program that hands a stat a read-only buffer sees the difference (no EFAULT).
    pub fn answer_with_data(&self, n: &Notice, addr: u64, data: &[u8], ret: i64) -> bool {
        let written = {
            let _writing = self.writes.read().unwrap_or_else(|e| e.into_inner());
            let mem = std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/{}/mem", n.tid));
            if !self.id_valid(n) {
                // Gone (killed): nothing to answer.
                self.unanswered.lock().unwrap().remove(&n.id);
                return true;
            }
            mem.and_then(|m| m.write_all_at(data, addr))
        };
        // A buffer that is not there is the kernel's EFAULT (the file says EIO).
        self.answer(
            n,
            if written.is_ok() {
                ret
            } else {
                -i64::from(libc::EFAULT)
            },
        )
    }

    /// Returns once no write into a waiting thread's memory is under way; those that start
    /// later find the calls of threads already stopped no longer valid. The tracer calls
    /// it before acting on each stop.
    pub fn settle(&self) {
        drop(self.writes.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// Whether the notified call still waits for its answer.
    fn id_valid(&self, n: &Notice) -> bool {
        let mut id = n.id;
        self.ioctl(libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id)
            .is_ok()
    }

    /// Waits until a notification is there; false once no process uses the filter any
    /// more (a handed-over process tree that ended), when `recv` would wait for ever.
    pub fn wait(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, -1) };
            if r > 0 {
                return p.revents & libc::POLLIN != 0;
            }
            if r < 0 && Errno::last() != Errno::EINTR {
                return false;
            }
        }
    }

    fn send(&self, id: u64, val: i64, error: i32, flags: u32) {
        self.unanswered.lock().unwrap().remove(&id);
        let mut resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags,
        };
        if let Err(e) = self.ioctl(libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) {
            // ENOENT: the thread was interrupted or died meanwhile; nothing to answer.
            if e != Errno::ENOENT {
                tracing::debug!("seccomp notification answer: {e}");
            }
        }
    }
}
