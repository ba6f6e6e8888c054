//! Taking over a running process tree (`roam attach`, Ufo's `ufo -pid`). Every thread of
//! every process in the tree is seized; then one thread of each process is interrupted and
//! made to install roam's seccomp filter for all its threads (`SECCOMP_FILTER_FLAG_TSYNC`):
//! roam points it at a `syscall` instruction of its vDSO with the registers of
//! `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp(2)`, and then puts its own registers back, as
//! the kernel would have left them (an interrupted call is restarted).
//!
//! A seccomp filter cannot be removed, so a process stays filtered after `roam detach`; its
//! trapped calls then cost one ptrace stop each (see docs/SYSCALLS.md).

use std::collections::BTreeSet;

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::unistd::Pid;

use super::memory;
use super::remote_call::{run_syscall, syscall_insn, wait_for, CallError, Seen, Want};
use super::seccomp::Insn;

/// What went wrong while taking over a process.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no process {0}")]
    NoProcess(Pid),
    #[error("cannot trace {pid}: {errno} (tracing another user's process, or one that is not your descendant under yama ptrace_scope ≥ 1, needs CAP_SYS_PTRACE)")]
    Denied { pid: Pid, errno: Errno },
    #[error("{pid}: {what}: {errno}")]
    Sys {
        pid: Pid,
        what: &'static str,
        errno: Errno,
    },
    #[error(transparent)]
    Call(#[from] CallError),
}

fn sys(pid: Pid, what: &'static str) -> impl Fn(Errno) -> AttachError {
    move |errno| AttachError::Sys { pid, what, errno }
}

/// Options for a seized process: those of `roam run` without `EXITKILL` — the process was
/// there before roam and must not die with it.
fn options() -> ptrace::Options {
    super::ptrace::options() - ptrace::Options::PTRACE_O_EXITKILL
}

/// The processes of the tree rooted at `root` (the root first).
pub fn processes(root: Pid) -> Vec<Pid> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        for tid in threads(out[i]) {
            let path = format!("/proc/{}/task/{tid}/children", out[i]);
            let kids = std::fs::read_to_string(path).unwrap_or_default();
            out.extend(
                kids.split_whitespace()
                    .filter_map(|s| s.parse().ok().map(Pid::from_raw)),
            );
        }
        i += 1;
    }
    out
}

/// The threads of process `pid`.
pub fn threads(pid: Pid) -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok().map(Pid::from_raw))
        .collect()
}

/// Seizes every thread of the tree until a pass finds none new (threads and children
/// created meanwhile are either seen by the next pass or attached by the kernel).
pub fn seize_tree(root: Pid) -> Result<BTreeSet<Pid>, AttachError> {
    if !std::path::Path::new(&format!("/proc/{root}")).exists() {
        return Err(AttachError::NoProcess(root));
    }
    let mut seized = BTreeSet::new();
    loop {
        let mut new = 0;
        for pid in processes(root) {
            for tid in threads(pid) {
                if seized.contains(&tid) {
                    continue;
                }
                match ptrace::seize(tid, options()) {
                    Ok(()) => {}
                    // Ended meanwhile.
                    Err(Errno::ESRCH) => continue,
                    // A child forked meanwhile, which the kernel attached to roam already.
                    Err(Errno::EPERM) if traced_by_me(tid) => {}
                    Err(errno) => return Err(AttachError::Denied { pid: tid, errno }),
                }
                seized.insert(tid);
                new += 1;
            }
        }
        if new == 0 {
            return Ok(seized);
        }
    }
}

/// Whether process `pid` already runs under a seccomp filter.
pub fn is_filtered(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2'))
    })
}

/// Makes seized thread `tid` install `filter` for every thread of its process, and map a
/// scratch region (see `platform::scratch`). Returns what the thread did meanwhile
/// (children attached by the kernel) and where the region is, if it could be mapped.
pub fn install_filter(tid: Pid, filter: &[Insn]) -> Result<(Seen, Option<u64>), AttachError> {
    let mut seen = Seen::default();
    ptrace::interrupt(tid).map_err(sys(tid, "PTRACE_INTERRUPT"))?;
    wait_for(tid, &mut seen, Want::EventStop)?;
    let saved = ptrace::getregs(tid).map_err(sys(tid, "PTRACE_GETREGS"))?;
    let mut base = saved;
    base.rip = syscall_insn(tid, &saved)?;
    let fprog_at = filter_on_stack(tid, &mut base, filter)?;
    let mut call =
        |nr: i64, [a, b, c]: [u64; 3]| run_syscall(tid, &base, nr, [a, b, c, 0, 0, 0], &mut seen);
    // Without CAP_SYS_ADMIN a filter needs no_new_privs; TSYNC spreads it to every thread.
    if !is_root(tid) {
        let r = call(libc::SYS_prctl, [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0])?;
        Errno::result(r).map_err(sys(tid, "prctl(PR_SET_NO_NEW_PRIVS)"))?;
    }
    let r = call(
        libc::SYS_seccomp,
        [
            libc::SECCOMP_SET_MODE_FILTER as u64,
            libc::SECCOMP_FILTER_FLAG_TSYNC | super::seccomp::SPEC_ALLOW,
            fprog_at,
        ],
    )?;
    if r != 0 {
        // TSYNC answers with the id of a thread it could not synchronise.
        let errno = if r > 0 {
            Errno::EBUSY
        } else {
            Errno::from_raw(-r as i32)
        };
        return Err(AttachError::Sys {
            pid: tid,
            what: "seccomp(SECCOMP_SET_MODE_FILTER, TSYNC)",
            errno,
        });
    }
    // Without a region the thread's names are rewritten on its stack: not worth failing for.
    let scratch = super::scratch::map_from(tid, &base, &mut seen)
        .map_err(|e| tracing::debug!(%tid, "scratch region: {e}"))
        .ok();
    ptrace::setregs(tid, as_the_kernel_would_resume(saved)).map_err(sys(tid, "PTRACE_SETREGS"))?;
    super::ptrace::resume(tid, seen.held).map_err(sys(tid, "PTRACE_CONT"))?;
    Ok((seen, scratch))
}

/// Writes `filter` and its `sock_fprog` below the red zone of the stack of `base` (the
/// registers a call will run from), moving its stack pointer below them. Returns the
/// address of the `sock_fprog`.
pub fn filter_on_stack(
    tid: Pid,
    base: &mut libc::user_regs_struct,
    filter: &[Insn],
) -> Result<u64, CallError> {
    let prog_bytes = insns_bytes(filter);
    let prog_at = (base.rsp - 128 - prog_bytes.len() as u64) & !15;
    let fprog_at = prog_at - 16;
    let mut fprog = Vec::with_capacity(16);
    fprog.extend_from_slice(&(filter.len() as u64).to_ne_bytes());
    fprog.extend_from_slice(&prog_at.to_ne_bytes());
    let writing = super::remote_call::sys(tid, "writing the filter");
    memory::write(tid, prog_at, &prog_bytes).map_err(&writing)?;
    memory::write(tid, fprog_at, &fprog).map_err(&writing)?;
    base.rsp = fprog_at & !15;
    Ok(fprog_at)
}

/// The registers of an interrupted thread as the kernel's signal path would resume it
/// when no handler runs: an interrupted call is restarted.
pub fn as_the_kernel_would_resume(mut regs: libc::user_regs_struct) -> libc::user_regs_struct {
    const ERESTARTSYS: i64 = 512;
    const ERESTARTNOINTR: i64 = 513;
    const ERESTARTNOHAND: i64 = 514;
    const ERESTART_RESTARTBLOCK: i64 = 516;
    if (regs.orig_rax as i64) >= 0 {
        match -(regs.rax as i64) {
            ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => {
                regs.rax = regs.orig_rax;
                regs.rip -= 2;
            }
            ERESTART_RESTARTBLOCK => {
                regs.rax = libc::SYS_restart_syscall as u64;
                regs.rip -= 2;
            }
            _ => {}
        }
    }
    regs.orig_rax = u64::MAX;
    regs
}

fn insns_bytes(prog: &[Insn]) -> Vec<u8> {
    prog.iter()
        .flat_map(|i| {
            let mut b = Vec::with_capacity(8);
            b.extend_from_slice(&i.code.to_ne_bytes());
            b.push(i.jt);
            b.push(i.jf);
            b.extend_from_slice(&i.k.to_ne_bytes());
            b
        })
        .collect()
}

/// Whether roam is the tracer of `tid` (`TracerPid:` in its status).
pub fn traced_by_me(tid: Pid) -> bool {
    let me = std::process::id().to_string();
    std::fs::read_to_string(format!("/proc/{tid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .is_some_and(|t| t.trim() == me)
    })
}

/// Whether the process runs as root (then it may install a filter without no_new_privs).
fn is_root(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(rax: i64, orig: i64, rip: u64) -> libc::user_regs_struct {
        // SAFETY: an all-zero register set is a valid value of this plain C struct.
        let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        (r.rax, r.orig_rax, r.rip) = (rax as u64, orig as u64, rip);
        r
    }

    #[test]
    fn interrupted_calls_are_restarted_as_the_kernel_would() {
        let r = as_the_kernel_would_resume(regs(-512, libc::SYS_read, 0x1002));
        assert_eq!(
            (r.rax, r.rip, r.orig_rax),
            (libc::SYS_read as u64, 0x1000, u64::MAX)
        );
        let r = as_the_kernel_would_resume(regs(-516, libc::SYS_nanosleep, 0x1002));
        assert_eq!((r.rax, r.rip), (libc::SYS_restart_syscall as u64, 0x1000));
        // A finished call (or user code) is left as it was.
        let r = as_the_kernel_would_resume(regs(5, libc::SYS_read, 0x1002));
        assert_eq!((r.rax, r.rip), (5, 0x1002));
        let r = as_the_kernel_would_resume(regs(-512, -1, 0x1002));
        assert_eq!((r.rax as i64, r.rip), (-512, 0x1002));
    }
}
