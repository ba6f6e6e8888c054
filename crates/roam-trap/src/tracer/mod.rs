//! The tracer thread's event loop. It alone issues ptrace requests (the kernel requires the
//! attaching thread), never waits on the network, and keeps serving stops of other threads
//! while workers serve slow calls. It wakes on either a tracee stop (SIGCHLD, read through a
//! signalfd) or a finished job (an eventfd); no wake-up can be lost between the two.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::kernel::{AfterExit, Decision, Job, Kernel, Triage};
use crate::platform::handoff::Stop;
use crate::platform::inject::{FdMove, Next};
use crate::platform::notify::{Listener, Notice};
use crate::platform::scratch::Scratch;
use crate::platform::{memory, proxy, ptrace};
use crate::TrapError;
use freeze::{Freezer, Hold};
use handover::reply_afar;
use takeover::{listen, Outlets, Takeover, Takeovers};

mod freeze;
mod handover;
mod interrupt;
mod takeover;

/// How long the tracer polls for the next stop before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Longest sleep of the tracer without looking for stops (see [`Tracer::sleep`]).
const SLEEP_BACKSTOP_MS: i32 = 100;

/// Threads that serve calls needing remote work; each blocks only on its own request.
const WORKERS: usize = 8;

/// Signals the tracer reads from its signalfd instead of being interrupted by them.
pub fn tracer_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    set
}

/// The first program, for the signal handler below.
static MAIN_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward_to_program(sig: libc::c_int) {
    let pid = MAIN_PID.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// SIGTERM/SIGHUP sent to roam are meant for the program: forwarded. SIGINT/SIGQUIT from
/// the terminal reach the program through its process group already: ignored by roam,
/// which ends when the program does.
pub fn route_signals(main: Pid) -> nix::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler};
    MAIN_PID.store(main.as_raw(), std::sync::atomic::Ordering::Relaxed);
    let forward = SigAction::new(
        SigHandler::Handler(forward_to_program),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler only calls kill(2).
    unsafe {
        sigaction(Signal::SIGTERM, &forward)?;
        sigaction(Signal::SIGHUP, &forward)?;
        sigaction(Signal::SIGINT, &ignore)?;
        sigaction(Signal::SIGQUIT, &ignore)?;
    }
    Ok(())
}

/// What a moment of polling found.
enum Polled {
    Status(nix::Result<WaitStatus>),
    /// Finished jobs were carried out.
    Worked,
    Idle,
}

struct Done {
    tid: Pid,
    /// The number of the job of a stopped thread's call ([`Tracer::waiting`]).
    job: Option<u64>,
    sp: u64,
    decision: Decision,
    /// A signal to deliver as the thread resumes.
    sig: i32,
}

pub struct Tracer {
    kernel: Arc<Kernel>,
    main: Pid,
    main_status: Option<i32>,
    jobs: Sender<Work>,
    done: Receiver<Done>,
    wake: Arc<EventFd>,
    signals: SignalFd,
    in_flight: usize,
    /// Threads stopped at a call a worker serves, with the number of its job: a thread
    /// interrupted by a signal meanwhile leaves, and the job's answer is dropped.
    waiting: HashMap<Pid, u64>,
    jobs_sent: u64,
    /// Threads running a call whose result roam finishes at the syscall-exit stop.
    overrides: HashMap<Pid, AfterExit>,
    /// Deliveries started at process exits; the run ends only after them.
    deliveries: Vec<std::thread::JoinHandle<()>>,
    /// Threads whose new fd is being moved to a watched number.
    fd_moves: HashMap<Pid, (FdMove, String)>,
    /// For answers that come from elsewhere than the workers.
    done_tx: Sender<Done>,
    /// Privileged programs roam runs untraced, each with the tracee waiting in its place.
    proxies: HashMap<Pid, Pid>,
    /// Threads whose notified call needs the tracer: the listener left it unanswered.
    takeover_rx: Receiver<Takeover>,
    takeovers: Takeovers,
    /// Tracees a debugger asked for, interrupted to be handed over, each with the
    /// debugger's thread (stopped at its request) and stack pointer.
    handovers: HashMap<Pid, (Pid, u64)>,
    /// The filter of a handed-over process (see `platform::handoff`).
    handoff_filter: Vec<crate::platform::seccomp::Insn>,
    /// Processes whose threads reach a listener of their own (see `platform::handoff`).
    handed_processes: HashSet<(Pid, u64)>,
    /// Children handed over before their parent's fork event was seen.
    handed_early: HashSet<Pid>,
    jobs_for_afar: Sender<Work>,
    /// Where each thread's rewritten names go.
    scratch: Scratch,
    /// What roam-vfs asks while suspended, and the threads held for it (`freeze.rs`).
    freezer: Arc<Freezer>,
    hold: Hold,
}

/// Work for the worker threads: a call stopped in the tracer, a notified one, or one of a
/// process handed over to a debugger (answered through its own listener).
enum Work {
    Stop(Job, u64),
    Notice(Notice, Job),
    Afar(Notice, Job, Arc<Listener>),
}

impl Tracer {
    /// Must be called with [`tracer_signals`] blocked in this thread. `listener`: the
    /// filter's notifications, served by a thread of their own.
    pub fn new(
        kernel: Arc<Kernel>,
        main: Pid,
        listener: Option<OwnedFd>,
    ) -> Result<Tracer, TrapError> {
        let wake = Arc::new(EventFd::from_value_and_flags(
            0,
            EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
        )?);
        let signals = SignalFd::with_flags(
            &tracer_signals(),
            SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
        )?;
        let (jobs, job_rx) = channel::<Work>();
        let (done_tx, done) = channel::<Done>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (takeover_tx, takeover_rx) = channel::<Takeover>();
        let listener = listener.map(|fd| Arc::new(Listener::new(fd)));
        for i in 0..WORKERS {
            let to = Outlets {
                done: done_tx.clone(),
                wake: wake.clone(),
                listener: listener.clone(),
                takeovers: takeover_tx.clone(),
            };
            let (kernel, rx) = (kernel.clone(), job_rx.clone());
            std::thread::Builder::new()
                .name(format!("roam-worker-{i}"))
                .spawn(move || worker(&kernel, &rx, &to))
                .map_err(|e| TrapError::Setup(format!("cannot start a worker thread: {e}")))?;
        }
        kernel.tracee_started(main);
        let mut takeovers = Takeovers::default();
        if let Some(listener) = listener {
            takeovers.listener = Some(listener.clone());
            // Every call roam sees is a notification (see `roam_filter`).
            let table = crate::kernel::table::traced_numbers().into_iter();
            let gated = crate::kernel::table::gated_numbers()
                .into_iter()
                .map(|(nr, _)| nr);
            takeovers.notified = table.chain(gated).collect();
            let to = Outlets {
                done: done_tx.clone(),
                wake: wake.clone(),
                listener: Some(listener.clone()),
                takeovers: takeover_tx,
            };
            let (kernel, let_run, jobs) = (kernel.clone(), takeovers.let_run.clone(), jobs.clone());
            let afar = takeovers.afar.clone();
            std::thread::Builder::new()
                .name("roam-notify".into())
                .spawn(move || listen(&kernel, &listener, &to, &jobs, &let_run, &afar))
                .map_err(|e| TrapError::Setup(format!("cannot start the listener thread: {e}")))?;
        }
        let deliverer = kernel.clone();
        std::thread::Builder::new()
            .name("roam-deliver".into())
            .spawn(move || deliverer.deliver_later())
            .map_err(|e| TrapError::Setup(format!("cannot start the delivery thread: {e}")))?;
        let freezer = Arc::new(Freezer::new(wake.clone()));
        kernel.hold_with(freezer.clone());
        let handoff_filter = crate::platform::seccomp::notify_only(
            &crate::kernel::table::traced_numbers(),
            &crate::kernel::table::gated_numbers(),
        );
        Ok(Tracer {
            kernel,
            main,
            main_status: None,
            jobs_for_afar: jobs.clone(),
            jobs,
            done,
            wake,
            signals,
            in_flight: 0,
            waiting: HashMap::new(),
            jobs_sent: 0,
            overrides: HashMap::new(),
            deliveries: Vec::new(),
            fd_moves: HashMap::new(),
            done_tx,
            proxies: HashMap::new(),
            takeover_rx,
            takeovers,
            handovers: HashMap::new(),
            handoff_filter,
            handed_early: HashSet::new(),
            handed_processes: HashSet::new(),
            scratch: Scratch::default(),
            freezer,
            hold: Hold::default(),
        })
    }

    /// The threads of a process taken over by `roam attach`, whose scratch region is at
    /// `base`.
    pub fn adopt_scratch(&mut self, threads: &[Pid], base: u64) {
        self.scratch.adopt(threads, base);
    }

    /// Serves every tracee until none is left; returns the first program's exit status.
    pub fn run(mut self) -> Result<i32, TrapError> {
        loop {
            self.look_at_hold();
            let status = match self.poll() {
                Polled::Status(s) => s,
                Polled::Worked => continue,
                // Nothing for a moment: sleep, watching tracees, the workers, the
                // listener and roam-vfs's suspensions.
                Polled::Idle => {
                    self.sleep()?;
                    continue;
                }
            };
            match status {
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR) => {}
                Ok(status) => self.on_status(status),
                Err(Errno::ECHILD) => {
                    // Every program is gone: deliver what the last writers left behind.
                    for d in self.deliveries.drain(..) {
                        let _ = d.join();
                    }
                    self.kernel.flush_finished(true);
                    return Ok(self.main_status.unwrap_or(1));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Polls tracees and workers for a moment before the tracer sleeps: a tracee that was
    /// just resumed usually stops again within microseconds, and a tracer still running
    /// then is reached without the cost of waking a sleeping CPU (tens of µs in a VM).
    fn poll(&mut self) -> Polled {
        let until = std::time::Instant::now() + SPIN;
        loop {
            match waitpid(
                None::<Pid>,
                Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
            ) {
                Ok(WaitStatus::StillAlive) => {}
                other => return Polled::Status(other),
            }
            let mut worked = false;
            while let Ok(t) = self.takeover_rx.try_recv() {
                self.take_over(t);
                worked = true;
            }
            while let Ok(d) = self.done.try_recv() {
                self.in_flight -= 1;
                if let Some(job) = d.job {
                    if self.waiting.get(&d.tid) != Some(&job) {
                        continue; // the thread was interrupted: it is no longer there
                    }
                    self.waiting.remove(&d.tid);
                }
                self.apply(d.tid, d.sp, d.decision, d.sig);
                worked = true;
            }
            if worked {
                return Polled::Worked;
            }
            if std::time::Instant::now() >= until {
                return Polled::Idle;
            }
            // Yield, not spin: on a shared CPU the tracee gets it at once.
            std::thread::yield_now();
        }
    }

    /// Blocks until a tracee stops, a job finishes, or roam gets a signal.
    fn sleep(&mut self) -> Result<(), TrapError> {
        let mut fds = [
            libc::pollfd {
                fd: self.signals.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        // A backstop timeout: a SIGCHLD taken by a thread that did not block it (one a
        // library started early) would otherwise leave the tracer asleep for good.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, SLEEP_BACKSTOP_MS) };
        if r < 0 && Errno::last() != Errno::EINTR {
            return Err(Errno::last().into());
        }
        let _ = self.wake.read();
        while let Ok(Some(_)) = self.signals.read_signal() {}
        self.interrupt_signalled();
        Ok(())
    }

    /// Lets go of the threads waiting on a worker that a pending signal will end: their
    /// call fails with EINTR now, and the signal ends them (see `interrupt.rs`). Runs
    /// whenever the tracer wakes from a sleep, at the latest after the backstop.
    fn interrupt_signalled(&mut self) {
        let signalled: Vec<Pid> = self
            .waiting
            .keys()
            .copied()
            .filter(|&tid| interrupt::interrupted(tid))
            .collect();
        for tid in signalled {
            tracing::debug!(%tid, "a fatal signal interrupts the call a worker serves");
            self.waiting.remove(&tid);
            self.takeovers.serving.remove(&tid);
            if let Err(e) = ptrace::skip_with(tid, -i64::from(libc::EINTR)) {
                tracing::debug!(%tid, "interrupt: {e}");
            }
            resume(tid, 0);
        }
    }

    fn on_status(&mut self, status: WaitStatus) {
        let pid = status.pid();
        if let Some(listener) = &self.takeovers.listener {
            // The thread may have left a notified call's wait (a signal, an interrupt):
            // a write into its memory for that call ends before roam lets it run.
            listener.settle();
        }
        self.on_stop(status);
        // A thread to hold that stopped for another reason: ask again.
        if let Some(pid) = pid.filter(|p| self.hold.awaits(*p)) {
            if let Err(e) = nix::sys::ptrace::interrupt(pid) {
                tracing::debug!(%pid, "hold: interrupt again: {e}");
            }
        }
        // A thread a debugger waits for (see `handover`): any ptrace stop clears a pending
        // interrupt, so after a stop other than the one that hands it over, ask again.
        if let Some(pid) = pid.filter(|p| self.handovers.contains_key(p)) {
            if let Err(e) = nix::sys::ptrace::interrupt(pid) {
                tracing::debug!(%pid, "interrupt again: {e}");
            }
        }
    }

    fn on_stop(&mut self, status: WaitStatus) {
        match status {
            WaitStatus::Exited(pid, code) => self.on_exit(pid, code),
            WaitStatus::Signaled(pid, sig, _) => {
                // Killed while it may have been writing: what it wrote is no whole version.
                self.kernel.writer_killed(pid, sig as i32);
                self.on_exit(pid, 128 + sig as i32)
            }
            WaitStatus::Stopped(pid, sig) => match self.fd_moves.get_mut(&pid) {
                Some((mv, _)) => {
                    mv.hold_signal(sig as i32);
                    let _ = nix::sys::ptrace::syscall(pid, None);
                }
                None => resume(pid, sig as i32),
            },
            WaitStatus::PtraceEvent(pid, sig, event) => self.on_event(pid, sig, event),
            WaitStatus::PtraceSyscall(pid) if self.takeovers.to_entry.remove(&pid) => {
                self.on_taken_over(pid)
            }
            WaitStatus::PtraceSyscall(pid) => self.on_syscall_exit(pid),
            _ => {}
        }
    }

    fn on_exit(&mut self, pid: Pid, status: i32) {
        if let Some(waiting) = self.proxies.remove(&pid) {
            // The tracee that exec'd the privileged program ends with its status (a death
            // by signal N as exit status 128+N).
            if let Err(e) = ptrace::replace_call(waiting, libc::SYS_exit_group, status as u64) {
                tracing::debug!(%waiting, "exit in place of a privileged program: {e}");
            }
            return resume(waiting, 0);
        }
        if pid == self.main {
            self.main_status = Some(status);
        }
        if let Some((debugger, sp)) = self.handovers.remove(&pid) {
            // Its debugger's request finds no process (ESRCH, from the kernel).
            self.apply(debugger, sp, Decision::Continue, 0);
        }
        self.overrides.remove(&pid);
        self.takeovers.let_run.forget(pid);
        self.hold.forget(pid);
        self.scratch.ended(pid);
        if self.kernel.tracee_ended(pid) {
            // A writer that exits without close(2) leaves its change to be delivered now;
            // off the tracer thread, which must never wait on the network.
            let kernel = self.kernel.clone();
            self.deliveries.retain(|d| !d.is_finished());
            self.deliveries
                .push(std::thread::spawn(move || kernel.flush_finished(false)));
        }
    }

    /// A syscall stop of a thread whose new fd is being moved (see [`Decision::OpenWatched`]).
    fn on_fd_move(&mut self, pid: Pid) {
        let Some((mv, _)) = self.fd_moves.get_mut(&pid) else {
            return;
        };
        match mv.on_syscall_stop(pid) {
            Ok(Next::Step) => {
                let _ = nix::sys::ptrace::syscall(pid, None);
            }
            Ok(Next::Done(sig)) => {
                self.fd_moves.remove(&pid);
                resume(pid, sig);
            }
            Ok(Next::Unwatched(sig)) => {
                let (_, virt) = self.fd_moves.remove(&pid).expect("present");
                // Reads of this fd will not be seen: the whole file first, off this thread.
                let (kernel, tx, wake) =
                    (self.kernel.clone(), self.done_tx.clone(), self.wake.clone());
                self.in_flight += 1;
                std::thread::spawn(move || {
                    kernel.complete_copy(&virt);
                    let _ = tx.send(Done {
                        tid: pid,
                        job: None,
                        sp: 0,
                        decision: Decision::Continue,
                        sig,
                    });
                    let _ = wake.write(1);
                });
            }
            Err(e) => {
                tracing::debug!(%pid, "fd move: {e}");
                self.fd_moves.remove(&pid);
                resume(pid, 0);
            }
        }
    }

    /// The exit stop of a call whose result roam replaces (see [`Decision::RunThenReturn`]).
    fn on_syscall_exit(&mut self, pid: Pid) {
        if self.fd_moves.contains_key(&pid) {
            return self.on_fd_move(pid);
        }
        if let Some(after) = self.overrides.remove(&pid) {
            if let Err(e) = after.apply(pid) {
                tracing::debug!(%pid, "after exit: {e}");
            }
        }
        resume(pid, 0);
    }

    fn on_event(&mut self, pid: Pid, sig: Signal, event: i32) {
        match event {
            libc::PTRACE_EVENT_SECCOMP if self.handovers.contains_key(&pid) => {
                self.hand_over_asked(pid, Stop::Seccomp)
            }
            libc::PTRACE_EVENT_SECCOMP => self.on_syscall(pid),
            libc::PTRACE_EVENT_STOP
                if (self.handovers.contains_key(&pid) || self.hold.awaits(pid))
                    && (self.fd_moves.contains_key(&pid) || self.overrides.contains_key(&pid)) =>
            {
                // Inside roam's own steps of a call (an fd being moved, a result to finish
                // at the exit stop): they go on; an interrupt waits for the next stop.
                if let Err(e) = nix::sys::ptrace::syscall(pid, None) {
                    tracing::debug!(%pid, "resume within a call: {e}");
                }
            }
            libc::PTRACE_EVENT_STOP if self.handovers.contains_key(&pid) => {
                self.hand_over_asked(pid, Stop::Event)
            }
            libc::PTRACE_EVENT_STOP if is_stopping(sig) => {
                // Group-stop: stay stopped (job control) but keep hearing about the tracee.
                self.hold.forget(pid);
                if let Err(e) = ptrace::listen(pid) {
                    tracing::debug!(%pid, "listen: {e}");
                }
            }
            libc::PTRACE_EVENT_STOP if self.takeovers.interrupted.remove(&pid) => {
                // Out of its wait, the call about to restart: catch it at its entry.
                self.takeovers.to_entry.insert(pid);
                if let Err(e) = nix::sys::ptrace::syscall(pid, None) {
                    tracing::debug!(%pid, "resume to entry: {e}");
                }
            }
            // Held while roam-vfs is suspended: resumed when it resumes.
            libc::PTRACE_EVENT_STOP if self.hold.keep(pid) => {}
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                if let Ok(child) = nix::sys::ptrace::getevent(pid) {
                    let child = Pid::from_raw(child as i32);
                    if !self.handed_early.remove(&child) {
                        // A number a handed-over thread had, now roam's tracee's.
                        self.takeovers.afar.lock().unwrap().remove(&child);
                        self.kernel.tracee_started(child);
                        self.hold.born(child);
                        self.scratch.started(pid, child);
                    }
                }
                resume(pid, 0);
            }
            libc::PTRACE_EVENT_EXEC => {
                // A new program: a scratch region for the names roam rewrites in it.
                let view = self.kernel.fastpath_view(pid);
                let held = match self.scratch.exec(pid, view.as_deref()) {
                    Ok(held) => held,
                    Err(e) => {
                        tracing::debug!(%pid, "scratch region: {e}");
                        0
                    }
                };
                resume(pid, held);
            }
            // Exec/exit events and interrupt stops need nothing from us.
            _ => resume(pid, 0),
        }
    }

    fn on_syscall(&mut self, pid: Pid) {
        match ptrace::syscall_at_stop(pid) {
            Ok(call) => self.serve_stop(pid, call),
            Err(e) => {
                tracing::debug!(%pid, "syscall info: {e}");
                resume(pid, 0)
            }
        }
    }

    /// Serves a thread stopped at system call `call`, now or through a worker.
    fn serve_stop(&mut self, pid: Pid, call: crate::platform::ptrace::Syscall) {
        match self.kernel.triage(pid, call) {
            Triage::Done(d) => self.apply(pid, call.sp, d, 0),
            Triage::Later(job) => {
                self.in_flight += 1;
                self.jobs_sent += 1;
                self.waiting.insert(pid, self.jobs_sent);
                self.jobs
                    .send(Work::Stop(job, self.jobs_sent))
                    .expect("workers live as long as the tracer");
            }
        }
    }

    /// Carries a decision out on a thread stopped at a system call, then resumes it.
    fn apply(&mut self, tid: Pid, sp: u64, decision: Decision, sig: i32) {
        let nr = self.takeovers.serving.remove(&tid);
        // The call goes on into seccomp, whose notification must then let it run: expected
        // once its arguments are final.
        let rerun = nr.is_some_and(|nr| self.takeovers.notified.contains(&nr)) && runs(&decision);
        if let Decision::OpenWatched {
            arg,
            path,
            cloexec,
            virt,
        } = decision
        {
            let len = memory::strings_len(&[&path]);
            let pushed = place(&mut self.scratch, tid, sp, len, |top| {
                memory::push_strings(tid, top, &[&path])
            })
            .and_then(|a| ptrace::set_args(tid, &[(arg, a[0])]));
            if rerun {
                self.takeovers.let_run.expect(tid);
            }
            match pushed.and_then(|()| ptrace::resume_to_exit(tid)) {
                Ok(()) => {
                    self.fd_moves.insert(tid, (FdMove::new(cloexec), virt));
                }
                Err(e) => tracing::debug!(%tid, "open watched: {e}"),
            }
            return;
        }
        if let Decision::HandOver { target } = decision {
            return self.hand_over(tid, sp, target, nr.is_some());
        }
        if let Decision::RunUntraced { path, argv, envp } = decision {
            match proxy::spawn_untraced(tid, &path, &argv, &envp) {
                // The tracee stays stopped at its exec until the program ends.
                Ok(child) => {
                    self.proxies.insert(child, tid);
                }
                Err(e) => {
                    let _ = ptrace::skip_with(tid, -(e as i64));
                    resume(tid, 0);
                }
            }
            return;
        }
        let (decision, after) = match decision {
            Decision::RunThenReturn(ret) => (Decision::Continue, Some(AfterExit::Return(ret))),
            Decision::RewriteThen { args, after } => (Decision::Rewrite(args), Some(after)),
            d => (d, None),
        };
        if let Some(after) = after {
            let carried = carry_out(tid, sp, decision, &mut self.scratch);
            if rerun {
                self.takeovers.let_run.expect(tid);
            }
            match carried.and_then(|()| ptrace::resume_to_exit(tid)) {
                Ok(()) => {
                    self.overrides.insert(tid, after);
                }
                Err(e) => {
                    tracing::debug!(%tid, "resume to exit: {e}");
                    resume(tid, sig);
                }
            }
            return;
        }
        if let Err(e) = carry_out(tid, sp, decision, &mut self.scratch) {
            // ESRCH: the thread died meanwhile (killed, or its process exec'd).
            if e != Errno::ESRCH {
                tracing::warn!(%tid, "could not change the system call: {e}");
                let _ = ptrace::skip_with(tid, -(e as i64));
            }
        }
        if rerun {
            self.takeovers.let_run.expect(tid);
        }
        resume(tid, sig);
    }
}

/// Places `len` bytes of roam's strings for `tid`'s call with `put` (given the top of the
/// memory to fill): in the thread's scratch slot, or else (none, or not mapped after all)
/// below its stack pointer `sp`.
fn place<T>(
    scratch: &mut Scratch,
    tid: Pid,
    sp: u64,
    len: usize,
    put: impl Fn(u64) -> nix::Result<T>,
) -> nix::Result<T> {
    if let Some(top) = scratch.top(tid, len) {
        match put(top) {
            Ok(placed) => return Ok(placed),
            Err(e) => {
                tracing::debug!(%tid, "scratch slot: {e}");
                scratch.ended(tid);
            }
        }
    }
    put(memory::below_red_zone(sp))
}

fn carry_out(tid: Pid, sp: u64, decision: Decision, scratch: &mut Scratch) -> nix::Result<()> {
    match decision {
        // Handled by `apply` before it gets here.
        Decision::Continue
        | Decision::RunThenReturn(_)
        | Decision::RewriteThen { .. }
        | Decision::OpenWatched { .. }
        | Decision::HandOver { .. }
        | Decision::RunUntraced { .. } => Ok(()),
        Decision::Rewrite(args) => {
            let strings: Vec<&[u8]> = args.iter().map(|(_, s)| s.as_slice()).collect();
            let len = memory::strings_len(&strings);
            let addrs = place(scratch, tid, sp, len, |top| {
                memory::push_strings(tid, top, &strings)
            })?;
            let changes: Vec<(usize, u64)> = args.iter().map(|(i, _)| *i).zip(addrs).collect();
            ptrace::set_args(tid, &changes)
        }
        Decision::RewriteAddr { arg, len_arg, addr } => {
            let len = memory::strings_len(&[&addr]);
            let placed = place(scratch, tid, sp, len, |top| {
                memory::push_strings(tid, top, &[&addr])
            })?;
            // With the NUL that follows the name.
            ptrace::set_args(tid, &[(arg, placed[0]), (len_arg, addr.len() as u64 + 1)])
        }
        Decision::Exec {
            path_arg,
            path,
            argv_arg,
            argv,
        } => {
            let len = memory::exec_len(&path, &argv);
            let (p, a) = place(scratch, tid, sp, len, |top| {
                memory::push_exec(tid, top, &path, &argv)
            })?;
            ptrace::set_args(tid, &[(path_arg, p), (argv_arg, a)])
        }
        Decision::Return(ret) => ptrace::skip_with(tid, ret),
        Decision::ReturnData { addr, data, ret } => {
            memory::write(tid, addr, &data)?;
            ptrace::skip_with(tid, ret)
        }
    }
}

/// Whether a decision lets the call itself run (maybe changed) rather than skip it.
fn runs(decision: &Decision) -> bool {
    !matches!(
        decision,
        Decision::Return(_)
            | Decision::ReturnData { .. }
            | Decision::RunUntraced { .. }
            | Decision::HandOver { .. }
    )
}

fn resume(pid: Pid, sig: i32) {
    if let Err(e) = ptrace::resume(pid, sig) {
        tracing::debug!(%pid, "resume: {e}");
    }
}

fn is_stopping(sig: Signal) -> bool {
    matches!(
        sig,
        Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
    )
}

fn worker(kernel: &Kernel, jobs: &Mutex<Receiver<Work>>, to: &Outlets) {
    loop {
        let Ok(work) = jobs.lock().unwrap().recv() else {
            return;
        };
        let going_on = match work {
            Work::Stop(job, number) => {
                let decision = kernel.serve(&job);
                let done = Done {
                    tid: job.tid,
                    job: Some(number),
                    sp: job.call.sp,
                    decision,
                    sig: 0,
                };
                let sent = to.done.send(done).is_ok();
                let _ = to.wake.write(1);
                sent
            }
            Work::Notice(n, job) => to.answer_or_make(kernel, &n, kernel.serve(&job)),
            Work::Afar(n, job, listener) => reply_afar(kernel, &listener, &n, kernel.serve(&job)),
        };
        if !going_on {
            return;
        }
    }
}
