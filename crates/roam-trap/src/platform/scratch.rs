//! Scratch areas for the names roam rewrites (DESIGN §3: "written into a scratch area the
//! agent maps in the tracee, never into the program's own memory"). A rewritten name must
//! be in the program's memory when its call runs; below the stack pointer is free only on
//! big stacks: a Go goroutine has ~800 bytes of guaranteed room there, and a long name
//! written below it overwrote the neighbouring stack (static Go programs crashed).
//!
//! So roam maps a region into every program at its exec (from the exec event stop: on to
//! the exec's exit stop, an `mmap` run in the thread, registers put back) and into every
//! process `roam attach` takes over (with its filter), and gives each thread of the
//! address space a slot of its own: a thread has one call in flight, and the kernel has
//! copied its names before the thread can stop again, so a slot is never rewritten while
//! the kernel still reads it. A fork's child has a copy of the region at the same address;
//! threads and vfork children share their parent's region and so draw from its slots. A
//! thread without a slot (more threads than slots, a failed mapping, a slot found
//! unmapped) falls back to its stack, below the red zone.

use std::collections::HashMap;

use nix::sys::ptrace;
use nix::unistd::Pid;

use super::remote_call::{run_syscall, sys, syscall_insn, wait_for, CallError, Seen, Want};

/// Bytes of one thread's slot: two `PATH_MAX` names with their NULs, and room to spare.
pub const SLOT: u64 = 16 * 1024;
/// Slots of one address space (the region is reserved, its pages made only when written).
const SLOTS: usize = 1024;

/// One address space's region: where it is and which thread has which slot.
#[derive(Clone, Debug)]
struct Space {
    base: u64,
    slot_of: HashMap<Pid, usize>,
    free: Vec<usize>,
    next: usize,
}

impl Space {
    fn new(base: u64) -> Space {
        Space {
            base,
            slot_of: HashMap::new(),
            free: Vec::new(),
            next: 0,
        }
    }

    fn slot(&mut self, tid: Pid) -> Option<u64> {
        let i = match self.slot_of.get(&tid) {
            Some(&i) => i,
            None => {
                let i = self.free.pop().or_else(|| {
                    (self.next < SLOTS).then(|| {
                        self.next += 1;
                        self.next - 1
                    })
                })?;
                self.slot_of.insert(tid, i);
                i
            }
        };
        Some(self.base + i as u64 * SLOT)
    }

    fn release(&mut self, tid: Pid) {
        if let Some(i) = self.slot_of.remove(&tid) {
            self.free.push(i);
        }
    }
}

/// The regions of every traced address space. Owned by the tracer thread.
#[derive(Default)]
pub struct Scratch {
    spaces: HashMap<u64, Space>,
    space_of: HashMap<Pid, u64>,
    next_id: u64,
}

impl Scratch {
    /// `tid` stopped at its exec event: maps a region into its new program, and the fast
    /// path's pages with `view` if given (see `platform::fastpath`). Returns a signal that
    /// arrived meanwhile, to deliver as it resumes. Leaves it stopped.
    pub fn exec(&mut self, tid: Pid, view: Option<&[u8]>) -> Result<i32, CallError> {
        self.leave(tid);
        let (base, held) = map_region(tid, view)?;
        self.join_new(tid, Space::new(base));
        Ok(held)
    }

    /// The threads of a process roam attached to, whose region is at `base`.
    pub fn adopt(&mut self, threads: &[Pid], base: u64) {
        let Some((&first, rest)) = threads.split_first() else {
            return;
        };
        self.join_new(first, Space::new(base));
        let id = self.space_of[&first];
        for &tid in rest {
            self.space_of.insert(tid, id);
        }
    }

    /// `parent` made `child` (a fork, vfork or clone event).
    pub fn started(&mut self, parent: Pid, child: Pid) {
        // The child's own exec may have been seen before its parent's fork event: its
        // region then is the new program's.
        if self.space_of.contains_key(&child) {
            return;
        }
        let Some(&id) = self.space_of.get(&parent) else {
            return;
        };
        if shares_memory(parent, child) {
            self.space_of.insert(child, id);
        } else {
            // A copy of the parent's memory, region included, at the same address.
            let base = self.spaces[&id].base;
            self.join_new(child, Space::new(base));
        }
    }

    /// `tid` ended, or roam let go of it.
    pub fn ended(&mut self, tid: Pid) {
        self.leave(tid);
    }

    /// The top of the slot where `tid` may place `len` bytes, if it has one that fits.
    pub fn top(&mut self, tid: Pid, len: usize) -> Option<u64> {
        if len as u64 > SLOT - 16 {
            return None;
        }
        let id = *self.space_of.get(&tid)?;
        let slot = self.spaces.get_mut(&id)?.slot(tid)?;
        Some(slot + SLOT)
    }

    fn join_new(&mut self, tid: Pid, space: Space) {
        self.next_id += 1;
        self.spaces.insert(self.next_id, space);
        self.space_of.insert(tid, self.next_id);
    }

    fn leave(&mut self, tid: Pid) {
        let Some(id) = self.space_of.remove(&tid) else {
            return;
        };
        if let Some(space) = self.spaces.get_mut(&id) {
            space.release(tid);
        }
        if !self.space_of.values().any(|&other| other == id) {
            self.spaces.remove(&id);
        }
    }
}

/// Whether two tasks share one address space (threads, vfork, `clone(CLONE_VM)`).
fn shares_memory(a: Pid, b: Pid) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp only compares kernel objects of the two tasks.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a.as_raw(), b.as_raw(), KCMP_VM, 0, 0) };
    r == 0
}

/// Maps a region (and the fast path's pages with `view`) into the new program of `tid`,
/// stopped at its exec event.
fn map_region(tid: Pid, view: Option<&[u8]>) -> Result<(u64, i32), CallError> {
    let mut seen = Seen::default();
    // On to the exec's exit stop: registers set at the event stop would be overwritten by
    // the exec's return value.
    ptrace::syscall(tid, None).map_err(sys(tid, "PTRACE_SYSCALL"))?;
    wait_for(tid, &mut seen, Want::SyscallStop)?;
    let saved = ptrace::getregs(tid).map_err(sys(tid, "PTRACE_GETREGS"))?;
    let mut base = saved;
    base.rip = syscall_insn(tid, &saved)?;
    let addr = map_from(tid, &base, &mut seen);
    if let Some(view) = view.filter(|_| addr.is_ok()) {
        if let Err(e) = super::fastpath::map(tid, &base, &mut seen, view) {
            tracing::debug!(%tid, "fast path: {e}");
        }
    }
    ptrace::setregs(tid, saved).map_err(sys(tid, "PTRACE_SETREGS"))?;
    Ok((addr?, seen.held))
}

/// Maps a region in stopped thread `tid`'s process by a call run from registers `base`
/// (pointing at a `syscall` instruction); the caller puts the thread's registers back.
pub fn map_from(
    tid: Pid,
    base: &libc::user_regs_struct,
    seen: &mut Seen,
) -> Result<u64, CallError> {
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE) as u64;
    let len = SLOT * SLOTS as u64;
    let args = [0, len, prot, flags, u64::MAX, 0];
    let addr = run_syscall(tid, base, libc::SYS_mmap, args, seen)?;
    if (-4095..0).contains(&addr) {
        return Err(sys(tid, "mmap of the scratch region")(
            nix::errno::Errno::from_raw(-addr as i32),
        ));
    }
    Ok(addr as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_of_a_space_get_slots_of_their_own_and_give_them_back() {
        let mut s = Scratch::default();
        let (a, b, c) = (Pid::from_raw(10), Pid::from_raw(11), Pid::from_raw(12));
        s.join_new(a, Space::new(0x1000_0000));
        s.space_of.insert(b, s.space_of[&a]);
        let ta = s.top(a, 100).unwrap();
        let tb = s.top(b, 100).unwrap();
        assert_ne!(ta, tb);
        assert_eq!(s.top(a, 100), Some(ta), "a thread keeps its slot");
        s.ended(a);
        s.space_of.insert(c, s.space_of[&b]);
        assert_eq!(s.top(c, 100), Some(ta), "a freed slot is reused");
        assert_eq!(s.top(c, SLOT as usize), None, "too big for a slot");
        assert_eq!(s.top(Pid::from_raw(99), 1), None, "unknown thread");
    }

    #[test]
    fn a_space_is_forgotten_with_its_last_thread() {
        let mut s = Scratch::default();
        let a = Pid::from_raw(20);
        s.join_new(a, Space::new(0x2000_0000));
        s.ended(a);
        assert!(s.spaces.is_empty() && s.space_of.is_empty());
    }
}
