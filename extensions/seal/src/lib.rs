//! The `seal` frame codec (a length-changing stream graft, `codec:seal:URL`): each frame
//! encrypted and authenticated with ChaCha20-Poly1305 (RFC 8439) under the file's own key,
//! which roam derives from its master key and hands in with each frame (the extension never
//! sees the master key). The nonce is the frame's number and a last-frame flag, the associated
//! data the file's header: exactly the native `seal:` layer's format, under its codec number
//! (2), so the two read each other's files, and a frame changed, moved, dropped or taken
//! from another file fails to open.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use roam_ext_abi::{FrameOp, Reply, Request};

roam_ext_abi::export!(handle);

/// The native `seal:` layer's number in the framed header.
const ID: u8 = 2;

fn handle(req: Request) -> Reply {
    let Request::Frame {
        op,
        header,
        n,
        last,
        key,
        data,
        ..
    } = req
    else {
        return Reply::Fail("seal only encodes and decodes frames".into());
    };
    if op == FrameOp::Describe {
        // One (empty) frame even for an empty file, so no file can lose all its frames.
        return Reply::Codec {
            id: ID,
            min_frames: 1,
            key: true,
        };
    }
    let Ok(cipher) = ChaCha20Poly1305::new_from_slice(&key) else {
        return Reply::Fail("no 32-byte file key".into());
    };
    let payload = Payload {
        msg: &data,
        aad: &header,
    };
    let nonce = nonce(n, last);
    let done = match op {
        FrameOp::Encode => cipher.encrypt(&nonce, payload),
        _ => cipher.decrypt(&nonce, payload),
    };
    match done {
        Ok(bytes) => Reply::Bytes(bytes),
        Err(_) => Reply::Fail("does not authenticate (changed, moved, or another key)".into()),
    }
}

/// Frame `n`'s nonce: its number, and a last-frame flag so the end cannot move.
fn nonce(n: u32, last: bool) -> Nonce {
    let mut b = [0; 12];
    b[..4].copy_from_slice(&n.to_le_bytes());
    b[11] = u8::from(last);
    Nonce::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(op: FrameOp, n: u32, key: u8, data: Vec<u8>) -> Request {
        Request::Frame {
            op,
            header: vec![7; 48],
            n,
            last: false,
            len: 0,
            key: vec![key; 32],
            data,
        }
    }

    #[test]
    fn a_frame_opens_only_where_and_with_what_it_was_sealed() {
        let Reply::Bytes(sealed) = handle(frame(FrameOp::Encode, 3, 1, b"secret".to_vec())) else {
            panic!("not sealed");
        };
        assert_eq!(sealed.len(), 6 + 16);
        assert_eq!(
            handle(frame(FrameOp::Decode, 3, 1, sealed.clone())),
            Reply::Bytes(b"secret".to_vec())
        );
        let fails = |r| matches!(r, Reply::Fail(_));
        assert!(
            fails(handle(frame(FrameOp::Decode, 4, 1, sealed.clone()))),
            "moved"
        );
        assert!(
            fails(handle(frame(FrameOp::Decode, 3, 2, sealed.clone()))),
            "key"
        );
        let mut bad = sealed;
        bad[0] ^= 1;
        assert!(fails(handle(frame(FrameOp::Decode, 3, 1, bad))), "flipped");
    }
}
