//! The fast path's region, mapped into every program at its exec (beside the scratch
//! region, from the same stop): two pages at an address fixed for the whole run.
//!
//! - The gadget page holds `syscall; ret`. roam's filter lets a call through when it comes
//!   from this page (`platform::seccomp`), so the preloaded library (`preload/fastpath.c`)
//!   makes there the calls it has decided need nothing of roam, at native cost: no signal,
//!   no notification, no ptrace stop. Every other call site is caught as before, so a
//!   program that bypasses libc, or has no library, is served as before.
//! - The view page tells the library what roam serves: the prefixes of names that may lead
//!   into roam (the mounts, roam's cache, `/proc/`, `/dev/fd/`) and whether the process may
//!   hold one of roam's directories as its cwd, which makes its relative names roam's to
//!   decide. It is read-only to the program; roam writes the flag through `/proc/PID/mem`.
//!
//! The address is fixed because the filter, installed before the first exec and inherited
//! unchanged, must name it. `MAP_FIXED_NOREPLACE` never takes the place of a program's own
//! mapping: if the address is taken, the program simply runs without the fast path.

use nix::unistd::Pid;

use super::memory;
use super::remote_call::{run_syscall, sys, CallError, Seen};

/// The gadget page (its high word is what the filter compares first).
pub const GADGET: u64 = 0x6f00_0000_0000;
/// Bytes of a page.
pub const PAGE: u32 = 4096;
/// The view page, right above the gadget page.
pub const VIEW: u64 = GADGET + PAGE as u64;

/// `syscall; ret`: the library jumps here with the call's registers set.
const GADGET_CODE: [u8; 3] = [0x0f, 0x05, 0xc3];
/// The view's header, as `preload/fastpath.c` reads it: magic, version, the cwd flag,
/// the number of prefixes and their bytes (each NUL-terminated, right after the header).
const MAGIC: &[u8; 8] = b"roamview";
const VERSION: u32 = 1;
const OFF_CWD_REMOTE: u64 = 12;
#[cfg(test)]
const HEADER: usize = 24;

/// The view page for a program whose cwd is (or may be) one of roam's directories when
/// `cwd_remote`; `None` if the prefixes do not fit in a page (no fast path then).
pub fn view_page(prefixes: &[Vec<u8>], cwd_remote: bool) -> Option<Vec<u8>> {
    let mut page = Vec::with_capacity(PAGE as usize);
    page.extend_from_slice(MAGIC);
    page.extend_from_slice(&VERSION.to_ne_bytes());
    page.extend_from_slice(&u32::from(cwd_remote).to_ne_bytes());
    page.extend_from_slice(&(prefixes.len() as u32).to_ne_bytes());
    let bytes: usize = prefixes.iter().map(|p| p.len() + 1).sum();
    page.extend_from_slice(&(bytes as u32).to_ne_bytes());
    for p in prefixes {
        if p.contains(&0) {
            return None;
        }
        page.extend_from_slice(p);
        page.push(0);
    }
    (page.len() <= PAGE as usize).then_some(page)
}

/// Maps the gadget and `view` pages into the process of `tid`, stopped at the exit of its
/// exec, by calls run from registers `base` (pointing at a `syscall` instruction); the
/// caller puts the thread's registers back.
pub fn map(
    tid: Pid,
    base: &libc::user_regs_struct,
    seen: &mut Seen,
    view: &[u8],
) -> Result<(), CallError> {
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE) as u64;
    let len = 2 * PAGE as u64;
    let args = [GADGET, len, rw, flags, u64::MAX, 0];
    let addr = run_syscall(tid, base, libc::SYS_mmap, args, seen)?;
    if addr as u64 != GADGET {
        if !(-4095..0).contains(&addr) {
            // A kernel without MAP_FIXED_NOREPLACE took the address as a hint.
            run_syscall(
                tid,
                base,
                libc::SYS_munmap,
                [addr as u64, len, 0, 0, 0, 0],
                seen,
            )?;
        }
        return Err(sys(tid, "mmap of the fast path's pages")(
            nix::errno::Errno::EEXIST,
        ));
    }
    memory::write(tid, GADGET, &GADGET_CODE).map_err(sys(tid, "writing the gadget"))?;
    memory::write(tid, VIEW, view).map_err(sys(tid, "writing the view"))?;
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as u64;
    let r = libc::PROT_READ as u64;
    for (page, prot) in [(GADGET, rx), (VIEW, r)] {
        let args = [page, PAGE as u64, prot, 0, 0, 0];
        run_syscall(tid, base, libc::SYS_mprotect, args, seen)?;
    }
    Ok(())
}

/// Marks the process of `tid` as one whose cwd may be roam's: its relative names go to
/// roam from now on (until its next exec, whose view says again). Threads and `vfork`
/// children share the page, so they all send their relative names to roam: slower, never
/// wrong. A process without the view (no library, or its exec not seen) needs nothing.
pub fn cwd_may_be_roam(tid: Pid) {
    use std::os::unix::fs::FileExt;
    // The page is read-only to the program: `/proc/PID/mem` writes through that, as a
    // debugger's breakpoints do. Only over roam's own view, never over a program's page.
    let written = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{tid}/mem"))
        .and_then(|mem| {
            let mut magic = [0u8; 8];
            mem.read_exact_at(&mut magic, VIEW)?;
            if &magic != MAGIC {
                return Ok(());
            }
            mem.write_all_at(&1u32.to_ne_bytes(), VIEW + OFF_CWD_REMOTE)
        });
    if let Err(e) = written {
        tracing::trace!(%tid, "fast path view: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_lists_prefixes_after_its_header() {
        let page = view_page(&[b"/http".to_vec(), b"/proc/".to_vec()], true).unwrap();
        assert_eq!(&page[..8], MAGIC);
        assert_eq!(page[OFF_CWD_REMOTE as usize], 1);
        assert_eq!(page[16], 2, "two prefixes");
        assert_eq!(page[20] as usize, page.len() - HEADER);
        assert_eq!(&page[HEADER..], b"/http\0/proc/\0");
        assert_eq!(view_page(&[], false).unwrap()[OFF_CWD_REMOTE as usize], 0);
    }

    #[test]
    fn a_view_that_does_not_fit_is_none() {
        let long = vec![b'a'; PAGE as usize];
        assert!(view_page(&[long], false).is_none());
        assert!(view_page(&[b"/a\0b".to_vec()], false).is_none());
    }
}
