//! The write side. Files served in place are changed in place; everything else goes through
//! roam-vfs's write path: writes land in the journaled copy, and the change is uploaded
//! when the last writer closes it. `flush` (each `close`) is where the upload happens when
//! no other writer is left, so an upload failure is `close`'s error; `release` uploads what
//! was written after that (through a dup'ed fd or a shared mapping) and can only log.

use std::ffi::OsStr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr, TimeOrNow};
use roam_vfs::{Change, Flushed, Node};

use crate::handles::{Data, OpenFile, Opened};
use crate::names::Held;
use crate::read::open_local;
use crate::{io_errno, vfs_errno, Place, Res, Roamfs};

/// What `setattr` asks to change.
pub(crate) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
}

impl Roamfs {
    /// A new name in `parent`, which must be changeable.
    fn new_child(&self, parent: u64, name: &OsStr) -> Res<(String, Place)> {
        let virt = self.child(parent, name)?;
        match self.place(&virt) {
            Ok(Place::Synthetic | Place::UrlAlias(_)) | Err(Errno::ENOENT) => Err(Errno::EROFS),
            Ok(p) => Ok((virt, p)),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(FileAttr, Duration, u64, Opened)> {
        let (virt, place) = self.new_child(parent, name)?;
        let mode = mode & 0o7777;
        let (fh, how) = match place {
            Place::Local(p) => {
                let file = create_in_place(&p, flags, mode)?;
                let ino = self.ino_of(&virt);
                let (fh, _, how) = self.add_file(Data::File(file), ino, virt, Opened::InPlace);
                (fh, how)
            }
            Place::Remote(node) => {
                let ino = self.ino_of(&virt);
                let (fh, _, how) =
                    self.open_remote(&node, ino, virt, flags | libc::O_CREAT, mode)?;
                (fh, how)
            }
            Place::Synthetic | Place::UrlAlias(_) => unreachable!("refused by new_child"),
        };
        let f = self.handles.file(fh).ok_or(Errno::EBADF)?;
        let (attr, ttl) = self.open_attr(&f)?;
        Ok((attr, ttl, fh, how))
    }

    /// A write; `kill_suid`: the kernel asks roam to drop set-ID bits first.
    pub(crate) fn write(&self, fh: u64, offset: u64, data: &[u8], kill_suid: bool) -> Res<u32> {
        // While the namespace is suspended, a write waits here (roam-vfs `suspend.rs`).
        let _change = self.vfs.change();
        let f = self.handles.file(fh).ok_or(Errno::EBADF)?;
        if kill_suid {
            f.data.kill_suid().map_err(io_errno)?;
        }
        self.written(&f)?;
        if let Err(e) = f.data.write_all_at(data, offset) {
            self.copy_write_failed(&f, &e);
            return Err(io_errno(e));
        }
        Ok(data.len() as u32)
    }

    /// `fallocate` of an open file: a change of its bytes like a write (a journaled copy
    /// grown by it is uploaded at its close).
    pub(crate) fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> Res<()> {
        let _change = self.vfs.change();
        let f = self.handles.file(fh).ok_or(Errno::EBADF)?;
        self.written(&f)?;
        f.data.allocate(offset, len, mode).map_err(io_errno)
    }

    /// Notes a write (or truncation) of `f`. The first since a `close` makes its change
    /// one being written again (not a whole version: a writer killed now leaves it kept).
    fn written(&self, f: &OpenFile) -> Res<()> {
        if !f.set_unflushed(true) && f.uploads() {
            self.vfs.writing_again(&f.virt).map_err(vfs_errno)?;
        }
        Ok(())
    }

    /// A write (or truncation) of a copy being written failed (the cache disk is full ...):
    /// the copy may lack bytes the program meant to write, so it must never be uploaded.
    fn copy_write_failed(&self, f: &OpenFile, e: &std::io::Error) {
        if f.uploads() {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            if let Err(e) = self.vfs.write_failed(&f.virt, errno) {
                tracing::warn!("{}: {e}", f.virt);
            }
        }
    }

    /// `close` of one fd by process `pid`: uploads when no other writer holds the copy.
    /// The kernel flushes the fds of a process killed by a signal as it closes any: that
    /// writer may have left the copy half-written, so its change is kept, not uploaded.
    pub(crate) fn flush(&self, fh: u64, pid: u32) -> Res<()> {
        let Some(f) = self.handles.file(fh) else {
            return Ok(());
        };
        let _ = f.set_unflushed(false);
        if !f.uploads() {
            return Ok(());
        }
        if let Some(signal) = killed_by_signal(pid) {
            if let Err(e) = self.vfs.writer_killed(&f.virt, pid as i32, signal) {
                tracing::warn!("{}: {e}", f.virt);
            }
            return Ok(());
        }
        if self.handles.unflushed_writers(&f.virt, fh) > 0 {
            return Ok(());
        }
        // A whole version from here on, whatever becomes of this upload: one that fails
        // stays due for `roam sync` even if roam ends before the release.
        self.vfs.seal(&f.virt, true).map_err(vfs_errno)?;
        // The handle stays open until its release (a dup of the fd may write more): the
        // upload is `close`'s, the change stays this process's until then.
        self.upload(&f, fh, true, false)
    }

    /// Locks the names among `names` that a release may be delivering a change to (remote
    /// names, not kept in memory), as a request changing them must ([`crate::names`]).
    /// Past the suspension's gate first, as every change: a release holding the lock
    /// delivers what a suspension waits for. Names served in place take no lock: their
    /// requests are answered on the threads reading the kernel's, which must not wait.
    fn lock_remote(&self, names: &[(&str, &Place)]) -> Option<(Change<'_>, Held<'_>)> {
        let remote: Vec<&str> = names
            .iter()
            .filter(|(_, p)| matches!(p, Place::Remote(n) if !self.vfs.in_memory(n)))
            .map(|(virt, _)| *virt)
            .collect();
        if remote.is_empty() {
            return None;
        }
        let change = self.vfs.change();
        Some((change, self.names.lock(&remote)))
    }

    /// The place of `virt`, looked up under its name lock where it is remote (or not
    /// found): a release may be publishing this very name (a file made and closed just
    /// before; the kernel sends the release in the background), and what a lookup answers
    /// before the release is done may be stale (`chmod` after `close`: `ENOENT`).
    fn place_locked(&self, virt: &str) -> Res<(Place, Option<(Change<'_>, Held<'_>)>)> {
        let lock = match self.place(virt) {
            Ok(place) => match self.lock_remote(&[(virt, &place)]) {
                None => return Ok((place, None)),
                lock => lock,
            },
            Err(e) if e == Errno::ENOENT => Some((self.vfs.change(), self.names.lock(&[virt]))),
            Err(e) => return Err(e),
        };
        Ok((self.place(virt)?, lock))
    }

    /// The last reference to the open file is gone. Whoever ends a run waits for this to
    /// return ([`crate::releases`]): the upload it makes is part of the program's close.
    pub(crate) fn release(&self, fh: u64) {
        let Some((f, _serving)) = self.handles.remove_file(fh) else {
            return;
        };
        if f.uploads() && self.handles.unflushed_writers(&f.virt, fh) == 0 {
            // Requests sent after the close may be served already: not in the middle.
            let _name = self.names.lock(&[&f.virt]);
            if let Err(e) = self.upload(&f, fh, false, false) {
                tracing::warn!(
                    "{}: not uploaded ({e:?}); the change stays journaled for `roam sync`",
                    f.virt
                );
            }
        }
        // The kernel's pages are of the version just written.
        if let Some(version) = f.data.version() {
            self.inodes.lock().unwrap().cache_version(f.ino, version);
        }
        let ino = f.ino;
        drop(f);
        self.passthrough.released(ino);
    }

    pub(crate) fn fsync(&self, fh: u64) -> Res<()> {
        let f = self.handles.file(fh).ok_or(Errno::EBADF)?;
        match (f.uploads(), f.file()) {
            // A durability point: upload now; the fd stays open for more writes.
            (true, _) => self.upload(&f, fh, true, true),
            (false, Some(file)) => file.sync_all().map_err(io_errno),
            // In memory: nothing more durable exists.
            (false, None) => Ok(()),
        }
    }

    /// Delivers the change of `f` (`fh` still open when `keep_open`): at once for an
    /// fsync (`now`), else as the core's T_write says (a failure is retried meanwhile).
    fn upload(&self, f: &OpenFile, fh: u64, keep_open: bool, now: bool) -> Res<()> {
        let still_written = || keep_open || self.handles.writers(&f.virt, fh) > 0;
        let done = match now {
            true => self.vfs.deliver_now(&f.virt, &still_written),
            false => self.vfs.last_close(&f.virt, &still_written),
        };
        if let Flushed::Conflict(beside) = done.map_err(vfs_errno)? {
            tracing::warn!("{}", roam_vfs::conflict(&f.virt, &beside));
        }
        Ok(())
    }

    pub(crate) fn mkdir(&self, parent: u64, name: &OsStr, mode: u32) -> Res<(FileAttr, Duration)> {
        let (virt, place) = self.new_child(parent, name)?;
        match place {
            Place::Local(p) => {
                std::fs::DirBuilder::new()
                    .mode(mode & 0o7777)
                    .create(&p)
                    .map_err(io_errno)?;
                // The kernel applied the caller's umask; roam's own must not narrow it.
                let exact = std::fs::Permissions::from_mode(mode & 0o7777);
                std::fs::set_permissions(&p, exact).map_err(io_errno)?
            }
            Place::Remote(node) => self.vfs.mkdir(&node, mode & 0o7777).map_err(vfs_errno)?,
            Place::Synthetic | Place::UrlAlias(_) => unreachable!("refused by new_child"),
        }
        self.entry(&virt)
    }

    pub(crate) fn symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
    ) -> Res<(FileAttr, Duration)> {
        let (virt, place) = self.new_child(parent, name)?;
        match place {
            Place::Local(p) => std::os::unix::fs::symlink(target, p).map_err(io_errno)?,
            Place::Remote(node) => {
                let target = target.to_str().ok_or(Errno::EINVAL)?;
                self.vfs.symlink(target, &node).map_err(vfs_errno)?
            }
            Place::Synthetic | Place::UrlAlias(_) => unreachable!("refused by new_child"),
        }
        self.entry(&virt)
    }

    /// Special files exist where the files are local (FIFOs, sockets, devices: made by
    /// `mknod` there) and where roam-vfs's backend keeps them (FIFOs and sockets on
    /// `mem:`); elsewhere `EPERM`. The kernel itself carries a FIFO's or socket's bytes.
    pub(crate) fn mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> Res<(FileAttr, Duration)> {
        let (virt, place) = self.new_child(parent, name)?;
        let p = match place {
            Place::Local(p) => p,
            Place::Remote(node) => {
                self.vfs.mknod(&node, mode).map_err(vfs_errno)?;
                return self.entry(&virt);
            }
            Place::Synthetic | Place::UrlAlias(_) => unreachable!("refused by new_child"),
        };
        let c =
            std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
        // SAFETY: a valid C string; mknod reads nothing else.
        if unsafe { libc::mknod(c.as_ptr(), mode, libc::dev_t::from(rdev)) } != 0 {
            return Err(io_errno(std::io::Error::last_os_error()));
        }
        // The kernel applied the caller's umask; roam's own must not narrow it.
        let exact = std::fs::Permissions::from_mode(mode & 0o7777);
        std::fs::set_permissions(&p, exact).map_err(io_errno)?;
        self.entry(&virt)
    }

    /// Hard links exist where the files are local, and on `mem:` (roam-vfs makes them);
    /// elsewhere `EPERM`, as Linux says for a file system without them.
    pub(crate) fn link(&self, ino: u64, parent: u64, name: &OsStr) -> Res<(FileAttr, Duration)> {
        let from = self.virt_of(ino)?;
        let (virt, place) = self.new_child(parent, name)?;
        match (self.place(&from)?, place) {
            (Place::Local(a), Place::Local(b)) => std::fs::hard_link(a, b).map_err(io_errno)?,
            (Place::Remote(a), Place::Remote(b)) => self.vfs.link(&a, &b, true).map_err(|e| {
                if e.errno() == libc::EPERM {
                    tracing::warn!("{from}: this backend has no hard links");
                }
                vfs_errno(e)
            })?,
            _ => {
                tracing::warn!("{from}: this backend has no hard links");
                return Err(Errno::EPERM);
            }
        }
        // A hard link is the same inode: the kernel must see the same number, and the file
        // must stay reachable by this name when the first goes.
        self.inodes.lock().unwrap().link(ino, &virt);
        self.attr_of(ino, &virt)
    }

    /// The entry the kernel gets for a name just made.
    fn entry(&self, virt: &str) -> Res<(FileAttr, Duration)> {
        let ino = self.ino_of(virt);
        self.attr_of(ino, virt)
    }

    pub(crate) fn unlink(&self, parent: u64, name: &OsStr, dir: bool) -> Res<()> {
        let (virt, place) = self.new_child(parent, name)?;
        let _name = self.lock_remote(&[(&virt, &place)]);
        match (place, dir) {
            (Place::Local(p), false) => std::fs::remove_file(p).map_err(io_errno)?,
            (Place::Local(p), true) => std::fs::remove_dir(p).map_err(io_errno)?,
            (Place::Remote(node), false) => self.vfs.remove_file(&node).map_err(vfs_errno)?,
            (Place::Remote(node), true) => self.vfs.remove_dir(&node).map_err(vfs_errno)?,
            (Place::Synthetic | Place::UrlAlias(_), _) => unreachable!("refused by new_child"),
        }
        self.inodes.lock().unwrap().detach(&virt);
        Ok(())
    }

    pub(crate) fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Res<()> {
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(Errno::EINVAL);
        }
        let (from, a) = self.new_child(parent, name)?;
        let (to, b) = self.new_child(newparent, newname)?;
        let _names = self.lock_remote(&[(&from, &a), (&to, &b)]);
        if flags & libc::RENAME_NOREPLACE != 0 && self.attr_of(0, &to).is_ok() {
            return Err(Errno::EEXIST);
        }
        match (a, b) {
            (Place::Local(a), Place::Local(b)) => std::fs::rename(a, b).map_err(io_errno)?,
            (Place::Remote(a), Place::Remote(b)) => self.vfs.rename(&a, &b).map_err(vfs_errno)?,
            _ => return Err(Errno::EXDEV),
        }
        self.inodes.lock().unwrap().rename(&from, &to);
        Ok(())
    }

    pub(crate) fn setattr(
        &self,
        ino: u64,
        fh: Option<u64>,
        set: &SetAttr,
    ) -> Res<(FileAttr, Duration)> {
        let _change = self.vfs.change();
        let virt = self.virt_of(ino)?;
        let (place, _name) = self.place_locked(&virt)?;
        let open = fh.and_then(|fh| self.handles.file(fh));
        match place {
            Place::Local(p) => set_local(&p, open.as_deref(), set)?,
            Place::Remote(node) if self.vfs.in_memory(&node) => {
                self.set_memory(&node, open.as_deref(), set)?
            }
            Place::Remote(node) => self.set_remote(&node, open.as_deref(), set)?,
            Place::Synthetic | Place::UrlAlias(_) => return Err(Errno::EPERM),
        }
        self.getattr(ino, fh)
    }

    /// Remote files belong to the user who mounted: a `chown` to anyone else is `EPERM`.
    fn check_owner(&self, set: &SetAttr) -> Res<()> {
        if set.uid.is_some_and(|u| u != self.owner.uid)
            || set.gid.is_some_and(|g| g != self.owner.gid)
        {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// setattr of an in-memory node: a file is changed itself (through its open handle,
    /// which outlives an unlink); a directory or symlink by name.
    fn set_memory(&self, node: &Node, open: Option<&OpenFile>, set: &SetAttr) -> Res<()> {
        let file = match open.map(|f| &f.data) {
            Some(Data::Memory(c)) => Some(c.clone()),
            _ => self.vfs.open_in_memory(node, None).ok(),
        };
        let Some(c) = file else {
            return self.set_remote(node, None, set);
        };
        self.check_owner(set)?;
        let data = Data::Memory(c.clone());
        if set.uid.is_some() || set.gid.is_some() {
            data.kill_suid().map_err(io_errno)?;
        }
        if let Some(mode) = set.mode {
            c.set_mode(mode);
        }
        if let Some(size) = set.size {
            c.set_len(size).map_err(io_errno)?;
        }
        if let Some(mtime) = set.mtime {
            c.set_mtime(resolve(mtime));
        }
        if let Some(atime) = set.atime {
            c.set_atime(resolve(atime));
        }
        Ok(())
    }

    fn set_remote(&self, node: &Node, open: Option<&OpenFile>, set: &SetAttr) -> Res<()> {
        self.check_owner(set)?;
        if let Some(mode) = set.mode {
            self.vfs.set_mode(node, mode & 0o7777).map_err(vfs_errno)?;
        }
        let writing = open.filter(|f| f.uploads());
        if let Some(size) = set.size {
            match writing {
                // ftruncate of a file being written: its copy, uploaded at close.
                Some(f) => {
                    self.written(f)?;
                    if let Err(e) = f.data.set_len(size) {
                        self.copy_write_failed(f, &e);
                        return Err(io_errno(e));
                    }
                }
                None => self.vfs.truncate(node, size).map_err(vfs_errno)?,
            }
        }
        let (atime, mtime) = (set.atime.map(resolve), set.mtime.map(resolve));
        match mtime {
            Some(mtime) if self.vfs.is_dirty(node.virt()) => {
                // The upload carries the copy's mtime.
                let copy = self.vfs.copy_path(node.virt());
                set_times(&copy, None, Some(mtime))?;
                if atime.is_some() {
                    self.vfs.set_times(node, atime, None).map_err(vfs_errno)?;
                }
            }
            _ if atime.is_some() || mtime.is_some() => {
                self.vfs.set_times(node, atime, mtime).map_err(vfs_errno)?;
            }
            _ => {}
        }
        Ok(())
    }
}

fn resolve(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

/// setattr of a file served in place: the local calls themselves.
fn set_local(p: &Path, open: Option<&OpenFile>, set: &SetAttr) -> Res<()> {
    if let Some(mode) = set.mode {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(io_errno)?;
    }
    if set.uid.is_some() || set.gid.is_some() {
        std::os::unix::fs::lchown(p, set.uid, set.gid).map_err(io_errno)?;
    }
    if let Some(size) = set.size {
        match open {
            Some(f) => f.data.set_len(size).map_err(io_errno)?,
            None => open_local(p, libc::O_WRONLY, 0)?
                .set_len(size)
                .map_err(io_errno)?,
        }
    }
    if set.atime.is_some() || set.mtime.is_some() {
        set_times(p, set.atime.map(resolve), set.mtime.map(resolve))?;
    }
    Ok(())
}

/// utimensat without following a final symlink; `None` leaves a time as it is.
fn set_times(p: &Path, atime: Option<SystemTime>, mtime: Option<SystemTime>) -> Res<()> {
    roam_vfs::set_own_times(p, atime, mtime).map_err(io_errno)
}

/// The signal that is ending process `pid`, if it is exiting for one (its fds are being
/// closed by the kernel): `/proc/PID/stat` shows PF_EXITING in its flags and the signal in
/// its exit code (readable by the process's own user; otherwise `None`, a close).
fn killed_by_signal(pid: u32) -> Option<i32> {
    const PF_EXITING: u64 = 0x4;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses): the state is
    // field 3, flags field 9, exit_code field 52.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let flags: u64 = fields.get(9 - 3)?.parse().ok()?;
    let exit_code: i32 = fields.get(52 - 3)?.parse().ok()?;
    let signal = exit_code & 0x7f;
    (flags & PF_EXITING != 0 && signal != 0).then_some(signal)
}

/// Opens (with `O_CREAT`) a file served in place. The kernel applied the caller's umask
/// to `mode` already and roam's own must not narrow it again, so a file this call makes
/// gets exactly `mode`: made with `O_EXCL` to know it is new, then `fchmod`ed.
fn create_in_place(path: &Path, flags: i32, mode: u32) -> Res<std::fs::File> {
    loop {
        match open_local(path, flags | libc::O_CREAT | libc::O_EXCL, mode) {
            Ok(f) => {
                let exact = std::fs::Permissions::from_mode(mode);
                f.set_permissions(exact).map_err(io_errno)?;
                return Ok(f);
            }
            Err(Errno::EEXIST) if flags & libc::O_EXCL == 0 => {
                match open_local(path, flags & !libc::O_CREAT, mode) {
                    // Removed between the two opens: make it after all.
                    Err(Errno::ENOENT) => continue,
                    opened => return opened,
                }
            }
            Err(e) => return Err(e),
        }
    }
}
