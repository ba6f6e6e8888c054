//! `mem:`: a writable file system held in memory (puffs' dtfs), gone when roam exits. A
//! mount target for tests and benchmarks that measures roam itself, with no server behind.
//!
//! One ordered map from driver path to object; a directory's children are the keys right
//! below it, found by a range scan. A file's [`Contents`] are shared with every open
//! handle, so frontends read and write them in place ([`Driver::open_in_place`]) with no
//! copy, journal or upload, and a file unlinked while open stays usable through them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use crate::{
    is_driver_path, DirEntry, Driver, Error, ErrorKind, Fetched, Kind, Leftover, Listing, Meta,
    NewFile, Result, Upload, Validator,
};

/// A file: its bytes, permission bits and modification time.
#[derive(Debug)]
pub struct Contents {
    body: RwLock<Body>,
    /// The tree's version when this file was made: with `changes`, its ETag.
    born: u64,
}

#[derive(Debug)]
struct Body {
    bytes: Vec<u8>,
    mode: u32,
    mtime: SystemTime,
    /// Bumped by every change, so each version has its own ETag.
    changes: u64,
}

impl Contents {
    fn new(bytes: Vec<u8>, mode: u32, born: u64) -> Arc<Contents> {
        Arc::new(Contents {
            body: RwLock::new(Body {
                bytes,
                mode,
                mtime: SystemTime::now(),
                changes: 0,
            }),
            born,
        })
    }

    /// Copies the bytes at `offset` into `buf`; returns how many (fewer at the end).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> usize {
        let body = self.body.read().unwrap();
        let start = usize::try_from(offset).map_or(body.bytes.len(), |o| o.min(body.bytes.len()));
        let n = buf.len().min(body.bytes.len() - start);
        buf[..n].copy_from_slice(&body.bytes[start..start + n]);
        n
    }

    /// Writes `data` at `offset`; a gap before it reads as zeros (a sparse file).
    pub fn write_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| too_big())?;
        let end = start.checked_add(data.len()).ok_or_else(too_big)?;
        self.change(|b| {
            if b.bytes.len() < end {
                b.bytes.resize(end, 0);
            }
            b.bytes[start..end].copy_from_slice(data);
        });
        Ok(())
    }

    /// Truncates or extends (with zeros) to `len` bytes.
    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        let len = usize::try_from(len).map_err(|_| too_big())?;
        self.change(|b| b.bytes.resize(len, 0));
        Ok(())
    }

    /// What `stat` says of this file.
    pub fn meta(&self) -> Meta {
        let b = self.body.read().unwrap();
        Meta {
            size: Some(b.bytes.len() as u64),
            mtime: Some(b.mtime),
            mode: Some(b.mode),
            etag: Some(format!("{}.{}", self.born, b.changes)),
            ..Meta::of_kind(Kind::File)
        }
    }

    /// A change of contents: a new version with a new mtime.
    fn change(&self, f: impl FnOnce(&mut Body)) {
        let mut b = self.body.write().unwrap();
        f(&mut b);
        b.mtime = SystemTime::now();
        b.changes += 1;
    }

    /// Sets the permission bits.
    pub fn set_mode(&self, mode: u32) {
        self.set(|b| b.mode = mode & 0o7777);
    }

    /// Sets the modification time.
    pub fn set_mtime(&self, mtime: SystemTime) {
        self.set(|b| b.mtime = mtime);
    }

    /// A change of attributes only: a new version, the mtime as set.
    fn set(&self, f: impl FnOnce(&mut Body)) {
        let mut b = self.body.write().unwrap();
        f(&mut b);
        b.changes += 1;
    }
}

fn too_big() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EFBIG)
}

#[derive(Clone)]
enum Object {
    File(Arc<Contents>),
    Dir {
        mode: u32,
        mtime: SystemTime,
        version: u64,
    },
    Symlink {
        target: String,
        mtime: SystemTime,
    },
}

impl Object {
    fn kind(&self) -> Kind {
        match self {
            Object::File(_) => Kind::File,
            Object::Dir { .. } => Kind::Dir,
            Object::Symlink { .. } => Kind::Symlink,
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
            Object::Symlink { target, mtime } => Meta {
                size: Some(target.len() as u64),
                mtime: Some(*mtime),
                mode: Some(0o777),
                symlink_target: Some(target.clone()),
                ..Meta::of_kind(Kind::Symlink)
            },
        }
    }
}

/// The in-memory file system.
#[derive(Debug)]
pub struct MemDriver {
    tree: Mutex<Tree>,
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
    /// An empty file system: just the root directory.
    pub fn new() -> MemDriver {
        let mut objects = BTreeMap::new();
        objects.insert("/".to_owned(), new_dir(0));
        MemDriver {
            tree: Mutex::new(Tree {
                objects,
                next_version: 1,
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
            Object::Symlink { .. } => Err(self.err(ErrorKind::InvalidName, path, "is a symlink")),
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

fn new_dir(version: u64) -> Object {
    Object::Dir {
        mode: 0o755,
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

impl Driver for MemDriver {
    fn describe(&self, path: &str) -> String {
        format!("mem:{path}")
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        Ok(self.get(&self.tree.lock().unwrap(), path)?.meta())
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind() != Kind::Dir {
            return Err(self.err(ErrorKind::NotADirectory, path, "not a directory"));
        }
        let base = if path == "/" { 0 } else { path.len() };
        let entries = tree
            .below(path)
            .filter_map(|(k, o)| {
                let name = &k[base + 1..];
                (!name.contains('/')).then(|| DirEntry {
                    name: name.to_owned(),
                    meta: o.meta(),
                })
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
        dest.write_all(&c.body.read().unwrap().bytes)
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
        Ok(Fetched::Body(meta))
    }

    fn in_memory(&self) -> bool {
        true
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
            Some(Object::Symlink { .. }) => {
                Err(self.err(ErrorKind::InvalidName, path, "is a symlink"))
            }
            None => {
                let c = Contents::new(Vec::new(), new.mode & 0o7777, tree.bump());
                tree.objects
                    .insert(path.to_owned(), Object::File(c.clone()));
                Ok(c)
            }
        }
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    fn read_range(&self, path: &str, offset: u64, len: u64, dest: &mut dyn Write) -> Result<u64> {
        let c = self.file(path)?;
        let body = c.body.read().unwrap();
        let start = usize::try_from(offset).map_or(body.bytes.len(), |o| o.min(body.bytes.len()));
        let end = start.saturating_add(len as usize).min(body.bytes.len());
        dest.write_all(&body.bytes[start..end])
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
        Ok((end - start) as u64)
    }

    fn writable(&self) -> bool {
        true
    }

    /// The new contents replace the file as one object, checked against `how.expect`
    /// under the tree's lock: nothing can come between the check and the replacement.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        let mut data = Vec::with_capacity(len as usize);
        src.read_to_end(&mut data)
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
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
        let mode = how.attrs.mode.or(kept).unwrap_or(0o644);
        // A new object, as an atomic upload makes: open handles keep the old contents.
        let c = Contents::new(data, mode, tree.bump());
        if let Some(mtime) = how.attrs.mtime {
            c.set_mtime(mtime);
        }
        let meta = c.meta();
        tree.objects.insert(path.to_owned(), Object::File(c));
        Ok(meta)
    }

    /// An upload here makes nothing but the file itself.
    fn remove_leftover(&self, _leftover: &Leftover) -> Result<()> {
        Ok(())
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.create(path, new_dir)
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind() == Kind::Dir {
            return Err(self.err(ErrorKind::IsADirectory, path, "is a directory"));
        }
        tree.objects.remove(path);
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
            // A symlink's bits are always 0777, as on Linux.
            Some(Object::Symlink { .. }) => {}
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
            Some(Object::Symlink { mtime: t, .. }) => *t = mtime,
            None => return Err(self.err(ErrorKind::NotFound, path, "no such file or directory")),
        }
        Ok(())
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.create(path, |_| Object::Symlink {
            target: target.to_owned(),
            mtime: SystemTime::now(),
        })
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
    fn files_directories_and_listings() {
        let d = MemDriver::new();
        d.mkdir("/a").unwrap();
        put(&d, "/a/f", b"hello");
        put(&d, "/a0", b"x");
        d.mkdir("/a/b").unwrap();
        put(&d, "/a/b/g", b"deep");
        assert_eq!(names(&d, "/"), ["a", "a0"]);
        assert_eq!(names(&d, "/a"), ["b", "f"]);
        let mut out = Vec::new();
        d.fetch("/a/f", &mut out, None).unwrap();
        assert_eq!(out, b"hello");
        let mut part = Vec::new();
        assert_eq!(d.read_range("/a/b/g", 1, 2, &mut part).unwrap(), 2);
        assert_eq!(part, b"ee");
    }

    #[test]
    fn errors_are_posix() {
        let d = MemDriver::new();
        d.mkdir("/d").unwrap();
        put(&d, "/d/f", b"x");
        let kind = |r: Result<()>| r.unwrap_err().kind;
        assert_eq!(kind(d.mkdir("/d")), ErrorKind::AlreadyExists);
        assert_eq!(kind(d.mkdir("/nope/x")), ErrorKind::NotFound);
        assert_eq!(kind(d.remove_dir("/d")), ErrorKind::NotEmpty);
        assert_eq!(kind(d.remove_file("/d")), ErrorKind::IsADirectory);
        assert_eq!(kind(d.remove_dir("/d/f")), ErrorKind::NotADirectory);
        assert_eq!(kind(d.rename("/d", "/d/f/x")), ErrorKind::NotADirectory);
        assert_eq!(kind(d.rename("/d", "/d/sub")), ErrorKind::InvalidName);
        assert_eq!(kind(d.mkdir("/d/../x")), ErrorKind::InvalidName);
    }

    #[test]
    fn rename_moves_subtrees_and_replaces_files() {
        let d = MemDriver::new();
        d.mkdir("/d").unwrap();
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
}
