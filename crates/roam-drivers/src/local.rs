//! The local driver: a directory of this machine mounted elsewhere in the namespace
//! (`-m /proj=file:///srv/x`). It serves files in place ([`Driver::local_path`]), so the
//! cache never copies them; metadata comes from `lstat`, exactly as the kernel has it.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

mod short;

pub use short::{keep_links_in, spell, spell_within, LONGEST_NAME};

use crate::{
    is_safe_name, Attrs, Capabilities, DirEntry, Driver, Error, Expect, Fetched, Kind, Leftover,
    Listing, Meta, Pinned, Result, Upload, Validator,
};

/// A local directory tree.
#[derive(Debug)]
pub struct LocalDriver {
    root: PathBuf,
    in_place: bool,
}

impl LocalDriver {
    /// A tree served in place: programs open its files directly.
    pub fn new(root: impl Into<PathBuf>) -> LocalDriver {
        LocalDriver {
            root: root.into(),
            in_place: true,
        }
    }

    /// A tree served through roam's cache like a remote one (whole-file copies, write-back at
    /// close): for slow or flaky local mounts (NFS), and to exercise the write-back path.
    pub fn cached(root: impl Into<PathBuf>) -> LocalDriver {
        LocalDriver {
            root: root.into(),
            in_place: false,
        }
    }

    /// The local name of `path`, as the kernel takes it (through links where it is longer
    /// than `PATH_MAX`: see [`short`]).
    fn real(&self, path: &str) -> PathBuf {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() {
            self.root.clone()
        } else {
            spell(&self.root.join(rel)).into_owned()
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
        nlink: None,
        atime: md.accessed().ok(),
        fresh_for: None,
    }
}

impl Driver for LocalDriver {
    /// A local directory: everything but special files through the driver. Served in
    /// place, the kernel does what frontends hand it (hard links, FIFOs, access times) and
    /// follows a link in the middle of a path; through the cache, such a link is
    /// roam-vfs's to follow (by its rule, inside the mount).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cheap_stat: true,
            serves_links: !self.in_place,
            in_place: self.in_place,
            symlinks: true,
            set_atime: true,
            hard_links: self.in_place,
            special_files: self.in_place,
            server_copy: true,
            ..Capabilities::writable()
                .with_ranges()
                .with_modes_and_times()
        }
    }

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
                tracing::warn!("{}: skipping the unsafe name {name:?}", ctx());
                continue;
            }
            let md = match entry.metadata() {
                Ok(md) => md,
                // Renamed or removed since the directory was read (another client's
                // upload putting its temporary in place): not there, as a later listing
                // would say.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::from_io(ctx(), &e)),
            };
            entries.push(DirEntry {
                meta: meta_of(&entry.path(), &md),
                name,
            });
        }
        Ok(Listing {
            entries,
            complete: true,
            stands_alone: true,
        })
    }

    /// The file's bytes, or `NotModified` when `validator` names this very version (its
    /// ETag: inode and mtime to the nanosecond), as a conditional GET answers: roam's copy
    /// then stays the one a program has already seen.
    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let real = self.real(path);
        let ctx = || format!("read {}", real.display());
        let mut file = open_unread(&real).map_err(|e| Error::from_io(ctx(), &e))?;
        let md = file.metadata().map_err(|e| Error::from_io(ctx(), &e))?;
        if md.is_dir() {
            return Err(Error::new(
                crate::ErrorKind::IsADirectory,
                format!("{}: is a directory", ctx()),
            ));
        }
        let meta = meta_of(&real, &md);
        if validator.is_some_and(|v| v.etag.is_some() && v.etag == meta.etag) {
            return Ok(Fetched::NotModified);
        }
        std::io::copy(&mut file, dest).map_err(|e| Error::from_io(ctx(), &e))?;
        Ok(Fetched::Body(meta))
    }

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        self.in_place.then(|| self.real(path))
    }

    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        let real = self.real(path);
        let ctx = || format!("read {}", real.display());
        let mut file = open_unread(&real).map_err(|e| Error::from_io(ctx(), &e))?;
        if let Some(of) = of {
            // The open file is the version its fstat describes, whatever replaces it.
            let md = file.metadata().map_err(|e| Error::from_io(ctx(), &e))?;
            of.check(&meta_of(&real, &md), &ctx())?;
        }
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| Error::from_io(ctx(), &e))?;
        std::io::copy(&mut file.take(len), dest).map_err(|e| Error::from_io(ctx(), &e))
    }

    /// Writes a temporary sibling (with the mode of the file it replaces, else that of
    /// `how.attrs`, and the time of `how.attrs`), then puts it in place: `renameat2` with
    /// `RENAME_NOREPLACE` for a new file (atomically create-only), else a recheck of the
    /// name's version right before `rename`, under the lock roam clients take on the name
    /// ([`crate::under_name_lock`]). The temporary goes if anything fails.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        let real = self.real(path);
        let ctx = || format!("write {}", real.display());
        let temporary = crate::temporary_beside(self, "write", path, crate::TEMPORARY_PREFIX)?;
        let tmp = self.real(&temporary);
        how.announce(&ctx(), &Leftover::Temporary { path: temporary })?;
        // New contents keep the file's mode, as a write in place would.
        let mode = fs::metadata(&real)
            .ok()
            .map(|m| m.permissions().mode())
            .or(how.attrs.mode);
        let written = write_temporary(&tmp, (src, len), mode, &how.attrs)
            .and_then(|()| self.place(&tmp, &real, how.expect));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(match e {
                Placed::Io(e) => Error::from_io(ctx(), &e),
                Placed::Changed(now) => how.expect.mismatch(&ctx(), now.as_ref()),
            });
        }
        self.stat(path)
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        let real = self.real(leftover.path());
        match fs::remove_file(&real) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::from_io(
                format_args!("remove {}", real.display()),
                &e,
            )),
            _ => Ok(()),
        }
    }

    /// Made with `mode` less roam's own umask (so never wider than asked, even for a
    /// moment), then given exactly `mode`: roam's umask is not the caller's.
    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let real = self.real(path);
        fs::DirBuilder::new()
            .mode(mode & 0o7777)
            .create(&real)
            .map_err(|e| Error::from_io(format_args!("mkdir {}", real.display()), &e))?;
        self.set_mode(path, mode & 0o7777)
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        let real = self.real(path);
        fs::remove_file(&real)
            .map_err(|e| Error::from_io(format_args!("remove {}", real.display()), &e))
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        let real = self.real(path);
        fs::remove_dir(&real)
            .map_err(|e| Error::from_io(format_args!("rmdir {}", real.display()), &e))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (a, b) = (self.real(from), self.real(to));
        fs::rename(&a, &b).map_err(|e| {
            Error::from_io(
                format_args!("rename {} to {}", a.display(), b.display()),
                &e,
            )
        })
    }

    /// The kernel's copy (`copy_file_range`), with the source's permission bits.
    fn copy(&self, from: &str, to: &str) -> Result<()> {
        let (a, b) = (self.real(from), self.real(to));
        let how = || format!("copy {} to {}", a.display(), b.display());
        let md = fs::symlink_metadata(&a).map_err(|e| Error::from_io(how(), &e))?;
        if md.is_dir() {
            let e = std::io::Error::from_raw_os_error(libc::EISDIR);
            return Err(Error::from_io(how(), &e));
        }
        if a == b {
            return Ok(());
        }
        fs::copy(&a, &b)
            .map(drop)
            .map_err(|e| Error::from_io(how(), &e))
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        let real = self.real(path);
        fs::set_permissions(&real, fs::Permissions::from_mode(mode))
            .map_err(|e| Error::from_io(format_args!("chmod {}", real.display()), &e))
    }

    /// Of `path` itself: a symlink's own time, not its target's (`touch -h`, `tar x`).
    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        let real = self.real(path);
        set_own_times(&real, None, Some(mtime))
            .map_err(|e| Error::from_io(format_args!("set mtime of {}", real.display()), &e))
    }

    /// Of `path` itself, as `set_mtime`.
    fn set_times(&self, path: &str, atime: SystemTime, mtime: Option<SystemTime>) -> Result<()> {
        let real = self.real(path);
        set_own_times(&real, Some(atime), mtime)
            .map_err(|e| Error::from_io(format_args!("set times of {}", real.display()), &e))
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        let real = self.real(path);
        std::os::unix::fs::symlink(target, &real)
            .map_err(|e| Error::from_io(format_args!("symlink {}", real.display()), &e))
    }
}

/// Opens `real` to read without moving its access time (`O_NOATIME`: roam's reads, for
/// its cache or of its own copies, are no program's); as usual where that is refused (a
/// file of another user's).
pub fn open_unread(real: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    match fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(real)
    {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => fs::File::open(real),
        other => other,
    }
}

/// `utimensat(AT_SYMLINK_NOFOLLOW)` of `p`'s own times (a symlink's, not its target's);
/// `None` leaves a time as it is.
pub fn set_own_times(
    p: &Path,
    atime: Option<SystemTime>,
    mtime: Option<SystemTime>,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())?;
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: a NUL-terminated path and two timespecs, as utimensat(2) takes.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `time` as utimensat(2) takes it (before 1970 too); `None`: `UTIME_OMIT`.
fn timespec(time: Option<SystemTime>) -> libc::timespec {
    let Some(time) = time else {
        return libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        };
    };
    // Seconds as i64: the C type's name differs between glibc and musl.
    let (tv_sec, tv_nsec) = match time.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as libc::c_long),
        Err(e) => {
            let d = e.duration();
            let borrow = i64::from(d.subsec_nanos() > 0);
            (
                -(d.as_secs() as i64) - borrow,
                (1_000_000_000 - d.subsec_nanos() as libc::c_long) % 1_000_000_000,
            )
        }
    };
    libc::timespec {
        tv_sec: tv_sec as _,
        tv_nsec,
    }
}

impl LocalDriver {
    /// Puts the written temporary `tmp` at `real` if what is there is what `expect` says.
    fn place(&self, tmp: &Path, real: &Path, expect: &Expect) -> std::result::Result<(), Placed> {
        match expect {
            Expect::Any => Ok(fs::rename(tmp, real)?),
            Expect::Absent => match rename_noreplace(tmp, real) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Err(Placed::Changed(self.lstat(real)))
                }
                other => Ok(other?),
            },
            Expect::Version { .. } => {
                let check_and_rename = |_: &mut ()| {
                    let now = self.lstat(real);
                    match expect.admits(now.as_ref()) {
                        true => Ok(fs::rename(tmp, real)?),
                        false => Err(Placed::Changed(now)),
                    }
                };
                let Some(name) = real.file_name() else {
                    return check_and_rename(&mut ());
                };
                let mut lock_name = std::ffi::OsString::from(".roam-lock-");
                lock_name.push(name);
                let lock = real.with_file_name(lock_name);
                crate::under_name_lock(
                    &mut (),
                    |_| match fs::create_dir(&lock) {
                        Ok(()) => crate::Attempt::Made,
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                            crate::Attempt::Held
                        }
                        Err(_) => crate::Attempt::Failed,
                    },
                    |_| drop(fs::remove_dir(&lock)),
                    check_and_rename,
                )
            }
        }
    }

    /// What `real` is now; `None` if nothing (or nothing that can be asked about).
    fn lstat(&self, real: &Path) -> Option<Meta> {
        fs::symlink_metadata(real).ok().map(|md| meta_of(real, &md))
    }
}

/// Why a temporary was not put in place.
enum Placed {
    Io(std::io::Error),
    /// The name is not what the upload expected; here is what it is.
    Changed(Option<Meta>),
}

impl From<std::io::Error> for Placed {
    fn from(e: std::io::Error) -> Placed {
        Placed::Io(e)
    }
}

/// Creates `tmp` (exclusively) with exactly the `len` bytes of `src`, `mode` and `mtime`,
/// on disk before it is renamed.
fn write_temporary(
    tmp: &Path,
    (src, len): (&mut dyn Read, u64),
    mode: Option<u32>,
    attrs: &Attrs,
) -> std::result::Result<(), Placed> {
    let mut f = fs::File::options().write(true).create_new(true).open(tmp)?;
    if let Some(mode) = mode {
        f.set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
    }
    let n = std::io::copy(&mut src.take(len), &mut f)?;
    if n != len {
        let why = format!("the data ended after {n} of {len} bytes");
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why).into());
    }
    if let Some(mtime) = attrs.mtime {
        let times = fs::FileTimes::new().set_modified(mtime);
        f.set_times(attrs.atime.map_or(times, |a| times.set_accessed(a)))?;
    }
    Ok(f.sync_all()?)
}

/// `rename(from, to)` unless `to` exists (EEXIST then), atomically: `renameat2` with
/// `RENAME_NOREPLACE`, or, on a file system without it, a hard link and an unlink.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
    let (a, b) = (c(from)?, c(to)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call. The system call
    // itself: musl has no `renameat2` wrapper.
    let done = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    match done {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EINVAL) => {
                fs::hard_link(from, to)?;
                // In place already: a temporary left behind is only a hidden name.
                let _ = fs::remove_file(from);
                Ok(())
            }
            e => Err(e),
        },
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

    #[test]
    fn directories_get_the_mode_asked_and_links_their_own_times() {
        let dir = std::env::temp_dir().join(format!("roam-local-m-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let d = LocalDriver::new(&dir);
        // Whatever roam's own umask (usually 022) would have taken.
        d.mkdir("/open", 0o777).unwrap();
        d.mkdir("/private", 0o700).unwrap();
        assert_eq!(d.stat("/open").unwrap().mode, Some(0o777));
        assert_eq!(d.stat("/private").unwrap().mode, Some(0o700));

        fs::write(dir.join("f"), b"").unwrap();
        std::os::unix::fs::symlink("f", dir.join("l")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
        let at = |s: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        d.set_mtime("/f", at(3000)).unwrap();
        d.set_mtime("/l", at(1000)).unwrap();
        d.set_mtime("/dangling", at(2000)).unwrap();
        assert_eq!(d.stat("/l").unwrap().mtime, Some(at(1000)));
        assert_eq!(d.stat("/dangling").unwrap().mtime, Some(at(2000)));
        assert_eq!(
            d.stat("/f").unwrap().mtime,
            Some(at(3000)),
            "the target keeps its own"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_are_atomic_and_errors_precise() {
        let dir = std::env::temp_dir().join(format!("roam-local-w-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let d = LocalDriver::new(&dir);

        let m = d.put("/f", &mut &b"0123456789"[..], 10).unwrap();
        assert_eq!(m.size, Some(10));
        let mut part = Vec::new();
        assert_eq!(d.read_range("/f", 3, 4, None, &mut part).unwrap(), 4);
        assert_eq!(part, b"3456");
        // A short source never replaces the old contents.
        assert_eq!(
            d.put("/f", &mut &b"xy"[..], 5).unwrap_err().errno(),
            libc::EIO
        );
        assert_eq!(fs::read(dir.join("f")).unwrap(), b"0123456789");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file left behind"
        );

        d.mkdir("/d", 0o755).unwrap();
        assert_eq!(d.mkdir("/d", 0o755).unwrap_err().errno(), libc::EEXIST);
        assert_eq!(d.mkdir("/no/d", 0o755).unwrap_err().errno(), libc::ENOENT);
        d.rename("/f", "/d/g").unwrap();
        assert_eq!(d.remove_dir("/d").unwrap_err().errno(), libc::ENOTEMPTY);
        d.set_mode("/d/g", 0o600).unwrap();
        assert_eq!(d.stat("/d/g").unwrap().mode, Some(0o600));
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        d.set_mtime("/d/g", t).unwrap();
        assert_eq!(d.stat("/d/g").unwrap().mtime, Some(t));
        d.symlink("g", "/d/l").unwrap();
        assert_eq!(d.stat("/d/l").unwrap().symlink_target.as_deref(), Some("g"));
        d.remove_file("/d/l").unwrap();
        d.remove_file("/d/g").unwrap();
        assert_eq!(d.remove_file("/d/g").unwrap_err().errno(), libc::ENOENT);
        d.remove_dir("/d").unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A lock on a name that a dead roam left is waited for, then broken: the upload goes
    /// through (a few seconds late) and leaves no lock.
    #[test]
    fn an_abandoned_lock_on_a_name_is_broken() {
        let dir = std::env::temp_dir().join(format!("roam-local-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join(".roam-lock-f")).unwrap();
        fs::write(dir.join("f"), b"one").unwrap();
        let d = LocalDriver::new(&dir);
        let base = Expect::version_of(Some(&d.stat("/f").unwrap()));
        let started = std::time::Instant::now();
        let how = Upload {
            expect: &base,
            ..Upload::default()
        };
        d.upload("/f", &mut &b"two"[..], 3, &how).unwrap();
        assert!(
            started.elapsed() >= crate::LOCK_PATIENCE,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(fs::read(dir.join("f")).unwrap(), b"two");
        assert!(!dir.join(".roam-lock-f").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
