//! The server's version of a file in conflict, as a merge sees it. A resolver reads it by
//! ranges where the protocol can (an ID3 merge then fetches tags, not audio), else it is
//! fetched whole once. A patch is applied to the version fetched whole, and only if that is
//! still the version the resolver studied: a third version that arrived meanwhile is a
//! conflict again, never silently overwritten.
//!
//! Also the extension-backed resolver: `roam.toml`'s `[[resolver]]` rules, one extension of the
//! resolver kind per glob.

use std::cell::RefCell;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use roam_drivers::{Fetched, Meta, Pinned, Validator};
use roam_ext::resolve::{self, Patch, Versions};
use roam_ext::Extension;

use crate::cache::DiskCache;
use crate::consistency::glob_matches;
use crate::path::split_name;
use crate::write::{Conflict, ConflictResolver, Resolution};
use crate::{Error, Remote, Result};

/// The server's version of one file during one merge.
pub(crate) struct ServerVersion<'a> {
    r: &'a Remote,
    cache: &'a DiskCache,
    /// The version fetched whole (in the cache's `tmp/`) and what the server said of it.
    whole: RefCell<Option<(PathBuf, Meta)>>,
    /// The version the resolver studies: every range it reads is of it (else `ESTALE`).
    studied: Pinned,
}

impl<'a> ServerVersion<'a> {
    /// The server's version `studied` of the file `r`.
    pub(crate) fn new(r: &'a Remote, cache: &'a DiskCache, studied: &Meta) -> Self {
        ServerVersion {
            r,
            cache,
            whole: RefCell::new(None),
            studied: Pinned::new(Validator::of(studied)),
        }
    }

    /// `len` bytes at `off` (fewer at the end of the file).
    pub(crate) fn read(&self, off: u64, len: u32) -> std::io::Result<Vec<u8>> {
        let io = |e: Error| std::io::Error::other(e.to_string());
        if self.r.driver.capabilities().stream_large_files {
            let mut buf = Vec::with_capacity(len as usize);
            self.r
                .driver
                .read_range(
                    &self.r.path,
                    off,
                    u64::from(len),
                    Some(&self.studied),
                    &mut buf,
                )
                .map_err(|e| io(e.into()))?;
            return Ok(buf);
        }
        let (path, _) = self.fetch_whole().map_err(io)?;
        read_at(&File::open(path)?, off, len)
    }

    /// The file the patch makes of the version the resolver studied (`studied`), in `tmp/`.
    pub(crate) fn patched(&self, patch: &Patch, studied: &Meta) -> Result<PathBuf> {
        let (path, meta) = self.fetch_whole()?;
        if !same_version(&meta, studied) {
            return Err(Error::posix(
                libc::EAGAIN,
                "the server's version changed again during the merge",
            ));
        }
        let (out, file) = self.cache.create_download()?;
        let src = File::open(&path).map_err(|e| Error::cache(&path, e))?;
        let mut dest = BufWriter::new(file);
        let applied = patch
            .apply(&mut BufReader::new(src), &mut dest)
            .and_then(|_| dest.flush());
        if let Err(e) = applied {
            let _ = std::fs::remove_file(&out);
            return Err(Error::posix(
                libc::EINVAL,
                format!("the patch does not fit: {e}"),
            ));
        }
        Ok(out)
    }

    /// Fetches the version whole, once.
    fn fetch_whole(&self) -> Result<(PathBuf, Meta)> {
        if let Some(got) = self.whole.borrow().as_ref() {
            return Ok(got.clone());
        }
        let (path, file) = self.cache.create_download()?;
        let mut dest = BufWriter::new(file);
        let fetched = self.r.driver.fetch(&self.r.path, &mut dest, None);
        let flushed = dest.flush().map_err(|e| Error::cache(&path, e));
        let meta = match (fetched, flushed) {
            (Ok(Fetched::Body(meta)), Ok(())) => meta,
            (Ok(Fetched::NotModified), _) => {
                let e = Error::posix(libc::EIO, "the server said `not modified` to a plain fetch");
                return Err(self.forget(&path, e));
            }
            (Err(e), _) => return Err(self.forget(&path, e.into())),
            (_, Err(e)) => return Err(self.forget(&path, e)),
        };
        *self.whole.borrow_mut() = Some((path.clone(), meta.clone()));
        Ok((path, meta))
    }

    fn forget(&self, path: &Path, e: Error) -> Error {
        let _ = std::fs::remove_file(path);
        e
    }
}

impl Drop for ServerVersion<'_> {
    fn drop(&mut self) {
        if let Some((path, _)) = self.whole.get_mut().take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether two answers of the server describe the same version.
fn same_version(a: &Meta, b: &Meta) -> bool {
    match (&a.etag, &b.etag) {
        (Some(x), Some(y)) => x == y,
        _ => a.size == b.size && a.mtime == b.mtime,
    }
}

/// Resolver extensions by glob (`roam.toml`: `[[resolver]] glob = "*.txt" ext = "merge3"`):
/// the first rule whose glob matches a file's name merges its conflicts. A glob without `/`
/// matches the file name alone, one with `/` the whole virtual path (as `[t_read]` globs).
#[derive(Debug)]
pub struct ExtResolvers {
    rules: Vec<(String, Extension)>,
}

impl ExtResolvers {
    pub fn new(rules: Vec<(String, Extension)>) -> ExtResolvers {
        ExtResolvers { rules }
    }

    fn rule(&self, virt: &str) -> Option<&Extension> {
        let name = split_name(virt).1;
        self.rules
            .iter()
            .find(|(glob, _)| match glob.contains('/') {
                true => glob_matches(glob, virt),
                false => glob_matches(glob, name),
            })
            .map(|(_, ext)| ext)
    }
}

impl ConflictResolver for ExtResolvers {
    fn wants_base(&self, virt: &str) -> bool {
        self.rule(virt).is_some()
    }

    fn resolve(&self, c: &Conflict) -> Resolution {
        let Some(ext) = self.rule(c.virt) else {
            return Resolution::KeepBoth;
        };
        match ask(ext, c) {
            Ok(patch) => Resolution::Patch(patch),
            Err(why) => {
                tracing::warn!("{}: not merged: {why}; keeping both versions", c.virt);
                Resolution::KeepBoth
            }
        }
    }
}

/// Converses with the resolver extension about the three versions. A missing base (a file
/// created on both sides, or changed before the rule existed) is an empty one.
fn ask(ext: &Extension, c: &Conflict) -> std::result::Result<Patch, String> {
    let open = |p: &Path| File::open(p).map_err(|e| format!("{}: {e}", p.display()));
    let base = c.base.map(open).transpose()?;
    let local = open(c.local)?;
    let size = |f: &File| f.metadata().map(|m| m.len()).map_err(|e| e.to_string());
    let sizes = Versions {
        base: base.as_ref().map(size).transpose()?.unwrap_or(0),
        local: size(&local)?,
        remote: c
            .remote
            .size
            .ok_or("the server does not say the file's size")?,
    };
    let mut fetch = |file: u8, off: u64, len: u32| match (file, &base) {
        (resolve::REMOTE, _) => (c.read_remote)(off, len),
        (resolve::BASE, Some(f)) => read_at(f, off, len),
        (resolve::LOCAL, _) => read_at(&local, off, len),
        _ => Ok(Vec::new()),
    };
    let name = split_name(c.virt).1;
    resolve::resolve(ext, name, sizes, &mut fetch).map_err(|e| e.to_string())
}

/// Exactly `len` bytes at `off` (the conversation asks only for ranges inside the file).
fn read_at(f: &File, off: u64, len: u32) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    f.read_exact_at(&mut buf, off)?;
    Ok(buf)
}
