//! The extension's side of the ABI: what [`export!`](crate::export) expands to.
//!
//! An extension exports `roam_alloc(len) -> ptr` (wasm hosts copy the request into the memory it
//! returns; native hosts pass their own buffer) and `roam_call(ptr, len) -> ptr`, which returns a
//! pointer to the reply: a little-endian u32 length followed by that many bytes. The reply lives
//! in a buffer owned by the extension until its next call.

use crate::{Reply, Request};
use std::cell::RefCell;

thread_local! {
    static OUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Memory for a request of `len` bytes; leaked on purpose: a wasm instance lives for one call.
pub fn alloc(len: usize) -> *mut u8 {
    Vec::<u8>::with_capacity(len).leak().as_mut_ptr()
}

/// Decodes the request, runs `handler`, and encodes its reply.
pub fn typed(input: &[u8], handler: fn(Request) -> Reply) -> Vec<u8> {
    let reply = match Request::decode(input) {
        Ok(req) => handler(req),
        Err(e) => Reply::Fail(e.to_string()),
    };
    reply.encode()
}

/// Runs `handler` on the request bytes and returns a pointer to its length-prefixed reply.
pub fn call(input: &[u8], handler: impl FnOnce(&[u8]) -> Vec<u8>) -> *const u8 {
    let body = handler(input);
    OUT.with(|out| {
        let mut out = out.borrow_mut();
        out.clear();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out.as_ptr()
    })
}

/// Exports `roam_alloc` and `roam_call` for an extension whose entry point is `$handler`
/// (`fn(Request) -> Reply`), or with `raw`, `fn(&[u8]) -> Vec<u8>` on the encoded bytes (only
/// the fault probes need that, to answer malformed replies).
#[macro_export]
macro_rules! export {
    ($handler:path) => {
        $crate::export!(raw |input: &[u8]| $crate::guest::typed(input, $handler));
    };
    (raw $handler:expr) => {
        #[no_mangle]
        pub extern "C" fn roam_alloc(len: usize) -> *mut u8 {
            $crate::guest::alloc(len)
        }

        /// # Safety
        /// `ptr` must point to `len` readable bytes (the host's request).
        #[no_mangle]
        pub unsafe extern "C" fn roam_call(ptr: *const u8, len: usize) -> *const u8 {
            // SAFETY: the host guarantees `ptr..ptr+len` is its request buffer.
            let input = unsafe { ::core::slice::from_raw_parts(ptr, len) };
            $crate::guest::call(input, $handler)
        }
    };
}
