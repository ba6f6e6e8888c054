//! `zlib:URL`: contents compressed, each frame a zlib stream (RFC 1950: DEFLATE with an
//! Adler-32 checksum, so a damaged frame is an error rather than other bytes); names
//! unchanged. Framing, ranges and sizes: [`super::framed`].

use super::framed::{Codec, Format, Header};

/// DEFLATE at level 6 (zlib's default: most of level 9's ratio at a fraction of its time).
#[derive(Debug)]
pub struct Zlib;

impl Codec for Zlib {
    fn format(&self) -> Result<Format, String> {
        Ok(Format {
            id: 1,
            min_frames: 0,
        })
    }

    fn scheme(&self) -> &str {
        "zlib"
    }

    fn encode(
        &self,
        _head: &Header,
        _n: u32,
        _last: bool,
        plain: &[u8],
    ) -> Result<Vec<u8>, String> {
        Ok(miniz_oxide::deflate::compress_to_vec_zlib(plain, 6))
    }

    fn decode(
        &self,
        _head: &Header,
        _n: u32,
        _last: bool,
        stored: &[u8],
        len: usize,
    ) -> Result<Vec<u8>, String> {
        let plain = miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(stored, len)
            .map_err(|e| format!("does not inflate ({:?})", e.status))?;
        if plain.len() != len {
            return Err(format!("inflates to {} bytes, not {len}", plain.len()));
        }
        Ok(plain)
    }
}
