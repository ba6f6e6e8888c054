//! The FUSE request handlers: each turns a request into one call of [`Roamfs`] and its
//! result into the reply (the data, or the errno).
//!
//! Where a request is answered depends on whether it can wait for a server. The few
//! threads that read `/dev/fuse` answer everything that cannot (made-up directories,
//! files served in place or in memory, reads and writes of open files) themselves: a
//! handoff to another thread would cost two more context switches per request, and the
//! kernel wakes its readers in turn, so each extra reader is one more cold thread per
//! request. Requests on remote names go to the [`Pool`], where a slow server holds one
//! worker, never a reader.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};

use crate::counts::{Counts, Op};
use crate::handles::Opened;
use crate::write::SetAttr;
use crate::Roamfs;

const GEN: Generation = Generation(0);

/// The open flags for the kernel: keep its cached pages (the same version), send no
/// `flush` at `close` where roam has nothing to do then, and write a write-only file
/// straight through (`FOPEN_DIRECT_IO`): through the page cache, each `write(2)` that does
/// not start on a page boundary becomes two requests, split at the boundary (tar: 2.4
/// `WRITE` requests a file instead of its 1.9 writes). A direct write drops the pages
/// other opens cached of what it changed, so their reads still see it; and a write-only
/// fd cannot be mapped, so no mapping misses the page cache.
pub(crate) fn fopen_flags(keep: bool, how: Opened, open_flags: i32) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    if keep {
        flags |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if !how.needs_flush() {
        flags |= FopenFlags::FOPEN_NOFLUSH;
    }
    if open_flags & libc::O_ACCMODE == libc::O_WRONLY {
        flags |= FopenFlags::FOPEN_DIRECT_IO;
    }
    flags
}

/// The open flags of a directory: the kernel keeps its listing in its page cache
/// (`FOPEN_CACHE_DIR`), and keeps the one it has where roam's listing is still the same
/// (a new listing of roam's, after T_read or a change, replaces it). A change made through
/// the mount drops the kernel's copy itself.
pub(crate) fn dir_flags(keep: bool) -> FopenFlags {
    match keep {
        true => FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        false => FopenFlags::FOPEN_CACHE_DIR,
    }
}

/// The open flags of a file the kernel reads and writes itself: the page cache is the
/// backing file's, so there is none to keep or write past (and the kernel fails an open
/// that asks to keep it with `EIO`).
pub(crate) fn passed(flags: FopenFlags) -> FopenFlags {
    flags - FopenFlags::FOPEN_DIRECT_IO - FopenFlags::FOPEN_KEEP_CACHE
}

fn reply_entry(reply: ReplyEntry, res: Result<(fuser::FileAttr, Duration), Errno>) {
    match res {
        Ok((attr, ttl)) => reply.entry(&ttl, &attr, GEN),
        Err(e) => reply.error(e),
    }
}

fn reply_attr(reply: ReplyAttr, res: Result<(fuser::FileAttr, Duration), Errno>) {
    match res {
        Ok((attr, ttl)) => reply.attr(&ttl, &attr),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, res: Result<(), Errno>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Worker threads for requests that may wait for a server.
pub struct Pool {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Pool {
    /// `n` workers; they end when the pool is dropped (the session ended).
    pub fn new(n: usize) -> std::io::Result<Pool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("roam-fuse-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().unwrap().recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                })?;
        }
        Ok(Pool {
            jobs: Mutex::new(tx),
        })
    }

    fn run(&self, job: Job) {
        // The workers outlive the session, so the channel is open while requests come.
        let _ = self.jobs.lock().unwrap().send(job);
    }
}

/// The file system as the kernel sees it: [`Roamfs`] and where its requests run.
pub struct Served {
    pub fs: Arc<Roamfs>,
    pub pool: Pool,
    pub counts: Arc<Counts>,
    /// Ring entries are ready for FUSE over io_uring ([`crate::uring`]): ask the kernel.
    pub uring_ready: bool,
    /// The kernel agreed to FUSE over io_uring at `init`.
    pub uring_granted: Arc<AtomicBool>,
    /// Extended attributes are answered ([`crate::Options::xattrs`]).
    pub xattrs: bool,
}

impl Served {
    /// Runs `f` here when the request cannot wait for a server, else on a worker.
    fn serve(&self, may_block: bool, f: impl FnOnce(&Roamfs) + Send + 'static) {
        if may_block {
            let fs = self.fs.clone();
            self.pool.run(Box::new(move || f(&fs)));
        } else {
            f(&self.fs);
        }
    }

    /// [`Served::serve`] for a change of the namespace. While the namespace is suspended
    /// a change waits at roam-vfs's gate: on a worker, never on a thread reading requests
    /// (the reads that go on while suspended need those).
    fn serve_change(&self, may_block: bool, f: impl FnOnce(&Roamfs) + Send + 'static) {
        match self.fs.vfs.try_change() {
            Some(_change) if !may_block => f(&self.fs),
            _ => self.serve(true, f),
        }
    }

    fn ino_blocks(&self, ino: INodeNo) -> bool {
        self.fs.ino_may_block(ino.0)
    }

    fn child_blocks(&self, parent: INodeNo, name: &OsStr) -> bool {
        self.fs.child_may_block(parent.0, name)
    }

    /// Whether closing or syncing the open file `fh` uploads.
    fn uploads(&self, fh: FileHandle) -> bool {
        self.fs.handles.file(fh.0).is_some_and(|f| f.uploads())
    }
}

impl Filesystem for Served {
    fn init(&mut self, __req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // O_TRUNC reaches open (one journaled change, not a truncate upload first);
        // `ls -l` gets attributes with the listing; roam drops set-ID bits itself on
        // write and chown (KILLPRIV_V2), so the kernel need not ask for the mode first.
        let wanted = InitFlags::FUSE_ATOMIC_O_TRUNC
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        let _ = config.add_capabilities(wanted & config.capabilities());
        // The kernel's own limit per request (256 pages), and the ring entries' buffers.
        let _ = config.set_max_write(crate::uring::MAX_PAYLOAD as u32);
        if self.uring_ready
            && config
                .capabilities()
                .contains(InitFlags::FUSE_OVER_IO_URING)
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok()
        {
            self.uring_granted.store(true, Ordering::Relaxed);
        }
        // Files served in place are read and written by the kernel itself where it can
        // (crate::passthrough); their backing files are on a plain local file system.
        if config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH)
            && config.set_max_stack_depth(1).is_ok()
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
        {
            self.fs.passthrough.enable();
        }
        Ok(())
    }

    fn destroy(&mut self) {
        tracing::debug!("requests: {}", self.counts.summary());
    }

    /// roam keeps an inode's number while its name exists, whatever the kernel holds.
    /// (Counted per inode: fuser turns a `BATCH_FORGET` into one call per inode.)
    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {
        self.counts.add(Op::Forget);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counts.add(Op::Lookup);
        let name = name.to_owned();
        self.serve(self.child_blocks(parent, &name), move |fs| {
            reply_entry(reply, fs.lookup(parent.0, &name))
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.counts.add(Op::Getattr);
        self.serve(self.ino_blocks(ino), move |fs| {
            reply_attr(reply, fs.getattr(ino.0, fh.map(|f| f.0)))
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.counts.add(Op::Setattr);
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        self.serve_change(self.ino_blocks(ino), move |fs| {
            reply_attr(reply, fs.setattr(ino.0, fh.map(|f| f.0), &set))
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.counts.add(Op::Readlink);
        self.serve(self.ino_blocks(ino), move |fs| match fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        });
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.counts.add(Op::Mkdir);
        let name = name.to_owned();
        self.serve_change(self.child_blocks(parent, &name), move |fs| {
            reply_entry(reply, fs.mkdir(parent.0, &name, mode))
        });
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.counts.add(Op::Mknod);
        let name = name.to_owned();
        self.serve_change(self.child_blocks(parent, &name), move |fs| {
            reply_entry(reply, fs.mknod(parent.0, &name, mode, rdev))
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.add(Op::Unlink);
        let name = name.to_owned();
        self.serve_change(self.child_blocks(parent, &name), move |fs| {
            reply_empty(reply, fs.unlink(parent.0, &name, false))
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.add(Op::Rmdir);
        let name = name.to_owned();
        self.serve_change(self.child_blocks(parent, &name), move |fs| {
            reply_empty(reply, fs.unlink(parent.0, &name, true))
        });
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.counts.add(Op::Symlink);
        let (name, target) = (link_name.to_owned(), target.to_owned());
        self.serve_change(self.child_blocks(parent, &name), move |fs| {
            reply_entry(reply, fs.symlink(parent.0, &name, &target))
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Rename);
        let blocks = self.child_blocks(parent, name) || self.child_blocks(newparent, newname);
        let (name, newname): (OsString, OsString) = (name.to_owned(), newname.to_owned());
        self.serve_change(blocks, move |fs| {
            let res = fs.rename(parent.0, &name, newparent.0, &newname, flags.bits());
            reply_empty(reply, res)
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.counts.add(Op::Link);
        let blocks = self.ino_blocks(ino) || self.child_blocks(newparent, newname);
        let newname = newname.to_owned();
        self.serve_change(blocks, move |fs| {
            reply_entry(reply, fs.link(ino.0, newparent.0, &newname))
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.counts.add(Op::Open);
        self.serve_change(self.ino_blocks(ino), move |fs| {
            match fs.open(ino.0, flags.0) {
                Ok((fh, keep, how)) => {
                    let flags = fopen_flags(keep, how, flags.0);
                    match fs.backing_for(fh) {
                        // SAFETY: the id is a live registration, which `b` owns (the
                        // handle keeps it until release); fuser's wrapper is only lent.
                        Some(b) => {
                            let id = unsafe { reply.wrap_backing(b.id()) };
                            reply.opened_passthrough(FileHandle(fh), passed(flags), &id);
                            let _ = id.into_raw();
                        }
                        None => reply.opened(FileHandle(fh), flags),
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    /// Reads and writes go to a local file or to memory: answered here.
    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.counts.add(Op::Read);
        // A range still on its way waits for the server: not on a channel thread. One that
        // came already (a stream ahead of its reader) is read here, without a handoff.
        let Some(f) = self.fs.handles.file(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let waits =
            f.how == Opened::Stream && self.fs.vfs.range_missing(&f.virt, offset, size.into());
        self.serve(waits, move |fs| match fs.read(&f, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.counts.add(Op::Write);
        let kill_suid = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let reply_write = move |reply: ReplyWrite, res: Result<u32, Errno>| match res {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        };
        if let Some(_change) = self.fs.vfs.try_change() {
            return reply_write(reply, self.fs.write(fh.0, offset, data, kill_suid));
        }
        let data = data.to_vec();
        self.serve(true, move |fs| {
            reply_write(reply, fs.write(fh.0, offset, &data, kill_suid))
        });
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Flush);
        let pid = req.pid();
        self.serve(self.uploads(fh), move |fs| {
            reply_empty(reply, fs.flush(fh.0, pid))
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Release);
        self.serve(self.uploads(fh), move |fs| {
            fs.release(fh.0);
            reply.ok();
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Fsync);
        self.serve(self.uploads(fh), move |fs| {
            reply_empty(reply, fs.fsync(fh.0))
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Fallocate);
        // Local bytes only (a copy, a file in place or in memory): never a server's.
        self.serve_change(false, move |fs| {
            reply_empty(reply, fs.fallocate(fh.0, offset, length, mode))
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.counts.add(Op::Opendir);
        self.serve(self.ino_blocks(ino), move |fs| match fs.opendir(ino.0) {
            Ok((fh, keep)) => reply.opened(FileHandle(fh), dir_flags(keep)),
            Err(e) => reply.error(e),
        });
    }

    /// The entries were read at `opendir`: answered here.
    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.counts.add(Op::Readdir);
        let Some(dir) = self.fs.handles.dir(fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in dir.entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.counts.add(Op::Readdirplus);
        self.serve(self.ino_blocks(ino), move |fs| {
            let mut reply = reply;
            let res = fs.readdirplus(fh.0, offset, |ino, off, name, ttl, attr| {
                reply.add(INodeNo(ino), off, name, ttl, attr, GEN)
            });
            match res {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Releasedir);
        self.fs.handles.remove_dir(fh.0);
        reply.ok();
    }

    /// roam's own attributes (`user.roam.sha256` ...) when mounted with them; else
    /// ENOSYS (not ENODATA), which makes the kernel stop asking: it otherwise asks before
    /// the first write to each inode (for `security.capability`).
    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.counts.add(Op::Getxattr);
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let name = name.to_owned();
        // A fingerprint may read the whole file.
        self.serve(true, move |fs| match fs.roam_xattr(ino.0, &name) {
            Ok(value) if size == 0 => reply.size(value.len() as u32),
            Ok(value) if value.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(value) => reply.data(&value),
            Err(e) => reply.error(e),
        });
    }

    /// roam's attributes are asked for by name, never listed (each may cost a read of the
    /// whole file).
    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        self.counts.add(Op::Listxattr);
        match self.xattrs {
            true => reply.size(0),
            false => reply.error(Errno::ENOSYS),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.counts.add(Op::Statfs);
        match self.fs.statfs() {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                255,
                st.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.counts.add(Op::Create);
        let name = name.to_owned();
        self.serve_change(self.child_blocks(parent, &name), move |fs| {
            match fs.create(parent.0, &name, mode, flags) {
                Ok((attr, ttl, fh, how)) => {
                    let flags = fopen_flags(false, how, flags);
                    match fs.backing_for(fh) {
                        // SAFETY: as for open.
                        Some(b) => {
                            let id = unsafe { reply.wrap_backing(b.id()) };
                            let fh = FileHandle(fh);
                            reply.created_passthrough(&ttl, &attr, GEN, fh, passed(flags), &id);
                            let _ = id.into_raw();
                        }
                        None => reply.created(&ttl, &attr, GEN, FileHandle(fh), flags),
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }
}
