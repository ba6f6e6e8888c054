//! `mem:`: a writable file system held in memory (puffs' dtfs), gone when roam exits. A
//! mount target for tests and benchmarks that measures roam itself, with no server behind.
//!
//! One ordered map from driver path to object; a directory's children are the keys right
//! below it, found by a range scan. A file's [`Contents`] are shared with every open
//! handle, so frontends read and write them in place ([`Driver::open_in_place`]) with no
//! copy, journal or upload, and a file unlinked while open stays usable through them.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use crate::{
    is_driver_path, Capabilities, DirEntry, Driver, Error, ErrorKind, Fetched, Kind, Leftover,
    Listing, Meta, NewFile, Pinned, Result, Upload, Validator,
};

/// The largest file, as on tmpfs (the kernel's `MAX_LFS_FILESIZE`): beyond it, EFBIG.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// Bytes held per page: a file holds only the pages written, so a file truncated up, or
/// written far out, costs only what was written (a sparse file, as on tmpfs).
const PAGE: usize = 4096;
/// Seconds after which `relatime` moves an access time that is after the last change.
const DAY: u64 = 24 * 60 * 60;

/// How many bytes of pages one backend may hold (the `size=` of a tmpfs), and how many
/// it holds: beyond the limit, writes fail with ENOSPC.
#[derive(Debug)]
struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    fn take(&self, bytes: u64) -> std::io::Result<()> {
        let taken = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            });
        taken
            .map(drop)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOSPC))
    }

    fn give(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// A file: its pages, size, permission bits and modification time.
#[derive(Debug)]
pub struct Contents {
    body: RwLock<Body>,
    /// The tree's version when this file was made: with `changes`, its ETag.
    born: u64,
    /// How many names it has (hard links); open handles are not names.
    names: AtomicU32,
    budget: Arc<Budget>,
}

#[derive(Debug)]
struct Body {
    /// The pages written, by index; a missing one reads as zeros.
    pages: BTreeMap<u64, Box<[u8]>>,
    size: u64,
    mode: u32,
    mtime: SystemTime,
    /// The last access: moved by reads as Linux's default `relatime` moves it, and by
    /// `utimensat`; no new version.
    atime: SystemTime,
    /// Bumped by every change of contents or mtime, so each version has its own ETag.
    changes: u64,
}

impl Body {
    /// Copies bytes from `offset` into `buf` (which must lie within the file), zeros
    /// where no page was written.
    fn copy_out(&self, buf: &mut [u8], offset: u64) {
        buf.fill(0);
        let end = offset + buf.len() as u64;
        let pages = self
            .pages
            .range(offset / PAGE as u64..end.div_ceil(PAGE as u64));
        for (&index, page) in pages {
            let start = index * PAGE as u64;
            let (from, to) = (start.max(offset), (start + PAGE as u64).min(end));
            let src = &page[(from - start) as usize..(to - start) as usize];
            buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
        }
    }

    /// How many pages a write of `[offset, end)` would add.
    fn missing_pages(&self, offset: u64, end: u64) -> u64 {
        let (first, last) = (offset / PAGE as u64, end.div_ceil(PAGE as u64));
        (last - first) - self.pages.range(first..last).count() as u64
    }

    /// Writes `data` at `offset`, making the pages it needs (already paid for).
    fn copy_in(&mut self, data: &[u8], offset: u64) {
        let mut at = offset;
        for chunk in split_at_pages(data, offset) {
            let index = at / PAGE as u64;
            let within = (at % PAGE as u64) as usize;
            let page = self
                .pages
                .entry(index)
                .or_insert_with(|| vec![0; PAGE].into_boxed_slice());
            page[within..within + chunk.len()].copy_from_slice(chunk);
            at += chunk.len() as u64;
        }
        self.size = self.size.max(at);
    }

    /// Cuts the file to `len` bytes: pages past it go (and are returned to `budget`), and
    /// the rest of the last one is zeroed, so that growing again reads zeros there.
    fn cut(&mut self, len: u64, budget: &Budget) {
        let first_gone = len.div_ceil(PAGE as u64);
        let gone = self.pages.split_off(&first_gone);
        budget.give(gone.len() as u64 * PAGE as u64);
        if let Some(page) = self.pages.get_mut(&(len / PAGE as u64)) {
            page[(len % PAGE as u64) as usize..].fill(0);
        }
        self.size = len;
    }
}

/// `data` (to be written at `offset`) in pieces that each stay within one page.
fn split_at_pages(data: &[u8], offset: u64) -> impl Iterator<Item = &[u8]> {
    let head = (PAGE - (offset % PAGE as u64) as usize).min(data.len());
    let (first, rest) = data.split_at(head);
    std::iter::once(first)
        .chain(rest.chunks(PAGE))
        .filter(|c| !c.is_empty())
}

impl Contents {
    fn new(mode: u32, born: u64, budget: Arc<Budget>) -> Arc<Contents> {
        let now = SystemTime::now();
        Arc::new(Contents {
            body: RwLock::new(Body {
                pages: BTreeMap::new(),
                size: 0,
                mode,
                mtime: now,
                atime: now,
                changes: 0,
            }),
            born,
            names: AtomicU32::new(1),
            budget,
        })
    }

    fn count_names(&self, by: i32) {
        let _ = self
            .names
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add_signed(by))
            });
    }

    /// Copies the bytes at `offset` into `buf`; returns how many (fewer at the end). A
    /// hole reads as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> usize {
        let body = self.body.read().unwrap();
        let n = body.size.saturating_sub(offset).min(buf.len() as u64) as usize;
        body.copy_out(&mut buf[..n], offset);
        drop(body);
        self.accessed();
        n
    }

    /// A read moves the access time as `relatime` does: when it is not after the last
    /// modification, or is a day old (so most reads take no write lock).
    fn accessed(&self) {
        let now = SystemTime::now();
        let stale = |b: &Body| {
            b.atime <= b.mtime || now.duration_since(b.atime).is_ok_and(|d| d.as_secs() > DAY)
        };
        if stale(&self.body.read().unwrap()) {
            let mut b = self.body.write().unwrap();
            if stale(&b) {
                b.atime = now;
            }
        }
    }

    /// Sets the access time (`utimensat`, `touch -a`): no new version.
    pub fn set_atime(&self, atime: SystemTime) {
        self.body.write().unwrap().atime = atime;
    }

    /// Writes `len` bytes from `offset` (clipped to the file) into `dest`, a page at a
    /// time; returns how many.
    fn copy_to(&self, dest: &mut dyn Write, offset: u64, len: u64) -> std::io::Result<u64> {
        let mut buf = vec![0; PAGE * 16];
        let mut done = 0;
        loop {
            let want = (len - done).min(buf.len() as u64) as usize;
            let n = self.read_at(&mut buf[..want], offset + done);
            if n == 0 {
                return Ok(done);
            }
            dest.write_all(&buf[..n])?;
            done += n as u64;
        }
    }

    /// Writes `data` at `offset`; a gap before it reads as zeros (a sparse file) and costs
    /// nothing. EFBIG past [`MAX_FILE_SIZE`], ENOSPC past the backend's capacity.
    pub fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= MAX_FILE_SIZE)
            .ok_or_else(too_big)?;
        if data.is_empty() {
            return Ok(());
        }
        let mut b = self.body.write().unwrap();
        self.budget
            .take(b.missing_pages(offset, end) * PAGE as u64)?;
        b.copy_in(data, offset);
        changed(&mut b);
        Ok(())
    }

    /// Truncates or extends to `len` bytes; extending allocates nothing (the new bytes
    /// read as zeros). EFBIG past [`MAX_FILE_SIZE`].
    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        if len > MAX_FILE_SIZE {
            return Err(too_big());
        }
        let mut b = self.body.write().unwrap();
        match len < b.size {
            true => b.cut(len, &self.budget),
            false => b.size = len,
        }
        changed(&mut b);
        Ok(())
    }

    /// What `stat` says of this file.
    pub fn meta(&self) -> Meta {
        let b = self.body.read().unwrap();
        Meta {
            size: Some(b.size),
            mtime: Some(b.mtime),
            atime: Some(b.atime),
            mode: Some(b.mode),
            etag: Some(format!("{}.{}", self.born, b.changes)),
            nlink: links(self.names.load(Ordering::Relaxed)),
            ..Meta::of_kind(Kind::File)
        }
    }

    /// Sets the permission bits: the same version (an ETag names contents and mtime, as
    /// on SFTP or a local disk), so copies of it stay good.
    pub fn set_mode(&self, mode: u32) {
        self.body.write().unwrap().mode = mode & 0o7777;
    }

    /// Sets the modification time.
    pub fn set_mtime(&self, mtime: SystemTime) {
        self.set(|b| b.mtime = mtime);
    }

    /// A change of the mtime only: a new version, the mtime as set.
    fn set(&self, f: impl FnOnce(&mut Body)) {
        let mut b = self.body.write().unwrap();
        f(&mut b);
        b.changes += 1;
    }
}

/// A change of contents: a new version with a new mtime.
fn changed(b: &mut Body) {
    b.mtime = SystemTime::now();
    b.changes += 1;
}

impl Drop for Contents {
    /// The last handle of a file gone (and its name), its pages are free for others.
    fn drop(&mut self) {
        let pages = self.body.get_mut().map_or(0, |b| b.pages.len());
        self.budget.give(pages as u64 * PAGE as u64);
    }
}

fn too_big() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EFBIG)
}

/// Half the physical memory: tmpfs's default size.
fn half_of_memory() -> u64 {
    // SAFETY: sysconf(3) reads system constants and touches no memory of ours.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (u64::try_from(pages).unwrap_or(0) * u64::try_from(page).unwrap_or(0)) / 2
}

#[derive(Clone)]
enum Object {
    /// A file, shared by its hard links and by everyone who has it open.
    File(Arc<Contents>),
    Dir {
        mode: u32,
        mtime: SystemTime,
        version: u64,
    },
    /// A symlink, or a FIFO's or socket's name: only its attributes live here (the kernel
    /// carries the bytes of what is opened or bound through a mount), shared by its hard
    /// links.
    Name(Arc<Mutex<Name>>),
}

/// What a symlink, FIFO or socket is: attributes only.
#[derive(Debug)]
struct Name {
    kind: Kind,
    /// A symlink's target (empty for the others).
    target: String,
    /// Permission bits (a symlink's are always 0777, as on Linux).
    mode: u32,
    mtime: SystemTime,
    /// How many names it has (hard links).
    names: u32,
}

impl Name {
    fn object(kind: Kind, target: String, mode: u32) -> Object {
        Object::Name(Arc::new(Mutex::new(Name {
            kind,
            target,
            mode: mode & 0o7777,
            mtime: SystemTime::now(),
            names: 1,
        })))
    }
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::File(_) => Kind::File,
            Object::Dir { .. } => Kind::Dir,
            Object::Name(n) => n.lock().unwrap().kind,
        }
    }

    fn meta(&self) -> Meta {
        match self {
            Object::File(c) => c.meta(),
            Object::Dir {
                mode,
                mtime,
                version,
            } => Meta {
                size: Some(0),
                mtime: Some(*mtime),
                mode: Some(*mode),
                etag: Some(version.to_string()),
                ..Meta::of_kind(Kind::Dir)
            },
            Object::Name(n) => n.lock().unwrap().meta(),
        }
    }

    /// Whether `self` and `other` are names of one object (hard links).
    fn same(&self, other: &Object) -> bool {
        match (self, other) {
            (Object::File(a), Object::File(b)) => Arc::ptr_eq(a, b),
            (Object::Name(a), Object::Name(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Counts a name more (`+1`, a hard link made) or less (`-1`, a name removed or
    /// renamed over).
    fn count_names(&self, by: i32) {
        match self {
            Object::File(c) => c.count_names(by),
            Object::Name(n) => {
                let mut n = n.lock().unwrap();
                n.names = n.names.saturating_add_signed(by);
            }
            Object::Dir { .. } => {}
        }
    }
}

impl Name {
    fn meta(&self) -> Meta {
        let symlink = self.kind == Kind::Symlink;
        Meta {
            size: Some(if symlink { self.target.len() as u64 } else { 0 }),
            mtime: Some(self.mtime),
            mode: Some(if symlink { 0o777 } else { self.mode }),
            symlink_target: symlink.then(|| self.target.clone()),
            nlink: links(self.names),
            ..Meta::of_kind(self.kind)
        }
    }
}

/// A link count to show: `None` for the usual one.
fn links(names: u32) -> Option<u32> {
    (names != 1).then_some(names)
}

/// The in-memory file system.
#[derive(Debug)]
pub struct MemDriver {
    tree: Mutex<Tree>,
    budget: Arc<Budget>,
}

struct Tree {
    objects: BTreeMap<String, Object>,
    next_version: u64,
}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} objects", self.objects.len())
    }
}

impl Default for MemDriver {
    fn default() -> Self {
        MemDriver::new()
    }
}

impl MemDriver {
    /// An empty file system, just the root directory, that holds at most half the
    /// physical memory in file contents (tmpfs's default).
    pub fn new() -> MemDriver {
        MemDriver::with_capacity(half_of_memory())
    }

    /// [`MemDriver::new`] that holds at most `bytes` of file contents (in pages of 4 KiB):
    /// a write beyond fails with ENOSPC.
    pub fn with_capacity(bytes: u64) -> MemDriver {
        let mut objects = BTreeMap::new();
        objects.insert("/".to_owned(), new_dir(0, 0o755));
        MemDriver {
            tree: Mutex::new(Tree {
                objects,
                next_version: 1,
            }),
            budget: Arc::new(Budget {
                limit: bytes,
                used: AtomicU64::new(0),
            }),
        }
    }

    fn err(&self, kind: ErrorKind, path: &str, why: &str) -> Error {
        Error::new(kind, format!("{}: {why}", self.describe(path)))
    }

    fn checked<'a>(&self, path: &'a str) -> Result<&'a str> {
        if is_driver_path(path) {
            Ok(path)
        } else {
            Err(self.err(ErrorKind::InvalidName, path, "not a valid name"))
        }
    }

    /// Checks that the parent of `path` is a directory, for a new object there.
    fn parent_is_dir(&self, tree: &Tree, path: &str) -> Result<()> {
        match tree.objects.get(parent(path)).map(Object::kind) {
            Some(Kind::Dir) => Ok(()),
            Some(_) => Err(self.err(ErrorKind::NotADirectory, path, "parent is not a directory")),
            None => Err(self.err(ErrorKind::NotFound, path, "no such directory")),
        }
    }

    fn get<'t>(&self, tree: &'t Tree, path: &str) -> Result<&'t Object> {
        tree.objects
            .get(self.checked(path)?)
            .ok_or_else(|| self.err(ErrorKind::NotFound, path, "no such file or directory"))
    }

    /// The contents of the file `path`.
    fn file(&self, path: &str) -> Result<Arc<Contents>> {
        match self.get(&self.tree.lock().unwrap(), path)? {
            Object::File(c) => Ok(c.clone()),
            Object::Dir { .. } => Err(self.err(ErrorKind::IsADirectory, path, "is a directory")),
            Object::Name(_) => Err(self.err(ErrorKind::InvalidName, path, "is not a file")),
        }
    }

    /// Adds a new object at `path` (its parent must be a directory, the name free).
    fn create(&self, path: &str, make: impl FnOnce(u64) -> Object) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        self.parent_is_dir(&tree, self.checked(path)?)?;
        if tree.objects.contains_key(path) {
            return Err(self.err(ErrorKind::AlreadyExists, path, "exists"));
        }
        let version = tree.bump();
        tree.objects.insert(path.to_owned(), make(version));
        Ok(())
    }
}

impl Tree {
    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    /// The names directly in the directory `dir`, with their objects.
    fn children<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a str, &'a Object)> + 'a {
        let base = if dir == "/" { 0 } else { dir.len() };
        self.below(dir).filter_map(move |(k, o)| {
            let name = &k[base + 1..];
            (!name.contains('/')).then_some((name, o))
        })
    }

    /// Keys strictly below the directory `dir`.
    fn below<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a String, &'a Object)> + 'a {
        let start = if dir == "/" {
            "/".to_owned()
        } else {
            format!("{dir}/")
        };
        let end = format!("{}0", start.trim_end_matches('/'));
        let end = if dir == "/" { "0".to_owned() } else { end };
        self.objects
            .range::<str, _>((
                Bound::Excluded(start.as_str()),
                Bound::Excluded(end.as_str()),
            ))
            .filter(move |(k, _)| k.starts_with(&start))
    }
}

fn new_dir(version: u64, mode: u32) -> Object {
    Object::Dir {
        mode: mode & 0o7777,
        mtime: SystemTime::now(),
        version,
    }
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Writes the `len` bytes of `src` into the new file `c`; returns how many there were.
fn fill(c: &Contents, src: &mut dyn Read, len: u64) -> std::io::Result<u64> {
    let mut buf = vec![0; PAGE * 16];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = match src.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        c.write_at(&buf[..n], done)?;
        done += n as u64;
    }
    Ok(done)
}

impl Driver for MemDriver {
    fn describe(&self, path: &str) -> String {
        format!("mem:{path}")
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let tree = self.tree.lock().unwrap();
        let mut meta = self.get(&tree, path)?.meta();
        if meta.kind == Kind::Dir {
            let subdirs = tree
                .children(path)
                .filter(|(_, o)| o.kind() == Kind::Dir)
                .count();
            meta.nlink = Some(2 + subdirs as u32);
        }
        Ok(meta)
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind() != Kind::Dir {
            return Err(self.err(ErrorKind::NotADirectory, path, "not a directory"));
        }
        let base = if path == "/" { 0 } else { path.len() };
        // A directory's link count: 2, and 1 per subdirectory (seen in the same walk).
        let mut subdirs: HashMap<&str, u32> = HashMap::new();
        for (k, o) in tree.below(path) {
            let mut parts = k[base + 1..].split('/');
            if let (Some(child), Some(_), None) = (parts.next(), parts.next(), parts.next()) {
                if o.kind() == Kind::Dir {
                    *subdirs.entry(child).or_default() += 1;
                }
            }
        }
        let entries = tree
            .children(path)
            .map(|(name, o)| {
                let mut meta = o.meta();
                if meta.kind == Kind::Dir {
                    meta.nlink = Some(2 + subdirs.get(name).copied().unwrap_or(0));
                }
                DirEntry {
                    name: name.to_owned(),
                    meta,
                }
            })
            .collect();
        Ok(Listing {
            entries,
            complete: true,
            stands_alone: true,
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let c = self.file(path)?;
        let meta = c.meta();
        if validator.is_some_and(|v| v.etag.is_some() && v.etag == meta.etag) {
            return Ok(Fetched::NotModified);
        }
        let size = meta.size.unwrap_or(0);
        c.copy_to(dest, 0, size)
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
        Ok(Fetched::Body(meta))
    }

    /// Everything. Paths through a symlink in their middle are roam-vfs's to follow
    /// (`serves_links`: the tree takes each component as a name).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            serves_links: true,
            in_memory: true,
            symlinks: true,
            set_atime: true,
            special_files: true,
            hard_links: true,
            ..Capabilities::writable()
                .with_ranges()
                .with_modes_and_times()
        }
    }

    fn open_in_place(&self, path: &str, create: Option<NewFile>) -> Result<Arc<Contents>> {
        let Some(new) = create else {
            return self.file(path);
        };
        let mut tree = self.tree.lock().unwrap();
        self.parent_is_dir(&tree, self.checked(path)?)?;
        match tree.objects.get(path) {
            Some(_) if new.exclusive => Err(self.err(ErrorKind::AlreadyExists, path, "exists")),
            Some(Object::File(c)) => Ok(c.clone()),
            Some(Object::Dir { .. }) => {
                Err(self.err(ErrorKind::IsADirectory, path, "is a directory"))
            }
            Some(Object::Name(_)) => Err(self.err(ErrorKind::InvalidName, path, "is not a file")),
            None => {
                let c = Contents::new(new.mode & 0o7777, tree.bump(), self.budget.clone());
                tree.objects
                    .insert(path.to_owned(), Object::File(c.clone()));
                Ok(c)
            }
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
        let file = self.file(path)?;
        if let Some(of) = of {
            of.check(&file.meta(), &self.describe(path))?;
        }
        file.copy_to(dest, offset, len)
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))
    }

    /// The new contents replace the file as one object, checked against `how.expect`
    /// under the tree's lock: nothing can come between the check and the replacement.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        // Filled before the tree is locked (the data may come slowly); the version is
        // taken now, as any unused number will do.
        let born = self.tree.lock().unwrap().bump();
        let c = Contents::new(0o644, born, self.budget.clone());
        let read = fill(&c, src, len).map_err(|e| Error::from_io(self.describe(path), &e))?;
        if read != len {
            let why = format!("the data ended after {read} of {len} bytes");
            return Err(self.err(ErrorKind::Io, path, &why));
        }
        let mut tree = self.tree.lock().unwrap();
        self.parent_is_dir(&tree, self.checked(path)?)?;
        let now = tree.objects.get(path).map(Object::meta);
        let kept = match now.as_ref().map(|m| (m.kind, m.mode)) {
            Some((Kind::Dir, _)) => {
                return Err(self.err(ErrorKind::IsADirectory, path, "is a directory"))
            }
            Some((Kind::File, mode)) => mode,
            _ => None,
        };
        if !how.expect.admits(now.as_ref()) {
            return Err(how.expect.mismatch(&self.describe(path), now.as_ref()));
        }
        // A new object, as an atomic upload makes: open handles keep the old contents.
        c.set_mode(how.attrs.mode.or(kept).unwrap_or(0o644));
        if let Some(mtime) = how.attrs.mtime {
            c.set_mtime(mtime);
        }
        if let Some(atime) = how.attrs.atime {
            c.set_atime(atime);
        }
        let meta = c.meta();
        tree.objects.insert(path.to_owned(), Object::File(c));
        Ok(meta)
    }

    /// An upload here makes nothing but the file itself.
    fn remove_leftover(&self, _leftover: &Leftover) -> Result<()> {
        Ok(())
    }

    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.create(path, |version| new_dir(version, mode))
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind() == Kind::Dir {
            return Err(self.err(ErrorKind::IsADirectory, path, "is a directory"));
        }
        if let Some(gone) = tree.objects.remove(path) {
            gone.count_names(-1);
        }
        Ok(())
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind() != Kind::Dir {
            return Err(self.err(ErrorKind::NotADirectory, path, "not a directory"));
        }
        if path == "/" || tree.below(path).next().is_some() {
            return Err(self.err(ErrorKind::NotEmpty, path, "directory not empty"));
        }
        tree.objects.remove(path);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        let moving = self.get(&tree, from)?.kind();
        self.parent_is_dir(&tree, self.checked(to)?)?;
        if from == to {
            return Ok(());
        }
        if to.starts_with(&format!("{from}/")) {
            return Err(self.err(ErrorKind::InvalidName, to, "inside the directory moved"));
        }
        if let Some(there) = tree.objects.get(to) {
            // Two names of one file: rename(2) does nothing.
            if there.same(self.get(&tree, from)?) {
                return Ok(());
            }
            match (moving == Kind::Dir, there.kind() == Kind::Dir) {
                (false, true) => {
                    return Err(self.err(ErrorKind::IsADirectory, to, "is a directory"))
                }
                (true, false) => {
                    return Err(self.err(ErrorKind::NotADirectory, to, "not a directory"))
                }
                (true, true) if tree.below(to).next().is_some() => {
                    return Err(self.err(ErrorKind::NotEmpty, to, "directory not empty"))
                }
                _ => {}
            }
        }
        if let Some(replaced) = tree.objects.get(to) {
            replaced.count_names(-1);
        }
        let subtree: Vec<String> = tree.below(from).map(|(k, _)| k.clone()).collect();
        for key in std::iter::once(from.to_owned()).chain(subtree) {
            let o = tree.objects.remove(&key).expect("listed above");
            tree.objects
                .insert(format!("{to}{}", &key[from.len()..]), o);
        }
        Ok(())
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        let version = tree.bump();
        match tree.objects.get_mut(self.checked(path)?) {
            Some(Object::File(c)) => c.set_mode(mode),
            Some(Object::Dir {
                mode: m,
                version: v,
                ..
            }) => (*m, *v) = (mode & 0o7777, version),
            // A symlink's bits stay 0777, as on Linux (its `meta` shows no other).
            Some(Object::Name(n)) => n.lock().unwrap().mode = mode & 0o7777,
            None => return Err(self.err(ErrorKind::NotFound, path, "no such file or directory")),
        }
        Ok(())
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        let version = tree.bump();
        match tree.objects.get_mut(self.checked(path)?) {
            Some(Object::File(c)) => c.set_mtime(mtime),
            Some(Object::Dir {
                mtime: t,
                version: v,
                ..
            }) => (*t, *v) = (mtime, version),
            Some(Object::Name(n)) => n.lock().unwrap().mtime = mtime,
            None => return Err(self.err(ErrorKind::NotFound, path, "no such file or directory")),
        }
        Ok(())
    }

    /// A file's own; directories, links and special files show their mtime for it, so
    /// theirs is accepted and not kept.
    fn set_times(&self, path: &str, atime: SystemTime, mtime: Option<SystemTime>) -> Result<()> {
        if let Some(mtime) = mtime {
            self.set_mtime(path, mtime)?;
        }
        let tree = self.tree.lock().unwrap();
        match tree.objects.get(self.checked(path)?) {
            Some(Object::File(c)) => c.set_atime(atime),
            Some(_) => {}
            None => return Err(self.err(ErrorKind::NotFound, path, "no such file or directory")),
        }
        Ok(())
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.create(path, |_| {
            Name::object(Kind::Symlink, target.to_owned(), 0o777)
        })
    }

    /// A second name of a file, symlink or special file: the same object (as on tmpfs,
    /// where a hard link is the same inode). Not of a directory (`ENOTSUP`: roam-vfs says
    /// `EPERM` first, as Linux does).
    fn hard_link(&self, from: &str, to: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        let object = self.get(&tree, from)?.clone();
        if object.kind() == Kind::Dir {
            return Err(self.err(
                ErrorKind::Unsupported,
                from,
                "a directory has no hard links",
            ));
        }
        self.parent_is_dir(&tree, self.checked(to)?)?;
        if tree.objects.contains_key(to) {
            return Err(self.err(ErrorKind::AlreadyExists, to, "exists"));
        }
        object.count_names(1);
        tree.objects.insert(to.to_owned(), object);
        Ok(())
    }

    fn make_special(&self, path: &str, kind: Kind, mode: u32) -> Result<()> {
        if !matches!(kind, Kind::Fifo | Kind::Socket) {
            return Err(self.err(ErrorKind::InvalidName, path, "not a special kind"));
        }
        self.create(path, |_| Name::object(kind, String::new(), mode))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(d: &MemDriver, path: &str, data: &[u8]) {
        d.put(path, &mut &data[..], data.len() as u64).unwrap();
    }

    fn names(d: &MemDriver, dir: &str) -> Vec<String> {
        let mut v: Vec<String> = d
            .list(dir)
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.name)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn fifos_and_sockets_are_names_with_attributes() {
        let d = MemDriver::new();
        d.make_special("/p", Kind::Fifo, 0o640).unwrap();
        d.make_special("/s", Kind::Socket, 0o755).unwrap();
        let p = d.stat("/p").unwrap();
        assert_eq!((p.kind, p.mode), (Kind::Fifo, Some(0o640)));
        assert_eq!(d.stat("/s").unwrap().kind, Kind::Socket);
        assert_eq!(names(&d, "/"), ["p", "s"]);
        let again = d.make_special("/p", Kind::Fifo, 0o640).unwrap_err();
        assert_eq!(again.kind, ErrorKind::AlreadyExists);
        assert_eq!(
            d.fetch("/p", &mut Vec::new(), None).unwrap_err().kind,
            ErrorKind::InvalidName
        );
        assert_eq!(
            d.make_special("/f", Kind::File, 0o644).unwrap_err().kind,
            ErrorKind::InvalidName
        );
    }

    #[test]
    fn access_times_are_kept_apart_and_moved_by_reads_as_relatime() {
        let d = MemDriver::new();
        put(&d, "/f", b"x");
        let c = d.open_in_place("/f", None).unwrap();
        let at = |s: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        c.set_atime(at(1000));
        c.set_mtime(at(2000));
        let m = c.meta();
        assert_eq!((m.atime, m.mtime), (Some(at(1000)), Some(at(2000))));
        assert_eq!(m.etag, d.stat("/f").unwrap().etag, "no new version");
        c.read_at(&mut [0; 1], 0);
        let read = c.meta().atime.unwrap();
        assert!(read > at(2000), "not after the change: moved");
        c.read_at(&mut [0; 1], 0);
        assert_eq!(
            c.meta().atime,
            Some(read),
            "recent and after the change: kept"
        );
    }

    #[test]
    fn directories_count_their_subdirectories_as_links() {
        let d = MemDriver::new();
        for dir in ["/d", "/d/a", "/d/b", "/d/b/x"] {
            d.mkdir(dir, 0o755).unwrap();
        }
        put(&d, "/d/f", b"");
        assert_eq!(d.stat("/d").unwrap().nlink, Some(4));
        let listed = d.list("/").unwrap().entries;
        assert_eq!(listed[0].meta.nlink, Some(4), "a listing says the same");
        assert_eq!(d.stat("/d/b/x").unwrap().nlink, Some(2));
    }

    #[test]
    fn files_directories_and_listings() {
        let d = MemDriver::new();
        d.mkdir("/a", 0o755).unwrap();
        put(&d, "/a/f", b"hello");
        put(&d, "/a0", b"x");
        d.mkdir("/a/b", 0o755).unwrap();
        put(&d, "/a/b/g", b"deep");
        assert_eq!(names(&d, "/"), ["a", "a0"]);
        assert_eq!(names(&d, "/a"), ["b", "f"]);
        let mut out = Vec::new();
        d.fetch("/a/f", &mut out, None).unwrap();
        assert_eq!(out, b"hello");
        let mut part = Vec::new();
        assert_eq!(d.read_range("/a/b/g", 1, 2, None, &mut part).unwrap(), 2);
        assert_eq!(part, b"ee");
    }

    #[test]
    fn errors_are_posix() {
        let d = MemDriver::new();
        d.mkdir("/d", 0o755).unwrap();
        put(&d, "/d/f", b"x");
        let kind = |r: Result<()>| r.unwrap_err().kind;
        assert_eq!(kind(d.mkdir("/d", 0o755)), ErrorKind::AlreadyExists);
        assert_eq!(kind(d.mkdir("/nope/x", 0o755)), ErrorKind::NotFound);
        assert_eq!(kind(d.remove_dir("/d")), ErrorKind::NotEmpty);
        assert_eq!(kind(d.remove_file("/d")), ErrorKind::IsADirectory);
        assert_eq!(kind(d.remove_dir("/d/f")), ErrorKind::NotADirectory);
        assert_eq!(kind(d.rename("/d", "/d/f/x")), ErrorKind::NotADirectory);
        assert_eq!(kind(d.rename("/d", "/d/sub")), ErrorKind::InvalidName);
        assert_eq!(kind(d.mkdir("/d/../x", 0o755)), ErrorKind::InvalidName);
    }

    #[test]
    fn rename_moves_subtrees_and_replaces_files() {
        let d = MemDriver::new();
        d.mkdir("/d", 0o755).unwrap();
        put(&d, "/d/f", b"one");
        put(&d, "/g", b"two");
        d.rename("/d/f", "/g").unwrap();
        assert_eq!(d.stat("/g").unwrap().size, Some(3));
        d.rename("/d", "/e").unwrap();
        assert_eq!(names(&d, "/"), ["e", "g"]);
        d.symlink("g", "/l").unwrap();
        assert_eq!(d.stat("/l").unwrap().symlink_target.as_deref(), Some("g"));
    }

    #[test]
    fn files_are_written_in_place_and_outlive_their_name() {
        let d = MemDriver::new();
        let new = NewFile {
            mode: 0o640,
            exclusive: true,
        };
        let f = d.open_in_place("/f", Some(new)).unwrap();
        let kind = |r: Result<Arc<Contents>>| r.unwrap_err().kind;
        assert_eq!(
            kind(d.open_in_place("/f", Some(new))),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            kind(d.open_in_place("/nope/f", Some(new))),
            ErrorKind::NotFound
        );
        let before = d.stat("/f").unwrap();
        f.write_at(b"tail", 6).unwrap();
        let after = d.stat("/f").unwrap();
        assert_eq!((after.size, after.mode), (Some(10), Some(0o640)));
        assert_ne!(before.etag, after.etag, "a write is a new version");
        let mut out = Vec::new();
        d.fetch("/f", &mut out, None).unwrap();
        assert_eq!(out, b"\0\0\0\0\0\0tail");
        d.remove_file("/f").unwrap();
        f.set_len(2).unwrap();
        let mut buf = [9u8; 4];
        assert_eq!(f.read_at(&mut buf, 0), 2);
        assert_eq!(buf, [0, 0, 9, 9]);
        assert_eq!(kind(d.open_in_place("/f", None)), ErrorKind::NotFound);
    }

    fn file(d: &MemDriver, path: &str) -> Arc<Contents> {
        let new = NewFile {
            mode: 0o644,
            exclusive: false,
        };
        d.open_in_place(path, Some(new)).unwrap()
    }

    fn errno(r: std::io::Result<()>) -> Option<i32> {
        r.unwrap_err().raw_os_error()
    }

    #[test]
    fn files_are_sparse() {
        let d = MemDriver::with_capacity(4 * PAGE as u64);
        let f = file(&d, "/huge");
        f.set_len(999_999_999_999_999).unwrap();
        assert_eq!(d.stat("/huge").unwrap().size, Some(999_999_999_999_999));
        assert_eq!(
            d.budget.used.load(Ordering::Relaxed),
            0,
            "truncating up holds nothing"
        );
        let mut buf = [7u8; 10];
        assert_eq!(f.read_at(&mut buf, 500_000_000_000_000), 10);
        assert_eq!(buf, [0; 10]);
        // Far out, across a page boundary: two pages, no more.
        f.write_at(b"far", 700_000_000_000_000 - 1).unwrap();
        assert_eq!(d.budget.used.load(Ordering::Relaxed), 2 * PAGE as u64);
        let mut got = [0u8; 5];
        assert_eq!(f.read_at(&mut got, 700_000_000_000_000 - 2), 5);
        assert_eq!(&got, b"\0far\0");
        let mut tail = Vec::new();
        let at = 999_999_999_999_999 - 3;
        assert_eq!(d.read_range("/huge", at, 100, None, &mut tail).unwrap(), 3);
        assert_eq!(tail, [0, 0, 0]);
        // Cut down, then grown again: what was cut reads as zeros and is given back.
        f.set_len(700_000_000_000_000).unwrap();
        assert_eq!(d.budget.used.load(Ordering::Relaxed), PAGE as u64);
        f.set_len(800_000_000_000_000).unwrap();
        assert_eq!(f.read_at(&mut got, 700_000_000_000_000 - 2), 5);
        assert_eq!(&got, b"\0f\0\0\0");
    }

    #[test]
    fn sizes_stop_where_tmpfs_does() {
        let d = MemDriver::with_capacity(PAGE as u64);
        let f = file(&d, "/f");
        f.set_len(MAX_FILE_SIZE).unwrap();
        assert_eq!(f.meta().size, Some(MAX_FILE_SIZE));
        assert_eq!(errno(f.set_len(MAX_FILE_SIZE + 1)), Some(libc::EFBIG));
        assert_eq!(errno(f.set_len(u64::MAX)), Some(libc::EFBIG));
        assert_eq!(errno(f.write_at(b"x", MAX_FILE_SIZE)), Some(libc::EFBIG));
        assert_eq!(errno(f.write_at(b"xy", u64::MAX - 1)), Some(libc::EFBIG));
        f.write_at(b"x", MAX_FILE_SIZE - 1).unwrap();
        assert_eq!(f.meta().size, Some(MAX_FILE_SIZE));
    }

    #[test]
    fn capacity_is_shared_and_given_back() {
        let d = MemDriver::with_capacity(3 * PAGE as u64);
        let (a, b) = (file(&d, "/a"), file(&d, "/b"));
        a.write_at(&[1; 2 * PAGE], 0).unwrap();
        assert_eq!(errno(b.write_at(&[2; 2 * PAGE], 0)), Some(libc::ENOSPC));
        assert_eq!(b.meta().size, Some(0), "a refused write changes nothing");
        b.write_at(&[2; PAGE], 0).unwrap();
        let upload = d.put("/c", &mut &[3u8; 10][..], 10).unwrap_err();
        assert_eq!(upload.kind, ErrorKind::NoSpace, "{}", upload.message);
        assert_eq!(d.stat("/c").unwrap_err().kind, ErrorKind::NotFound);
        // Removed while open, a file still holds its pages; closed, it gives them back.
        d.remove_file("/a").unwrap();
        assert!(d.put("/c", &mut &[3u8; 10][..], 10).is_err());
        drop(a);
        d.put("/c", &mut &[3u8; 10][..], 10).unwrap();
        // An upload announced far larger than it is allocates only what arrives.
        let short = d.put("/d", &mut &[4u8; 10][..], u64::MAX).unwrap_err();
        assert_eq!(short.kind, ErrorKind::Io, "{}", short.message);
    }
}
