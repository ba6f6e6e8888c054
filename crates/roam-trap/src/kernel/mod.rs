//! The kernel: what each caught system call *means* for roam's namespace (gVisor's sentry to
//! the platform's ptrace). One file per family of calls; each turns a call whose names
//! touch roam into a [`Decision`] that the platform carries out on the stopped thread.
//!
//! Work is split in two so one slow server blocks only the thread that asked:
//! [`Kernel::triage`] runs on the tracer thread and answers at once whatever needs no
//! remote work (most calls: local names); the rest becomes a [`Job`] that a worker thread
//! [`Kernel::serve`]s while the tracer goes on serving other threads.

pub mod afar;

mod close;
mod dir;
mod exec;
mod inspect;
mod junction;
mod mutate;
mod native_names;
pub(crate) mod open;
mod read;
mod report;
pub mod resolve;
mod socket;
mod syscalls;
pub mod table;

use std::sync::Arc;

use nix::unistd::Pid;
use roam_vfs::{Node, Vfs};

use crate::platform::memory;
use crate::platform::ptrace::{Syscall, AUDIT_ARCH_X86_64};
pub use report::Reporter;
use resolve::{Place, Resolver};
use table::{Family, Spec};

/// What to do with a stopped system call.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let it run as the program made it.
    Continue,
    /// Let it run with these path arguments (register index, new NUL-free bytes).
    Rewrite(Vec<(usize, Vec<u8>)>),
    /// Skip it; it returns this value (`-errno` for a failure).
    Return(i64),
    /// Skip it after writing `data` into the program's buffer at `addr`.
    ReturnData { addr: u64, data: Vec<u8>, ret: i64 },
    /// Let it run (e.g. `close` must really close the fd), then make it return this value.
    RunThenReturn(i64),
    /// Let it run with the socket address `addr` (a `sockaddr_un`) in place of register
    /// `arg`'s, its length in register `len_arg`.
    RewriteAddr {
        arg: usize,
        len_arg: usize,
        addr: Vec<u8>,
    },
    /// Let it run with these path arguments, then finish its result (at the exit stop).
    RewriteThen {
        args: Vec<(usize, Vec<u8>)>,
        after: AfterExit,
    },
    /// Let an open run with this path argument, then move the fd it returns to a watched
    /// number (≥ `WATCHED_FD_BASE`), whose reads roam sees: a large file arriving in ranges.
    /// `virt` is the file, for when no watched number is free.
    OpenWatched {
        arg: usize,
        path: Vec<u8>,
        cloexec: bool,
        virt: String,
    },
    /// A privileged program (setuid, setgid, file capabilities) must not run traced: roam
    /// starts it untraced in the tracee's place; the tracee exits with its status.
    RunUntraced {
        path: Vec<u8>,
        argv: Vec<Vec<u8>>,
        envp: Vec<Vec<u8>>,
    },
    /// A debugger asks to trace `target` (the caller itself for `PTRACE_TRACEME`), one of
    /// roam's tracees: roam hands it over (see `platform::handoff`), then lets the call run.
    HandOver { target: Pid },
    /// Let an exec run another program with another argument vector (a script whose
    /// interpreter is a roam name: the kernel would look for the interpreter itself).
    Exec {
        path_arg: usize,
        path: Vec<u8>,
        argv_arg: usize,
        argv: Vec<Vec<u8>>,
    },
}

impl Decision {
    fn fail(errno: i32) -> Decision {
        Decision::Return(-(errno as i64))
    }
}

/// What roam does to a call's result at its syscall-exit stop.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterExit {
    /// The call returns this value instead.
    Return(i64),
    /// A `struct stat` (or `statx`) at `buf` of a cache entry standing for a remote file:
    /// made to describe the remote file (see `inspect::as_remote_stat`). `link`: for a
    /// remote link, the length of the server's text (its skeleton entry says another).
    RemoteStat {
        buf: u64,
        statx: bool,
        link: Option<u64>,
    },
    /// `data` after the `ret` bytes a call wrote to `buf` (of `room` bytes), if it fits:
    /// the mount points a listing of their local parent shows (see `junction`).
    Append { buf: u64, room: u64, data: Vec<u8> },
}

impl AfterExit {
    pub fn apply(&self, tid: Pid) -> nix::Result<()> {
        match *self {
            AfterExit::Return(ret) => crate::platform::ptrace::set_return(tid, ret),
            AfterExit::RemoteStat { buf, statx, link } => {
                inspect::as_remote_stat(tid, buf, statx, link)
            }
            AfterExit::Append {
                buf,
                room,
                ref data,
            } => junction::append(tid, buf, room, data),
        }
    }
}

/// A call that needs the namespace (and maybe the network) to be answered.
#[derive(Debug)]
pub struct Job {
    pub tid: Pid,
    pub call: Syscall,
    spec: &'static Spec,
    places: Vec<Place>,
}

impl Job {
    /// Whether serving it asks nothing of the stopped thread but maybe its answer: a name
    /// looked at (stat, access, readlink) or changed by a driver (the answer is the result),
    /// opened to read only (roam makes the open and hands the fd over, see
    /// [`open::only_reads`]), or a changed copy's fd closed or synced (roam uploads while
    /// the call waits, then lets it run; an upload that failed goes to the tracer, which
    /// alone can both close the fd and fail the call). Other opens and chdirs hand the
    /// thread something of roam's or change it, so only the tracer serves them.
    pub fn answerable_from_afar(&self) -> bool {
        match self.spec.family {
            Family::Inspect | Family::Access | Family::Readlink | Family::Mutate => true,
            Family::Open => crate::from_afar() && open::only_reads(&self.call),
            Family::Close | Family::Sync => crate::from_afar(),
            _ => false,
        }
    }
}

/// Outcome of triage on the tracer thread.
pub enum Triage {
    Done(Decision),
    Later(Job),
}

/// The syscall kernel: the namespace plus the resolver and the user-facing reporter.
pub struct Kernel {
    resolver: Resolver,
    report: Reporter,
    /// Every traced thread, so a close can tell whether it was the last writer of a file.
    tracees: std::sync::Mutex<std::collections::HashSet<Pid>>,
    /// Remote files each thread was allowed to write: when it ends without `close(2)` (exit,
    /// an fd replaced by `dup2`), those are delivered once no writer is left. Key 0 holds
    /// the files of threads that ended.
    granted: std::sync::Mutex<std::collections::HashMap<Pid, std::collections::HashSet<String>>>,
    /// Set by `roam detach`: names are the kernel's again; roam still serves the fds it
    /// gave out (reads of files arriving in ranges, the last close of a written file).
    detached: std::sync::atomic::AtomicBool,
}

impl Kernel {
    /// `fastpath`: whether programs get the fast path's view (`platform::fastpath`).
    pub fn new(vfs: Arc<Vfs>, fastpath: bool) -> Kernel {
        Kernel {
            resolver: Resolver::new(vfs, fastpath),
            report: Reporter::default(),
            tracees: Default::default(),
            granted: Default::default(),
            detached: Default::default(),
        }
    }

    /// Gives the tracees' names back to the kernel (`roam detach`) and delivers every change
    /// no program is still writing; returns the changes still pending (their writers'
    /// closes deliver them).
    pub fn detach(&self) -> Vec<String> {
        self.detached
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.flush_finished(true);
        self.vfs().dirty()
    }

    /// Waits until the copy of `virt` is whole (an fd on it could not be watched), telling
    /// the user if that fails: the program's reads would then end early.
    pub fn complete_copy(&self, virt: &str) {
        if let Err(e) = self.vfs().ensure_whole(virt) {
            self.report
                .error(Pid::from_raw(0), "read", virt, e.errno(), &e.to_string());
        }
    }

    /// Records that `tid` may write `virt` (it was given the copy to open).
    fn write_granted(&self, tid: Pid, virt: &str) {
        self.granted
            .lock()
            .unwrap()
            .entry(tid)
            .or_default()
            .insert(virt.to_owned());
    }

    /// The fast path's view for the program `tid` has just exec'd, if programs get one.
    pub fn fastpath_view(&self, tid: Pid) -> Option<Vec<u8>> {
        self.resolver.fastpath_view(tid)
    }

    /// Every thread roam traces now.
    pub(crate) fn tracee_list(&self) -> Vec<Pid> {
        self.tracees.lock().unwrap().iter().copied().collect()
    }

    /// Names what holds the tracees while roam-vfs is suspended.
    pub(crate) fn hold_with(&self, holder: std::sync::Arc<dyn roam_vfs::Holder>) {
        self.vfs().set_holder(holder);
    }

    /// The tracer tells of every thread that appears or ends.
    pub fn tracee_started(&self, tid: Pid) {
        self.tracees.lock().unwrap().insert(tid);
    }

    /// Thread `tid` was killed by `signal`: the changes it was writing are kept, never
    /// uploaded (their copies may lack what it meant to write; `roam status` names them).
    pub fn writer_killed(&self, tid: Pid, signal: i32) {
        let writing = self.granted.lock().unwrap().get(&tid).cloned();
        for virt in writing.unwrap_or_default() {
            if !self.vfs().is_dirty(&virt) {
                continue;
            }
            if let Err(e) = self.vfs().writer_killed(&virt, tid.as_raw(), signal) {
                self.report.once(format!("kept {virt}"), e.to_string());
            }
        }
    }

    /// A thread ended. Returns whether changes may wait for delivery, which
    /// [`Kernel::flush_finished`] then does (it may wait on the network).
    pub fn tracee_ended(&self, tid: Pid) -> bool {
        self.tracees.lock().unwrap().remove(&tid);
        let mut granted = self.granted.lock().unwrap();
        let mine = granted.remove(&tid).unwrap_or_default();
        let ended = granted.entry(Pid::from_raw(0)).or_default();
        ended.extend(mine);
        let waiting = !ended.is_empty();
        drop(granted);
        // Changes already due for delivery need no thread of their own at each exit.
        waiting
            || self
                .vfs()
                .dirty()
                .iter()
                .any(|virt| !self.vfs().delivery_waits(virt))
    }

    /// Delivers every change whose last writer is gone (after a process exit, and at the end
    /// of the run); changes still being written wait for their writers. Says what failed.
    pub fn flush_finished(&self, at_end: bool) {
        let ended = self
            .granted
            .lock()
            .unwrap()
            .remove(&Pid::from_raw(0))
            .unwrap_or_default();
        let mut candidates = self.vfs().dirty();
        candidates.extend(ended);
        candidates.sort();
        candidates.dedup();
        for virt in candidates {
            // Already due for delivery (closed under T_write > 0, or a retry): the deliverer
            // checks for writers when it is due. Asking here, at every process exit, cost a
            // scan of every tracee's fds per pending file (make: hundreds of exits, dozens of
            // pending .o files), and rescheduling postponed the upload at each exit.
            if !at_end && self.vfs().delivery_waits(&virt) {
                continue;
            }
            let holders = close::writers(self, &virt, None);
            if !holders.is_empty() {
                // Still being written: the holders' own end delivers it.
                for h in holders {
                    self.write_granted(h, &virt);
                }
                continue;
            }
            // Its writers are gone (an exit closes without `close(2)`): a whole version.
            if let Err(e) = self.vfs().seal(&virt, false) {
                self.report.once(format!("seal {virt}"), e.to_string());
            }
            let still_written = || !close::writers(self, &virt, None).is_empty();
            let done = match at_end {
                true => self.vfs().deliver_now(&virt, &still_written),
                false => self.vfs().last_close(&virt, &still_written),
            };
            match done {
                Ok(flushed) => close::tell_conflict(self, &virt, flushed),
                Err(e) if e.is_kept() => self.report.once(format!("kept {virt}"), e.to_string()),
                Err(e) if at_end => self.report.once(
                    format!("pending {virt}"),
                    format!("upload of {virt} failed: {e}; the change is kept in roam's journal (run `roam sync`)"),
                ),
                // Retried in the background.
                Err(_) => {}
            }
        }
    }

    /// Runs for ever on its own thread: delivers what is due (T_write, retries).
    pub fn deliver_later(&self) {
        let writing = |virt: &str| !close::writers(self, virt, None).is_empty();
        self.vfs()
            .deliver_due(&writing, &|key, message| self.report.once(key, message));
    }

    fn vfs(&self) -> &Vfs {
        self.resolver.vfs()
    }

    /// Decides on the tracer thread, without remote work, or defers to a worker.
    pub fn triage(&self, tid: Pid, call: Syscall) -> Triage {
        if call.arch != AUDIT_ARCH_X86_64 {
            self.report.once(
                format!("foreign-abi {tid}"),
                format!("pid {tid} makes 32-bit (i386/x32) system calls; roam does not interpret them, so they see only local files"),
            );
            return Triage::Done(Decision::Continue);
        }
        let Some(spec) = table::lookup(call.nr) else {
            return Triage::Done(Decision::Continue);
        };
        match spec.family {
            Family::Close | Family::Sync => return close::triage(self, tid, spec, call),
            Family::Read => return read::triage(self, tid, spec, call),
            Family::Dup => return close::triage_dup(self, tid, spec, call),
            _ if self.detached.load(std::sync::atomic::Ordering::Relaxed) => {
                return Triage::Done(Decision::Continue)
            }
            Family::Getcwd => return Triage::Done(dir::getcwd(self, tid, &call)),
            Family::Socket => return socket::triage(self, tid, spec, call),
            Family::Dents => return junction::triage(self, tid, &call),
            Family::NoUring => return Triage::Done(Decision::fail(libc::ENOSYS)),
            Family::Ptrace => return Triage::Done(self.pass_ptrace(tid, &call)),
            Family::MutateFd => return mutate::on_fd(self, tid, spec, call),
            Family::Readlink => {
                if let Some(d) = inspect::readlink_magic(self, tid, spec, &call) {
                    return Triage::Done(d);
                }
            }
            _ => {}
        }
        if table::changes_names(spec) {
            self.resolver.names_changing();
        }
        let places = match self.places(tid, spec, &call) {
            Ok(p) => p,
            Err(errno) => return Triage::Done(Decision::fail(errno)),
        };
        if places.iter().any(|p| matches!(p, Place::Deferred { .. })) {
            // Finding what a name through an archive means may wait on a server.
            return Triage::Later(Job {
                tid,
                call,
                spec,
                places,
            });
        }
        self.decide(tid, spec, call, places)
    }

    /// Triage of a call whose names are resolved.
    fn decide(&self, tid: Pid, spec: &'static Spec, call: Syscall, places: Vec<Place>) -> Triage {
        if mutate::source_first(spec, &places) {
            // link(2) looks its source up whole before the new name's directory.
            return Triage::Later(Job {
                tid,
                call,
                spec,
                places,
            });
        }
        if let Some(d) = places.iter().find_map(|p| self.lookup_failed(tid, spec, p)) {
            return Triage::Done(d);
        }
        if places.iter().all(Place::is_native) {
            if spec.family == Family::Exec {
                if exec::has_roam_interpreter(self, tid, &call) {
                    return Triage::Later(Job {
                        tid,
                        call,
                        spec,
                        places,
                    });
                }
                if let Some(d) = exec::privileged(self, tid, &call) {
                    return Triage::Done(d);
                }
            }
            if spec.family == Family::Open {
                if let Some(d) = junction::open(self, tid, spec, &call) {
                    return Triage::Done(d);
                }
            }
            return Triage::Done(Decision::Continue);
        }
        let has_roam = places
            .iter()
            .any(|p| matches!(p, Place::Roam(_) | Place::RoamFd(_)));
        match spec.family {
            _ if !has_roam => Triage::Done(rewrite_locals(spec, &places)),
            Family::Mutate => mutate::triage(self, tid, spec, call, places),
            Family::Unsupported => Triage::Done(mutate::unsupported(self, tid, spec, &places)),
            Family::Unserved => Triage::Done(mutate::unserved(self, tid, spec, &places)),
            _ => Triage::Later(Job {
                tid,
                call,
                spec,
                places,
            }),
        }
    }

    /// Serves a deferred call; may block on the network. Runs on a worker thread.
    pub fn serve(&self, job: &Job) -> Decision {
        if job
            .places
            .iter()
            .any(|p| matches!(p, Place::Deferred { .. }))
        {
            return self.serve_settled(job);
        }
        let result = match job.spec.family {
            Family::Open => open::serve(self, job),
            Family::Exec => exec::serve(self, job),
            Family::Chdir => dir::chdir(self, job),
            Family::Socket => socket::serve(self, job),
            Family::Inspect | Family::Access | Family::Readlink => inspect::serve(self, job),
            Family::Mutate | Family::MutateFd => mutate::serve(self, job),
            Family::Close | Family::Sync => close::serve(self, job),
            Family::Read => read::serve(self, job),
            Family::Dup => close::serve_dup(self, job),
            // Triage answers every other family itself.
            _ => Ok(Decision::Continue),
        };
        result.unwrap_or_else(|(node, err)| self.fail_on(job.tid, job.spec, &node, &err))
    }

    /// Serves a call with names left to a worker: resolved now, then triaged and served as
    /// any other.
    fn serve_settled(&self, job: &Job) -> Decision {
        let places = job
            .places
            .iter()
            .map(|p| self.resolver.settle(p.clone()))
            .collect();
        match self.decide(job.tid, job.spec, job.call, places) {
            Triage::Done(d) => d,
            Triage::Later(settled) => self.serve(&settled),
        }
    }

    /// A tracee asks to trace (or be traced). roam is the tracer of every process it runs,
    /// so a request to trace one of them hands that process over to the asker (Parrot's
    /// debuggers inside the agent); requests about other processes are the kernel's.
    fn pass_ptrace(&self, tid: Pid, call: &Syscall) -> Decision {
        // The constants' C type differs between glibc (unsigned) and musl (signed):
        // compared as the kernel's.
        let request = call.args[0] as u32;
        #[allow(clippy::unnecessary_cast)]
        let is = |r| request == r as u32;
        let target = match () {
            _ if is(libc::PTRACE_TRACEME) => tid,
            _ if is(libc::PTRACE_ATTACH) || is(libc::PTRACE_SEIZE) => {
                Pid::from_raw(call.args[1] as i32)
            }
            _ => return Decision::Continue,
        };
        // Not `tracees`: a child's first calls may reach roam before its parent's fork
        // event has made it one of them.
        if target != tid && !crate::platform::attach::traced_by_me(target) {
            return Decision::Continue;
        }
        Decision::HandOver { target }
    }

    /// Whether roam traces `tid` (since its fork event).
    pub fn is_tracee(&self, tid: Pid) -> bool {
        self.tracees.lock().unwrap().contains(&tid)
    }

    /// A tracee was handed over to another tracer: roam serves its calls from afar now.
    /// Returns whether roam knew it as a tracee (its parent's fork event came first).
    pub fn tracee_handed_over(&self, tid: Pid) -> bool {
        self.tracees.lock().unwrap().remove(&tid)
    }

    /// Tells the user that a debugger could not have `target` (the kernel's reason).
    pub fn hand_over_failed(&self, target: Pid, why: &str) {
        self.report.once(
            format!("hand over {target}"),
            format!("pid {target}: roam could not hand it over to its debugger: {why}; the debugger's request fails with EPERM"),
        );
    }

    /// Reads and resolves every path argument of a call.
    fn places(&self, tid: Pid, spec: &Spec, call: &Syscall) -> Result<Vec<Place>, i32> {
        let mut places = Vec::with_capacity(spec.paths.len());
        let follow = table::follows_last(spec, &call.args);
        for pa in spec.paths {
            let addr = call.args[pa.path];
            let raw = if addr == 0 {
                Vec::new()
            } else {
                memory::read_cstr(tid, addr).map_err(|e| e as i32)?
            };
            let dirfd = pa.dirfd.map(|i| call.args[i] as i32);
            places.push(self.resolver.resolve(tid, dirfd, &raw, follow));
        }
        Ok(places)
    }

    /// A call on a name whose mount lookup failed fails with its errno, told as any other
    /// failure on a roam name.
    fn lookup_failed(&self, tid: Pid, spec: &Spec, place: &Place) -> Option<Decision> {
        let Place::Failed { virt, errno, why } = place else {
            return None;
        };
        if is_ordinary(*errno) {
            tracing::info!("{} {virt}: {why}", spec.name.trim_start_matches("SYS_"));
        } else {
            self.report.error(tid, spec.name, virt, *errno, why);
        }
        Some(Decision::fail(*errno))
    }

    /// Tells the user why a call on a roam name failed (once per message) and fails it.
    /// A missing or existing name is the everyday answer to programs that probe (compilers,
    /// Python, `mkdir -p`), so those are told only with `-v`; every other failure always.
    fn fail_on(&self, tid: Pid, spec: &Spec, node: &Node, err: &roam_vfs::Error) -> Decision {
        let errno = err.errno();
        if is_ordinary(errno) {
            tracing::info!(
                "{} {}: {err} ({})",
                spec.name.trim_start_matches("SYS_"),
                node.virt(),
                report::errno_name(errno)
            );
        } else if err.worth_telling() {
            self.report
                .error(tid, spec.name, node.virt(), errno, &err.to_string());
        }
        Decision::fail(errno)
    }
}

/// Errors that programs provoke on purpose and handle (probing for a name, `mkdir -p`).
fn is_ordinary(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOENT | libc::EEXIST | libc::ENOTEMPTY | libc::ENOTDIR | libc::EISDIR
    )
}

/// The roam node whose copy (a file of the data mirror) `fd` is open on.
fn copy_behind(k: &Kernel, tid: Pid, fd: i32) -> Option<Node> {
    let virt = resolve::fd_target(tid, fd).and_then(|t| k.vfs().unmap_copy(&t))?;
    k.vfs().lookup(&virt).ok().flatten()
}

/// Defers a call about the copy of `node` to a worker.
fn later_on(tid: Pid, call: Syscall, spec: &'static Spec, node: Node) -> Triage {
    Triage::Later(Job {
        tid,
        call,
        spec,
        places: vec![Place::Roam(node)],
    })
}

/// Spells out local names that the program reached through roam's skeleton.
fn rewrite_locals(spec: &Spec, places: &[Place]) -> Decision {
    let args = spec
        .paths
        .iter()
        .zip(places)
        .filter_map(|(pa, place)| match place {
            Place::Local(p) => Some((pa.path, p.clone().into_bytes())),
            _ => None,
        })
        .collect();
    Decision::Rewrite(args)
}

/// The result of serving a call on one node: a decision, or the node and why it failed.
type Served = Result<Decision, (Node, roam_vfs::Error)>;

/// Rewrites path argument `arg` to the local path `p`.
fn rewrite_to(arg: usize, p: &std::path::Path) -> Decision {
    use std::os::unix::ffi::OsStrExt;
    Decision::Rewrite(vec![(arg, p.as_os_str().as_bytes().to_vec())])
}

/// The single roam node of a one-name call, with the register of its name.
fn single_node(job: &Job) -> Option<(usize, &Node)> {
    // Calls about a copy (close, read ...) have a node but no path register.
    let arg = job.spec.paths.first().map_or(0, |p| p.path);
    match job.places.first()? {
        Place::Roam(n) => Some((arg, n)),
        _ => None,
    }
}
