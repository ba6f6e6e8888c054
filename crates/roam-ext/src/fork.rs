//! The fork technology (Sprockets §3.3): each call runs in a fresh child forked from roam,
//! confined by [`Filter`], and hands its reply back through a shared-memory page. The child
//! then exits, so whatever it did to its memory is rolled back by construction.

use crate::native::Library;
use crate::runner::Runner;
use crate::sandbox::{self, Filter};
use crate::{Fault, Limits};
use std::path::Path;
use std::sync::Mutex;

/// Exit status of a child that could not confine itself (and so ran nothing).
pub(crate) const CONFINE_FAILED: i32 = 125;

/// Header of the shared region: state (1 = answered) and the reply's claimed length.
const HEADER: usize = 8;

pub(crate) struct Fork {
    lib: Library,
    filter: Filter,
    shm: Mutex<Shm>,
}

/// An anonymous shared mapping the child writes its reply into.
struct Shm {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: the mapping is only touched under the Fork's mutex (and by the child, a separate
// process, while the parent waits).
unsafe impl Send for Shm {}

impl Shm {
    fn ensure(&mut self, cap: usize) -> Result<(), Fault> {
        if self.cap >= cap {
            return Ok(());
        }
        self.unmap();
        // SAFETY: a fresh anonymous shared mapping; checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Fault::host(std::io::Error::last_os_error()));
        }
        *self = Shm {
            ptr: ptr.cast(),
            cap,
        };
        Ok(())
    }

    fn unmap(&mut self) {
        if self.cap > 0 {
            // SAFETY: ptr/cap describe a mapping we made and nobody else references.
            unsafe { libc::munmap(self.ptr.cast(), self.cap) };
            self.cap = 0;
        }
    }

    fn header(&self) -> [u32; 2] {
        // SAFETY: the mapping holds at least HEADER bytes (ensure) and is page-aligned.
        unsafe { std::ptr::read_volatile(self.ptr.cast::<[u32; 2]>()) }
    }

    fn set_header(&self, state: u32, len: u32) {
        // SAFETY: as in `header`.
        unsafe { std::ptr::write_volatile(self.ptr.cast::<[u32; 2]>(), [state, len]) };
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        self.unmap();
    }
}

impl Fork {
    pub(crate) fn load(path: &Path) -> Result<Fork, Fault> {
        let shm = Shm {
            ptr: std::ptr::null_mut(),
            cap: 0,
        };
        Ok(Fork {
            lib: Library::open(path)?,
            filter: Filter::new(&[]),
            shm: Mutex::new(shm),
        })
    }

    /// The child's whole life: confine, call, copy the reply if it fits, exit.
    fn child(&self, shm: &Shm, request: &[u8], limits: &Limits) -> ! {
        if self.filter.confine(limits.memory).is_err() {
            // SAFETY: leaving the child without running the parent's exit handlers.
            unsafe { libc::_exit(CONFINE_FAILED) }
        }
        {
            // SAFETY: we are the sandboxed child; whatever the extension does stays here.
            match unsafe { self.lib.call(request, limits) } {
                Ok(reply) => {
                    // SAFETY: reply.len() <= max_reply and the mapping holds HEADER + max_reply.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            reply.as_ptr(),
                            shm.ptr.add(HEADER),
                            reply.len(),
                        )
                    };
                    shm.set_header(1, reply.len() as u32);
                }
                Err(Fault::Oversized { len, .. }) => shm.set_header(2, len as u32),
                Err(_) => {}
            }
        }
        // SAFETY: _exit skips the parent's atexit handlers and buffers, which are not ours.
        unsafe { libc::_exit(0) }
    }
}

impl Runner for Fork {
    fn call(&self, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault> {
        let mut shm = self.shm.lock().map_err(Fault::host)?;
        shm.ensure(HEADER + limits.max_reply)?;
        shm.set_header(0, 0);
        // SAFETY: the child only runs `child`, which calls no lock-taking code of the parent's
        // threads except malloc, which glibc makes fork-safe.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => return Err(Fault::host(std::io::Error::last_os_error())),
            0 => self.child(&shm, request, limits),
            _ => {}
        }
        let status = sandbox::wait(pid, limits.timeout)?;
        match shm.header() {
            [1, len] if status == 0 => {
                // SAFETY: the child wrote `len` (<= max_reply) bytes after the header and exited.
                Ok(
                    unsafe { std::slice::from_raw_parts(shm.ptr.add(HEADER), len as usize) }
                        .to_vec(),
                )
            }
            [2, len] => Err(Fault::Oversized {
                len: u64::from(len),
                max: limits.max_reply,
            }),
            _ if status == 0 => Err(Fault::Exited(0)),
            _ => Err(Fault::of_status(status)),
        }
    }
}
