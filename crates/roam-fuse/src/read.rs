//! The read side: attributes, directory listings, opening and reading files.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use fuser::{Errno, FileAttr, FileType};
use roam_vfs::Kind;
use roam_vfs::{LinkTarget, Node};

use crate::attr;
use crate::handles::{Data, OpenDir, OpenFile, Opened};
use crate::{io_errno, vfs_errno, Place, Res, Roamfs};

impl Roamfs {
    /// Attributes of `virt` (numbered `ino`) and how long the kernel may keep them.
    pub(crate) fn attr_of(&self, ino: u64, virt: &str) -> Res<(FileAttr, Duration)> {
        match self.place(virt)? {
            Place::Synthetic => Ok((
                attr::synthetic_dir(ino, self.owner, self.mounted),
                self.ttl(virt, None),
            )),
            Place::UrlAlias(scheme) => Ok((
                attr::alias(ino, scheme, self.owner, self.mounted),
                self.ttl(virt, None),
            )),
            Place::Local(p) => {
                let md = std::fs::symlink_metadata(&p).map_err(io_errno)?;
                Ok((
                    attr::from_local(ino, &md),
                    self.ttl(virt, md.modified().ok()),
                ))
            }
            Place::Remote(node) => self.remote_attr(ino, &node),
        }
    }

    fn remote_attr(&self, ino: u64, node: &Node) -> Res<(FileAttr, Duration)> {
        let virt = node.virt();
        if self.vfs.is_dirty(virt) {
            // Being written here: the journaled copy is the truth (unless it was published
            // meanwhile: then the new version's attributes follow).
            if let Ok(md) = std::fs::metadata(self.vfs.copy_path(virt)) {
                return Ok((attr::from_copy(ino, &md), Duration::ZERO));
            }
        }
        let mut meta = self.vfs.stat(node).map_err(vfs_errno)?;
        if meta.kind == Kind::File && meta.size.is_none() {
            // The server did not say how big it is: only the body tells.
            self.vfs.meta_path(node).map_err(vfs_errno)?;
            meta = self.vfs.stat(node).map_err(vfs_errno)?;
        }
        if meta.kind == Kind::File && self.inodes.lock().unwrap().saw(ino, meta.size, meta.mtime) {
            self.invalidate(ino);
        }
        if meta.kind == Kind::File && meta.mode.is_none() {
            meta.mode = Some(self.modeless(node));
        }
        Ok((
            attr::from_meta(ino, &meta, self.owner, self.mounted),
            self.ttl(virt, meta.mtime),
        ))
    }

    /// Permission bits of a file whose protocol has none (HTTP, WebDAV, S3). The kernel
    /// checks them before any open, so they cannot wait for the contents: the mode roam
    /// gave the cached copy (r-x for programs, r-- otherwise, or a `chmod` of it) once
    /// there is one, else r-x so a program can start; plus w for the owner where the
    /// backend is writable.
    fn modeless(&self, node: &Node) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        let copy = std::fs::metadata(self.vfs.copy_path(node.virt()));
        let mode = copy.map_or(0o555, |md| md.permissions().mode() & 0o7777);
        if self.vfs.writable(node) {
            mode | 0o200
        } else {
            mode
        }
    }

    /// The entry of `name` in `parent`. A name that does not exist is an entry too, numbered
    /// 0: the kernel then keeps it as absent for roam's T_read, as it keeps a present one
    /// (a compiler looking for a header along an include path asks once, not at every
    /// look). A name made through this mount replaces the kernel's absent entry itself.
    pub(crate) fn lookup(&self, parent: u64, name: &std::ffi::OsStr) -> Res<(FileAttr, Duration)> {
        let virt = self.child(parent, name)?;
        let local = match self.place(&virt) {
            Ok(Place::Local(p)) => Some(p),
            _ => None,
        };
        let ino = self.ino_found(&virt, local.as_deref());
        match self.attr_of(ino, &virt) {
            Err(Errno::ENOENT) => Ok((
                attr::absent(self.owner, self.mounted),
                self.ttl(&virt, None),
            )),
            res => res,
        }
    }

    pub(crate) fn getattr(&self, ino: u64, fh: Option<u64>) -> Res<(FileAttr, Duration)> {
        // The kernel names the handle only sometimes (not for fstat).
        let open = fh
            .and_then(|fh| self.handles.file(fh))
            .or_else(|| self.handles.file_of(ino));
        if let Some(f) = open.as_ref().filter(|f| self.answers_for_itself(f)) {
            return self.open_attr(f);
        }
        let virt = self.virt_of(ino)?;
        match (self.attr_of(ino, &virt), open) {
            // Removed while open: the copy still holds what the program reads.
            (Err(Errno::ENOENT), Some(f)) => self.open_attr(&f),
            (res, _) => res,
        }
    }

    /// Whether the attributes of the open file `f` are its own: a file served in place or
    /// in memory, a copy with a change not yet uploaded. A copy uploaded at a `close` of
    /// one of its fds (and not written since) is not: a `chmod` or `touch` after that went
    /// to the server, and a program still holding the fd must see them.
    fn answers_for_itself(&self, f: &OpenFile) -> bool {
        match f.how {
            Opened::Copy | Opened::Stream => false,
            Opened::Uploads => f.is_unflushed() || self.vfs.is_dirty(&f.virt),
            Opened::InPlace | Opened::Memory => true,
        }
    }

    /// Attributes of an open file from what it holds: the local file, or the in-memory
    /// file. A file served in place or in memory is what the kernel is told, for T_read; a
    /// copy being written is not the remote file yet, so its attributes are asked again.
    pub(crate) fn open_attr(&self, f: &OpenFile) -> Res<(FileAttr, Duration)> {
        match &f.data {
            Data::File(file) => {
                let md = file.metadata().map_err(io_errno)?;
                Ok(match f.how {
                    Opened::InPlace => (
                        attr::from_local(f.ino, &md),
                        self.ttl(&f.virt, md.modified().ok()),
                    ),
                    _ => (attr::from_copy(f.ino, &md), Duration::ZERO),
                })
            }
            Data::Memory(c) => {
                let meta = c.meta();
                let ttl = self.ttl(&f.virt, meta.mtime);
                Ok((attr::from_meta(f.ino, &meta, self.owner, self.mounted), ttl))
            }
        }
    }

    /// The value of roam's extended attribute `name` of `ino` (`ENODATA` for any other,
    /// and for files served in place).
    pub(crate) fn roam_xattr(&self, ino: u64, name: &std::ffi::OsStr) -> Res<Vec<u8>> {
        let virt = self.virt_of(ino)?;
        let (Place::Remote(node), Some(name)) = (self.place(&virt)?, name.to_str()) else {
            return Err(Errno::ENODATA);
        };
        match self.vfs.roam_xattr(&node, name) {
            Some(value) => value.map_err(vfs_errno),
            None => Err(Errno::ENODATA),
        }
    }

    pub(crate) fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let virt = self.virt_of(ino)?;
        match self.place(&virt)? {
            Place::Local(p) => std::fs::read_link(p)
                .map(|t| t.into_os_string().into_encoded_bytes())
                .map_err(io_errno),
            // The kernel follows what this says in the local namespace: not the server's
            // text, but a path to where roam's rule leads, relative, so it stays inside.
            Place::Remote(node) => match self.vfs.link_target(&node).map_err(vfs_errno)? {
                Some((LinkTarget::Roam(to), _)) => {
                    // From the node's own name: an archive member's is the canonical one,
                    // like the name its link leads to.
                    let dir = roam_vfs::path::split_name(node.virt()).0;
                    Ok(roam_vfs::path::relative(dir, &to).into_bytes())
                }
                Some((LinkTarget::Local(p), _)) => Ok(p.into_bytes()),
                None => Err(Errno::EINVAL),
            },
            Place::UrlAlias(scheme) => Ok(scheme.as_bytes().to_vec()),
            Place::Synthetic => Err(Errno::EINVAL),
        }
    }

    /// Snapshots the entries of a directory for `readdir`; says whether the kernel may keep
    /// the listing it cached of `ino` (the same entries as this one).
    pub(crate) fn opendir(&self, ino: u64) -> Res<(u64, bool)> {
        let virt = self.virt_of(ino)?;
        let mut local_dir = None;
        let names: Vec<(String, FileType)> = match self.place(&virt)? {
            Place::Synthetic => self.synthetic_children(&virt),
            Place::UrlAlias(_) => return Err(Errno::ENOTDIR),
            Place::Local(p) => {
                let names = local_entries(&p)?;
                local_dir = Some(p);
                names
            }
            Place::Remote(node) => {
                let dir = self.vfs.open_path(&node).map_err(vfs_errno)?;
                local_entries(&dir)?
            }
        };
        let parent = roam_vfs::path::split_name(&virt).0.to_owned();
        let mut entries = vec![
            (ino, FileType::Directory, ".".to_owned()),
            (self.ino_of(&parent), FileType::Directory, "..".to_owned()),
        ];
        for (name, kind) in names {
            let child = roam_vfs::path::join(&virt, &name);
            // readdirplus hands these numbers to the kernel as inodes: hard links share one.
            let local = local_dir.as_ref().map(|d| d.join(&name));
            entries.push((self.ino_found(&child, local.as_deref()), kind, name));
        }
        let keep = self
            .inodes
            .lock()
            .unwrap()
            .cache_version(ino, listing_version(&entries));
        Ok((self.handles.add_dir(OpenDir { virt, entries }), keep))
    }

    /// `readdir` with each entry's attributes (`ls -l` in one request): `add` takes each
    /// entry from `offset` on (inode, the next entry's offset, name, TTL, attributes) and
    /// says when the reply is full.
    pub(crate) fn readdirplus(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, u64, &str, &Duration, &FileAttr) -> bool,
    ) -> Res<()> {
        let dir = self.handles.dir(fh).ok_or(Errno::EBADF)?;
        for (i, (ino, _, name)) in dir.entries.iter().enumerate().skip(offset as usize) {
            let virt = match name.as_str() {
                "." => dir.virt.clone(),
                ".." => roam_vfs::path::split_name(&dir.virt).0.to_owned(),
                _ => roam_vfs::path::join(&dir.virt, name),
            };
            // A name that vanished since opendir is left out, as a fresh listing would.
            let Ok((attr, ttl)) = self.attr_of(*ino, &virt) else {
                continue;
            };
            if add(*ino, i as u64 + 1, name, &ttl, &attr) {
                break;
            }
        }
        Ok(())
    }

    /// The next components of the mount points below the made-up directory `virt`.
    fn synthetic_children(&self, virt: &str) -> Vec<(String, FileType)> {
        let mut names: Vec<String> = self
            .prefixes
            .iter()
            .filter_map(|p| roam_vfs::path::strip_dir_prefix(p, virt))
            .filter_map(|rest| rest.split('/').nth(1).filter(|n| !n.is_empty()))
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| (n, FileType::Directory))
            .collect()
    }

    /// Opens a file as the core decides (`Vfs::open`): for reading, or for writing through
    /// the journaled copy; a file served in place (local or in memory) is opened itself.
    /// Says whether the kernel may keep its cached pages, and whether `close` needs a
    /// `flush`.
    pub(crate) fn open(&self, ino: u64, flags: i32) -> Res<(u64, bool, Opened)> {
        let virt = self.virt_of(ino)?;
        match self.place(&virt)? {
            Place::Synthetic => Err(Errno::EISDIR),
            // Only O_PATH|O_NOFOLLOW opens a symlink itself, and that never reaches roam.
            Place::UrlAlias(_) => Err(Errno::ELOOP),
            Place::Local(p) => {
                let file = open_local(&p, flags & !(libc::O_CREAT | libc::O_EXCL), 0)?;
                Ok(self.add_file(Data::File(file), ino, virt, Opened::InPlace))
            }
            // The kernel made the new file's mode already (`create`), or it exists.
            Place::Remote(node) => self.open_remote(&node, ino, virt, flags, 0o644),
        }
    }

    /// Opens a remote name through the core; `mode` is a file it creates.
    pub(crate) fn open_remote(
        &self,
        node: &Node,
        ino: u64,
        virt: String,
        flags: i32,
        mode: u32,
    ) -> Res<(u64, bool, Opened)> {
        // A writer from now on (past the suspension's gate first, so that a drain does
        // not wait for an open that waits for it): see `Handles::opening`.
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY
            || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        let _change = writes.then(|| self.vfs.change());
        let _opening = writes.then(|| self.handles.opening(&virt));
        // The kernel checked the caller's permissions (`default_permissions`).
        let how = roam_vfs::OpenHow {
            flags,
            mode,
            caller: &|| None,
            memory: true,
        };
        let (path, how) = match self.vfs.open(node, &how).map_err(vfs_errno)? {
            roam_vfs::Opened::Memory(c) => {
                return Ok(self.add_file(Data::Memory(c), ino, virt, Opened::Memory))
            }
            roam_vfs::Opened::Local(p) => (p, Opened::InPlace),
            roam_vfs::Opened::Change(p) => (p, Opened::Uploads),
            roam_vfs::Opened::Partial(p) => (p, Opened::Stream),
            roam_vfs::Opened::Copy(p) => (p, Opened::Copy),
        };
        // A new file's copy is made here; an existing one's is there already.
        let flags = match how {
            Opened::Uploads => flags,
            _ => flags & !(libc::O_CREAT | libc::O_EXCL),
        };
        let file = open_local(&path, flags, mode)?;
        Ok(self.add_file(Data::File(file), ino, virt, how))
    }

    /// Registers an open file; says whether the kernel may keep the pages it cached of
    /// this very version.
    pub(crate) fn add_file(
        &self,
        data: Data,
        ino: u64,
        virt: String,
        how: Opened,
    ) -> (u64, bool, Opened) {
        let keep = data
            .version()
            .is_some_and(|v| self.inodes.lock().unwrap().cache_version(ino, v));
        let fh = self.handles.add_file(OpenFile::new(data, ino, virt, how));
        (fh, keep, how)
    }

    /// Reads from the open file `f` (looked up once, by the channel thread).
    pub(crate) fn read(&self, f: &OpenFile, offset: u64, size: u32) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; size as usize];
        let n = self.read_into(f, offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Reads into `buf` (a ring entry's payload: no buffer of its own); the bytes read.
    pub(crate) fn read_into(&self, f: &OpenFile, offset: u64, buf: &mut [u8]) -> Res<usize> {
        let len = buf.len() as u64;
        if f.how == Opened::Stream && self.vfs.range_missing(&f.virt, offset, len) {
            self.vfs
                .ensure_range(&f.virt, offset, len)
                .map_err(vfs_errno)?;
        }
        let mut n = 0;
        while n < buf.len() {
            match f.data.read_at(&mut buf[n..], offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_errno(e)),
            }
        }
        Ok(n)
    }

    /// Free space: that of the file system holding roam's cache, where copies live.
    pub(crate) fn statfs(&self) -> Res<libc::statvfs> {
        let root = std::ffi::CString::new(self.vfs.cache_root().as_os_str().as_encoded_bytes())
            .map_err(|_| Errno::EINVAL)?;
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a zeroed out-parameter.
        if unsafe { libc::statvfs(root.as_ptr(), &mut st) } != 0 {
            return Err(io_errno(std::io::Error::last_os_error()));
        }
        Ok(st)
    }
}

/// A listing as a [`crate::inodes::Version`]: a hash of its entries in order (numbers,
/// kinds, names, so the offsets `readdir` gives are those of the same entries).
fn listing_version(entries: &[(u64, FileType, String)]) -> crate::inodes::Version {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (ino, kind, name) in entries {
        (ino, kind, name).hash(&mut h);
    }
    (h.finish(), None)
}

fn local_entries(dir: &Path) -> Res<Vec<(String, FileType)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_errno)? {
        let e = e.map_err(io_errno)?;
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let kind = e
            .file_type()
            .ok()
            .and_then(FileType::from_std)
            .unwrap_or(FileType::RegularFile);
        out.push((name, kind));
    }
    Ok(out)
}

/// Opens a local file (copy or in place) with a program's flags.
pub(crate) fn open_local(path: &Path, flags: i32, mode: u32) -> Res<File> {
    let acc = flags & libc::O_ACCMODE;
    std::fs::OpenOptions::new()
        .read(acc != libc::O_WRONLY)
        .write(acc != libc::O_RDONLY)
        .custom_flags(flags & !libc::O_ACCMODE | libc::O_CLOEXEC)
        .mode(mode)
        .open(path)
        .map_err(io_errno)
}
