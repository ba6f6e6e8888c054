//! Native extensions: a shared library loaded into the process (dlopen).
//!
//! [`Library`] is the loaded code; the fork and worker technologies call it inside a sandboxed
//! child, the native technology ([`Native`]) calls it in roam's own process with no isolation
//! at all — a baseline for benchmarks and the fault table, never a choice for real use.

use crate::runner::{reply_len, Runner};
use crate::{Fault, Limits};
use roam_ext_abi::LEN_PREFIX;
use std::ffi::{c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

type CallFn = unsafe extern "C" fn(*const u8, usize) -> *const u8;

/// A loaded extension library. It is never unloaded: the extension's thread-local reply buffer
/// may outlive any handle, and unloading code that a TLS destructor still points to crashes.
pub(crate) struct Library {
    call: CallFn,
}

impl Library {
    pub(crate) fn open(path: &Path) -> Result<Library, Fault> {
        let cpath = CString::new(path.as_os_str().as_bytes()).map_err(Fault::host)?;
        // SAFETY: dlopen runs the library's initialisers in our process: loading a native
        // extension trusts it, which is exactly what the native technology means.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(Fault::Load(dl_error()));
        }
        // SAFETY: handle is a live dlopen handle and the name is NUL-terminated.
        let sym: *mut c_void = unsafe { libc::dlsym(handle, c"roam_call".as_ptr()) };
        if sym.is_null() {
            return Err(Fault::Load(format!(
                "{} exports no roam_call",
                path.display()
            )));
        }
        // SAFETY: `roam_call` is defined by roam_ext_abi::export! with exactly this signature.
        let call = unsafe { std::mem::transmute::<*mut c_void, CallFn>(sym) };
        Ok(Library { call })
    }

    /// Calls the extension on `request` and returns its reply, which lives in the library's
    /// buffer until the next call on this thread.
    ///
    /// # Safety
    /// Runs foreign code in this process: nothing stops it from corrupting memory. Callers run
    /// it in a sandboxed child (fork, worker) or accept that (native).
    pub(crate) unsafe fn call<'a>(
        &'a self,
        request: &[u8],
        limits: &Limits,
    ) -> Result<&'a [u8], Fault> {
        // SAFETY: see the function's contract; the request buffer is valid for its length.
        let out = unsafe { (self.call)(request.as_ptr(), request.len()) };
        // SAFETY: export! returns a pointer to a length prefix followed by that many bytes.
        let prefix = unsafe { std::ptr::read_unaligned(out.cast::<[u8; LEN_PREFIX]>()) };
        let len = reply_len(prefix, limits)?;
        // SAFETY: as above; the length was checked against the limit.
        Ok(unsafe { std::slice::from_raw_parts(out.add(LEN_PREFIX), len) })
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by libc.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        return "dlopen failed".into();
    }
    // SAFETY: non-null, NUL-terminated, valid until the next dl* call on this thread.
    unsafe { CStr::from_ptr(msg) }
        .to_string_lossy()
        .into_owned()
}

/// The in-process technology: no isolation.
pub(crate) struct Native {
    lib: Library,
}

impl Native {
    pub(crate) fn load(path: &Path) -> Result<Native, Fault> {
        Ok(Native {
            lib: Library::open(path)?,
        })
    }
}

impl Runner for Native {
    fn call(&self, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault> {
        // SAFETY: none is possible: the native technology trusts the extension (see module docs).
        unsafe { self.lib.call(request, limits) }.map(<[u8]>::to_vec)
    }
}
