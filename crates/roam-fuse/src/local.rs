//! Paths of files served in place, whatever their length.
//!
//! The kernel asks about a name in a directory; roam answers with the local file's whole
//! path, mount directory and all. Natively a program deep in a tree never spells that
//! path (it works relative to its cwd), so a tree may be deeper than `PATH_MAX` (4096)
//! bytes of absolute path, and the kernel's calls on such a path fail with `ENAMETOOLONG`.
//! A long path is therefore spelt through a directory fd: its head is opened piece by
//! piece (`openat` with `O_PATH`), and the rest is named below `/proc/self/fd/N/`, which
//! the kernel resolves to that directory. Every `std::fs` call then works unchanged.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Paths at least this long go through a directory fd; each piece opened is at most half.
const LONG: usize = 4000;

/// A local path the kernel takes: the path itself, or a `/proc/self/fd/N/...` spelling of
/// it that holds the directory fd `N` open as long as it lives.
#[derive(Debug)]
pub(crate) struct LocalPath {
    path: PathBuf,
    _dir: Option<OwnedFd>,
}

impl LocalPath {
    /// `path` as the kernel takes it.
    pub(crate) fn new(path: PathBuf) -> std::io::Result<LocalPath> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.len() < LONG {
            return Ok(LocalPath { path, _dir: None });
        }
        let cut = split_before(bytes, bytes.len() - LONG / 2);
        let dir = open_dir(&bytes[..cut])?;
        let rest = std::ffi::OsStr::from_bytes(&bytes[cut + 1..]);
        let spelt = Path::new("/proc/self/fd")
            .join(dir.as_raw_fd().to_string())
            .join(rest);
        Ok(LocalPath {
            path: spelt,
            _dir: Some(dir),
        })
    }
}

impl std::ops::Deref for LocalPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for LocalPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// The position of the first `/` at or after `at` (names are at most 255 bytes, so there
/// is one well before the end).
fn split_before(bytes: &[u8], at: usize) -> usize {
    bytes[at..]
        .iter()
        .position(|&b| b == b'/')
        .map_or(bytes.len(), |i| at + i)
}

/// Opens the directory `path` (absolute, maybe longer than `PATH_MAX`) with `O_PATH`, a
/// piece of at most `LONG / 2` bytes at a time.
fn open_dir(path: &[u8]) -> std::io::Result<OwnedFd> {
    let mut dir: Option<OwnedFd> = None;
    let mut rest = path;
    while !rest.is_empty() {
        let cut = match rest.len() > LONG / 2 {
            true => split_before(rest, LONG / 2).min(rest.len()),
            false => rest.len(),
        };
        let piece = CString::new(&rest[..cut]).map_err(std::io::Error::other)?;
        let at = dir.as_ref().map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: a valid C string and flags; the fd returned is ours alone.
        let fd = unsafe { libc::openat(at, piece.as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        dir = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        rest = rest.get(cut + 1..).unwrap_or_default();
    }
    dir.ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_longer_than_path_max_is_reached_through_a_directory_fd() {
        let base = std::env::temp_dir().join(format!("roam-long-{}", std::process::id()));
        let name = "d".repeat(200);
        let mut deep = base.clone();
        std::fs::create_dir(&base).unwrap();
        // Made one level at a time, relative to the last, as a program would.
        let mut here = LocalPath::new(base.clone()).unwrap();
        for _ in 0..25 {
            deep.push(&name);
            std::fs::create_dir(here.join(&name)).unwrap();
            here = LocalPath::new(deep.clone()).unwrap();
        }
        assert!(deep.as_os_str().len() > 5000);
        let file = LocalPath::new(deep.join("f")).unwrap();
        std::fs::write(&*file, b"deep").unwrap();
        assert_eq!(std::fs::read(&*file).unwrap(), b"deep");
        assert!(
            std::fs::write(deep.join("g"), b"").is_err(),
            "the plain path is too long"
        );
        let short = LocalPath::new(base.clone()).unwrap();
        assert_eq!(&*short, base.as_path());
        std::fs::remove_dir_all(&base).ok();
    }
}
