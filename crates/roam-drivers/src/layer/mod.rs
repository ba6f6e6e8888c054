//! Stackable layers (puffs §5): a driver over another driver, changing names and contents
//! on the way through. [`Stacked`] does the stacking once; a layer only says how it
//! transforms ([`Transform`]):
//! - `null:` ([`null::Null`]) changes nothing: over a local directory it passes the local
//!   files through, so frontends serve them in place at native speed;
//! - `rot13:` ([`rot13::Rot13`]) rotates the letters of names and contents.

pub mod null;
pub mod rot13;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::{DirEntry, Driver, Fetched, Known, Listing, Meta, NewFile, Result, Validator};

/// What a layer does to what passes through it. Both transforms are their own inverse,
/// so the same function serves the way down and the way up.
pub trait Transform: Send + Sync + std::fmt::Debug + 'static {
    /// The layer's scheme, for messages (`rot13`).
    const NAME: &'static str;
    /// Whether contents pass unchanged, so the lower layer's local files may be used as
    /// they are.
    const TRANSPARENT: bool;
    /// A name or path (each component alike: `/` and `.` never change).
    fn name(&self, s: &str) -> String;
    /// File contents, in place; `offset` is where `bytes` start in the file.
    fn bytes(&self, bytes: &mut [u8], offset: u64);
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

    fn meta_up(&self, mut m: Meta) -> Meta {
        m.symlink_target = m.symlink_target.map(|t| self.t.name(&t));
        m
    }
}

/// A writer that transforms what passes into it.
struct Down<'a, T> {
    t: &'a T,
    inner: &'a mut dyn Write,
    offset: u64,
}

impl<T: Transform> Write for Down<'_, T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut b = buf.to_vec();
        self.t.bytes(&mut b, self.offset);
        self.inner.write_all(&b)?;
        self.offset += b.len() as u64;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that transforms what is read from it.
struct Up<'a, T> {
    t: &'a T,
    inner: &'a mut dyn Read,
    offset: u64,
}

impl<T: Transform> Read for Up<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.t.bytes(&mut buf[..n], self.offset);
        self.offset += n as u64;
        Ok(n)
    }
}

impl<T: Transform> Driver for Stacked<T> {
    fn describe(&self, path: &str) -> String {
        format!("{}:{}", T::NAME, self.lower.describe(&self.t.name(path)))
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        self.lower.stat(&self.t.name(path)).map(|m| self.meta_up(m))
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let l = self.lower.list(&self.t.name(path))?;
        Ok(Listing {
            entries: l
                .entries
                .into_iter()
                .map(|e| DirEntry {
                    name: self.t.name(&e.name),
                    meta: self.meta_up(e.meta),
                })
                .collect(),
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
        match self.lower.fetch(&self.t.name(path), &mut down, validator)? {
            Fetched::Body(m) => Ok(Fetched::Body(self.meta_up(m))),
            Fetched::NotModified => Ok(Fetched::NotModified),
        }
    }

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        if T::TRANSPARENT {
            self.lower.local_path(&self.t.name(path))
        } else {
            None
        }
    }

    fn in_memory(&self) -> bool {
        T::TRANSPARENT && self.lower.in_memory()
    }

    fn open_in_place(
        &self,
        path: &str,
        create: Option<NewFile>,
    ) -> Result<Arc<crate::mem::Contents>> {
        if T::TRANSPARENT {
            self.lower.open_in_place(&self.t.name(path), create)
        } else {
            Err(crate::unsupported(self, "open files in place", path))
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
            .read_range(&self.t.name(path), offset, len, &mut down)
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
        self.lower
            .put(&self.t.name(path), &mut up, len)
            .map(|m| self.meta_up(m))
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.lower.mkdir(&self.t.name(path))
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.lower.remove_file(&self.t.name(path))
    }

    fn remove_known_file(&self, path: &str, known: Known) -> Result<()> {
        self.lower.remove_known_file(&self.t.name(path), known)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.lower.remove_dir(&self.t.name(path))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.lower.rename(&self.t.name(from), &self.t.name(to))
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.lower.set_mode(&self.t.name(path), mode)
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.lower.set_mtime(&self.t.name(path), mtime)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.lower.symlink(&self.t.name(target), &self.t.name(path))
    }
}
