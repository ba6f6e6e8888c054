//! The layer kind (a stream graft): transforms contents and names on their way through a
//! mount. Layers preserve length, so that offsets map one to one and a layered file can be
//! read by ranges; names must stay valid single path components.

use crate::{ExtError, Extension};
use roam_ext_abi::{LayerOp, Reply, Request};

/// `data` (at offset `off` of its file) transformed by the layer.
pub fn transform(ext: &Extension, op: LayerOp, off: u64, data: &[u8]) -> Result<Vec<u8>, ExtError> {
    let out = match ext.call(&Request::Layer {
        op,
        off,
        data: data.to_vec(),
    })? {
        Reply::Bytes(out) => out,
        other => return Err(ext.invalid(format!("answered {other:?} to a layer call"))),
    };
    match op {
        LayerOp::Decode | LayerOp::Encode if out.len() != data.len() => {
            Err(ext.invalid(format!("turned {} bytes into {}", data.len(), out.len())))
        }
        LayerOp::DecodeName | LayerOp::EncodeName if !valid_name(&out) => Err(ext.invalid(
            format!("produced the name {:?}", String::from_utf8_lossy(&out)),
        )),
        _ => Ok(out),
    }
}

/// A name an extension may produce: one path component, no NUL, not `.` or `..`, at most 255
/// bytes.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != b"."
        && name != b".."
        && !name.iter().any(|b| *b == b'/' || *b == 0)
}

#[cfg(test)]
mod tests {
    use super::valid_name;

    #[test]
    fn names_cannot_escape_or_smuggle() {
        assert!(valid_name(b"track01.mp3"));
        for bad in [
            &b""[..],
            b".",
            b"..",
            b"a/b",
            b"/etc",
            b"a\0b",
            &[b'x'; 256],
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
