//! The worker technology (Small & Seltzer's user-level server): a persistent helper process
//! that answers upcalls over pipes. roam starts it by executing its own program
//! (`/proc/self/exe`) with an empty environment, so it holds none of roam's memory,
//! descriptors or secrets; it loads the native extension once, confines itself with
//! [`Filter`] and forks one child per call. Each child is forked in advance (while roam
//! handles the previous reply), from a process that never ran the extension, reads its
//! request, confines itself further to writing the reply, and exits: every call
//! starts from the same state, as under the other technologies, and a call that crashes costs
//! its child only. The worker is killed and restarted only when it stops answering (a call
//! past its deadline).
//!
//! Any program that links this crate can be the worker: a constructor that runs before `main`
//! turns the process into one when it finds `ROAM_EXT_WORKER=MEMORY:LIBRARY` in its
//! environment (set only by [`Worker`]), so `roam`, its tests and benchmarks need no helper
//! binary of their own.
//!
//! Pipe protocol (the worker's stdin and stdout): the worker first answers `[u32 0]` once the
//! library is loaded and it is confined, or `[u32 len][message]` saying why it cannot be
//! loaded. roam then writes `[u32 max_reply][u32 len][request]`; the call's child answers
//! `[u32 len]` and, when `len <= max_reply`, the reply bytes; when it dies without a reply,
//! the worker answers `[u32::MAX][i32 wait status]`.

use crate::native::Library;
use crate::runner::Runner;
use crate::sandbox::{self, Filter};
use crate::{Fault, Limits};
use std::ffi::OsStr;
use std::ffi::{CStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The environment variable that makes a process the worker of a library.
const ROLE: &CStr = c"ROAM_EXT_WORKER";

/// How long a worker may take to start (exec, load the library, confine itself): a loaded
/// machine's exec, not the extension's deadline.
const START: Duration = Duration::from_secs(10);

/// The worker's descriptors for requests (in) and replies (out): its stdin and stdout.
const IN: RawFd = 0;
const OUT: RawFd = 1;

/// Exit statuses of a call's child that are not a fault of the call: answered, and no more
/// requests (roam closed the pipe).
const ANSWERED: i32 = 0;
const NO_MORE: i32 = 3;

pub(crate) struct Worker {
    path: PathBuf,
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
    /// Starts the worker of the library at `path` (so that a library that cannot be loaded
    /// fails here, not at the first call).
    pub(crate) fn load(path: &Path, limits: &Limits) -> Result<Worker, Fault> {
        let worker = Worker {
            path: path.to_path_buf(),
            process: Mutex::new(None),
        };
        let process = worker.spawn(limits)?;
        *worker.process.lock().map_err(Fault::host)? = Some(process);
        Ok(worker)
    }

    /// Executes this program as the worker and waits until it is ready.
    fn spawn(&self, limits: &Limits) -> Result<Process, Fault> {
        let (req_r, req_w) = pipe()?;
        let (rep_r, rep_w) = pipe()?;
        let mut role = OsString::from(format!("{}:", limits.memory));
        role.push(&self.path);
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("roam-ext-worker")
            .env_clear()
            .env(OsStr::from_bytes(ROLE.to_bytes()), role)
            .stdin(Stdio::from(req_r))
            .stdout(Stdio::from(rep_w));
        // SAFETY: between fork and exec only an async-signal-safe system call: descriptors
        // roam opened without O_CLOEXEC must not reach the worker either.
        unsafe {
            cmd.pre_exec(|| {
                libc::syscall(
                    libc::SYS_close_range,
                    3,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
                Ok(())
            })
        };
        let child = cmd.spawn().map_err(Fault::host)?;
        // Dropping `cmd` closes our copies of the worker's ends, so its death reads as EOF.
        drop(cmd);
        let process = Process {
            pid: child.id() as libc::pid_t,
            to: req_w,
            from: rep_r,
        };
        match ready(&process, limits) {
            Ok(()) => Ok(process),
            Err(Fault::Exited(0)) => Err(died(process)),
            Err(fault) => Err(fault),
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
        let len = read_u32(p.from.as_raw_fd(), deadline, limits)?;
        if len == DIED {
            let status = read_u32(p.from.as_raw_fd(), deadline, limits)?;
            return Ok(Err(Fault::of_status(status as i32)));
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

/// Waits for the worker's first answer: ready, or why the library cannot be loaded.
fn ready(p: &Process, limits: &Limits) -> Result<(), Fault> {
    let start = Limits {
        timeout: START,
        ..*limits
    };
    let deadline = Instant::now() + START;
    let len = read_u32(p.from.as_raw_fd(), deadline, &start)? as usize;
    if len == 0 {
        return Ok(());
    }
    let mut why = vec![0u8; len.min(4096)];
    read_by(p.from.as_raw_fd(), &mut why, deadline, &start)?;
    Err(Fault::Load(String::from_utf8_lossy(&why).into_owned()))
}

/// The worker's answer for a call whose child died without replying.
const DIED: u32 = u32::MAX;

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
    let status = sandbox::wait(p.pid, Duration::from_secs(1));
    p.pid = 0;
    match status {
        Ok(status) => Fault::of_status(status),
        Err(fault) => fault,
    }
}

// The worker's side: a constructor in every program that links this crate.

#[used]
#[link_section = ".init_array"]
static BECOME_WORKER: extern "C" fn() = become_worker_if_asked;

/// Before `main`: when this process was started as a worker, serve and exit; else return.
extern "C" fn become_worker_if_asked() {
    if let Some((memory, path)) = role() {
        let status = serve(&path, memory);
        // SAFETY: the worker never returns to the program's `main`.
        unsafe { libc::_exit(status) }
    }
}

/// The worker's memory limit and library, from its environment (then cleared, so the
/// extension sees an empty environment).
fn role() -> Option<(usize, PathBuf)> {
    // SAFETY: before `main`, one thread: nothing changes the environment meanwhile.
    let value = unsafe { libc::getenv(ROLE.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returned a NUL-terminated string, copied before the variable is unset.
    let value = unsafe { CStr::from_ptr(value) }.to_bytes().to_vec();
    // SAFETY: as above.
    unsafe { libc::unsetenv(ROLE.as_ptr()) };
    let colon = value.iter().position(|b| *b == b':')?;
    let memory = std::str::from_utf8(&value[..colon]).ok()?.parse().ok()?;
    let path = OsString::from_vec(value[colon + 1..].to_vec());
    Some((memory, PathBuf::from(path)))
}

/// The worker's life: load the library, confine, say ready, then fork a child per call and
/// report the calls whose child died; until roam closes the pipe. Returns the exit status.
fn serve(path: &Path, memory: usize) -> i32 {
    let lib = match Library::open(path) {
        Ok(lib) => lib,
        Err(Fault::Load(why)) | Err(Fault::Host(why)) => {
            let mut all = (why.len() as u32).to_le_bytes().to_vec();
            all.extend_from_slice(why.as_bytes());
            write_all(OUT, &all);
            return 1;
        }
        Err(_) => return 1,
    };
    // The worker forks (a process, never a thread: `clone`'s flags are exactly SIGCHLD),
    // reaps and reports; a call's child may set its parent-death signal, read its request
    // and add the call filter, then only write its reply.
    let worker = Filter::with(
        &[libc::SYS_wait4],
        &[
            (libc::SYS_read, IN),
            (libc::SYS_write, OUT),
            (libc::SYS_clone, libc::SIGCHLD),
            (libc::SYS_prctl, libc::PR_SET_PDEATHSIG),
            (libc::SYS_prctl, libc::PR_SET_SECCOMP),
        ],
    );
    let call = Filter::new(&[(libc::SYS_write, OUT)]);
    if worker.confine(memory).is_err() {
        return crate::fork::CONFINE_FAILED;
    }
    if !write_all(OUT, &0u32.to_le_bytes()) {
        return 0;
    }
    loop {
        // SAFETY: a plain fork of a one-thread process; the child answers one call and exits.
        match unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) } {
            -1 => return 1,
            // SAFETY: leaving the call's child.
            0 => unsafe { libc::_exit(answer(&lib, &call)) },
            pid => {
                if !reap_and_tell(pid as libc::pid_t) {
                    return 0;
                }
            }
        }
    }
}

/// In a call's child, forked before its request came: wait for the request, confine to
/// writing the reply, call the extension, write the reply. Returns the exit status.
fn answer(lib: &Library, call: &Filter) -> i32 {
    // SAFETY: plain prctl: the child dies with the worker (killed at a deadline).
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let mut head = [0u8; 8];
    if !read_exact(IN, &mut head) {
        return NO_MORE;
    }
    let max_reply = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let mut request = vec![0u8; u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize];
    // The filter comes after the request: the extension may not read the next call's.
    if !read_exact(IN, &mut request) || !call.install() {
        return 1;
    }
    let limits = Limits {
        max_reply,
        ..Limits::default()
    };
    // SAFETY: we are a sandboxed child; the extension can only hurt this process.
    let answered = match unsafe { lib.call(&request, &limits) } {
        Ok(reply) => {
            let mut all = (reply.len() as u32).to_le_bytes().to_vec();
            all.extend_from_slice(reply);
            write_all(OUT, &all)
        }
        Err(Fault::Oversized { len, .. }) => write_all(OUT, &(len as u32).to_le_bytes()),
        Err(_) => false,
    };
    if answered {
        ANSWERED
    } else {
        1
    }
}

/// In the worker: waits for the call's child `pid`; when it ended without its reply, says
/// so with its wait status. False when the worker should stop (no more requests, or the
/// pipe to roam is gone).
fn reap_and_tell(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::wait4(pid, &mut status, 0, std::ptr::null_mut()) } != pid {
        return false;
    }
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            ANSWERED => return true,
            NO_MORE => return false,
            _ => {}
        }
    }
    let mut died = DIED.to_le_bytes().to_vec();
    died.extend_from_slice(&status.to_le_bytes());
    write_all(OUT, &died)
}

fn read_u32(fd: RawFd, deadline: Instant, limits: &Limits) -> Result<u32, Fault> {
    let mut buf = [0u8; 4];
    read_by(fd, &mut buf, deadline, limits)?;
    Ok(u32::from_le_bytes(buf))
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
