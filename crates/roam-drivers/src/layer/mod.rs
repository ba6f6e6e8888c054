//! Stackable layers (puffs §5): a driver over another driver, changing names and contents
//! on the way through. [`Stacked`] does the stacking once; a layer only says how it
//! transforms ([`Transform`]):
//! - `null:` ([`null::Null`]) changes nothing: over a local directory it passes the local
//!   files through, so frontends serve them in place at native speed;
//! - `rot13:` ([`rot13::Rot13`]) rotates the letters of names and contents;
//! - layers whose transform runs elsewhere (a layer extension, wired above the drivers):
//!   that is why a transform says which way data goes and may fail.

pub mod null;
pub mod rot13;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::{DirEntry, Driver, Fetched, Known, Listing, Meta, Result, Validator};

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

/// A writer that decodes what the lower driver writes into it, on its way to the program.
struct Down<'a, T> {
    t: &'a T,
    inner: &'a mut dyn Write,
    offset: u64,
}

impl<T: Transform> Write for Down<'_, T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut b = buf.to_vec();
        self.t
            .bytes(&mut b, self.offset, Way::Decode)
            .map_err(std::io::Error::other)?;
        self.inner.write_all(&b)?;
        self.offset += b.len() as u64;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that encodes what the lower driver reads from it, on its way to storage.
struct Up<'a, T> {
    t: &'a T,
    inner: &'a mut dyn Read,
    offset: u64,
}

impl<T: Transform> Read for Up<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.t
            .bytes(&mut buf[..n], self.offset, Way::Encode)
            .map_err(std::io::Error::other)?;
        self.offset += n as u64;
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
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let mut down = Down {
            t: &self.t,
            inner: dest,
            offset: 0,
        };
        match self.lower.fetch(&self.down(path)?, &mut down, validator)? {
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

    fn reads_ranges(&self) -> bool {
        self.lower.reads_ranges()
    }

    fn read_range(&self, path: &str, offset: u64, len: u64, dest: &mut dyn Write) -> Result<u64> {
        let mut down = Down {
            t: &self.t,
            inner: dest,
            offset,
        };
        self.lower
            .read_range(&self.down(path)?, offset, len, &mut down)
    }

    fn writable(&self) -> bool {
        self.lower.writable()
    }

    fn put(&self, path: &str, src: &mut dyn Read, len: u64) -> Result<Meta> {
        let mut up = Up {
            t: &self.t,
            inner: src,
            offset: 0,
        };
        self.meta_up(self.lower.put(&self.down(path)?, &mut up, len)?)
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.lower.mkdir(&self.down(path)?)
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.lower.remove_file(&self.down(path)?)
    }

    fn remove_known_file(&self, path: &str, known: Known) -> Result<()> {
        self.lower.remove_known_file(&self.down(path)?, known)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.lower.remove_dir(&self.down(path)?)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.lower.rename(&self.down(from)?, &self.down(to)?)
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.lower.set_mode(&self.down(path)?, mode)
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.lower.set_mtime(&self.down(path)?, mtime)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.lower.symlink(&self.down(target)?, &self.down(path)?)
    }
}
