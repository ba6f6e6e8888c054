//! The `zlib` frame codec (a length-changing stream graft, `codec:zlib:URL`): each frame a
//! zlib stream (DEFLATE level 6 with an Adler-32 checksum, as the native `zlib:` layer
//! writes, with the same `miniz_oxide`), under the same codec number (1), so the native
//! layer and this extension read each other's files.

use roam_ext_abi::{FrameOp, Reply, Request};

roam_ext_abi::export!(handle);

/// The native `zlib:` layer's number in the framed header.
const ID: u8 = 1;

fn handle(req: Request) -> Reply {
    match req {
        Request::Frame {
            op: FrameOp::Describe,
            ..
        } => Reply::Codec {
            id: ID,
            min_frames: 0,
            key: false,
        },
        Request::Frame {
            op: FrameOp::Encode,
            data,
            ..
        } => Reply::Bytes(miniz_oxide::deflate::compress_to_vec_zlib(&data, 6)),
        Request::Frame {
            op: FrameOp::Decode,
            data,
            len,
            ..
        } => inflate(&data, len as usize),
        _ => Reply::Fail("zlib only encodes and decodes frames".into()),
    }
}

/// At most `len` bytes (a frame inflating to more is damaged, not a reason to run out of
/// memory).
fn inflate(stored: &[u8], len: usize) -> Reply {
    match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(stored, len) {
        Ok(plain) => Reply::Bytes(plain),
        Err(e) => Reply::Fail(format!("does not inflate ({:?})", e.status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_damage_fails() {
        let plain: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let Reply::Bytes(stored) = handle(frame(FrameOp::Encode, plain.clone(), 0)) else {
            panic!("no bytes");
        };
        assert!(stored.len() < plain.len() / 10);
        let len = plain.len() as u32;
        assert_eq!(
            handle(frame(FrameOp::Decode, stored.clone(), len)),
            Reply::Bytes(plain)
        );
        let mut bad = stored;
        bad[10] ^= 1;
        assert!(matches!(
            handle(frame(FrameOp::Decode, bad, len)),
            Reply::Fail(_)
        ));
    }

    fn frame(op: FrameOp, data: Vec<u8>, len: u32) -> Request {
        Request::Frame {
            op,
            header: vec![0; 48],
            n: 0,
            last: true,
            len,
            key: Vec::new(),
            data,
        }
    }
}
