//! Kernel passthrough for files served in place (`null:`, `file://`): the kernel reads and
//! writes the local file itself, so no `READ` or `WRITE` request reaches roam (a tar sends
//! 1.8 `WRITE`s a file). The kernel registers a backing file only for a server with
//! CAP_SYS_ADMIN (roam mounting as root); elsewhere, and for a file it refuses (one on a
//! stacked file system), the file is served through requests as before. While an inode is
//! open in passthrough, every open of it must name the same backing file, so the open
//! files of an inode share one [`Backing`], closed when the last of them goes.
//!
//! roam registers backing files itself (not through fuser's reply), on its own handle of
//! the FUSE device: the io_uring transport has no fuser reply to register them with.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use fuser::BackingId;

use crate::handles::Opened;
use crate::Roamfs;

/// `FUSE_DEV_IOC_BACKING_CLOSE`: `_IOW(229, 2, uint32_t)`.
const BACKING_CLOSE: libc::Ioctl = 0x4004_e502u32 as libc::Ioctl;

/// A file registered with the kernel for passthrough; unregistered when dropped.
pub struct Backing {
    id: u32,
    device: Arc<OwnedFd>,
}

impl Backing {
    /// The number open replies name it by.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: the ioctl reads one u32 that outlives the call.
        let rc = unsafe { libc::ioctl(self.device.as_raw_fd(), BACKING_CLOSE, &self.id) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            tracing::debug!("closing FUSE backing file {}: {e}", self.id);
        }
    }
}

/// The backing files of the inodes open in passthrough.
#[derive(Default)]
pub struct Passthrough {
    by_ino: Mutex<HashMap<u64, Weak<Backing>>>,
    /// The kernel agreed to passthrough at `init`, and has not refused a file for want
    /// of privilege since.
    usable: AtomicBool,
    /// A handle of the FUSE device, to register backing files on.
    device: OnceLock<Arc<OwnedFd>>,
}

impl Passthrough {
    /// The kernel agreed to passthrough (`init`).
    pub fn enable(&self) {
        self.usable.store(true, Ordering::Relaxed);
    }

    /// The FUSE device of the mount, once it is made.
    pub fn set_device(&self, device: Arc<OwnedFd>) {
        let _ = self.device.set(device);
    }

    /// The backing file for `file` of inode `ino`: the inode's own while it is open
    /// elsewhere, else one registered now. `None`: serve it through requests.
    fn backing(&self, ino: u64, file: &File) -> Option<Arc<Backing>> {
        if !self.usable.load(Ordering::Relaxed) {
            return None;
        }
        let device = self.device.get()?;
        // Held while registering, so two opens of one inode cannot register two files.
        let mut by_ino = self.by_ino.lock().unwrap();
        if let Some(b) = by_ino.get(&ino).and_then(Weak::upgrade) {
            return Some(b);
        }
        let registered = BackingId::create_raw(device, file).map(|id| Backing {
            id,
            device: device.clone(),
        });
        match registered {
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
    pub(crate) fn backing_for(&self, fh: u64) -> Option<Arc<Backing>> {
        let f = self.handles.file(fh)?;
        if f.how != Opened::InPlace {
            return None;
        }
        let b = self.passthrough.backing(f.ino, f.file()?)?;
        // The handle holds it until `release`.
        let _ = f.backing.set(b.clone());
        Some(b)
    }
}
