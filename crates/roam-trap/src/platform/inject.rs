//! Moving a freshly opened fd to a watched number, by running two system calls inside the
//! tracee on roam's behalf at the open's syscall-exit stop: `fcntl(fd, F_DUPFD, BASE)`
//! (the kernel picks the lowest free number ≥ BASE) and `close_range(fd, fd, 0)`. Each is
//! run by pointing the thread back at its `syscall` instruction with new registers; then
//! the open's own registers come back, returning the new fd. Signals that arrive meanwhile
//! are held and delivered afterwards.

use nix::sys::ptrace;
use nix::unistd::Pid;

use super::seccomp::WATCHED_FD_BASE;

/// Length of the x86_64 `syscall` instruction.
const SYSCALL_INSN: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    OpenExit,
    DupEnter,
    DupExit,
    CloseEnter,
    CloseExit,
}

/// What the tracer does after a step.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Resume to the next syscall stop.
    Step,
    /// Finished: resume normally, delivering any signal held meanwhile.
    Done(i32),
    /// No watched number was free: the fd stays where it is (its reads will not be seen),
    /// so the whole file must be there before the program runs on.
    Unwatched(i32),
}

/// One fd move in progress on one thread.
pub struct FdMove {
    step: Step,
    saved: Option<libc::user_regs_struct>,
    fd: u64,
    moved: u64,
    cloexec: bool,
    held_signal: i32,
}

impl FdMove {
    pub fn new(cloexec: bool) -> FdMove {
        FdMove {
            step: Step::OpenExit,
            saved: None,
            fd: 0,
            moved: 0,
            cloexec,
            held_signal: 0,
        }
    }

    /// A signal arrived during the move: deliver it when done.
    pub fn hold_signal(&mut self, sig: i32) {
        if self.held_signal == 0 {
            self.held_signal = sig;
        }
    }

    /// Advances at a syscall stop of the thread.
    pub fn on_syscall_stop(&mut self, pid: Pid) -> nix::Result<Next> {
        match self.step {
            Step::OpenExit => {
                let regs = ptrace::getregs(pid)?;
                if (regs.rax as i64) < 0 {
                    return Ok(Next::Done(self.held_signal));
                }
                self.fd = regs.rax;
                self.saved = Some(regs);
                let cmd = if self.cloexec {
                    libc::F_DUPFD_CLOEXEC
                } else {
                    libc::F_DUPFD
                };
                self.run(
                    pid,
                    libc::SYS_fcntl,
                    [self.fd, cmd as u64, WATCHED_FD_BASE as u64],
                )?;
                self.step = Step::DupEnter;
            }
            Step::DupEnter => self.step = Step::DupExit,
            Step::DupExit => {
                let ret = ptrace::getregs(pid)?.rax as i64;
                if ret < 0 {
                    self.restore(pid, self.fd)?;
                    return Ok(Next::Unwatched(self.held_signal));
                }
                self.moved = ret as u64;
                self.run(pid, libc::SYS_close_range, [self.fd, self.fd, 0])?;
                self.step = Step::CloseEnter;
            }
            Step::CloseEnter => self.step = Step::CloseExit,
            Step::CloseExit => {
                self.restore(pid, self.moved)?;
                return Ok(Next::Done(self.held_signal));
            }
        }
        Ok(Next::Step)
    }

    /// Points the thread back at its `syscall` instruction with call `nr` and `args`.
    fn run(&self, pid: Pid, nr: i64, args: [u64; 3]) -> nix::Result<()> {
        let mut regs = self.saved.expect("the open's registers are saved first");
        regs.rip -= SYSCALL_INSN;
        regs.rax = nr as u64;
        regs.orig_rax = nr as u64;
        (regs.rdi, regs.rsi, regs.rdx) = (args[0], args[1], args[2]);
        ptrace::setregs(pid, regs)
    }

    /// The open's own registers again, returning `fd`.
    fn restore(&self, pid: Pid, fd: u64) -> nix::Result<()> {
        let mut regs = self.saved.expect("the open's registers are saved first");
        regs.rax = fd;
        ptrace::setregs(pid, regs)
    }
}
