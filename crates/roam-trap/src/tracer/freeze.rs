//! Holding a `roam run`'s programs while roam-vfs is suspended (`roam suspend --pid`,
//! `roam snapshot --pid`). roam-vfs's gate stops every change roam serves, but a `write`
//! through a descriptor already open on a copy goes to the cache without roam hearing of
//! it; so once the gate is closed the tracer interrupts every thread it traces
//! (`PTRACE_INTERRUPT`, invisible to the program's parent, unlike `SIGSTOP`) and leaves
//! each at its interrupt stop until the suspension ends. A thread already stopped in
//! roam's hands (at a call a worker serves, or waiting for the answer to a notified call)
//! counts as held: when its call is answered, the interrupt still pending stops it before
//! it runs its own code again.
//!
//! Not held: privileged programs roam runs untraced, and processes handed over to a
//! debugger (roam no longer traces them).

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::eventfd::EventFd;
use nix::unistd::Pid;

use super::{resume, Tracer};

/// What roam-vfs asked for, shared between its suspending thread and the tracer.
pub(super) struct Freezer {
    state: Mutex<Wanted>,
    changed: Condvar,
    /// Wakes the tracer to look.
    wake: Arc<EventFd>,
}

#[derive(Default)]
struct Wanted {
    hold: bool,
    /// Every traced thread is stopped (told by the tracer).
    held: bool,
}

impl Freezer {
    pub(super) fn new(wake: Arc<EventFd>) -> Freezer {
        Freezer {
            state: Mutex::default(),
            changed: Condvar::new(),
            wake,
        }
    }

    fn wanted(&self) -> bool {
        self.state.lock().unwrap().hold
    }

    fn all_held(&self) {
        let mut st = self.state.lock().unwrap();
        if st.hold && !st.held {
            st.held = true;
            self.changed.notify_all();
        }
    }

    fn ask(&self, hold: bool) {
        let mut st = self.state.lock().unwrap();
        st.hold = hold;
        st.held = false;
        drop(st);
        let _ = self.wake.write(1);
    }
}

impl roam_vfs::Holder for Freezer {
    fn hold(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        self.ask(true);
        let mut st = self.state.lock().unwrap();
        while !st.held {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(st);
                self.ask(false);
                return Err(format!("threads still running after {limit:?}"));
            }
            st = self.changed.wait_timeout(st, left).unwrap().0;
        }
        Ok(())
    }

    fn release(&self) {
        self.ask(false);
    }
}

/// The tracer's side of a hold.
#[derive(Default)]
pub(super) struct Hold {
    active: bool,
    /// Interrupted, not yet stopped.
    pending: HashSet<Pid>,
    /// At their interrupt stop, to be resumed when the hold ends.
    held: HashSet<Pid>,
}

impl Hold {
    /// Whether `tid` is still to be stopped (the tracer interrupts it again after each of
    /// its stops: any ptrace stop clears a pending interrupt).
    pub(super) fn awaits(&self, tid: Pid) -> bool {
        self.active && self.pending.contains(&tid)
    }

    /// Whether an interrupt stop of `tid` is one to stay in.
    pub(super) fn keep(&mut self, tid: Pid) -> bool {
        if self.active {
            self.pending.remove(&tid);
            self.held.insert(tid);
        }
        self.active
    }

    /// `tid` is stopped by job control or gone: nothing to hold.
    pub(super) fn forget(&mut self, tid: Pid) {
        self.pending.remove(&tid);
        self.held.remove(&tid);
    }

    /// A thread born during a hold (its parent's fork event): held too.
    pub(super) fn born(&mut self, tid: Pid) {
        if self.active && !self.held.contains(&tid) {
            self.pending.insert(tid);
            interrupt(tid);
        }
    }
}

impl Tracer {
    /// Starts or ends a hold as roam-vfs asks, and tells it once every thread is stopped.
    /// Called whenever the tracer wakes.
    pub(super) fn look_at_hold(&mut self) {
        let wanted = self.freezer.wanted();
        if wanted && !self.hold.active {
            self.hold.active = true;
            for tid in self.kernel.tracee_list() {
                self.hold.pending.insert(tid);
                if !interrupt(tid) {
                    self.hold.pending.remove(&tid);
                }
            }
        } else if !wanted && self.hold.active {
            for tid in std::mem::take(&mut self.hold.held) {
                resume(tid, 0);
            }
            self.hold = Hold::default();
        }
        if self.hold.active && self.hold.pending.iter().all(|t| self.stopped_in_roam(*t)) {
            self.freezer.all_held();
        }
    }

    /// Whether `tid` is stopped at a call roam is serving (a worker's, a notified one
    /// roam has read, or a privileged program's in its place): it runs none of its own
    /// code until roam answers it.
    fn stopped_in_roam(&self, tid: Pid) -> bool {
        self.waiting.contains_key(&tid)
            || self.proxies.values().any(|&t| t == tid)
            || self
                .takeovers
                .listener
                .as_ref()
                .is_some_and(|l| l.holds(tid))
    }
}

/// Interrupts `tid`; false if it is gone.
fn interrupt(tid: Pid) -> bool {
    match nix::sys::ptrace::interrupt(tid) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(%tid, "hold: interrupt: {e}");
            false
        }
    }
}
