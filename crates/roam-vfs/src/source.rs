//! Device sources as mounts: `src:NAME:URL` shows the files under the mount `URL` as the
//! tree the device-source extension `NAME` makes of them (`roam_ext::source`): it reads
//! the spans it asks for, answers a tree of files, each a span of one source file, and roam
//! serves the files' bytes by ranges of their source files. Read-only (`EROFS`).
//!
//! The tree is made once per state of the source: each listing of its root walks the files
//! under `URL` again (the vfs lists at most once per T_read), and the extension is asked
//! again only when a file appeared, vanished or changed. A tree the extension fails to make or lies
//! about is `EIO`, with an error naming the extension and what it did (the frontend tells it
//! once).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use roam_drivers::{
    Capabilities, Driver, Error, ErrorKind, Fetched, Kind, Listing, Meta, Pinned, Result, Validator,
};
use roam_ext::abi::{MemberKind, SourceFile};
use roam_ext::archive::Entry;
use roam_ext::source::{Extent, Tree, MAX_FILES};
use roam_ext::Fault;

use crate::archive::listing_of;
use crate::lazy_ext::{LazyExtension, LoadExtension};

/// Directory levels below the URL walked for source files.
const MAX_DEPTH: usize = 16;

/// A read-only driver over the tree a device-source extension makes of a mount's files.
#[derive(Debug)]
pub(crate) struct SourceDriver {
    /// `src:NAME`.
    scheme: String,
    lower: Arc<dyn Driver>,
    ext: LazyExtension,
    tree: Mutex<Option<Arc<Made>>>,
}

/// The source files (with their ETags) a tree was made of, and the tree (or why not).
#[derive(Debug)]
struct Made {
    files: Vec<SourceFile>,
    etags: Vec<Option<String>>,
    tree: Result<Tree>,
}

impl SourceDriver {
    pub(crate) fn new(name: &str, load: LoadExtension, lower: Arc<dyn Driver>) -> SourceDriver {
        SourceDriver {
            scheme: format!("src:{name}"),
            lower,
            ext: LazyExtension::new(load),
            tree: Mutex::new(None),
        }
    }

    fn fail(&self, kind: ErrorKind, path: &str, why: impl std::fmt::Display) -> Error {
        Error::new(kind, format!("{}: {why}", self.describe(path)))
    }

    /// The tree, made at the first use; with `rescan`, made again if the source changed.
    fn made(&self, rescan: bool) -> Result<Arc<Made>> {
        let mut slot = self.tree.lock().unwrap();
        let Some(made) = slot.clone().filter(|_| !rescan) else {
            let (files, etags) = self.walk()?;
            if let Some(made) = slot
                .clone()
                .filter(|m| m.files == files && m.etags == etags)
            {
                return made.usable();
            }
            let (tree, transient) = self.make(&files);
            let made = Arc::new(Made { files, etags, tree });
            if !transient {
                *slot = Some(made.clone());
            }
            return made.usable();
        };
        made.usable()
    }

    /// Asks the extension for the tree of `files`; says whether a failure was the
    /// server's (not kept: it may answer next time).
    fn make(&self, files: &[SourceFile]) -> (Result<Tree>, bool) {
        let ext = match self.ext.get() {
            Ok(ext) => ext,
            Err(e) => return (Err(self.fail(ErrorKind::Io, "/", e)), false),
        };
        let mut fetch = |file: u32, off, len: u32| {
            let mut buf = Vec::with_capacity(len as usize);
            let path = format!("/{}", files[file as usize].path);
            self.lower
                .read_range(&path, off, len.into(), None, &mut buf)
                .map_err(|e| std::io::Error::other(e.message))?;
            Ok(buf)
        };
        match roam_ext::source::list(&ext, files, &mut fetch) {
            Ok(tree) => (Ok(tree), false),
            Err(e) if matches!(e.fault, Fault::Host(_)) => {
                let why = format!("cannot list: {e}");
                (Err(self.fail(ErrorKind::Io, "/", why)), true)
            }
            Err(e) => {
                // Told by the frontend with the call it fails, once.
                let why = format!("tree refused: {e}");
                (Err(self.fail(ErrorKind::Io, "/", why)), false)
            }
        }
    }

    /// The regular files under the URL (depth first, by name), with their ETags.
    fn walk(&self) -> Result<(Vec<SourceFile>, Vec<Option<String>>)> {
        let (mut files, mut etags) = (Vec::new(), Vec::new());
        let mut dirs = vec![(String::new(), 0)];
        while let Some((dir, depth)) = dirs.pop() {
            let mut listing = self.lower.list(&format!("/{dir}"))?.entries;
            listing.sort_by(|a, b| b.name.cmp(&a.name));
            for e in listing {
                let path = if dir.is_empty() {
                    e.name.clone()
                } else {
                    format!("{dir}/{}", e.name)
                };
                match e.meta.kind {
                    Kind::Dir if depth < MAX_DEPTH => dirs.push((path, depth + 1)),
                    Kind::File => {
                        files.push(SourceFile {
                            path,
                            size: e.meta.size.unwrap_or(0),
                            mtime: secs(e.meta.mtime),
                        });
                        etags.push(e.meta.etag);
                    }
                    _ => {}
                }
            }
            if files.len() > MAX_FILES {
                let why = format!("more than {MAX_FILES} files under the source");
                return Err(self.fail(ErrorKind::Io, "/", why));
            }
        }
        Ok((files, etags))
    }

    fn entry(&self, made: &Made, path: &str) -> Result<Entry> {
        made.tree()
            .index
            .get(path.trim_start_matches('/'))
            .cloned()
            .ok_or_else(|| self.fail(ErrorKind::NotFound, path, "no such file"))
    }

    /// The file `path` of the tree: its entry, extent and source file's path.
    fn file(&self, path: &str) -> Result<(Arc<Made>, Entry, Extent, String)> {
        let made = self.made(false)?;
        let e = self.entry(&made, path)?;
        if e.kind == MemberKind::Dir {
            return Err(self.fail(ErrorKind::IsADirectory, path, "is a directory"));
        }
        let extent = made.tree().extents[e.at as usize];
        let source = format!("/{}", made.files[extent.file as usize].path);
        Ok((made, e, extent, source))
    }
}

impl Made {
    fn usable(self: Arc<Self>) -> Result<Arc<Made>> {
        match &self.tree {
            Ok(_) => Ok(self),
            Err(e) => Err(e.clone()),
        }
    }

    /// The tree of a [`Made::usable`] state.
    fn tree(&self) -> &Tree {
        self.tree
            .as_ref()
            .expect("only usable states are handed out")
    }

    fn meta_of(&self, e: &Entry) -> Meta {
        let kind = match e.kind {
            MemberKind::Dir => Kind::Dir,
            _ => Kind::File,
        };
        Meta {
            kind,
            size: Some(e.size),
            mtime: Some(UNIX_EPOCH + Duration::from_secs(e.mtime)),
            mode: Some(e.mode),
            etag: (kind == Kind::File).then(|| self.etag_of(e)),
            symlink_target: None,
            nlink: None,
            atime: None,
            fresh_for: None,
        }
    }

    /// The version of the source file of `x` the tree was made from: every read of its
    /// span must be of it (else `ESTALE`), since the span's place is that version's.
    fn source_version(&self, x: &Extent) -> Pinned {
        let f = &self.files[x.file as usize];
        Pinned::new(Validator {
            etag: self.etags[x.file as usize].clone(),
            mtime: (f.mtime > 0).then(|| UNIX_EPOCH + Duration::from_secs(f.mtime)),
        })
    }

    /// A file's validator: its source file's, with the span.
    fn etag_of(&self, e: &Entry) -> String {
        let x = self.tree().extents[e.at as usize];
        let f = &self.files[x.file as usize];
        let tag = self.etags[x.file as usize].as_deref().unwrap_or("");
        format!("{}-{}-{tag}@{}+{}", f.size, f.mtime, x.off, x.len)
    }
}

fn secs(t: Option<SystemTime>) -> u64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

impl Driver for SourceDriver {
    fn describe(&self, path: &str) -> String {
        format!("{}:{}#{path}", self.scheme, self.lower.describe("/"))
    }

    /// The root is a directory without asking the extension: a mount starts without
    /// reading the source, and a tree refused is `EIO` where it is listed.
    fn stat(&self, path: &str) -> Result<Meta> {
        if path == "/" {
            let mode = Some(0o755);
            return Ok(Meta {
                mode,
                ..Meta::of_kind(Kind::Dir)
            });
        }
        let made = self.made(false)?;
        Ok(made.meta_of(&self.entry(&made, path)?))
    }

    fn list(&self, path: &str) -> Result<Listing> {
        // Listing the root looks for changes: `ls -R` walks the source once, not per day.
        let made = self.made(path == "/")?;
        let e = self.entry(&made, path)?;
        if e.kind != MemberKind::Dir {
            return Err(self.fail(ErrorKind::NotADirectory, path, "not a directory"));
        }
        Ok(listing_of(&made.tree().index, path, |e| made.meta_of(e)))
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let (made, e, extent, source) = self.file(path)?;
        let meta = made.meta_of(&e);
        if validator.is_some_and(|v| v.etag.is_some() && v.etag == meta.etag) {
            return Ok(Fetched::NotModified);
        }
        let of = made.source_version(&extent);
        let got = self
            .lower
            .read_range(&source, extent.off, extent.len, Some(&of), dest)?;
        if got != extent.len {
            let why = format!("{source} ended after {got} of {} bytes", extent.len);
            return Err(self.fail(ErrorKind::Io, path, why));
        }
        Ok(Fetched::Body(meta))
    }

    /// Read-only (`EROFS`); files are read in ranges of their source files.
    fn capabilities(&self) -> Capabilities {
        let below = self.lower.capabilities();
        Capabilities {
            read_ranges: below.read_ranges,
            stream_large_files: below.stream_large_files,
            ..Capabilities::READ_ONLY
        }
    }

    /// A file is a span of a source file, of the version the tree was made from: what a
    /// caller pins (a file's own validator) is implied by it.
    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        _of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        let (made, _, extent, source) = self.file(path)?;
        let len = len.min(extent.len.saturating_sub(offset));
        if len == 0 {
            return Ok(0);
        }
        let of = made.source_version(&extent);
        self.lower
            .read_range(&source, extent.off + offset, len, Some(&of), dest)
    }
}
