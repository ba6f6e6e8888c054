//! Running system calls inside a stopped tracee on roam's behalf (attach installs its
//! filter this way; the fast path maps its handler at each exec): the thread is pointed at
//! a `syscall` instruction with the call's registers, run to the call's exit stop, and its
//! own registers are put back by the caller. Other stops of the thread meanwhile are
//! passed over: new tracees are noted and a signal is held for later delivery.

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::memory;

/// Why a system call could not be run in a tracee.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{pid}: {what}: {errno}")]
    Sys {
        pid: Pid,
        what: &'static str,
        errno: Errno,
    },
    #[error("{0} has no `syscall` instruction roam can borrow (no vDSO)")]
    NoSyscallInsn(Pid),
    #[error("{0} ended while roam was preparing it")]
    Gone(Pid),
}

pub fn sys(pid: Pid, what: &'static str) -> impl Fn(Errno) -> CallError {
    move |errno| CallError::Sys { pid, what, errno }
}

/// What a thread did while roam ran calls in it.
#[derive(Default)]
pub struct Seen {
    /// Children and threads the kernel attached to roam meanwhile.
    pub new_tracees: Vec<Pid>,
    /// A signal that arrived, to deliver when roam is done with the thread.
    pub held: i32,
}

#[derive(PartialEq)]
pub enum Want {
    EventStop,
    SyscallStop,
}

/// Waits for the next stop of `tid` of the kind wanted, resuming it past others.
pub fn wait_for(tid: Pid, seen: &mut Seen, want: Want) -> Result<(), CallError> {
    loop {
        match waitpid(tid, Some(WaitPidFlag::__WALL)).map_err(sys(tid, "waitpid"))? {
            WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_STOP) if want == Want::EventStop => {
                return Ok(())
            }
            WaitStatus::PtraceSyscall(_) if want == Want::SyscallStop => return Ok(()),
            WaitStatus::PtraceEvent(_, _, event) => {
                if matches!(
                    event,
                    libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE
                ) {
                    if let Ok(child) = ptrace::getevent(tid) {
                        seen.new_tracees.push(Pid::from_raw(child as i32));
                    }
                }
                resume_for(tid, &want)?;
            }
            WaitStatus::Stopped(_, sig) => {
                seen.held = sig as i32;
                resume_for(tid, &want)?;
            }
            WaitStatus::Exited(..) | WaitStatus::Signaled(..) => return Err(CallError::Gone(tid)),
            _ => resume_for(tid, &want)?,
        }
    }
}

fn resume_for(tid: Pid, want: &Want) -> Result<(), CallError> {
    match want {
        Want::EventStop => ptrace::cont(tid, None),
        Want::SyscallStop => ptrace::syscall(tid, None),
    }
    .map_err(sys(tid, "resuming"))
}

/// Runs system call `nr` in stopped thread `tid` from registers `base` (pointing at a
/// `syscall` instruction); returns its raw result. The thread stays stopped after it.
pub fn run_syscall(
    tid: Pid,
    base: &libc::user_regs_struct,
    nr: i64,
    args: [u64; 6],
    seen: &mut Seen,
) -> Result<i64, CallError> {
    let mut regs = *base;
    regs.rax = nr as u64;
    // Not in a call: the kernel must not try to restart anything on the way out.
    regs.orig_rax = u64::MAX;
    (regs.rdi, regs.rsi, regs.rdx) = (args[0], args[1], args[2]);
    (regs.r10, regs.r8, regs.r9) = (args[3], args[4], args[5]);
    ptrace::setregs(tid, regs).map_err(sys(tid, "PTRACE_SETREGS"))?;
    for _ in 0..2 {
        // Entry stop, then exit stop.
        ptrace::syscall(tid, None).map_err(sys(tid, "PTRACE_SYSCALL"))?;
        wait_for(tid, seen, Want::SyscallStop)?;
    }
    Ok(ptrace::getregs(tid)
        .map_err(sys(tid, "PTRACE_GETREGS"))?
        .rax as i64)
}

/// The address of a `syscall` instruction in `tid`'s vDSO (or the one the thread is in).
pub fn syscall_insn(tid: Pid, regs: &libc::user_regs_struct) -> Result<u64, CallError> {
    let is_syscall = |at: u64| {
        let mut b = [0u8; 2];
        memory::read(tid, at, &mut b).is_ok_and(|n| n == 2) && b == [0x0f, 0x05]
    };
    if (regs.orig_rax as i64) >= 0 && is_syscall(regs.rip - 2) {
        return Ok(regs.rip - 2);
    }
    let maps = std::fs::read_to_string(format!("/proc/{tid}/maps")).unwrap_or_default();
    let range = maps.lines().find(|l| l.ends_with("[vdso]")).and_then(|l| {
        let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
        Some((
            u64::from_str_radix(lo, 16).ok()?,
            u64::from_str_radix(hi, 16).ok()?,
        ))
    });
    let (lo, hi) = range.ok_or(CallError::NoSyscallInsn(tid))?;
    let mut vdso = vec![0u8; (hi - lo) as usize];
    let n = memory::read(tid, lo, &mut vdso).map_err(sys(tid, "reading the vDSO"))?;
    vdso[..n]
        .windows(2)
        .position(|w| w == [0x0f, 0x05])
        .map(|i| lo + i as u64)
        .ok_or(CallError::NoSyscallInsn(tid))
}
