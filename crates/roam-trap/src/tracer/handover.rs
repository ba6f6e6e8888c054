//! Debuggers inside roam: a tracee a debugger asks for is handed over (see
//! `platform::handoff`) and served from afar through a listener of its own (see
//! `kernel::afar`).

use std::sync::mpsc::Sender;
use std::sync::Arc;

use nix::unistd::Pid;

use super::{resume, Tracer, Work};
use crate::kernel::afar::Reply;
use crate::kernel::{Decision, Kernel, Triage};
use crate::platform::handoff::{self, Stop};
use crate::platform::notify::{Listener, Notice};
use crate::platform::ptrace;

impl Tracer {
    /// Debugger thread `tid` (stopped at its ptrace request, stack at `sp`; `at_entry`: at
    /// the request's syscall-entry stop, taken over from the listener) asks to trace
    /// `target`: itself (`PTRACE_TRACEME`, handed over now) or another tracee (interrupted
    /// first; the debugger's request runs once it is handed over).
    pub(super) fn hand_over(&mut self, tid: Pid, sp: u64, target: Pid, at_entry: bool) {
        if target == tid {
            let stop = if at_entry { Stop::Entry } else { Stop::Seccomp };
            if !self.let_go(tid, stop) {
                resume(tid, 0);
            }
            return;
        }
        match nix::sys::ptrace::interrupt(target) {
            Ok(()) => {
                self.handovers.insert(target, (tid, sp));
            }
            // Gone meanwhile: the kernel answers the request.
            Err(_) => self.apply(tid, sp, Decision::Continue, 0),
        }
    }

    /// An interrupted tracee a debugger asked for stopped: hand it over, then let the
    /// debugger's request run.
    pub(super) fn hand_over_asked(&mut self, target: Pid, stop: Stop) {
        let Some((debugger, sp)) = self.handovers.remove(&target) else {
            return;
        };
        if !self.let_go(target, stop) {
            resume(target, 0);
        }
        self.apply(debugger, sp, Decision::Continue, 0);
    }

    /// Hands `tid` over and serves it from afar; false (told to the user) if it failed.
    fn let_go(&mut self, tid: Pid, stop: Stop) -> bool {
        // The filter goes in once per process, for all its threads; the others are only
        // let go (their calls reach the listener already). With roam's own listener,
        // every call roam sees reaches it already: no thread needs a filter.
        let process = handoff::process_key(tid);
        let first = !process.is_some_and(|p| self.handed_processes.contains(&p));
        let listening = self.takeovers.listener.is_some();
        let filter = (first && !listening).then_some(&self.handoff_filter[..]);
        if listening {
            // Before it runs again: its next notification must find it served from afar.
            self.takeovers.afar.lock().unwrap().insert(tid);
        }
        let listener = match handoff::hand_over(tid, stop, filter) {
            Ok(l) => l.map(|l| Arc::new(Listener::new(l))),
            Err(e) => {
                self.takeovers.afar.lock().unwrap().remove(&tid);
                if stop == Stop::Entry {
                    // Its call goes on as the program made it (the kernel refuses a second
                    // tracer), not back to roam's triage.
                    self.takeovers.let_run.expect(tid);
                }
                self.kernel.hand_over_failed(tid, &e.to_string());
                return false;
            }
        };
        tracing::debug!(%tid, "handed over to its debugger");
        self.handed_processes.extend(process);
        if !self.kernel.tracee_handed_over(tid) {
            // Its parent's fork event is still on its way: it must not make it a tracee.
            self.handed_early.insert(tid);
        }
        self.overrides.remove(&tid);
        self.scratch.ended(tid);
        let Some(listener) = listener else {
            return true;
        };
        let (kernel, jobs) = (self.kernel.clone(), self.jobs_for_afar.clone());
        let started = std::thread::Builder::new()
            .name(format!("roam-afar-{tid}"))
            .spawn(move || serve_afar(&kernel, &listener, &jobs));
        if let Err(e) = started {
            self.kernel
                .hand_over_failed(tid, &format!("no thread to serve it: {e}"));
        }
        true
    }
}

/// The listener of a process handed over to a debugger: every call roam would have
/// stopped is answered from afar (see `kernel::afar`), those needing the network by a
/// worker. Ends when no process uses the filter any more.
fn serve_afar(kernel: &Kernel, listener: &Arc<Listener>, jobs: &Sender<Work>) {
    for n in listener.notices("afar listener", true) {
        if !serve_afar_notice(kernel, listener, n, jobs) {
            return;
        }
    }
}

/// Answers one call of a handed-over process from afar, or gives it to a worker when it
/// needs the network. False once the workers are gone.
pub(super) fn serve_afar_notice(
    kernel: &Kernel,
    listener: &Arc<Listener>,
    n: Notice,
    jobs: &Sender<Work>,
) -> bool {
    // The debuggee's own ptrace requests (its PTRACE_TRACEME, made again once handed
    // over) are the kernel's.
    if n.call.nr == libc::SYS_ptrace && n.call.arch == ptrace::AUDIT_ARCH_X86_64 {
        return listener.run_as_is(&n);
    }
    match kernel.triage(n.tid, n.call) {
        Triage::Done(d) => reply_afar(kernel, listener, &n, d),
        Triage::Later(job) => jobs.send(Work::Afar(n, job, listener.clone())).is_ok(),
    }
}

/// Answers a call of a handed-over process with what `decision` comes to from afar.
pub(super) fn reply_afar(
    kernel: &Kernel,
    listener: &Listener,
    n: &Notice,
    decision: Decision,
) -> bool {
    match kernel.afar(n.tid, &n.call, decision) {
        Reply::Run => listener.run_as_is(n),
        Reply::Return(ret) => listener.answer(n, ret),
        Reply::Data { addr, data, ret } => listener.answer_with_data(n, addr, &data, ret),
        Reply::Fd { fd, cloexec, at } => listener.answer_with_fd(n, &fd, cloexec, at),
    }
}
