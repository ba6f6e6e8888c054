//! Mounting: a FUSE session over a [`Roamfs`] (readers and workers, see [`crate::ops`];
//! ring entries, see [`crate::uring`]), and the thread that passes roam's invalidations (a
//! remote file changed) to the kernel.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use fuser::{BackgroundSession, Config, INodeNo, MountOption, Session, SessionACL};

use crate::ops::{Pool, Served};
use crate::uring::Rings;
use crate::Roamfs;

/// Threads reading `/dev/fuse`. They never wait for a server (the workers do), so two
/// keep both cores busy with two programs at once; more only add cold threads for the
/// kernel to wake in turn (one tar into `mem:` took 0.21 s with 1 reader and 0.56 s with
/// 16; two tars at once 1.30 s with 1, 0.71 s with 2, 0.90 s with 4; docs/BENCHMARKS.md).
const READERS: usize = 2;

/// How to mount.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker threads: how many requests on remote names can wait at once without holding
    /// up others.
    pub threads: usize,
    /// What `mount` and `/proc/mounts` show as the source (`roam`, `roam:mem:` ...).
    pub fsname: String,
    /// Let other users in (needs `user_allow_other` in /etc/fuse.conf unless root).
    pub allow_other: bool,
    /// Mount with mount(2) even without root: the caller holds CAP_SYS_ADMIN in its own
    /// user namespace (`roam run --fuse`). Otherwise a user without root goes through
    /// fusermount3.
    pub direct: bool,
    /// Mount read-only: the kernel fails every change with EROFS before roam sees it.
    pub read_only: bool,
    /// Answer `getxattr` (roam's `user.roam.*` fingerprints). Off, the kernel is told at
    /// the first request that there are none (`ENOSYS`) and asks no more; on, it asks for
    /// `security.capability` before the first write to each inode (measured on 6.18: one
    /// request more per file written; mergerfs documents one per write on older kernels).
    pub xattrs: bool,
    /// Take requests through io_uring where the kernel allows it ([`crate::uring`]) and
    /// `xattrs` is off, else through `/dev/fuse`.
    pub uring: bool,
}

/// How requests reach roam.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Threads reading `/dev/fuse`.
    DevFuse { readers: usize },
    /// FUSE over io_uring: a queue per CPU, entries with a thread each.
    Uring { queues: usize, per_queue: usize },
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::DevFuse { readers } => write!(f, "/dev/fuse ({readers} readers)"),
            Transport::Uring { queues, per_queue } => write!(
                f,
                "FUSE over io_uring ({queues} queues of {per_queue} entries)"
            ),
        }
    }
}

/// A mounted file system; dropping it unmounts.
pub struct Mounted {
    session: BackgroundSession,
    /// Mounted by fusermount3, which must undo it too (fuser holds no mount then).
    helper: Option<std::path::PathBuf>,
    transport: Transport,
    releases: Arc<crate::Releases>,
}

impl Mounted {
    /// How requests reach roam.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// What the kernel still owes of its open files: a run waits for it before it ends.
    pub fn releases(&self) -> Arc<crate::Releases> {
        self.releases.clone()
    }

    /// Whether the session ended (the file system was unmounted from outside).
    pub fn ended(&self) -> bool {
        self.session.guard.is_finished()
    }

    /// Unmounts and waits for the request threads. When the file system was unmounted
    /// from outside already, nothing is unmounted: another mount may sit there by now, and
    /// fuser's own unmount-on-drop would take that one away.
    pub fn unmount(self) -> std::io::Result<()> {
        if self.ended() {
            std::mem::forget(self);
            return Ok(());
        }
        if let Some(dir) = &self.helper {
            crate::fusermount::unmount(dir)?;
        }
        self.session.umount_and_join()
    }
}

/// Uploads left for later (T_write > 0, retries) go on a thread of their own.
fn deliver_in_background(fs: &Arc<Roamfs>) -> std::io::Result<()> {
    let fs = fs.clone();
    std::thread::Builder::new()
        .name("roam-deliver".into())
        .spawn(move || {
            let writing = |virt: &str| fs.handles.writers(virt, 0) > 0;
            fs.vfs
                .deliver_due(&writing, &|_, message| tracing::warn!("{message}"));
        })?;
    Ok(())
}

/// Mounts `fs` at `dir`; returns once the kernel has completed the FUSE handshake, so the
/// mount is ready for programs.
pub fn mount(fs: Roamfs, dir: &Path, opts: &Options) -> std::io::Result<Mounted> {
    let (tx, rx) = mpsc::channel::<u64>();
    *fs.stale.lock().unwrap() = Some(tx);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("roam".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    if opts.read_only {
        config.mount_options.push(MountOption::RO);
    }
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(READERS);
    config.clone_fd = true;
    let fs = Arc::new(fs);
    deliver_in_background(&fs)?;
    let counts = Arc::default();
    // The rings answer no extended attributes: a mount that serves roam's goes through
    // /dev/fuse.
    let rings = (opts.uring && !opts.xattrs).then(|| Rings::prepare(&fs, &counts, opts.threads));
    let rings = match rings {
        Some(Err(e)) => {
            tracing::info!("no FUSE over io_uring: {e}");
            None
        }
        Some(Ok(r)) => Some(r),
        None => None,
    };
    let granted = Arc::new(AtomicBool::new(false));
    let roamfs = fs.clone();
    let fs = Served {
        fs,
        pool: Pool::new(opts.threads)?,
        counts,
        uring_ready: rings.is_some(),
        uring_granted: granted.clone(),
        xattrs: opts.xattrs,
    };
    // SAFETY: geteuid cannot fail.
    let (session, helper) = if opts.direct || unsafe { libc::geteuid() } == 0 {
        (Session::new(fs, dir, &config)?, None)
    } else {
        // No access to /dev/fuse or mount(2): the setuid helper does both.
        let fd = crate::fusermount::mount(dir, &helper_options(opts))?;
        let acl = config.acl;
        (Session::from_fd(fs, fd, acl, config)?, Some(dir.to_owned()))
    };
    let releases = roamfs.handles.releases();
    let device = Arc::new(session.as_fd().try_clone_to_owned()?);
    roamfs.passthrough.set_device(device.clone());
    let transport = match rings {
        Some(r) => {
            let uring = Transport::Uring {
                queues: r.queues,
                per_queue: r.per_queue,
            };
            match r.start(&device, granted.load(Ordering::Relaxed)) {
                true => uring,
                false => Transport::DevFuse { readers: READERS },
            }
        }
        None => Transport::DevFuse { readers: READERS },
    };
    let notifier = session.notifier();
    std::thread::Builder::new()
        .name("roam-fuse-inval".into())
        .spawn(move || {
            for ino in rx {
                // ENOENT: the kernel no longer holds the inode; nothing to drop.
                let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
            }
        })?;
    Ok(Mounted {
        session: session.spawn()?,
        helper,
        transport,
        releases,
    })
}

/// fusermount3's `-o` for `opts`.
fn helper_options(opts: &Options) -> String {
    let mut o = format!(
        "fsname={},subtype=roam,default_permissions,nodev,nosuid",
        opts.fsname.replace(',', "_")
    );
    if opts.allow_other {
        o.push_str(",allow_other");
    }
    if opts.read_only {
        o.push_str(",ro");
    }
    o
}
