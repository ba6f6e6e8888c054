//! Calls the tracer takes over from the listener (the default on Linux 6.6+, see
//! `platform::notify` and `roam_filter`):
//! the listener thread answers what needs nothing of the thread, workers answer what needs
//! the network, and a call that needs the thread (a roam name whose path must be
//! rewritten) goes to the tracer, which interrupts the thread, lets it out of its wait
//! with a restart, and serves the call made again at its syscall-entry stop.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use nix::sys::eventfd::EventFd;
use nix::unistd::Pid;

use super::{resume, Done, Tracer, Work};
use crate::kernel::afar::acts_as_roam;
use crate::kernel::{AfterExit, Decision, Kernel, Triage};
use crate::platform::notify::{Listener, Notice};
use crate::platform::ptrace;

/// A notified call left to the tracer, with the decision a worker already made for it
/// (applied at the entry stop if the call found there is the same one).
pub(super) struct Takeover {
    pub(super) notice: Notice,
    pub(super) made: Option<(i64, [u64; 6], Decision)>,
}

/// Calls the tracer takes over from the listener (see `platform::notify`): the thread is
/// interrupted out of its wait, then resumed to the restarted call's syscall-entry stop,
/// which is served as a seccomp stop would be. Its next notification (the same call, on
/// its way) is then let run.
#[derive(Default)]
pub(super) struct Takeovers {
    /// Interrupted; waiting for the interrupt stop.
    pub(super) interrupted: HashSet<Pid>,
    /// Resumed towards the restarted call's entry stop.
    pub(super) to_entry: HashSet<Pid>,
    /// Being served at an entry stop, with the number of the call found there.
    pub(super) serving: HashMap<Pid, i64>,
    /// The calls that reach roam as notifications: only their next notification may be let
    /// run (any other call found at an entry stop leaves no such token behind).
    pub(super) notified: HashSet<i64>,
    /// Decisions made for calls being taken over.
    pub(super) made: HashMap<Pid, (i64, [u64; 6], Decision)>,
    /// Shared with the listener thread: the calls to let run as they are ([`LetRun`]).
    pub(super) let_run: Arc<LetRun>,
    /// The listener a thread of roam's serves (which may hand calls over at any time, and
    /// whose interrupted threads the tracer lets out of their wait).
    pub(super) listener: Option<Arc<Listener>>,
    /// Threads handed over to a debugger: the listener serves their calls from afar.
    pub(super) afar: Arc<Mutex<HashSet<Pid>>>,
}

/// Calls served at their entry stop and on their way: each thread's notification of that
/// very call (its number and arguments, as roam left them) is let run as is. Only that
/// call: a signal that keeps it from reaching roam (the kernel then makes it again after
/// the handler, or fails it with `EINTR`) must not let the program's next call, or its
/// retry with its own arguments, run unserved (a `stat` of a roam name retried after
/// `EINTR` failed with `ENOENT`).
#[derive(Default)]
pub(super) struct LetRun(Mutex<HashMap<Pid, (i64, [u64; 6])>>);

impl LetRun {
    /// Lets `tid`'s call run as its registers now hold it.
    pub(super) fn expect(&self, tid: Pid) {
        match ptrace::call_in_registers(tid) {
            Ok(call) => {
                self.0.lock().unwrap().insert(tid, call);
            }
            Err(e) => tracing::debug!(%tid, "let run: {e}"),
        }
    }

    /// Whether `n` is the call expected of its thread (then expected no more).
    fn take(&self, n: &Notice) -> bool {
        let mut expected = self.0.lock().unwrap();
        let matches = expected.get(&n.tid) == Some(&(n.call.nr, n.call.args));
        if matches {
            expected.remove(&n.tid);
        }
        matches
    }

    /// `tid` ended.
    pub(super) fn forget(&self, tid: Pid) {
        self.0.lock().unwrap().remove(&tid);
    }
}

impl Tracer {
    /// The listener left a call to the tracer: interrupt the thread, then let it out of
    /// its wait (killable only: the interrupt alone does not end it) with a restart, so
    /// that it stops on its way back and makes the call again.
    pub(super) fn take_over(&mut self, t: Takeover) {
        let tid = t.notice.tid;
        match nix::sys::ptrace::interrupt(tid) {
            Ok(()) => {
                self.takeovers.interrupted.insert(tid);
                if let Some(made) = t.made {
                    self.takeovers.made.insert(tid, made);
                }
                if let Some(listener) = &self.takeovers.listener {
                    listener.restart(&t.notice);
                }
            }
            Err(e) => tracing::debug!(%tid, "interrupt: {e}"),
        }
    }

    /// The entry stop of a call taken over from the listener: served as a seccomp stop,
    /// with the decision a worker made for it if it is the same call.
    pub(super) fn on_taken_over(&mut self, pid: Pid) {
        let made = self.takeovers.made.remove(&pid);
        match ptrace::syscall_at_entry(pid) {
            Ok(call) => {
                self.takeovers.serving.insert(pid, call.nr);
                match made {
                    Some((nr, args, d)) if nr == call.nr && args == call.args => {
                        self.apply(pid, call.sp, d, 0)
                    }
                    _ => self.serve_stop(pid, call),
                }
            }
            Err(e) => {
                tracing::debug!(%pid, "syscall info at entry: {e}");
                resume(pid, 0)
            }
        }
    }
}

/// Where workers and the listener send what they found.
pub(super) struct Outlets {
    pub(super) done: Sender<Done>,
    pub(super) wake: Arc<EventFd>,
    pub(super) listener: Option<Arc<Listener>>,
    pub(super) takeovers: Sender<Takeover>,
}

impl Outlets {
    /// Answers a notified call with `decision` if it needs nothing of the thread, else
    /// leaves it to the tracer. Returns false once the tracer is gone.
    pub(super) fn answer(&self, n: &Notice, decision: Option<Decision>) -> bool {
        let listener = self
            .listener
            .as_ref()
            .expect("notices come from a listener");
        let decision = match decision {
            Some(Decision::Continue) => return listener.run_as_is(n),
            Some(Decision::Return(ret)) => return listener.answer(n, ret),
            Some(Decision::ReturnData { addr, data, ret }) => {
                return listener.answer_with_data(n, addr, &data, ret)
            }
            d => d,
        };
        let made = decision.map(|d| (n.call.nr, n.call.args, d));
        let notice = n.clone();
        if self.takeovers.send(Takeover { notice, made }).is_err() {
            return false;
        }
        let _ = self.wake.write(1);
        true
    }
}

impl Outlets {
    /// Answers a notified call with `decision`. A stat or a read-only open of a roam name
    /// that roam rewrote into its cache is made by roam itself and its result handed over
    /// (`kernel::afar`: the `struct stat` written into the program's buffer, the fd
    /// installed with `SECCOMP_IOCTL_NOTIF_ADDFD`), which costs no stop of the thread; and
    /// so is any rewrite for a thread acting with credentials other than roam's (the kernel
    /// would refuse it roam's private paths). Anything else that changes the call is left
    /// to the tracer.
    pub(super) fn answer_or_make(&self, kernel: &Kernel, n: &Notice, decision: Decision) -> bool {
        let rewrites = matches!(
            decision,
            Decision::Rewrite(_)
                | Decision::RewriteThen { .. }
                | Decision::OpenWatched { .. }
                | Decision::RewriteAddr { .. }
        );
        match self.listener.as_ref() {
            Some(listener)
                if made_from_afar(kernel, n, &decision) || rewrites && !acts_as_roam(n.tid) =>
            {
                super::handover::reply_afar(kernel, listener, n, decision)
            }
            _ => self.answer(n, Some(decision)),
        }
    }
}

/// The calls roam makes itself for a thread it traces (no stop): stats whose name (or fd)
/// it rewrote into its cache, answered as the remote file's, and opens that only read
/// what roam rewrote their name to in its cache (a whole copy, a skeleton directory),
/// whose fd the kernel numbers in the program as its own open would. An open at a
/// watched number (a copy being written or arriving in ranges) keeps the tracer's way.
/// Whether the thread acts as roam does not matter to them: roam looks only at its own
/// entries, and checks an open's permission for a thread acting as another user first
/// (`kernel::afar`).
fn made_from_afar(kernel: &Kernel, n: &Notice, decision: &Decision) -> bool {
    if !crate::from_afar() {
        return false;
    }
    match decision {
        Decision::RewriteThen {
            after: AfterExit::RemoteStat { .. },
            ..
        } => matches!(
            n.call.nr,
            libc::SYS_stat | libc::SYS_lstat | libc::SYS_newfstatat | libc::SYS_statx
        ),
        Decision::Rewrite(args) => {
            crate::kernel::open::only_reads(&n.call) && kernel.opens_own_entry(args)
        }
        _ => false,
    }
}

/// Whether `tid` is a thread roam no longer traces (handed over to a debugger, or a child
/// of one): its calls are answered from afar, since the tracer cannot take them over.
fn served_from_afar(kernel: &Kernel, afar: &Mutex<HashSet<Pid>>, tid: Pid) -> bool {
    // The handed-over set first: a thread joins it before roam lets it go.
    let mut afar = afar.lock().unwrap();
    if afar.contains(&tid) {
        return true;
    }
    if kernel.is_tracee(tid) {
        return false;
    }
    // Neither: a new child whose fork event is still on its way (roam traces it from its
    // birth), or a thread of a handed-over process.
    if crate::platform::attach::traced_by_me(tid) {
        return false;
    }
    afar.insert(tid);
    true
}

/// The listener thread: answers notified calls that need nothing of the tracer at once,
/// gives workers those that need the network but may be answered from afar, and hands the
/// others to the tracer.
pub(super) fn listen(
    kernel: &Kernel,
    listener: &Arc<Listener>,
    to: &Outlets,
    jobs: &Sender<Work>,
    let_run: &LetRun,
    afar: &Mutex<HashSet<Pid>>,
) {
    for n in listener.notices("listener", false) {
        if let_run.take(&n) {
            listener.run_as_is(&n);
            continue;
        }
        if served_from_afar(kernel, afar, n.tid) {
            if !super::handover::serve_afar_notice(kernel, listener, n, jobs) {
                return;
            }
            continue;
        }
        let answered = match kernel.triage(n.tid, n.call) {
            Triage::Done(d) => to.answer_or_make(kernel, &n, d),
            Triage::Later(job) if job.answerable_from_afar() || !acts_as_roam(n.tid) => {
                jobs.send(Work::Notice(n, job)).is_ok()
            }
            Triage::Later(_) => to.answer(&n, None),
        };
        if !answered {
            return;
        }
    }
}
