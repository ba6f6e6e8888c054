//! The local driver: a directory of this machine mounted elsewhere in the namespace
//! (`-m /proj=file:///srv/x`). It serves files in place ([`Driver::local_path`]), so the
//! cache never copies them; metadata comes from `lstat`, exactly as the kernel has it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{
    is_safe_name, DirEntry, Driver, Error, Fetched, Kind, Listing, Meta, Result, Validator,
};

/// A local directory tree.
#[derive(Debug)]
pub struct LocalDriver {
    root: PathBuf,
}

impl LocalDriver {
    pub fn new(root: impl Into<PathBuf>) -> LocalDriver {
        LocalDriver { root: root.into() }
    }

    fn real(&self, path: &str) -> PathBuf {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

fn meta_of(path: &Path, md: &fs::Metadata) -> Meta {
    let kind = if md.is_dir() {
        Kind::Dir
    } else if md.file_type().is_symlink() {
        Kind::Symlink
    } else {
        Kind::File
    };
    let symlink_target = match kind {
        Kind::Symlink => fs::read_link(path)
            .ok()
            .map(|t| t.to_string_lossy().into_owned()),
        _ => None,
    };
    Meta {
        kind,
        size: Some(md.len()),
        mtime: md.modified().ok(),
        mode: Some(md.permissions().mode() & 0o7777),
        etag: Some(format!("{}-{}-{}", md.ino(), md.mtime(), md.mtime_nsec())),
        symlink_target,
    }
}

impl Driver for LocalDriver {
    fn describe(&self, path: &str) -> String {
        format!("file://{}", self.real(path).display())
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let real = self.real(path);
        let md = fs::symlink_metadata(&real)
            .map_err(|e| Error::from_io(format_args!("stat {}", real.display()), &e))?;
        Ok(meta_of(&real, &md))
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let real = self.real(path);
        let ctx = || format!("list {}", real.display());
        let mut entries = Vec::new();
        for entry in fs::read_dir(&real).map_err(|e| Error::from_io(ctx(), &e))? {
            let entry = entry.map_err(|e| Error::from_io(ctx(), &e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                tracing::warn!("{}: skipping a name that is not UTF-8", ctx());
                continue;
            };
            if !is_safe_name(&name) {
                continue;
            }
            let md = entry.metadata().map_err(|e| Error::from_io(ctx(), &e))?;
            entries.push(DirEntry {
                meta: meta_of(&entry.path(), &md),
                name,
            });
        }
        Ok(Listing {
            entries,
            complete: true,
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        _validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let real = self.real(path);
        let ctx = || format!("read {}", real.display());
        let mut file = fs::File::open(&real).map_err(|e| Error::from_io(ctx(), &e))?;
        let md = file.metadata().map_err(|e| Error::from_io(ctx(), &e))?;
        if md.is_dir() {
            return Err(Error::new(
                crate::ErrorKind::IsADirectory,
                format!("{}: is a directory", ctx()),
            ));
        }
        std::io::copy(&mut file, dest).map_err(|e| Error::from_io(ctx(), &e))?;
        Ok(Fetched::Body(meta_of(&real, &md)))
    }

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        Some(self.real(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_lists_and_reads_a_real_tree() {
        let dir = std::env::temp_dir().join(format!("roam-local-{}", std::process::id()));
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("a.txt"), b"hello\n").unwrap();
        std::os::unix::fs::symlink("a.txt", dir.join("link")).unwrap();
        let d = LocalDriver::new(&dir);

        let m = d.stat("/a.txt").unwrap();
        assert_eq!((m.kind, m.size), (Kind::File, Some(6)));
        assert_eq!(d.stat("/sub").unwrap().kind, Kind::Dir);
        let l = d.stat("/link").unwrap();
        assert_eq!(
            (l.kind, l.symlink_target.as_deref()),
            (Kind::Symlink, Some("a.txt"))
        );
        assert_eq!(d.stat("/missing").unwrap_err().errno(), libc::ENOENT);
        assert_eq!(d.list("/a.txt").unwrap_err().errno(), libc::ENOTDIR);

        let mut names: Vec<_> = d
            .list("/")
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        assert_eq!(names, ["a.txt", "link", "sub"]);

        let mut buf = Vec::new();
        assert!(matches!(
            d.fetch("/a.txt", &mut buf, None).unwrap(),
            Fetched::Body(_)
        ));
        assert_eq!(buf, b"hello\n");
        assert_eq!(
            d.fetch("/sub", &mut buf, None).unwrap_err().errno(),
            libc::EISDIR
        );
        assert_eq!(d.local_path("/a.txt").unwrap(), dir.join("a.txt"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
