//! The worker technology (Small & Seltzer's user-level server): a persistent helper process,
//! forked once and confined by [`Filter`] to reading its request pipe and writing its reply
//! pipe, answers upcalls. It keeps its memory between calls (no rollback inside the worker:
//! only roam's side is protected), so after any fault it is killed and restarted at the next
//! call.
//!
//! Pipe protocol: roam writes `[u32 max_reply][u32 len][request]`; the worker answers
//! `[u32 len]` and, when `len <= max_reply`, the reply bytes.

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
        let filter = Filter::new(&[(libc::SYS_read, inp), (libc::SYS_write, out)]);
        // SAFETY: the child only runs `serve` (allocation is fork-safe in glibc).
        match unsafe { libc::fork() } {
            -1 => Err(Fault::host(std::io::Error::last_os_error())),
            0 => {
                close_all_but(inp, out);
                if filter.confine(limits.memory).is_ok() {
                    self.serve(inp, out);
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

    /// The worker's loop: read a request, call the extension, write the reply; until EOF.
    fn serve(&self, inp: RawFd, out: RawFd) {
        let mut head = [0u8; 8];
        while read_exact(inp, &mut head) {
            let max_reply = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let mut request =
                vec![0u8; u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize];
            if !read_exact(inp, &mut request) {
                return;
            }
            let limits = Limits {
                max_reply,
                ..Limits::default()
            };
            // SAFETY: we are the sandboxed worker; the extension can only hurt this process.
            let sent = match unsafe { self.lib.call(&request, &limits) } {
                Ok(reply) => {
                    write_all(out, &(reply.len() as u32).to_le_bytes()) && write_all(out, reply)
                }
                Err(Fault::Oversized { len, .. }) => write_all(out, &(len as u32).to_le_bytes()),
                Err(_) => false,
            };
            if !sent {
                return;
            }
        }
    }

    fn exchange(&self, p: &Process, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault> {
        let deadline = Instant::now() + limits.timeout;
        let mut head = (limits.max_reply as u32).to_le_bytes().to_vec();
        head.extend_from_slice(&(request.len() as u32).to_le_bytes());
        if !(write_all(p.to.as_raw_fd(), &head) && write_all(p.to.as_raw_fd(), request)) {
            return Err(Fault::host("the worker stopped reading"));
        }
        let mut len = [0u8; 4];
        read_by(p.from.as_raw_fd(), &mut len, deadline, limits)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > limits.max_reply {
            return Err(Fault::Oversized {
                len: len as u64,
                max: limits.max_reply,
            });
        }
        let mut reply = vec![0u8; len];
        read_by(p.from.as_raw_fd(), &mut reply, deadline, limits)?;
        Ok(reply)
    }
}

impl Runner for Worker {
    fn call(&self, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault> {
        let mut slot = self.process.lock().map_err(Fault::host)?;
        let process = match slot.take() {
            Some(p) => p,
            None => self.spawn(limits)?,
        };
        match self.exchange(&process, request, limits) {
            Ok(reply) => {
                *slot = Some(process);
                Ok(reply)
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
