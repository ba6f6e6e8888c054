//! The one interface behind which every technology runs an extension.

use crate::{Fault, Limits};
use roam_ext_abi::LEN_PREFIX;

/// Runs one invocation: request bytes in, reply bytes out (at most `limits.max_reply`).
pub(crate) trait Runner: Send + Sync {
    fn call(&self, request: &[u8], limits: &Limits) -> Result<Vec<u8>, Fault>;
}

/// The reply length announced by the prefix an extension's `roam_call` returns, checked
/// against the limit before anything is copied.
pub(crate) fn reply_len(prefix: [u8; LEN_PREFIX], limits: &Limits) -> Result<usize, Fault> {
    let len = u32::from_le_bytes(prefix) as usize;
    if len > limits.max_reply {
        return Err(Fault::Oversized {
            len: len as u64,
            max: limits.max_reply,
        });
    }
    Ok(len)
}
