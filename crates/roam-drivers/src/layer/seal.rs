//! `seal:URL`: contents encrypted and authenticated with ChaCha20-Poly1305; names
//! unchanged. Framing, ranges and sizes: [`super::framed`].
//!
//! The key is 32 bytes in a file named by `ROAM_SEAL_KEY_FILE` (raw, or 64 hex digits),
//! readable by its owner only; it never appears in argv, URLs or messages. Each file gets
//! its own key, HKDF-SHA256 of the master key with the file's random id as salt, so
//! nonces never repeat across files; a frame's nonce is its number and whether it is the
//! last, and the header is its associated data. A frame moved, swapped with another
//! file's, dropped or cut off, or a header changed, fails to open (`EIO`).

use std::path::Path;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use ring::hkdf::{Salt, HKDF_SHA256};

use super::framed::{Codec, Format, Header};

/// The environment variable naming the key file.
pub const KEY_ENV: &str = "ROAM_SEAL_KEY_FILE";
const INFO: &[u8] = b"roam seal v1";

/// The master key (its `Debug` shows nothing of it).
pub struct Seal {
    master: [u8; 32],
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seal")
    }
}

impl Seal {
    /// The key of the file `ROAM_SEAL_KEY_FILE` names.
    pub fn from_env() -> Result<Seal, String> {
        let path = std::env::var_os(KEY_ENV)
            .ok_or_else(|| format!("seal: needs a key file named by {KEY_ENV}"))?;
        Seal::from_file(Path::new(&path))
    }

    /// The key in `path`: 32 bytes, or 64 hex digits; refused if others may read it.
    pub fn from_file(path: &Path) -> Result<Seal, String> {
        use std::os::unix::fs::MetadataExt;
        let bad = |why: &str| format!("seal: key file {}: {why}", path.display());
        let md = std::fs::metadata(path).map_err(|e| bad(&e.to_string()))?;
        if md.mode() & 0o077 != 0 {
            return Err(bad("others may read it (chmod 600)"));
        }
        let raw = std::fs::read(path).map_err(|e| bad(&e.to_string()))?;
        let text = raw.trim_ascii();
        let key = if raw.len() == 32 {
            raw
        } else if text.len() == 64 {
            hex(text).ok_or_else(|| bad("not 64 hex digits"))?
        } else {
            return Err(bad("expected 32 bytes or 64 hex digits"));
        };
        Ok(Seal {
            master: key.try_into().unwrap(),
        })
    }

    /// The key of the file `head` describes (HKDF-SHA256, the file id as salt): what the
    /// native layer seals with, and what an extension codec that wants a key is handed.
    pub fn file_key(&self, head: &Header) -> [u8; 32] {
        let prk = Salt::new(HKDF_SHA256, head.file_id()).extract(&self.master);
        let mut key = [0; 32];
        prk.expand(&[INFO], KeyLen)
            .and_then(|okm| okm.fill(&mut key))
            .expect("a 32-byte key is within HKDF's length");
        key
    }

    fn aead(&self, head: &Header) -> LessSafeKey {
        let key = UnboundKey::new(&CHACHA20_POLY1305, &self.file_key(head))
            .expect("a 32-byte ChaCha20-Poly1305 key");
        LessSafeKey::new(key)
    }
}

/// HKDF's output length: a ChaCha20-Poly1305 key.
struct KeyLen;

impl ring::hkdf::KeyType for KeyLen {
    fn len(&self) -> usize {
        32
    }
}

fn hex(text: &[u8]) -> Option<Vec<u8>> {
    text.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

/// Frame `n`'s nonce: its number, and a last-frame flag so the end cannot move.
fn nonce(n: u32, last: bool) -> Nonce {
    let mut b = [0; 12];
    b[..4].copy_from_slice(&n.to_le_bytes());
    b[11] = u8::from(last);
    Nonce::assume_unique_for_key(b)
}

impl Codec for Seal {
    fn format(&self) -> Result<Format, String> {
        Ok(Format {
            id: 2,
            min_frames: 1,
        })
    }

    fn scheme(&self) -> &str {
        "seal"
    }

    fn encode(&self, head: &Header, n: u32, last: bool, plain: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = plain.to_vec();
        self.aead(head)
            .seal_in_place_append_tag(nonce(n, last), Aad::from(&head.bytes), &mut out)
            .map_err(|_| "sealing failed".to_owned())?;
        Ok(out)
    }

    fn decode(
        &self,
        head: &Header,
        n: u32,
        last: bool,
        stored: &[u8],
        len: usize,
    ) -> Result<Vec<u8>, String> {
        let mut buf = stored.to_vec();
        let plain = self
            .aead(head)
            .open_in_place(nonce(n, last), Aad::from(&head.bytes), &mut buf)
            .map_err(|_| "does not authenticate (changed, moved, or another key)".to_owned())?;
        if plain.len() != len {
            return Err(format!("holds {} bytes, not {len}", plain.len()));
        }
        buf.truncate(len);
        Ok(buf)
    }
}
