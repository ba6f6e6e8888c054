//! `mem:`: a writable file system held in memory (puffs' dtfs), gone when roam exits. A
//! mount target for tests and benchmarks that measures roam itself, with no server behind.
//!
//! One ordered map from driver path to object; a directory's children are the keys right
//! below it, found by a range scan.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::{
    is_driver_path, DirEntry, Driver, Error, ErrorKind, Fetched, Kind, Listing, Meta, Result,
    Validator,
};

#[derive(Clone)]
struct Object {
    kind: Kind,
    data: Arc<Vec<u8>>,
    mode: u32,
    mtime: SystemTime,
    target: Option<String>,
    /// Changes with every new version, as an ETag.
    version: u64,
}

impl Object {
    fn meta(&self) -> Meta {
        Meta {
            kind: self.kind,
            size: Some(match self.kind {
                Kind::Symlink => self.target.as_ref().map_or(0, |t| t.len() as u64),
                _ => self.data.len() as u64,
            }),
            mtime: Some(self.mtime),
            mode: Some(self.mode),
            etag: Some(self.version.to_string()),
            symlink_target: self.target.clone(),
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
        objects.insert("/".to_owned(), new_object(Kind::Dir, 0o755, 0));
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
        match tree.objects.get(parent(path)).map(|o| o.kind) {
            Some(Kind::Dir) => Ok(()),
            Some(_) => Err(self.err(ErrorKind::NotADirectory, path, "parent is not a directory")),
            None => Err(self.err(ErrorKind::NotFound, path, "no such directory")),
        }
    }

    fn get(&self, tree: &Tree, path: &str) -> Result<Object> {
        tree.objects
            .get(self.checked(path)?)
            .cloned()
            .ok_or_else(|| self.err(ErrorKind::NotFound, path, "no such file or directory"))
    }

    /// Adds a new object at `path` (its parent must be a directory, the name free).
    fn create(&self, path: &str, kind: Kind, mode: u32, target: Option<String>) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        self.parent_is_dir(&tree, self.checked(path)?)?;
        if tree.objects.contains_key(path) {
            return Err(self.err(ErrorKind::AlreadyExists, path, "exists"));
        }
        let version = tree.bump();
        let mut o = new_object(kind, mode, version);
        o.target = target;
        tree.objects.insert(path.to_owned(), o);
        Ok(())
    }

    /// Changes the object at `path` in place.
    fn change(&self, path: &str, f: impl FnOnce(&mut Object)) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        let version = tree.bump();
        let o = tree
            .objects
            .get_mut(self.checked(path)?)
            .ok_or_else(|| self.err(ErrorKind::NotFound, path, "no such file or directory"))?;
        f(o);
        o.version = version;
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

fn new_object(kind: Kind, mode: u32, version: u64) -> Object {
    Object {
        kind,
        data: Arc::new(Vec::new()),
        mode,
        mtime: SystemTime::now(),
        target: None,
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
        if self.get(&tree, path)?.kind != Kind::Dir {
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
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let o = self.get(&self.tree.lock().unwrap(), path)?;
        match o.kind {
            Kind::Dir => return Err(self.err(ErrorKind::IsADirectory, path, "is a directory")),
            Kind::Symlink => return Err(self.err(ErrorKind::InvalidName, path, "is a symlink")),
            Kind::File => {}
        }
        let meta = o.meta();
        if validator.is_some_and(|v| v.etag.is_some() && v.etag == meta.etag) {
            return Ok(Fetched::NotModified);
        }
        dest.write_all(&o.data)
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
        Ok(Fetched::Body(meta))
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    fn read_range(&self, path: &str, offset: u64, len: u64, dest: &mut dyn Write) -> Result<u64> {
        let o = self.get(&self.tree.lock().unwrap(), path)?;
        let start = (offset as usize).min(o.data.len());
        let end = start.saturating_add(len as usize).min(o.data.len());
        dest.write_all(&o.data[start..end])
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
        Ok((end - start) as u64)
    }

    fn writable(&self) -> bool {
        true
    }

    fn put(&self, path: &str, src: &mut dyn Read, len: u64) -> Result<Meta> {
        let mut data = Vec::with_capacity(len as usize);
        src.read_to_end(&mut data)
            .map_err(|e| self.err(ErrorKind::Io, path, &e.to_string()))?;
        let mut tree = self.tree.lock().unwrap();
        self.parent_is_dir(&tree, self.checked(path)?)?;
        let version = tree.bump();
        let mode = match tree.objects.get(path) {
            Some(o) if o.kind == Kind::Dir => {
                return Err(self.err(ErrorKind::IsADirectory, path, "is a directory"))
            }
            Some(o) => o.mode,
            None => 0o644,
        };
        let mut o = new_object(Kind::File, mode, version);
        o.data = Arc::new(data);
        let meta = o.meta();
        tree.objects.insert(path.to_owned(), o);
        Ok(meta)
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        self.create(path, Kind::Dir, 0o755, None)
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind == Kind::Dir {
            return Err(self.err(ErrorKind::IsADirectory, path, "is a directory"));
        }
        tree.objects.remove(path);
        Ok(())
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        let mut tree = self.tree.lock().unwrap();
        if self.get(&tree, path)?.kind != Kind::Dir {
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
        let moving = self.get(&tree, from)?;
        self.parent_is_dir(&tree, self.checked(to)?)?;
        if from == to {
            return Ok(());
        }
        if to.starts_with(&format!("{from}/")) {
            return Err(self.err(ErrorKind::InvalidName, to, "inside the directory moved"));
        }
        if let Some(there) = tree.objects.get(to) {
            match (moving.kind == Kind::Dir, there.kind == Kind::Dir) {
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
        self.change(path, |o| o.mode = mode & 0o7777)
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.change(path, |o| o.mtime = mtime)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.create(path, Kind::Symlink, 0o777, Some(target.to_owned()))
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
}
