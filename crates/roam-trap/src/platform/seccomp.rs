//! The seccomp-BPF filter installed in the first tracee (and inherited by every child):
//! it stops the tracee (`SECCOMP_RET_TRACE`) only for the system calls roam must see and
//! lets every other call run at native speed.
//!
//! Calls of a foreign ABI (i386 via `int 0x80`, x32) are always trapped: their numbers mean
//! other calls, so the tracer must see them to notice, instead of misreading them.

/// `struct sock_filter` of classic BPF.
pub type Insn = libc::sock_filter;

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `offsetof(struct seccomp_data, nr)` and `offsetof(struct seccomp_data, arch)`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;

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

/// Builds the filter that traps exactly `traced` (x86_64 numbers) and every foreign call.
pub fn filter(traced: &[i64]) -> Vec<Insn> {
    assert!(
        traced.len() < 250,
        "a linear filter jumps at most 255 instructions"
    );
    let n = traced.len();
    let mut prog = vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        // Native arch: go on; otherwise jump to the trace return after the list.
        jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 0, (n + 3) as u8),
        stmt(BPF_LD_W_ABS, OFF_NR),
        jump(BPF_JGE_K, X32_SYSCALL_BIT, (n + 1) as u8, 0),
    ];
    for (i, nr) in traced.iter().enumerate() {
        // Jump over the remaining comparisons and the ALLOW return to TRACE.
        prog.push(jump(BPF_JEQ_K, *nr as u32, (n - i) as u8, 0));
    }
    prog.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    prog.push(stmt(BPF_RET_K, libc::SECCOMP_RET_TRACE));
    prog
}

/// Installs `prog` in the calling process. Async-signal-safe: called between fork and exec.
///
/// # Safety
/// `prog` must be a valid filter; the call must happen in the child after `fork`.
pub unsafe fn install(prog: &[Insn], no_new_privs: bool) -> libc::c_int {
    if no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        return -1;
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut Insn,
    };
    libc::prctl(
        libc::PR_SET_SECCOMP,
        libc::SECCOMP_MODE_FILTER,
        &fprog as *const _ as libc::c_ulong,
        0,
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny classic-BPF interpreter, enough to check the jumps of our filter.
    fn run(prog: &[Insn], arch: u32, nr: u32) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            match i.code {
                BPF_LD_W_ABS => acc = if i.k == OFF_ARCH { arch } else { nr },
                BPF_JEQ_K => pc += if acc == i.k { i.jt } else { i.jf } as usize,
                BPF_JGE_K => pc += if acc >= i.k { i.jt } else { i.jf } as usize,
                BPF_RET_K => return i.k,
                c => panic!("unexpected opcode {c}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn traps_exactly_the_listed_calls() {
        let traced = [2, 257, 4, 59];
        let prog = filter(&traced);
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
