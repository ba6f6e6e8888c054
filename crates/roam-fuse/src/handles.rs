//! Open files and directories. A file handle holds the local file that answers reads and
//! writes: the fetched copy, the journaled copy being written, or the file itself for
//! mounts served in place; requests on it are plain `pread`/`pwrite`.

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex};

use fuser::FileType;

/// One open file.
pub struct OpenFile {
    pub file: File,
    pub ino: u64,
    pub virt: String,
    /// Writes go to a journaled copy that is uploaded when the last writer closes it.
    pub uploads: bool,
    /// The file itself (a local mount), not a copy.
    pub in_place: bool,
}

/// What an open file is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// A fetched copy, read only.
    Copy,
    /// The journaled copy of a file being written.
    Uploads,
    /// The file of a local mount itself.
    InPlace,
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
}

impl Handles {
    fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.table.lock().unwrap().insert(fh, h);
        fh
    }

    pub fn add_file(&self, f: OpenFile) -> u64 {
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

    pub fn remove(&self, fh: u64) -> Option<Arc<OpenFile>> {
        match self.table.lock().unwrap().remove(&fh)? {
            Handle::File(f) => Some(f),
            Handle::Dir(_) => None,
        }
    }

    /// How many handles other than `except` write `virt`'s journaled copy.
    pub fn writers(&self, virt: &str, except: u64) -> usize {
        self.table
            .lock()
            .unwrap()
            .iter()
            .filter(|(&fh, h)| {
                fh != except && matches!(h, Handle::File(f) if f.uploads && f.virt == virt)
            })
            .count()
    }
}
