//! The digest kind (fingerprints on demand): a file's MD5 and SHA-256, computed by an
//! extension. Hashing needs every byte, so it is a continued conversation (as an archive
//! listing): roam reads the file 4 MiB at a time and hands the extension 256 KiB pieces
//! with the state the previous call answered, so no call holds more than a piece and the
//! state. The core
//! checks that each state is bounded and the last answer is exactly two digests; it
//! cannot check the digests themselves (that would be computing them).

use crate::{ExtError, Extension, Fault};
use roam_ext_abi::{Reply, Request};

/// Bytes of the file one call gets (whole 64-byte blocks but the last piece): small
/// enough for the interpreted technology (Pulley) to hash within the deadline.
pub const PIECE: u64 = 256 << 10;
/// Bytes read at once (one range request for a remote file), handed over piece by piece.
pub const READ: u64 = 4 << 20;
/// Bytes of state an extension may carry between calls.
pub const MAX_STATE: usize = 64 << 10;

/// A file's fingerprints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sums {
    pub md5: [u8; 16],
    pub sha256: [u8; 32],
}

/// Reads `len` bytes at `off` of the file (all of them: fewer is an error).
pub type Read<'a> = dyn FnMut(u64, u64) -> std::io::Result<Vec<u8>> + 'a;

/// The fingerprints of a file of `size` bytes, read through `read` piece by piece.
pub fn digest(ext: &Extension, size: u64, read: &mut Read) -> Result<Sums, ExtError> {
    let mut state = Vec::new();
    let mut off = 0;
    loop {
        let len = READ.min(size - off);
        let data = read(off, len).map_err(|e| ext.error(Fault::host(e)))?;
        if data.len() as u64 != len {
            let why = format!(
                "the file ended after {} of {size} bytes",
                off + data.len() as u64
            );
            return Err(ext.error(Fault::Host(why)));
        }
        // An empty file is one empty piece.
        let pieces = data.chunks(PIECE as usize).map(<[u8]>::to_vec);
        for piece in pieces.chain((size == 0).then(Vec::new)) {
            let at = off;
            off += piece.len() as u64;
            let reply = ext.call(&Request::Digest {
                size,
                off: at,
                state: std::mem::take(&mut state),
                data: piece,
            })?;
            let Reply::Bytes(out) = reply else {
                return Err(ext.invalid(format!("answered {reply:?} to a digest")));
            };
            if off == size {
                return sums(&out).ok_or_else(|| {
                    ext.invalid(format!(
                        "answered {} bytes, not MD5 and SHA-256 (48)",
                        out.len()
                    ))
                });
            }
            if out.len() > MAX_STATE {
                let why = format!("carried {} bytes of state (at most {MAX_STATE})", out.len());
                return Err(ext.invalid(why));
            }
            state = out;
        }
    }
}

fn sums(b: &[u8]) -> Option<Sums> {
    Some(Sums {
        md5: b.get(..16)?.try_into().ok()?,
        sha256: b.get(16..)?.try_into().ok()?,
    })
}

/// Lower-case hexadecimal, as `md5sum` and `sha256sum` print.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
