//! Open files and directories. A file handle holds what answers reads and writes: the
//! fetched copy, the journaled copy being written, or the file itself for mounts served in
//! place (a local file, or an in-memory backend's file); requests on it are plain
//! `pread`/`pwrite` or memory copies.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use fuser::FileType;
use roam_vfs::MemoryFile;

use crate::inodes::Version;
use crate::releases::Serving;

/// Where an open file's bytes are.
pub enum Data {
    /// A local file: a copy, or the file itself.
    File(File),
    /// The file of an in-memory backend itself.
    Memory(Arc<MemoryFile>),
}

impl Data {
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        match self {
            Data::File(f) => f.read_at(buf, offset),
            Data::Memory(c) => Ok(c.read_at(buf, offset)),
        }
    }

    pub fn write_all_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        match self {
            Data::File(f) => f.write_all_at(data, offset),
            Data::Memory(c) => c.write_at(data, offset),
        }
    }

    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        match self {
            Data::File(f) => f.set_len(len),
            Data::Memory(c) => c.set_len(len),
        }
    }

    /// `fallocate(mode, offset, len)`. In memory, as on tmpfs: mode 0 makes the file at
    /// least `offset + len` bytes long (holes read as zeros, so nothing needs writing),
    /// `FALLOC_FL_KEEP_SIZE` changes nothing seen; other modes are not offered.
    pub fn allocate(&self, offset: u64, len: u64, mode: i32) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        match self {
            Data::File(f) => {
                let (offset, len) = (offset as libc::off_t, len as libc::off_t);
                // SAFETY: an open fd and plain integers.
                match unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) } {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                }
            }
            Data::Memory(c) => match mode {
                0 if end > c.meta().size.unwrap_or(0) => c.set_len(end),
                0 | libc::FALLOC_FL_KEEP_SIZE => Ok(()),
                _ => Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
            },
        }
    }

    /// Drops the set-user-ID bit (and set-group-ID with group execute), as the kernel
    /// does on a write by an unprivileged user or on `chown`: roam told the kernel to
    /// leave that to it (FUSE_HANDLE_KILLPRIV_V2, which saves a GETATTR per `chown`).
    pub fn kill_suid(&self) -> std::io::Result<()> {
        match self {
            Data::File(f) => {
                use std::os::unix::fs::PermissionsExt;
                let mode = f.metadata()?.permissions().mode();
                if killed(mode) != mode {
                    f.set_permissions(std::fs::Permissions::from_mode(killed(mode)))?;
                }
            }
            Data::Memory(c) => {
                let mode = c.meta().mode.unwrap_or(0);
                if killed(mode) != mode {
                    c.set_mode(killed(mode));
                }
            }
        }
        Ok(())
    }

    /// Size and mtime of the version it holds now.
    pub fn version(&self) -> Option<Version> {
        match self {
            Data::File(f) => f.metadata().ok().map(|md| (md.len(), md.modified().ok())),
            Data::Memory(c) => {
                let m = c.meta();
                Some((m.size.unwrap_or(0), m.mtime))
            }
        }
    }
}

/// `mode` without the bits a write or `chown` takes away.
fn killed(mode: u32) -> u32 {
    let sgid = if mode & 0o010 != 0 { 0o2000 } else { 0 };
    mode & !(0o4000 | sgid)
}

/// One open file.
pub struct OpenFile {
    pub data: Data,
    pub ino: u64,
    pub virt: String,
    pub how: Opened,
    /// Written (or opened to be written) since its last `flush`: a change only its own
    /// close can be trusted to deliver.
    pub unflushed: std::sync::atomic::AtomicBool,
    /// The kernel's registration of the file, when it reads and writes it itself
    /// ([`crate::passthrough`]); kept while the file is open.
    pub backing: std::sync::OnceLock<Arc<crate::passthrough::Backing>>,
}

impl OpenFile {
    pub fn new(data: Data, ino: u64, virt: String, how: Opened) -> OpenFile {
        let unflushed = std::sync::atomic::AtomicBool::new(how == Opened::Uploads);
        OpenFile {
            data,
            ino,
            virt,
            how,
            unflushed,
            backing: std::sync::OnceLock::new(),
        }
    }

    /// Notes a write (`true`) or a flush (`false`); returns whether it was written since
    /// its last flush before.
    pub fn set_unflushed(&self, pending: bool) -> bool {
        self.unflushed
            .swap(pending, std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether it was written since its last `flush`.
    pub fn is_unflushed(&self) -> bool {
        self.unflushed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Writes go to a journaled copy that is uploaded when the last writer closes it.
    pub fn uploads(&self) -> bool {
        self.how == Opened::Uploads
    }

    /// The local file of the handle, for calls only a local file answers.
    pub fn file(&self) -> Option<&File> {
        match &self.data {
            Data::File(f) => Some(f),
            Data::Memory(_) => None,
        }
    }
}

/// What an open file is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Opened {
    /// A fetched copy, read only.
    Copy,
    /// A large file's partial copy, read only: its ranges arrive as they are read.
    Stream,
    /// The journaled copy of a file being written.
    Uploads,
    /// The file of a local mount itself.
    InPlace,
    /// The file of an in-memory backend itself.
    Memory,
}

impl Opened {
    /// Whether closing it needs roam (an upload); the kernel is told not to send `flush`
    /// otherwise, which saves a request per `close`.
    pub fn needs_flush(self) -> bool {
        self == Opened::Uploads
    }
}

/// A directory's entries as they were at `opendir`, so `readdir` offsets stay valid.
pub struct OpenDir {
    pub virt: String,
    pub entries: Vec<(u64, FileType, String)>,
}

enum Handle {
    File(Arc<OpenFile>),
    Dir(Arc<OpenDir>),
}

/// The handle table.
#[derive(Default)]
pub struct Handles {
    table: Mutex<HashMap<u64, Handle>>,
    next: std::sync::atomic::AtomicU64,
    /// Opens for writing under way, by name: writers from before the core journals their
    /// change until their handle is in the table (see [`Handles::opening`]).
    opening: Mutex<HashMap<String, usize>>,
    /// Files the kernel has yet to release, and releases being served.
    releases: Arc<crate::releases::Releases>,
}

/// An open for writing of a name, under way; dropping it ends it (its handle is in the
/// table by then, or the open failed).
pub struct Opening<'a> {
    handles: &'a Handles,
    virt: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut opening = self.handles.opening.lock().unwrap();
        if let Some(n) = opening.get_mut(&self.virt) {
            *n -= 1;
            if *n == 0 {
                opening.remove(&self.virt);
            }
        }
    }
}

impl Handles {
    fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.table.lock().unwrap().insert(fh, h);
        fh
    }

    pub fn add_file(&self, f: OpenFile) -> u64 {
        self.releases.opened();
        self.insert(Handle::File(Arc::new(f)))
    }

    pub fn add_dir(&self, d: OpenDir) -> u64 {
        self.insert(Handle::Dir(Arc::new(d)))
    }

    pub fn file(&self, fh: u64) -> Option<Arc<OpenFile>> {
        match self.table.lock().unwrap().get(&fh)? {
            Handle::File(f) => Some(f.clone()),
            Handle::Dir(_) => None,
        }
    }

    /// Some open file of the inode `ino`.
    pub fn file_of(&self, ino: u64) -> Option<Arc<OpenFile>> {
        self.table.lock().unwrap().values().find_map(|h| match h {
            Handle::File(f) if f.ino == ino => Some(f.clone()),
            _ => None,
        })
    }

    pub fn dir(&self, fh: u64) -> Option<Arc<OpenDir>> {
        match self.table.lock().unwrap().get(&fh)? {
            Handle::Dir(d) => Some(d.clone()),
            Handle::File(_) => None,
        }
    }

    /// The kernel released the file `fh`: its release is served until the second value
    /// is dropped.
    pub fn remove_file(&self, fh: u64) -> Option<(Arc<OpenFile>, Serving<'_>)> {
        let mut table = self.table.lock().unwrap();
        let f = match table.get(&fh)? {
            Handle::File(f) => f.clone(),
            Handle::Dir(_) => return None,
        };
        table.remove(&fh);
        Some((f, self.releases.releasing()))
    }

    /// The kernel released the directory `fh`.
    pub fn remove_dir(&self, fh: u64) {
        let mut table = self.table.lock().unwrap();
        if let Some(Handle::Dir(_)) = table.get(&fh) {
            table.remove(&fh);
        }
    }

    /// What the kernel still owes of its open files, for whoever ends a run.
    pub fn releases(&self) -> Arc<crate::releases::Releases> {
        self.releases.clone()
    }

    /// How many handles other than `except` write `virt`'s journaled copy (open, so the
    /// change stays journaled after an upload), and opens for writing of it under way.
    pub fn writers(&self, virt: &str, except: u64) -> usize {
        let opening = self.opening.lock().unwrap().get(virt).copied();
        self.count_writers(virt, except, false) + opening.unwrap_or(0)
    }

    /// Counts an open for writing of `virt` as one of its writers until the returned
    /// value is dropped. The core hands the open the journaled copy before its handle
    /// exists; an upload in between (a previous writer's release, the background
    /// delivery) must not take that copy for a whole version and publish it away, or the
    /// open would find no copy (`ENOENT`) or write one nobody uploads.
    pub fn opening(&self, virt: &str) -> Opening<'_> {
        *self
            .opening
            .lock()
            .unwrap()
            .entry(virt.to_owned())
            .or_default() += 1;
        Opening {
            handles: self,
            virt: virt.to_owned(),
        }
    }

    /// How many of those hold writes no `flush` has seen: a close must then leave the upload
    /// to theirs. (A handle already flushed whose `release` is still on its way must not
    /// hold back the upload of the last close: that close would return, and the program
    /// end, before the change is delivered.)
    pub fn unflushed_writers(&self, virt: &str, except: u64) -> usize {
        self.count_writers(virt, except, true)
    }

    fn count_writers(&self, virt: &str, except: u64, unflushed_only: bool) -> usize {
        self.table
            .lock()
            .unwrap()
            .iter()
            .filter(|(&fh, h)| {
                fh != except
                    && matches!(h, Handle::File(f) if f.uploads() && f.virt == virt
                        && (!unflushed_only || f.is_unflushed()))
            })
            .count()
    }
}
