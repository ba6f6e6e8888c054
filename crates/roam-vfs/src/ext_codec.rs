//! Codec extensions as mounts: `codec:NAME:URL` frames the contents of the mount `URL`
//! with the frame-codec extension `NAME` (a length-changing stream graft, e.g. the
//! `zlib` and `seal` examples), through the drivers' own seekable framing
//! ([`Framed`](roam_drivers::layer::framed::Framed)): ranges, sizes and uploads work as
//! for the native `zlib:` and `seal:`, one sandboxed call per 64 KiB frame.
//!
//! The extension is compiled at the layer's first use and asked once which codec it is
//! (its number in the header, whether it needs a key); a codec that wants a key gets each
//! file's own key, derived here as the native `seal:` derives it from the master key of
//! `ROAM_SEAL_KEY_FILE`, so the master key never leaves roam. Every decoded frame is
//! checked to be exactly as long as the header says (`roam_ext::codec`): a failing or
//! lying extension makes the read `EIO` naming it, never other bytes.

use std::sync::{Arc, OnceLock};

use roam_drivers::layer::framed::{Codec, Format, Header};
use roam_drivers::layer::seal::{Seal, KEY_ENV};
use roam_ext::codec::{CodecInfo, Frame};
use roam_ext::Extension;

use crate::lazy_ext::{LazyExtension, LoadExtension};

/// A codec whose frames an extension encodes and decodes.
#[derive(Debug)]
pub(crate) struct ExtCodec {
    /// `codec:NAME`.
    scheme: String,
    ext: LazyExtension,
    /// The master key, when `ROAM_SEAL_KEY_FILE` names one.
    master: Option<Seal>,
    info: OnceLock<Result<CodecInfo, String>>,
}

impl ExtCodec {
    pub(crate) fn new(name: &str, load: LoadExtension, master: Option<Seal>) -> ExtCodec {
        ExtCodec {
            scheme: format!("codec:{name}"),
            ext: LazyExtension::new(load),
            master,
            info: OnceLock::new(),
        }
    }

    /// The extension, and what it said it is (asked once).
    fn ready(&self) -> Result<(Arc<Extension>, CodecInfo), String> {
        let ext = self.ext.get()?;
        let info = self
            .info
            .get_or_init(|| roam_ext::codec::describe(&ext).map_err(|e| e.to_string()))
            .clone()?;
        Ok((ext, info))
    }

    /// The file's key for a codec that wants one, else nothing.
    fn key(&self, info: &CodecInfo, head: &Header) -> Result<Vec<u8>, String> {
        match (&self.master, info.key) {
            (_, false) => Ok(Vec::new()),
            (Some(master), true) => Ok(master.file_key(head).to_vec()),
            (None, true) => Err(format!("needs a key file named by {KEY_ENV}")),
        }
    }

    /// Runs `call` on frame `n` of the file `head` describes, with its key.
    fn with_frame<T>(
        &self,
        head: &Header,
        n: u32,
        last: bool,
        call: impl FnOnce(&Extension, &Frame) -> Result<T, roam_ext::ExtError>,
    ) -> Result<T, String> {
        let (ext, info) = self.ready()?;
        let key = self.key(&info, head)?;
        let at = Frame {
            header: &head.bytes,
            n,
            last,
            key: &key,
        };
        call(&ext, &at).map_err(|e| e.to_string())
    }
}

impl Codec for ExtCodec {
    fn format(&self) -> Result<Format, String> {
        let (_, info) = self.ready()?;
        Ok(Format {
            id: info.id,
            min_frames: info.min_frames,
        })
    }

    fn scheme(&self) -> &str {
        &self.scheme
    }

    fn encode(&self, head: &Header, n: u32, last: bool, plain: &[u8]) -> Result<Vec<u8>, String> {
        self.with_frame(head, n, last, |ext, at| {
            roam_ext::codec::encode(ext, at, plain)
        })
    }

    fn decode(
        &self,
        head: &Header,
        n: u32,
        last: bool,
        stored: &[u8],
        len: usize,
    ) -> Result<Vec<u8>, String> {
        self.with_frame(head, n, last, |ext, at| {
            roam_ext::codec::decode(ext, at, stored, len)
        })
    }
}
