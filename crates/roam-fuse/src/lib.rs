//! roam's second frontend: the namespace of `roam-vfs` served through FUSE (puffs' model).
//!
//! The kernel does the VFS work (name resolution, permission checks with
//! `default_permissions`, the page cache) and asks roam only what it cannot know. Each
//! request is a short function over [`roam_vfs::Vfs`]: nothing here caches remote data or
//! speaks a protocol. What the kernel asks by inode number is turned into a virtual name by
//! the inode table ([`inodes`]); what roam-vfs answers with a local path (a fetched copy, a
//! journaled copy, a file served in place) is opened and read or written with
//! `pread`/`pwrite` ([`handles`]), or, for a file served in place, handed to the kernel to
//! read and write itself where it allows ([`passthrough`]).
//!
//! Names fall into three places ([`Place`]): directories roam makes up (the mount's root
//! and the parents of mount points), files served in place by a local mount (the null
//! layer: every call goes to the local file system unchanged), and everything else, served
//! through roam-vfs's cache and write path.
//!
//! Requests are read by a few threads (fuser's event loops on cloned `/dev/fuse` fds),
//! which answer what is local themselves and pass requests on remote names to a pool of
//! workers ([`ops`]): a request waiting for a slow server holds one worker, never the
//! mount. Or, where the kernel allows and the mount asks for it, they come through
//! io_uring ([`uring`]): to a thread on the CPU of the program that asked, which answers
//! them with the same calls.

mod attr;
mod counts;
mod fusermount;
mod handles;
mod inodes;
mod local;
mod mount;
mod names;
mod ops;
mod passthrough;
mod read;
mod releases;
pub mod uring;
mod write;

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::Errno;
use roam_vfs::{Node, Vfs};

pub use mount::{mount, Mounted, Options, Transport};
pub use releases::Releases;

/// Where a virtual name lives.
enum Place {
    /// A directory roam makes up: the root, `/` above the mount points.
    Synthetic,
    /// A file of a local mount, served in place.
    Local(local::LocalPath),
    /// A name served through roam-vfs.
    Remote(Node),
    /// `SCHEME:` at the root of the whole namespace: a symlink to the implicit mount
    /// `SCHEME`, so that URLs work as paths (the kernel reads `DIR/http://h/f` as
    /// `DIR/http:/h/f`).
    UrlAlias(&'static str),
}

/// The file system the kernel talks to.
pub struct Roamfs {
    vfs: Arc<Vfs>,
    inodes: Mutex<inodes::Inodes>,
    handles: handles::Handles,
    owner: attr::Owner,
    mounted: SystemTime,
    /// Prefixes under which roam names live, for the made-up directories above them.
    prefixes: Vec<String>,
    /// Inodes whose cached pages must go, for the thread that tells the kernel.
    stale: Mutex<Option<mpsc::Sender<u64>>>,
    /// Files served in place that the kernel reads and writes itself.
    passthrough: passthrough::Passthrough,
    /// A release delivering a change, and the requests that change that name, one at a
    /// time ([`names`]).
    names: names::NameLocks,
}

/// `Result` with the errno the program sees.
type Res<T> = std::result::Result<T, Errno>;

impl Roamfs {
    /// Serves `vfs` with the virtual name `root` at the mount's root (`/` for the whole
    /// namespace, a mount point for one remote).
    pub fn new(vfs: Arc<Vfs>, root: &str) -> Roamfs {
        let prefixes = vfs.prefixes();
        Roamfs {
            vfs,
            inodes: Mutex::new(inodes::Inodes::new(root)),
            handles: handles::Handles::default(),
            owner: attr::Owner::current(),
            mounted: SystemTime::now(),
            prefixes,
            stale: Mutex::new(None),
            passthrough: Default::default(),
            names: Default::default(),
        }
    }

    fn virt_of(&self, ino: u64) -> Res<String> {
        self.inodes.lock().unwrap().virt(ino).ok_or(Errno::ESTALE)
    }

    fn ino_of(&self, virt: &str) -> u64 {
        self.inodes.lock().unwrap().ino_of(virt)
    }

    /// The number of `virt` as found anew (a lookup, a listing): a file served in place
    /// at `local` gets the number of its other names, if it has any.
    fn ino_found(&self, virt: &str, local: Option<&std::path::Path>) -> u64 {
        use std::os::unix::fs::MetadataExt;
        match local.and_then(|p| std::fs::symlink_metadata(p).ok()) {
            Some(md) if !md.is_dir() => {
                self.inodes
                    .lock()
                    .unwrap()
                    .ino_of_file(virt, (md.dev(), md.ino()), md.nlink())
            }
            _ => self.ino_of(virt),
        }
    }

    /// The virtual name of `name` in the directory `parent`.
    fn child(&self, parent: u64, name: &std::ffi::OsStr) -> Res<String> {
        let name = name.to_str().ok_or(Errno::EINVAL)?;
        if !roam_vfs::is_safe_name(name) {
            return Err(Errno::EINVAL);
        }
        Ok(roam_vfs::path::join(&self.virt_of(parent)?, name))
    }

    fn place(&self, virt: &str) -> Res<Place> {
        match self.vfs.lookup(virt).map_err(vfs_errno)? {
            Some(node) => Ok(match self.vfs.in_place(&node) {
                Some(p) => Place::Local(local::LocalPath::new(p).map_err(io_errno)?),
                None => Place::Remote(node),
            }),
            None if self.is_above_mounts(virt) => Ok(Place::Synthetic),
            None => match url_alias(virt) {
                Some(scheme) => Ok(Place::UrlAlias(scheme)),
                None => Err(Errno::ENOENT),
            },
        }
    }

    /// Whether answering about `virt` may wait for a server: names of remote mounts may;
    /// made-up directories and files served in place or in memory never do.
    fn may_block(&self, virt: &str) -> bool {
        matches!(self.place(virt), Ok(Place::Remote(node)) if !self.vfs.in_memory(&node))
    }

    fn ino_may_block(&self, ino: u64) -> bool {
        self.virt_of(ino).is_ok_and(|v| self.may_block(&v))
    }

    fn child_may_block(&self, parent: u64, name: &std::ffi::OsStr) -> bool {
        self.child(parent, name).is_ok_and(|v| self.may_block(&v))
    }

    /// Whether `virt` is a strict ancestor of a mount point.
    fn is_above_mounts(&self, virt: &str) -> bool {
        self.prefixes
            .iter()
            .any(|p| roam_vfs::path::strip_dir_prefix(p, virt).is_some_and(|rest| rest != "/"))
    }

    /// How long the kernel may trust an answer about `virt`: roam's T_read for it.
    fn ttl(&self, virt: &str, mtime: Option<SystemTime>) -> Duration {
        self.vfs.t_read(virt, mtime)
    }

    /// Asks the kernel to drop its cached pages of `ino` (a newer version is on the server).
    fn invalidate(&self, ino: u64) {
        if let Some(tx) = self.stale.lock().unwrap().as_ref() {
            let _ = tx.send(ino);
        }
    }
}

/// The scheme of an implicit mount `virt` names as `/SCHEME:`.
fn url_alias(virt: &str) -> Option<&'static str> {
    let scheme = virt.strip_prefix('/')?.strip_suffix(':')?;
    roam_vfs::IMPLICIT_SCHEMES
        .iter()
        .copied()
        .find(|s| *s == scheme)
}

/// The errno of a roam-vfs failure; the user hears of failures worth telling.
fn vfs_errno(e: roam_vfs::Error) -> Errno {
    if e.worth_telling() {
        tell(&e.to_string());
    }
    Errno::from_i32(e.errno())
}

/// A failure told is not told again for this long: the kernel and programs ask again
/// (`ls` looks a name up, lists it, stats it), and one line per cause is what helps.
const RETELL_AFTER: Duration = Duration::from_secs(60);

/// Warns of `message` unless it was told within [`RETELL_AFTER`].
fn tell(message: &str) {
    static TOLD: Mutex<Vec<(String, std::time::Instant)>> = Mutex::new(Vec::new());
    let now = std::time::Instant::now();
    let mut told = TOLD.lock().unwrap();
    told.retain(|(_, at)| now.duration_since(*at) < RETELL_AFTER);
    if told.iter().any(|(m, _)| m == message) {
        return;
    }
    told.push((message.to_owned(), now));
    drop(told);
    tracing::warn!("{message}");
}

/// The errno of a local I/O failure (a copy in the cache, a file served in place).
fn io_errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}
