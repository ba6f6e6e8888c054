//! The worker technology (Small & Seltzer's user-level server): a persistent helper process,
//! forked once and confined by [`Filter`], answers upcalls. Each call runs in a child the
//! worker forks for it (copy-on-write, from a process that never ran the extension) and
//! confines further to writing the reply: every call starts from the same state, as under
//! the other technologies, and a call that crashes costs its child only. The worker itself
//! is killed and restarted only when it stops answering (a call past its deadline).
//!
//! Pipe protocol: roam writes `[u32 max_reply][u32 len][request]`; the call's child answers
//! `[u32 len]` and, when `len <= max_reply`, the reply bytes; when it dies without a reply,
//! the worker answers `[u32::MAX][i32 wait status]`.

use crate::native::Library;
use crate::runner::Runner;
use crate::sandbox::{self, Filter};
use crate::{Fault, Limits};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

pub(crate) struct Worker {
    lib: Library,
    process: Mutex<Option<Process>>,
}

/// A running helper and roam's ends of its pipes; killed and reaped on drop.
struct Process {
    pid: libc::pid_t,
    to: OwnedFd,
    from: OwnedFd,
}

impl Drop for Process {
    fn drop(&mut self) {
        // pid 0: already reaped by `died`.
        if self.pid > 0 {
            sandbox::kill(self.pid);
        }
    }
}

impl Worker {
    pub(crate) fn load(path: &Path) -> Result<Worker, Fault> {
        Ok(Worker {
            lib: Library::open(path)?,
            process: Mutex::new(None),
        })
    }

    fn spawn(&self, limits: &Limits) -> Result<Process, Fault> {
        let (req_r, req_w) = pipe()?;
        let (rep_r, rep_w) = pipe()?;
        let (inp, out) = (req_r.as_raw_fd(), rep_w.as_raw_fd());
        // The worker reads requests, forks (a process, never a thread: `clone`'s flags are
        // exactly SIGCHLD), reaps and answers; a call's child may set its parent-death
        // signal and add the call filter, then only write its reply.
        let worker = Filter::with(
            &[libc::SYS_wait4],
            &[
                (libc::SYS_read, inp),
                (libc::SYS_write, out),
                (libc::SYS_clone, libc::SIGCHLD),
                (libc::SYS_prctl, libc::PR_SET_PDEATHSIG),
                (libc::SYS_prctl, libc::PR_SET_SECCOMP),
            ],
        );
        let call = Filter::new(&[(libc::SYS_write, out)]);
        // SAFETY: the child only runs `serve` (allocation is fork-safe in glibc).
        match unsafe { libc::fork() } {
            -1 => Err(Fault::host(std::io::Error::last_os_error())),
            0 => {
                close_all_but(inp, out);
                if worker.confine(limits.memory).is_ok() {
                    self.serve(inp, out, &call);
                }
                // SAFETY: leaving the child without the parent's exit handlers.
                unsafe { libc::_exit(crate::fork::CONFINE_FAILED) }
            }
            pid => Ok(Process {
                pid,
                to: req_w,
                from: rep_r,
            }),
        }
    }

    /// The worker's loop: read a request, answer it in a child of its own; until EOF.
    fn serve(&self, inp: RawFd, out: RawFd, call: &Filter) {
        let mut head = [0u8; 8];
        while read_exact(inp, &mut head) {
            let max_reply = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let mut request =
                vec![0u8; u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize];
            if !read_exact(inp, &mut request) {
                return;
            }
            // SAFETY: a plain fork (no thread, no shared memory); the child runs `answer`
            // and exits.
            let child = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
            match child {
                -1 => return,
                0 => {
                    let answered = self.answer(&request, max_reply, out, call);
                    // SAFETY: leaving the call's child.
                    unsafe { libc::_exit(if answered { 0 } else { 1 }) }
                }
                pid => {
                    if !reap_and_tell(pid as libc::pid_t, out) {
                        return;
                    }
                }
            }
        }
    }

    /// In a call's child: confine, call the extension, write the reply.
    fn answer(&self, request: &[u8], max_reply: usize, out: RawFd, call: &Filter) -> bool {
        // SAFETY: plain prctl: the child dies with the worker (killed at a deadline).
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        if !call.install() {
            return false;
        }
        let limits = Limits {
            max_reply,
            ..Limits::default()
        };
        // SAFETY: we are a sandboxed child; the extension can only hurt this process.
        match unsafe { self.lib.call(request, &limits) } {
            Ok(reply) => {
                let mut all = (reply.len() as u32).to_le_bytes().to_vec();
                all.extend_from_slice(reply);
                write_all(out, &all)
            }
            Err(Fault::Oversized { len, .. }) => write_all(out, &(len as u32).to_le_bytes()),
            Err(_) => false,
        }
    }

    /// Sends `request`; the reply, or the fault of the call's child. `Err`: the worker
    /// itself failed (it is dropped: killed, restarted at the next call).
    fn exchange(
        &self,
        p: &Process,
        request: &[u8],
        limits: &Limits,
    ) -> Result<Result<Vec<u8>, Fault>, Fault> {
        let deadline = Instant::now() + limits.timeout;
        let mut head = (limits.max_reply as u32).to_le_bytes().to_vec();
        head.extend_from_slice(&(request.len() as u32).to_le_bytes());
        if !(write_all(p.to.as_raw_fd(), &head) && write_all(p.to.as_raw_fd(), request)) {
            return Err(Fault::host("the worker stopped reading"));
        }
        let mut len = [0u8; 4];
        read_by(p.from.as_raw_fd(), &mut len, deadline, limits)?;
        let len = u32::from_le_bytes(len);
        if len == DIED {
            let mut status = [0u8; 4];
            read_by(p.from.as_raw_fd(), &mut status, deadline, limits)?;
            return Ok(Err(Fault::of_status(i32::from_le_bytes(status))));
        }
        let len = len as usize;
        if len > limits.max_reply {
            return Ok(Err(Fault::Oversized {
                len: len as u64,
                max: limits.max_reply,
            }));
        }
        let mut reply = vec![0u8; len];
        read_by(p.from.as_raw_fd(), &mut reply, deadline, limits)?;
        Ok(Ok(reply))
    }
}

/// The worker's answer for a call whose child died without replying.
const DIED: u32 = u32::MAX;

/// In the worker: waits for the call's child `pid`; when it ended without its reply, says
/// so with its wait status. False when the pipe to roam is gone.
fn reap_and_tell(pid: libc::pid_t, out: RawFd) -> bool {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::wait4(pid, &mut status, 0, std::ptr::null_mut()) } != pid {
        return false;
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return true;
    }
    let mut died = DIED.to_le_bytes().to_vec();
    died.extend_from_slice(&status.to_le_bytes());
    write_all(out, &died)
}

impl Runner for Worker {
    fn call(&self, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault> {
        let mut slot = self.process.lock().map_err(Fault::host)?;
        let process = match slot.take() {
            Some(p) => p,
            None => self.spawn(limits)?,
        };
        match self.exchange(&process, request, limits) {
            Ok(answer) => {
                *slot = Some(process);
                answer
            }
            Err(Fault::Host(_) | Fault::Exited(_)) => Err(died(process)),
            // The worker is dropped (killed) here: the next call starts a fresh one.
            Err(fault) => Err(fault),
        }
    }
}

/// Why a worker stopped answering: reap it and report its end.
fn died(mut p: Process) -> Fault {
    let status = sandbox::wait(p.pid, std::time::Duration::from_secs(1));
    p.pid = 0;
    match status {
        Ok(status) => Fault::of_status(status),
        Err(fault) => fault,
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`, or says why not.
fn read_by(fd: RawFd, buf: &mut [u8], deadline: Instant, limits: &Limits) -> Result<(), Fault> {
    let mut done = 0;
    while done < buf.len() {
        if !sandbox::poll_readable(fd, deadline) {
            return Err(Fault::Timeout(limits.timeout));
        }
        // SAFETY: reading into the unfilled tail of `buf`.
        let n = unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        if n <= 0 {
            return Err(Fault::Exited(0));
        }
        done += n as usize;
    }
    Ok(())
}

fn read_exact(fd: RawFd, buf: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: reading into the unfilled tail of `buf`.
        let n = unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

fn write_all(fd: RawFd, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: writing from a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n <= 0 {
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Fault> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors that we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Fault::host(std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In the worker child: close every descriptor inherited from roam except stdio and the two
/// pipe ends, so a long-lived worker holds none of roam's files or sockets open.
fn close_all_but(a: RawFd, b: RawFd) {
    let (lo, hi) = (a.min(b) as u32, a.max(b) as u32);
    for (from, to) in [
        (3, lo.wrapping_sub(1)),
        (lo + 1, hi.wrapping_sub(1)),
        (hi + 1, u32::MAX),
    ] {
        if from <= to {
            // SAFETY: closing descriptors in our own (child) table.
            unsafe { libc::syscall(libc::SYS_close_range, from, to, 0) };
        }
    }
}
