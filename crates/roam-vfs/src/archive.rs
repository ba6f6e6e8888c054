//! Archives as directories: a regular file named `*.zip` or `*.tar` in the namespace can be
//! browsed as a read-only tree of its members, listed and read by an archive extension
//! (`roam_ext::archive`) that asks only for the byte ranges it needs.
//!
//! Names. A member has one canonical name, `/.archive` + the archive's name + the member's
//! path (`/.archive/http/h/photos.zip/a/b.jpg`): its skeleton lives there, apart from the
//! archive's own directory, so the archive's view never shows up in (nor is pruned with) the
//! listing of the directory that holds the archive. Two more spellings lead to it:
//! `.../photos.zip#/a/b.jpg` (AVFS' convention; works under `roam run` and in a FUSE mount,
//! whose kernel resolves one component at a time and so cannot go *through* a file) and
//! `.../photos.zip/a/b.jpg` (through the file; `roam run` hands whole names to the vfs).
//!
//! Each archive version (its size, mtime and ETag) gets one [`ArchiveDriver`], a read-only
//! [`Driver`] over the member tree, so the namespace, cache, listings and both frontends serve
//! members like any remote file; writes fail with EROFS. The drivers stay leaves: this module
//! (in the vfs, which already calls extensions for eviction) owns the extension.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use roam_drivers::{
    Capabilities, DirEntry, Driver, ErrorKind, Fetched, Kind, Listing, Meta, Pinned, Validator,
};
use roam_ext::abi::MemberKind;
use roam_ext::archive::{Data, Entry, Index};
use roam_ext::{Extension, Fault};

use crate::lazy_ext::{LazyExtension, LoadExtension};
use crate::mounts::{Node, Remote};
use crate::{Error, Resolved, Result, Vfs};

/// Where the canonical names of archive members live.
pub const VIEW_ROOT: &str = "/.archive";
/// The mark that makes `NAME.zip#` the directory view of the file `NAME.zip`.
const VIEW_MARK: char = '#';

/// The archive extension and the views made so far, by the archive's name.
pub(crate) struct Archives {
    ext: Arc<LazyExtension>,
    views: Mutex<HashMap<String, Arc<ArchiveDriver>>>,
}

/// Whether `name` is one an archive file may have (`*.zip`, `*.tar`, any case). Checked for
/// every component of every name looked up, so it allocates nothing.
fn archive_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > 4
        && [&b".zip"[..], b".tar"]
            .iter()
            .any(|ext| b[b.len() - 4..].eq_ignore_ascii_case(ext))
}

impl Vfs {
    /// Browses archives with the extension (of the archive kind) that `load` loads when the
    /// first archive is listed (see [`LazyExtension`]).
    pub fn set_archive_extension(&mut self, load: LoadExtension) {
        self.archives = Some(Archives {
            ext: Arc::new(LazyExtension::new(load)),
            views: Mutex::new(HashMap::new()),
        });
    }

    /// The member node `virt` names in any of its spellings, `None` when it names no member.
    pub(crate) fn archive_lookup(&self, virt: &str) -> Result<Option<Node>> {
        let Some(archives) = &self.archives else {
            return Ok(None);
        };
        let (canonical, rest) = match virt.strip_prefix(VIEW_ROOT) {
            Some("") => return Ok(Some(Node::SchemeRoot { virt: virt.into() })),
            Some(rest) if rest.starts_with('/') => (true, rest),
            _ => (false, virt),
        };
        if !canonical
            && !rest
                .split('/')
                .any(|c| archive_name(c.trim_end_matches(VIEW_MARK)))
        {
            return Ok(None);
        }
        let comps: Vec<&str> = rest.split('/').skip(1).collect();
        for (i, comp) in comps.iter().enumerate() {
            let marked = comp.strip_suffix(VIEW_MARK);
            let base = marked.unwrap_or(comp);
            let through = canonical || marked.is_some() || i + 1 < comps.len();
            if !through || !archive_name(base) {
                continue;
            }
            let file = format!("/{}", [&comps[..i], &[base]].concat().join("/"));
            if let Some((r, meta)) = self.archive_file(&file)? {
                let member = format!("/{}", comps[i + 1..].join("/"));
                return Ok(Some(self.member_node(archives, &file, r, meta, &member)));
            }
        }
        if canonical {
            return self.view_ancestor(virt, rest).map(Some);
        }
        Ok(None)
    }

    /// The root of the archive `virt` as a directory of its members, when `virt` is an
    /// archive file (`photos.zip/`: a trailing slash asks for a directory, and an archive
    /// file has one); `None` for any other name (a directory named `x.zip` stays itself).
    /// Whether looking `virt` up (or, with `as_root`, its archive root) may ask a server
    /// about an archive file on the way: callers that must never wait (roam's tracer) leave
    /// such names to a thread that may.
    pub fn archive_lookup_may_wait(&self, virt: &str, as_root: bool) -> bool {
        if self.archives.is_none() {
            return false;
        }
        if virt.starts_with(VIEW_ROOT) {
            return true;
        }
        let comps: Vec<&str> = virt.split('/').skip(1).collect();
        comps.iter().enumerate().any(|(i, c)| {
            let marked = c.strip_suffix(VIEW_MARK);
            let last = i + 1 == comps.len();
            archive_name(marked.unwrap_or(c)) && (marked.is_some() || !last || as_root)
        })
    }

    pub fn archive_root(&self, virt: &str) -> Result<Option<Node>> {
        let last = virt.rsplit('/').next().unwrap_or("");
        if self.archives.is_none() || !archive_name(last) {
            return Ok(None);
        }
        self.archive_lookup(&format!("{virt}{VIEW_MARK}"))
    }

    /// `/.archive/DIR`, DIR a directory of the namespace: a made-up directory (of the archive
    /// views opened below it), so a FUSE kernel can walk to `/.archive/DIR/NAME.zip` one
    /// component at a time.
    fn view_ancestor(&self, virt: &str, dir: &str) -> Result<Node> {
        let is_dir = match self.mounts.lookup(dir)? {
            Some(node) => {
                matches!(self.follow(node), Ok(Resolved::Node(_, m)) if m.kind == Kind::Dir)
            }
            None => false,
        };
        if is_dir {
            Ok(Node::SchemeRoot { virt: virt.into() })
        } else {
            Err(Error::posix(
                libc::ENOENT,
                format!("{virt}: no archive file on the way"),
            ))
        }
    }

    /// The remote regular file `virt` names (through symlinks), with its metadata.
    fn archive_file(&self, virt: &str) -> Result<Option<(Remote, Meta)>> {
        let Some(node) = self.mounts.lookup(virt)? else {
            return Ok(None);
        };
        Ok(match self.follow(node) {
            Ok(Resolved::Node(Node::Remote(r), meta)) if meta.kind == Kind::File => Some((r, meta)),
            _ => None,
        })
    }

    fn member_node(
        &self,
        archives: &Archives,
        file: &str,
        archive: Remote,
        meta: Meta,
        member: &str,
    ) -> Node {
        let mut views = archives.views.lock().unwrap();
        let view = match views.get(file) {
            Some(v) if v.version == Version::of(&meta) => v.clone(),
            _ => {
                let v = Arc::new(ArchiveDriver::new(
                    archive,
                    meta,
                    archives.ext.clone(),
                    self.usage.bytes_fetched.clone(),
                ));
                views.insert(file.to_owned(), v.clone());
                v
            }
        };
        let member = member.trim_end_matches('/');
        Node::Remote(Remote {
            virt: format!("{VIEW_ROOT}{file}{member}"),
            path: if member.is_empty() { "/" } else { member }.to_owned(),
            driver: view,
        })
    }
}

/// What identifies one version of an archive file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    size: u64,
    mtime: Option<SystemTime>,
    etag: Option<String>,
}

impl Version {
    fn of(meta: &Meta) -> Version {
        Version {
            size: meta.size.unwrap_or(0),
            mtime: meta.mtime,
            etag: meta.etag.clone(),
        }
    }

    /// A validator for members of this version: any change of the archive changes it.
    fn tag(&self) -> String {
        let secs = self
            .mtime
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        format!(
            "{}-{secs}-{}",
            self.size,
            self.etag.as_deref().unwrap_or("")
        )
    }
}

/// A read-only driver over the members of one version of one archive file.
#[derive(Debug)]
pub(crate) struct ArchiveDriver {
    archive: Remote,
    version: Version,
    /// Every read of the archive is of this version: its index says where members are.
    pinned: Pinned,
    /// A read found the archive changed on the server: what the extension then fails
    /// with is `ESTALE`, not `EIO`.
    stale: AtomicBool,
    ext: Arc<LazyExtension>,
    /// The vfs's count of bytes fetched: listing and locating members read the archive here.
    fetched: Arc<AtomicU64>,
    index: Mutex<Option<DResult<Arc<Index>>>>,
    /// Extents of stored members already located, by member path.
    extents: Mutex<HashMap<String, (u64, u64)>>,
}

type DResult<T> = roam_drivers::Result<T>;

impl ArchiveDriver {
    fn new(archive: Remote, meta: Meta, ext: Arc<LazyExtension>, fetched: Arc<AtomicU64>) -> Self {
        ArchiveDriver {
            archive,
            version: Version::of(&meta),
            pinned: Pinned::new(Validator::of(&meta)),
            stale: AtomicBool::new(false),
            ext,
            fetched,
            index: Mutex::new(None),
            extents: Mutex::new(HashMap::new()),
        }
    }

    fn fail(
        &self,
        kind: ErrorKind,
        path: &str,
        why: impl std::fmt::Display,
    ) -> roam_drivers::Error {
        roam_drivers::Error::new(kind, format!("{}: {why}", self.describe(path)))
    }

    /// The member tree, listed once per archive version. What the extension concluded is
    /// kept (a corrupt archive stays corrupt until it changes); a failed fetch is not (the
    /// server may answer next time). One listing at a time: the others wait for its result.
    fn index(&self) -> DResult<Arc<Index>> {
        let mut slot = self.index.lock().unwrap();
        if let Some(done) = &*slot {
            return done.clone();
        }
        let ext = self.extension("/")?;
        let listed = roam_ext::archive::list(
            &ext,
            self.file_name(),
            self.version.size,
            &mut |_, off, len| self.read(off, u64::from(len)),
        );
        let transient = matches!(&listed, Err(e) if matches!(e.fault, Fault::Host(_)));
        let result = listed
            .map(|index| {
                if index.skipped > 0 {
                    tracing::warn!(
                        "{}: {} members left out (unsafe names or clashing kinds)",
                        self.archive.describe(),
                        index.skipped
                    );
                }
                Arc::new(index)
            })
            .map_err(|e| self.fail(self.failed(), "/", format!("cannot list: {e}")));
        if !transient {
            *slot = Some(result.clone());
        }
        result
    }

    /// What the extension's failure to list or read is: `ESTALE` once the archive
    /// changed under it, else `EIO`.
    fn failed(&self) -> ErrorKind {
        match self.stale.load(Ordering::Relaxed) {
            true => ErrorKind::Changed,
            false => ErrorKind::Io,
        }
    }

    /// The archive's own file name: the extension tells zip from tar by it.
    fn file_name(&self) -> &str {
        self.archive.path.rsplit('/').next().unwrap_or("")
    }

    fn extension(&self, path: &str) -> DResult<Arc<Extension>> {
        self.ext
            .get()
            .map_err(|e| self.fail(ErrorKind::Io, path, e))
    }

    fn entry(&self, path: &str) -> DResult<(Arc<Index>, Entry)> {
        let index = self.index()?;
        let entry = index.get(path.trim_start_matches('/')).cloned();
        match entry {
            Some(e) => Ok((index, e)),
            None => Err(self.fail(ErrorKind::NotFound, path, "no such member")),
        }
    }

    fn meta_of(&self, e: &Entry) -> Meta {
        let kind = match e.kind {
            MemberKind::File => Kind::File,
            MemberKind::Dir => Kind::Dir,
            MemberKind::Symlink => Kind::Symlink,
        };
        Meta {
            kind,
            size: Some(if kind == Kind::Symlink {
                e.target.len() as u64
            } else {
                e.size
            }),
            mtime: Some(UNIX_EPOCH + Duration::from_secs(e.mtime)),
            mode: Some(e.mode),
            etag: Some(format!("{}@{}", self.version.tag(), e.at)),
            symlink_target: (kind == Kind::Symlink).then(|| e.target.clone()),
            nlink: None,
            atime: None,
            fresh_for: None,
        }
    }

    /// `len` bytes of the archive at `off`, counted as fetched.
    fn read(&self, off: u64, len: u64) -> std::io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(len as usize);
        self.read_into(off, len, &mut buf)
            .map_err(|e| std::io::Error::other(e.message))?;
        self.fetched.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(buf)
    }

    /// Bytes of the archive into `dest`, of the version its index was read from (else
    /// `ESTALE`); a backend that cannot read ranges says so (`ENOTSUP`), which archives
    /// then are on it.
    fn read_into(&self, off: u64, len: u64, dest: &mut dyn Write) -> DResult<u64> {
        self.archive
            .driver
            .read_range(&self.archive.path, off, len, Some(&self.pinned), dest)
            .inspect_err(|e| {
                if e.kind == ErrorKind::Changed {
                    self.stale.store(true, Ordering::Relaxed);
                }
            })
    }

    /// Where a file member's data is: an extent of the archive, or the (inflated) bytes.
    fn data(&self, path: &str, e: &Entry) -> DResult<Data> {
        if let Some(&(off, len)) = self.extents.lock().unwrap().get(path) {
            return Ok(Data::Extent { off, len });
        }
        let (ext, name) = (self.extension(path)?, self.file_name());
        let data =
            roam_ext::archive::extract(&ext, name, self.version.size, e, &mut |_, off, len| {
                self.read(off, u64::from(len))
            })
            .map_err(|err| self.fail(self.failed(), path, format!("cannot read: {err}")))?;
        if let Data::Extent { off, len } = data {
            self.extents
                .lock()
                .unwrap()
                .insert(path.to_owned(), (off, len));
        }
        Ok(data)
    }

    fn file(&self, path: &str) -> DResult<Entry> {
        let (_, e) = self.entry(path)?;
        match e.kind {
            MemberKind::File => Ok(e),
            MemberKind::Dir => Err(self.fail(ErrorKind::IsADirectory, path, "is a directory")),
            MemberKind::Symlink => Err(self.fail(ErrorKind::Io, path, "is a symbolic link")),
        }
    }
}

impl Driver for ArchiveDriver {
    fn describe(&self, path: &str) -> String {
        format!("{}{VIEW_MARK}{path}", self.archive.describe())
    }

    fn stat(&self, path: &str) -> DResult<Meta> {
        let (_, e) = self.entry(path)?;
        Ok(self.meta_of(&e))
    }

    fn list(&self, path: &str) -> DResult<Listing> {
        let (index, e) = self.entry(path)?;
        if e.kind != MemberKind::Dir {
            return Err(self.fail(ErrorKind::NotADirectory, path, "not a directory"));
        }
        Ok(listing_of(&index, path, |e| self.meta_of(e)))
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> DResult<Fetched> {
        let e = self.file(path)?;
        let meta = self.meta_of(&e);
        if validator.is_some_and(|v| v.etag.is_some() && v.etag == meta.etag) {
            return Ok(Fetched::NotModified);
        }
        match self.data(path, &e)? {
            Data::Extent { off, len } => {
                self.read_into(off, len, dest)?;
            }
            Data::Bytes(b) => dest
                .write_all(&b)
                .map_err(|err| self.fail(ErrorKind::Io, path, err))?,
        }
        Ok(Fetched::Body(meta))
    }

    /// Read-only (`EROFS`); members are read in ranges of the archive, as its backend
    /// reads them.
    fn capabilities(&self) -> Capabilities {
        let below = self.archive.driver.capabilities();
        Capabilities {
            read_ranges: below.read_ranges,
            stream_large_files: below.stream_large_files,
            ..Capabilities::READ_ONLY
        }
    }

    /// A member is a span of the archive, read as the archive is now.
    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        _of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> DResult<u64> {
        let e = self.file(path)?;
        let len = len.min(e.size.saturating_sub(offset));
        if len == 0 {
            return Ok(0);
        }
        match self.data(path, &e)? {
            Data::Extent { off, .. } => self.read_into(off + offset, len, dest),
            Data::Bytes(b) => {
                let piece = &b[offset as usize..(offset + len) as usize];
                dest.write_all(piece)
                    .map_err(|err| self.fail(ErrorKind::Io, path, err))?;
                Ok(len)
            }
        }
    }
}

/// The directory `path` of a member tree (an archive's, a device source's) as a listing,
/// each entry's metadata by `meta_of`.
pub(crate) fn listing_of(index: &Index, path: &str, meta_of: impl Fn(&Entry) -> Meta) -> Listing {
    let entries = index
        .children(path.trim_start_matches('/'))
        .map(|(name, e)| DirEntry {
            name: name.to_owned(),
            meta: meta_of(e),
        })
        .collect();
    Listing {
        entries,
        complete: true,
        stands_alone: true,
    }
}

#[cfg(test)]
mod tests {
    use super::archive_name;

    #[test]
    fn archive_names_by_suffix_in_any_case() {
        for yes in ["a.zip", "Photos.ZIP", "src.tar", "x.Tar"] {
            assert!(archive_name(yes), "{yes}");
        }
        for no in [".zip", "a.zip.gz", "a.tgz", "zip", "a.tar.gz", "aé"] {
            assert!(!archive_name(no), "{no}");
        }
    }
}
