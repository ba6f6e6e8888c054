//! The frame-codec kind (a stream graft that changes length): an extension that encodes and
//! decodes the frames of roam's seekable framing (`roam_drivers::layer::framed`), one call
//! per frame. The core frames, indexes and authenticates nothing itself here: it asks the
//! extension which codec it is ([`describe`]), then hands it one frame at a time, and checks
//! that a decoded frame is exactly as long as the header says (anything else is the
//! extension's fault, never other bytes).

use crate::{ExtError, Extension};
use roam_ext_abi::{FrameOp, Reply, Request};

/// What a codec extension says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecInfo {
    /// Its number in the header: a file is decoded only by a codec of the number that
    /// wrote it (a native codec and an extension sharing a number read each other's files).
    pub id: u8,
    /// Frames an empty file has: 0, or 1 for a codec that authenticates a file's end.
    pub min_frames: u32,
    /// Whether it needs each file's key.
    pub key: bool,
}

/// Asks the extension which codec it is; the number 0 and more than one frame for an empty
/// file are refused.
pub fn describe(ext: &Extension) -> Result<CodecInfo, ExtError> {
    match ext.call(&frame_request(FrameOp::Describe, &Frame::default(), 0, &[]))? {
        Reply::Codec { id: 0, .. } => Err(ext.invalid("claimed the codec number 0")),
        Reply::Codec { min_frames, .. } if min_frames > 1 => Err(ext.invalid(format!(
            "wants {min_frames} frames for an empty file (0 or 1)"
        ))),
        Reply::Codec {
            id,
            min_frames,
            key,
        } => Ok(CodecInfo {
            id,
            min_frames,
            key,
        }),
        other => Err(ext.invalid(format!("answered {other:?} to a codec description"))),
    }
}

/// Where a frame is: the file's header, its number, whether it is the last, and the file's
/// key (empty for a codec without one; no `Debug`, so that it is never printed).
#[derive(Default, Clone, Copy)]
pub struct Frame<'a> {
    pub header: &'a [u8],
    pub n: u32,
    pub last: bool,
    pub key: &'a [u8],
}

/// The stored bytes of the plaintext frame `plain`.
pub fn encode(ext: &Extension, at: &Frame, plain: &[u8]) -> Result<Vec<u8>, ExtError> {
    let len = frame_len(ext, plain.len())?;
    match ext.call(&frame_request(FrameOp::Encode, at, len, plain))? {
        Reply::Bytes(stored) => Ok(stored),
        other => Err(ext.invalid(format!("answered {other:?} to encoding a frame"))),
    }
}

/// The plaintext of the stored frame `stored`: exactly `len` bytes, or the extension's fault.
pub fn decode(ext: &Extension, at: &Frame, stored: &[u8], len: usize) -> Result<Vec<u8>, ExtError> {
    let want = frame_len(ext, len)?;
    match ext.call(&frame_request(FrameOp::Decode, at, want, stored))? {
        Reply::Bytes(plain) if plain.len() == len => Ok(plain),
        Reply::Bytes(plain) => Err(ext.invalid(format!(
            "decoded frame {} to {} bytes, not {len}",
            at.n,
            plain.len()
        ))),
        other => Err(ext.invalid(format!("answered {other:?} to decoding a frame"))),
    }
}

fn frame_len(ext: &Extension, len: usize) -> Result<u32, ExtError> {
    u32::try_from(len).map_err(|_| ext.invalid(format!("a frame of {len} bytes")))
}

fn frame_request(op: FrameOp, at: &Frame, len: u32, data: &[u8]) -> Request {
    Request::Frame {
        op,
        header: at.header.to_vec(),
        n: at.n,
        last: at.last,
        len,
        key: at.key.to_vec(),
        data: data.to_vec(),
    }
}
