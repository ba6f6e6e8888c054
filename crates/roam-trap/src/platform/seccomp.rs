//! The seccomp-BPF filter installed in the first tracee (and inherited by every child):
//! it stops the tracee (`SECCOMP_RET_TRACE`) only for the system calls roam must see and
//! lets every other call run at native speed.
//!
//! Calls of a foreign ABI (i386 via `int 0x80`, x32) are always trapped: their numbers mean
//! other calls, so the tracer must see them to notice, instead of misreading them.
//!
//! A call roam would trap is let through when it comes from the fast path's gadget page
//! (`platform::fastpath`): the preloaded library makes the calls it has decided are local
//! there. The test of the instruction pointer is made only on the way to a trap, so calls
//! allowed whatever their arguments stay ones the kernel's verdict cache can skip the filter
//! for.

use super::fastpath::{GADGET, PAGE};

/// `struct sock_filter` of classic BPF.
pub type Insn = libc::sock_filter;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `offsetof(struct seccomp_data, nr)` and `offsetof(struct seccomp_data, arch)`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, instruction_pointer)`: low word, then high word.
const OFF_IP: u32 = 8;
const OFF_ARGS: u32 = 16;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// Lowest fd number roam gives the copies it watches (large files fetched in ranges): calls
/// that read from an fd are trapped only at or above it.
pub const WATCHED_FD_BASE: u32 = 800;

/// Builds the filter that stops exactly `traced` (x86_64 numbers), the calls of `gated`
/// (number, register of an fd) when that fd is a watched one (at least
/// [`WATCHED_FD_BASE`]; never a negative one such as an anonymous mmap's -1), and every
/// foreign call, as ptrace stops (`SECCOMP_RET_TRACE`).
pub fn filter(traced: &[i64], gated: &[(i64, usize)]) -> Vec<Insn> {
    build(traced, gated, libc::SECCOMP_RET_TRACE)
}

/// The same calls as seccomp notifications to a listener (`SECCOMP_RET_USER_NOTIF`, see
/// `platform::notify`): roam's own listener under `roam run` (the default on Linux 6.6+),
/// or, stacked on the first filter, the listener of a process handed over to another
/// tracer (a debugger, see `platform::handoff`): the kernel takes the verdict of highest
/// precedence, and `USER_NOTIF` outranks `TRACE` (which, with roam no longer the tracer,
/// would fail the call with ENOSYS).
pub fn notify_only(traced: &[i64], gated: &[(i64, usize)]) -> Vec<Insn> {
    build(traced, gated, libc::SECCOMP_RET_USER_NOTIF)
}

/// The filter: `trap` is the verdict of the calls roam must see.
fn build(traced: &[i64], gated: &[(i64, usize)], trap: u32) -> Vec<Insn> {
    use Label::*;
    let mut b = Builder::default();
    b.stmt(BPF_LD_W_ABS, OFF_ARCH);
    // Native arch: go on; otherwise trace.
    b.jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, Next, Foreign);
    b.stmt(BPF_LD_W_ABS, OFF_NR);
    b.jump(BPF_JGE_K, X32_SYSCALL_BIT, Foreign, Next);
    // Gated calls first: they include read(2), the most frequent call, whose filter run
    // (it depends on an argument, so the kernel cannot cache its verdict) stays short.
    for &(nr, arg) in gated {
        // Not this call: skip the block, the number still in the accumulator.
        b.jump(BPF_JEQ_K, nr as u32, Next, Skip(3));
        // The low 32 bits of the argument (fds are ints).
        b.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * arg as u32);
        b.jump(BPF_JGE_K, 0x8000_0000, Allow, Next);
        b.jump(BPF_JGE_K, WATCHED_FD_BASE, Trace, Allow);
    }
    for &nr in traced {
        b.jump(BPF_JEQ_K, nr as u32, Trace, Next);
    }
    // Jumps go forward only: the verdicts come last.
    b.at(Allow);
    b.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    b.at(Trace);
    // From the gadget page (the instruction pointer is just past its `syscall`): allowed.
    let (page, page_hi) = (GADGET as u32, (GADGET >> 32) as u32);
    b.stmt(BPF_LD_W_ABS, OFF_IP + 4);
    b.jump(BPF_JEQ_K, page_hi, Next, Foreign);
    b.stmt(BPF_LD_W_ABS, OFF_IP);
    b.jump(BPF_JGE_K, page + PAGE, Foreign, Next);
    b.jump(BPF_JGE_K, page, Gadget, Foreign);
    b.at(Foreign);
    b.stmt(BPF_RET_K, trap);
    b.at(Gadget);
    b.stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW);
    b.finish()
}

/// Where a jump goes: the next instruction, `n` instructions further, or a named block.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    Next,
    Skip(usize),
    Allow,
    /// A call roam must see, unless it comes from the gadget page.
    Trace,
    /// A call roam must see.
    Foreign,
    /// A call from the gadget page.
    Gadget,
}

/// A classic-BPF program with forward jumps to labels, resolved at the end (every jump of a
/// linear filter must reach at most 255 instructions ahead).
#[derive(Default)]
struct Builder {
    prog: Vec<Insn>,
    jumps: Vec<(usize, Label, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Builder {
    fn stmt(&mut self, code: u16, k: u32) {
        self.prog.push(stmt(code, k));
    }

    fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) {
        self.jumps.push((self.prog.len(), jt, jf));
        self.prog.push(jump(code, k, 0, 0));
    }

    fn at(&mut self, label: Label) {
        self.labels.push((label, self.prog.len()));
    }

    fn finish(mut self) -> Vec<Insn> {
        for &(from, jt, jf) in &self.jumps {
            let offset = |l: Label| {
                let target = match l {
                    Label::Next => from + 1,
                    Label::Skip(n) => from + 1 + n,
                    named => {
                        self.labels
                            .iter()
                            .find(|(k, _)| *k == named)
                            .expect("every label used is placed")
                            .1
                    }
                };
                let off = target - from - 1;
                assert!(off < 256, "a filter jump reaches at most 255 instructions");
                off as u8
            };
            (self.prog[from].jt, self.prog[from].jf) = (offset(jt), offset(jf));
        }
        self.prog
    }
}

/// Every filter roam installs leaves the program's speculation mitigations as they were.
/// Without this flag, kernels whose policy is `spec_store_bypass_disable=seccomp` (the
/// default before 5.16) force SSBD (and `spectre_v2_user=seccomp`: STIBP) on any process
/// with a filter, slowing all of its code, not just the calls roam sees. roam's filter
/// is an interposition device, not a sandbox: the program keeps the mitigations it would
/// have had natively.
pub const SPEC_ALLOW: libc::c_ulong = libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW;

/// Installs `prog` in the calling process; with `listener`, also returns a new listener fd
/// for its notifications (else 0). Returns -1 on failure. Async-signal-safe: called
/// between fork and exec.
///
/// # Safety
/// `prog` must be a valid filter; the call must happen in the child after `fork`.
pub unsafe fn install(prog: &[Insn], no_new_privs: bool, listener: bool) -> libc::c_long {
    if no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        return -1;
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut Insn,
    };
    // A thread whose call roam has read waits for it killably (see `notify`).
    let flags = if listener {
        SPEC_ALLOW
            | libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
            | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
    } else {
        SPEC_ALLOW
    };
    libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        flags,
        &fprog as *const libc::sock_fprog,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny classic-BPF interpreter, enough to check the jumps of our filter.
    fn run(prog: &[Insn], arch: u32, nr: u32) -> u32 {
        run_with_arg(prog, arch, nr, 0)
    }

    /// Runs the filter with every argument register equal to `arg`.
    fn run_with_arg(prog: &[Insn], arch: u32, nr: u32, arg: u32) -> u32 {
        run_with_args(prog, arch, nr, [arg as u64; 6])
    }

    fn run_with_args(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        run_at(prog, arch, nr, args, 0x40_1000)
    }

    /// Runs the filter for a call made with the instruction pointer at `ip`.
    fn run_at(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6], ip: u64) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            match i.code {
                BPF_LD_W_ABS => {
                    acc = match i.k {
                        OFF_ARCH => arch,
                        OFF_NR => nr,
                        OFF_IP => ip as u32,
                        k if k == OFF_IP + 4 => (ip >> 32) as u32,
                        k => {
                            let a = args[((k - OFF_ARGS) / 8) as usize];
                            if (k - OFF_ARGS).is_multiple_of(8) {
                                a as u32
                            } else {
                                (a >> 32) as u32
                            }
                        }
                    }
                }
                BPF_JEQ_K => pc += if acc == i.k { i.jt } else { i.jf } as usize,
                BPF_JGE_K => pc += if acc >= i.k { i.jt } else { i.jf } as usize,
                BPF_RET_K => return i.k,
                c => panic!("unexpected opcode {c}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn only_the_gadget_page_makes_trapped_calls_natively() {
        let prog = notify_only(&[4, 257], &[(0, 0)]);
        let x86 = AUDIT_ARCH_X86_64;
        let notif = libc::SECCOMP_RET_USER_NOTIF;
        let allow = libc::SECCOMP_RET_ALLOW;
        let at = |nr: u32, ip: u64| run_at(&prog, x86, nr, [WATCHED_FD_BASE as u64; 6], ip);
        // The instruction pointer is just past the gadget's `syscall`.
        assert_eq!(at(257, GADGET + 2), allow, "openat from the gadget");
        assert_eq!(
            at(4, GADGET + PAGE as u64 - 1),
            allow,
            "last byte of the page"
        );
        assert_eq!(at(0, GADGET + 2), allow, "a watched read from the gadget");
        assert_eq!(at(257, GADGET - 1), notif, "just below the page");
        assert_eq!(at(257, GADGET + PAGE as u64), notif, "just above the page");
        assert_eq!(at(257, GADGET + (1 << 32) + 2), notif, "another high word");
        assert_eq!(at(257, GADGET & 0xffff_ffff), notif, "another high word");
        assert_eq!(at(257, 0x7f12_3456_7000), notif, "libc's own site");
        assert_eq!(at(1, 0x7f12_3456_7000), allow, "untraced calls anywhere");
        let i386 = run_at(&prog, 0x4000_0003, 5, [0; 6], GADGET + 2);
        assert_eq!(i386, notif, "a foreign call is trapped even from the page");
    }

    #[test]
    fn a_handed_over_process_notifies_whatever_roam_traced() {
        let prog = notify_only(&[59, 101], &[(0, 0)]);
        let x86 = AUDIT_ARCH_X86_64;
        let notif = libc::SECCOMP_RET_USER_NOTIF;
        assert_eq!(run(&prog, x86, 59), notif);
        assert_eq!(run(&prog, x86, 101), notif, "ptrace itself");
        assert_eq!(run_with_arg(&prog, x86, 0, WATCHED_FD_BASE), notif);
        assert_eq!(run_with_arg(&prog, x86, 0, 3), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(&prog, x86, 1), libc::SECCOMP_RET_ALLOW);
        assert_eq!(run(&prog, 0x4000_0003, 4), notif, "i386");
    }

    #[test]
    fn negative_fds_are_never_watched() {
        let prog = filter(&[], &[(9, 4)]);
        let mmap = |fd: i32| run_with_args(&prog, AUDIT_ARCH_X86_64, 9, [0, 0, 0, 0, fd as u64, 0]);
        assert_eq!(mmap(-1), libc::SECCOMP_RET_ALLOW, "anonymous mmap");
        assert_eq!(mmap(3), libc::SECCOMP_RET_ALLOW);
        assert_eq!(mmap(WATCHED_FD_BASE as i32), libc::SECCOMP_RET_TRACE);
    }

    #[test]
    fn gated_calls_are_trapped_only_on_watched_fds() {
        let prog = filter(&[2, 257], &[(0, 0), (9, 4)]);
        let x86 = AUDIT_ARCH_X86_64;
        assert_eq!(
            run_with_arg(&prog, x86, 0, 3),
            libc::SECCOMP_RET_ALLOW,
            "read of fd 3"
        );
        assert_eq!(
            run_with_arg(&prog, x86, 0, WATCHED_FD_BASE),
            libc::SECCOMP_RET_TRACE,
            "read of a watched fd"
        );
        assert_eq!(
            run_with_arg(&prog, x86, 9, WATCHED_FD_BASE + 5),
            libc::SECCOMP_RET_TRACE,
            "mmap"
        );
        assert_eq!(
            run_with_arg(&prog, x86, 1, WATCHED_FD_BASE),
            libc::SECCOMP_RET_ALLOW,
            "write is not gated"
        );
        assert_eq!(
            run_with_arg(&prog, x86, 257, 3),
            libc::SECCOMP_RET_TRACE,
            "openat always"
        );
    }

    #[test]
    fn traps_exactly_the_listed_calls() {
        let traced = [2, 257, 4, 59];
        let prog = filter(&traced, &[]);
        for nr in traced {
            assert_eq!(
                run(&prog, AUDIT_ARCH_X86_64, nr as u32),
                libc::SECCOMP_RET_TRACE,
                "nr {nr}"
            );
        }
        for nr in [0, 1, 3, 39, 56, 231] {
            assert_eq!(
                run(&prog, AUDIT_ARCH_X86_64, nr),
                libc::SECCOMP_RET_ALLOW,
                "nr {nr}"
            );
        }
        assert_eq!(
            run(&prog, 0x4000_0003, 20),
            libc::SECCOMP_RET_TRACE,
            "i386 is trapped"
        );
        assert_eq!(
            run(&prog, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 2),
            libc::SECCOMP_RET_TRACE,
            "x32"
        );
    }
}
