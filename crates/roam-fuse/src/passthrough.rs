//! Kernel passthrough for files served in place (`null:`, `file://`): the kernel reads and
//! writes the local file itself, so no `READ` or `WRITE` request reaches roam (a tar sends
//! 1.8 `WRITE`s a file). The kernel registers a backing file only for a server with
//! CAP_SYS_ADMIN (roam mounting as root); elsewhere, and for a file it refuses (one on a
//! stacked file system), the file is served through requests as before. While an inode is
//! open in passthrough, every open of it must name the same backing file, so the open
//! files of an inode share one [`BackingId`], closed when the last of them goes.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use fuser::BackingId;

use crate::handles::Opened;
use crate::Roamfs;

/// The backing files of the inodes open in passthrough.
#[derive(Default)]
pub struct Passthrough {
    by_ino: Mutex<HashMap<u64, Weak<BackingId>>>,
    /// The kernel agreed to passthrough at `init`, and has not refused a file for want
    /// of privilege since.
    usable: AtomicBool,
}

impl Passthrough {
    /// The kernel agreed to passthrough (`init`).
    pub fn enable(&self) {
        self.usable.store(true, Ordering::Relaxed);
    }

    /// The backing file for `file` of inode `ino`: the inode's own while it is open
    /// elsewhere, else one `register`ed now. `None`: serve it through requests.
    fn backing(
        &self,
        ino: u64,
        file: &File,
        register: impl FnOnce(&File) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.usable.load(Ordering::Relaxed) {
            return None;
        }
        // Held while registering, so two opens of one inode cannot register two files.
        let mut by_ino = self.by_ino.lock().unwrap();
        if let Some(b) = by_ino.get(&ino).and_then(Weak::upgrade) {
            return Some(b);
        }
        match register(file) {
            Ok(b) => {
                let b = Arc::new(b);
                by_ino.insert(ino, Arc::downgrade(&b));
                Some(b)
            }
            Err(e) => {
                tracing::debug!("FUSE passthrough refused for inode {ino}: {e}");
                if e.raw_os_error() == Some(libc::EPERM) {
                    tracing::debug!("no FUSE passthrough without CAP_SYS_ADMIN: files served in place go through roam");
                    self.usable.store(false, Ordering::Relaxed);
                }
                None
            }
        }
    }

    /// A handle of `ino` went: forget its backing file once no handle holds it.
    pub fn released(&self, ino: u64) {
        let mut by_ino = self.by_ino.lock().unwrap();
        if by_ino.get(&ino).is_some_and(|b| b.strong_count() == 0) {
            by_ino.remove(&ino);
        }
    }
}

impl Roamfs {
    /// The backing file for the open file `fh`, if the kernel is to read and write it
    /// itself: files served in place only (copies and in-memory files need roam).
    /// `register` is the reply's own registration.
    pub(crate) fn backing_for(
        &self,
        fh: u64,
        register: impl FnOnce(&File) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        let f = self.handles.file(fh)?;
        if f.how != Opened::InPlace {
            return None;
        }
        let b = self.passthrough.backing(f.ino, f.file()?, register)?;
        // The handle holds it until `release`.
        let _ = f.backing.set(b.clone());
        Some(b)
    }
}
