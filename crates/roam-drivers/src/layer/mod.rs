//! Stackable layers (puffs §5): a driver over another driver, changing names and contents
//! on the way through. [`Stacked`] does the stacking once; a layer only says how it
//! transforms ([`Transform`]):
//! - `null:` ([`null::Null`]) changes nothing: over a local directory it passes the local
//!   files through, so frontends serve them in place at native speed;
//! - `rot13:` ([`rot13::Rot13`]) rotates the letters of names and contents;
//! - `zlib:` and `seal:` change the length of contents (compress; encrypt and
//!   authenticate): [`framed::Framed`] stacks those, in seekable frames;
//! - layers whose transform runs elsewhere (a layer extension, wired above the drivers):
//!   that is why a transform says which way data goes and may fail.

pub mod framed;
pub mod null;
pub mod rot13;
pub mod seal;
pub mod zlib;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::{
    Capabilities, DirEntry, Driver, Fetched, Kind, Known, Leftover, Listing, Meta, NewFile, Pinned,
    Result, Upload, Validator,
};

/// Which way data passes through a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// From the program toward the lower driver (a lookup, a write).
    Encode,
    /// From the lower driver toward the program (a listing, a read).
    Decode,
}

/// What a layer does to what passes through it. Contents keep their length, so offsets map
/// one to one and ranges can be read through the layer.
pub trait Transform: Send + Sync + std::fmt::Debug + 'static {
    /// Whether contents pass unchanged, so the lower layer's local files may be used as
    /// they are.
    const TRANSPARENT: bool;
    /// The layer's scheme, for messages and cache identities (`rot13`, `ext:rot13`).
    fn scheme(&self) -> &str;
    /// A name or path (each component alike: `/`, `.` and `..` never change).
    fn name(&self, s: &str, way: Way) -> Result<String>;
    /// File contents, in place; `offset` is where `bytes` start in the file.
    fn bytes(&self, bytes: &mut [u8], offset: u64, way: Way) -> Result<()>;
}

/// What a layer that changes contents can do over a backend that can do `lower`: nothing
/// that serves the lower files as they are (in memory, in place, and what the kernel does
/// there).
fn opaque(lower: Capabilities) -> Capabilities {
    Capabilities {
        in_memory: false,
        in_place: false,
        hard_links: false,
        special_files: lower.special_files && !lower.in_place,
        ..lower
    }
}

/// A layer `T` over the driver `lower`.
#[derive(Debug)]
pub struct Stacked<T> {
    lower: Arc<dyn Driver>,
    t: T,
}

impl<T: Transform> Stacked<T> {
    pub fn new(t: T, lower: Arc<dyn Driver>) -> Stacked<T> {
        Stacked { lower, t }
    }

    fn meta_up(&self, mut m: Meta) -> Result<Meta> {
        m.symlink_target = match m.symlink_target {
            Some(t) => Some(self.t.name(&t, Way::Decode)?),
            None => None,
        };
        Ok(m)
    }

    /// The lower driver's name for `path`.
    fn down(&self, path: &str) -> Result<String> {
        self.t.name(path, Way::Encode)
    }
}

/// Bytes transformed at once: few calls for a transform that runs elsewhere (a layer
/// extension costs a call per piece), little memory per open file.
const PIECE: usize = 256 << 10;

/// A writer that decodes what the lower driver writes into it, on its way to the program,
/// in pieces of [`PIECE`] bytes; [`Down::finish`] writes the last one.
struct Down<'a, T> {
    t: &'a T,
    inner: &'a mut dyn Write,
    offset: u64,
    piece: Vec<u8>,
}

impl<'a, T: Transform> Down<'a, T> {
    fn new(t: &'a T, inner: &'a mut dyn Write, offset: u64) -> Self {
        Down {
            t,
            inner,
            offset,
            piece: Vec::new(),
        }
    }

    fn drain(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        self.t
            .bytes(&mut self.piece, self.offset, Way::Decode)
            .map_err(std::io::Error::other)?;
        self.inner.write_all(&self.piece)?;
        self.offset += self.piece.len() as u64;
        self.piece.clear();
        Ok(())
    }

    /// Writes what is still held; a failure is the transform's (or the destination's).
    fn finish(mut self) -> Result<()> {
        self.drain()
            .map_err(|e| crate::Error::new(crate::ErrorKind::Io, e.to_string()))
    }
}

impl<T: Transform> Write for Down<'_, T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.piece.extend_from_slice(buf);
        if self.piece.len() >= PIECE {
            self.drain()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.drain()?;
        self.inner.flush()
    }
}

/// A reader that encodes what the lower driver reads from it, on its way to storage: it
/// reads ahead a piece of [`PIECE`] bytes and transforms it at once.
struct Up<'a, T> {
    t: &'a T,
    inner: &'a mut dyn Read,
    /// Where the next piece starts in the file.
    offset: u64,
    piece: Vec<u8>,
    pos: usize,
}

impl<'a, T: Transform> Up<'a, T> {
    fn new(t: &'a T, inner: &'a mut dyn Read) -> Self {
        Up {
            t,
            inner,
            offset: 0,
            piece: Vec::new(),
            pos: 0,
        }
    }

    fn refill(&mut self) -> std::io::Result<()> {
        self.piece.resize(PIECE, 0);
        let mut n = 0;
        while n < PIECE {
            match self.inner.read(&mut self.piece[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.piece.truncate(n);
        self.t
            .bytes(&mut self.piece, self.offset, Way::Encode)
            .map_err(std::io::Error::other)?;
        self.offset += n as u64;
        self.pos = 0;
        Ok(())
    }
}

impl<T: Transform> Read for Up<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.piece.len() {
            self.refill()?;
        }
        let n = buf.len().min(self.piece.len() - self.pos);
        buf[..n].copy_from_slice(&self.piece[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl<T: Transform> Driver for Stacked<T> {
    fn describe(&self, path: &str) -> String {
        // A message must not fail: a name the layer cannot encode is shown as it is.
        let lower = self.down(path).unwrap_or_else(|_| path.to_owned());
        format!("{}:{}", self.t.scheme(), self.lower.describe(&lower))
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        self.meta_up(self.lower.stat(&self.down(path)?)?)
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let l = self.lower.list(&self.down(path)?)?;
        let entries = l
            .entries
            .into_iter()
            .map(|e| {
                Ok(DirEntry {
                    name: self.t.name(&e.name, Way::Decode)?,
                    meta: self.meta_up(e.meta)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Listing {
            entries,
            complete: l.complete,
            stands_alone: l.stands_alone,
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let mut down = Down::new(&self.t, dest, 0);
        let fetched = self.lower.fetch(&self.down(path)?, &mut down, validator)?;
        down.finish()?;
        match fetched {
            Fetched::Body(m) => Ok(Fetched::Body(self.meta_up(m)?)),
            Fetched::NotModified => Ok(Fetched::NotModified),
        }
    }

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        if T::TRANSPARENT {
            self.lower.local_path(&self.down(path).ok()?)
        } else {
            None
        }
    }

    /// The lower driver's, but what serves files as they are (in memory, in place, and
    /// what the kernel does there) only through a layer that leaves contents unchanged.
    fn capabilities(&self) -> Capabilities {
        let lower = self.lower.capabilities();
        if T::TRANSPARENT {
            return lower;
        }
        opaque(lower)
    }

    fn open_in_place(
        &self,
        path: &str,
        create: Option<NewFile>,
    ) -> Result<Arc<crate::mem::Contents>> {
        if T::TRANSPARENT {
            self.lower.open_in_place(&self.down(path)?, create)
        } else {
            Err(crate::unsupported(self, "open files in place", path))
        }
    }

    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        let mut down = Down::new(&self.t, dest, offset);
        let n = self
            .lower
            .read_range(&self.down(path)?, offset, len, of, &mut down)?;
        down.finish()?;
        Ok(n)
    }

    /// The precondition and the leftovers pass through: versions are the lower driver's
    /// (contents keep their length), and so are the paths of leftovers, which
    /// [`Driver::remove_leftover`] hands back down as they are.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        let mut up = Up::new(&self.t, src);
        self.meta_up(self.lower.upload(&self.down(path)?, &mut up, len, how)?)
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        self.lower.remove_leftover(leftover)
    }

    fn make_special(&self, path: &str, kind: Kind, mode: u32) -> Result<()> {
        self.lower.make_special(&self.down(path)?, kind, mode)
    }

    /// Through a transparent layer only: one that changes contents serves no lower file
    /// as it is.
    fn hard_link(&self, from: &str, to: &str) -> Result<()> {
        if !self.capabilities().hard_links {
            return Err(crate::unsupported(self, "make hard links", from));
        }
        self.lower.hard_link(&self.down(from)?, &self.down(to)?)
    }

    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.lower.mkdir(&self.down(path)?, mode)
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.lower.remove_file(&self.down(path)?)
    }

    fn mkdir_in_known_dir(&self, path: &str, mode: u32) -> Result<Option<Meta>> {
        self.lower.mkdir_in_known_dir(&self.down(path)?, mode)
    }

    fn remove_known_file(&self, path: &str, known: Known) -> Result<()> {
        self.lower.remove_known_file(&self.down(path)?, known)
    }

    fn remove_known_dir(&self, path: &str, known: Known) -> Result<()> {
        self.lower.remove_known_dir(&self.down(path)?, known)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.lower.remove_dir(&self.down(path)?)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.lower.rename(&self.down(from)?, &self.down(to)?)
    }

    /// The stored bytes copied as they are: a layer's contents do not depend on names.
    fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.lower.copy(&self.down(from)?, &self.down(to)?)
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.lower.set_mode(&self.down(path)?, mode)
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.lower.set_mtime(&self.down(path)?, mtime)
    }

    fn set_times(&self, path: &str, atime: SystemTime, mtime: Option<SystemTime>) -> Result<()> {
        self.lower.set_times(&self.down(path)?, atime, mtime)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.lower.symlink(&self.down(target)?, &self.down(path)?)
    }
}
