//! Thin, typed wrappers over the ptrace requests roam uses. All of them must be issued by
//! the one thread that attached (the tracer thread).

use nix::sys::ptrace;
use nix::unistd::Pid;

/// Events every tracee reports: new processes and threads, execs, seccomp traps.
/// `EXITKILL`: if roam dies, no tracee outlives it unsupervised.
pub fn options() -> ptrace::Options {
    use ptrace::Options as O;
    O::PTRACE_O_TRACESECCOMP
        | O::PTRACE_O_TRACESYSGOOD
        | O::PTRACE_O_TRACEFORK
        | O::PTRACE_O_TRACEVFORK
        | O::PTRACE_O_TRACECLONE
        | O::PTRACE_O_TRACEEXEC
        | O::PTRACE_O_EXITKILL
}

/// The system call a tracee is stopped at (from a seccomp stop).
#[derive(Clone, Copy, Debug)]
pub struct Syscall {
    pub arch: u32,
    pub nr: i64,
    pub args: [u64; 6],
    pub sp: u64,
}

pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;

/// `PTRACE_GET_SYSCALL_INFO` at a seccomp stop: number, arguments and stack pointer in one
/// request instead of `GETREGS`.
pub fn syscall_at_stop(pid: Pid) -> nix::Result<Syscall> {
    syscall_info(pid, INFO_SECCOMP)
}

/// `PTRACE_GET_SYSCALL_INFO` at a syscall-entry stop (a call the tracer took over from the
/// listener, restarted under `PTRACE_SYSCALL`).
pub fn syscall_at_entry(pid: Pid) -> nix::Result<Syscall> {
    syscall_info(pid, INFO_ENTRY)
}

/// `struct ptrace_syscall_info` (x86_64) as the kernel lays it out, with the `entry` and
/// `seccomp` members of its union, which both begin with the number and the arguments
/// (nix and the libc crate offer it with glibc only; roam also builds against musl).
#[repr(C)]
#[derive(Default)]
struct SyscallInfo {
    op: u8,
    _pad: [u8; 3],
    arch: u32,
    instruction_pointer: u64,
    stack_pointer: u64,
    nr: u64,
    args: [u64; 6],
    ret_data: u32,
    _pad2: u32,
}

const PTRACE_GET_SYSCALL_INFO: u32 = 0x420e;
const INFO_ENTRY: u8 = 1;
const INFO_SECCOMP: u8 = 3;

/// The call a thread is stopped at, if the stop is of kind `op` (else `EINVAL`).
fn syscall_info(pid: Pid, op: u8) -> nix::Result<Syscall> {
    let mut info = SyscallInfo::default();
    let size = std::mem::size_of::<SyscallInfo>();
    // SAFETY: the kernel writes at most `size` bytes into `info`.
    let r = unsafe {
        libc::ptrace(
            PTRACE_GET_SYSCALL_INFO as _,
            pid.as_raw(),
            size as *mut libc::c_void,
            &mut info as *mut SyscallInfo as *mut libc::c_void,
        )
    };
    nix::errno::Errno::result(r)?;
    if info.op != op {
        return Err(nix::errno::Errno::EINVAL);
    }
    Ok(Syscall {
        arch: info.arch,
        nr: info.nr as i64,
        args: info.args,
        sp: info.stack_pointer,
    })
}

/// Changes argument registers of a thread stopped at a system call (x86_64 ABI).
pub fn set_args(pid: Pid, changes: &[(usize, u64)]) -> nix::Result<()> {
    let mut regs = ptrace::getregs(pid)?;
    for &(i, v) in changes {
        match i {
            0 => regs.rdi = v,
            1 => regs.rsi = v,
            2 => regs.rdx = v,
            3 => regs.r10 = v,
            4 => regs.r8 = v,
            5 => regs.r9 = v,
            _ => unreachable!("x86_64 system calls have six arguments"),
        }
    }
    ptrace::setregs(pid, regs)
}

/// Skips the system call the thread is stopped at and makes it return `ret` (a value, or
/// `-errno`): at a seccomp stop, number -1 skips the call and the return register is kept.
pub fn skip_with(pid: Pid, ret: i64) -> nix::Result<()> {
    let mut regs = ptrace::getregs(pid)?;
    regs.orig_rax = u64::MAX;
    regs.rax = ret as u64;
    ptrace::setregs(pid, regs)
}

/// Makes a thread stopped at a seccomp stop run call `nr` with first argument `arg0`
/// instead of the one it made.
pub fn replace_call(pid: Pid, nr: i64, arg0: u64) -> nix::Result<()> {
    let mut regs = ptrace::getregs(pid)?;
    regs.orig_rax = nr as u64;
    regs.rdi = arg0;
    ptrace::setregs(pid, regs)
}

/// The return value of a thread stopped at a syscall-exit stop.
pub fn return_value(pid: Pid) -> nix::Result<i64> {
    Ok(ptrace::getregs(pid)?.rax as i64)
}

/// Sets the return value of a thread stopped at a syscall-exit stop.
pub fn set_return(pid: Pid, ret: i64) -> nix::Result<()> {
    let mut regs = ptrace::getregs(pid)?;
    regs.rax = ret as u64;
    ptrace::setregs(pid, regs)
}

/// Resumes a thread stopped at a seccomp stop so that it stops again when the call returns.
pub fn resume_to_exit(pid: Pid) -> nix::Result<()> {
    ptrace::syscall(pid, None)
}

/// Resumes a tracee, delivering `sig` (0 for none).
pub fn resume(pid: Pid, sig: i32) -> nix::Result<()> {
    // SAFETY: plain PTRACE_CONT with a signal number as data.
    let r = unsafe { libc::ptrace(libc::PTRACE_CONT, pid.as_raw(), 0, sig as libc::c_long) };
    nix::errno::Errno::result(r).map(drop)
}

/// Leaves a tracee in group-stop while letting roam hear when it is continued.
pub fn listen(pid: Pid) -> nix::Result<()> {
    // SAFETY: plain PTRACE_LISTEN.
    let r = unsafe { libc::ptrace(libc::PTRACE_LISTEN, pid.as_raw(), 0, 0) };
    nix::errno::Errno::result(r).map(drop)
}

/// The call a thread stopped at a system call will make: its number and arguments as its
/// registers hold them now (after roam rewrote them).
pub fn call_in_registers(pid: Pid) -> nix::Result<(i64, [u64; 6])> {
    let r = ptrace::getregs(pid)?;
    Ok((r.orig_rax as i64, [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9]))
}
