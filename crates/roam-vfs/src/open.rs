//! What an open of a roam name means, decided once for every frontend ([`Vfs::open`]):
//! the file itself (served in place, or kept in memory), a journaled copy to change, a
//! copy arriving in ranges, or a whole copy (a skeleton directory for a directory). The
//! frontend then only opens what it got, by its channel's means (a rewritten path and a
//! watched fd under `roam run`, a handle under FUSE).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use roam_drivers::NewFile;

use crate::access::{Caller, Need};
use crate::links::LinkTarget;
use crate::{Error, MemoryFile, Node, Resolved, Result, Vfs, MAX_SYMLINKS};

/// An open's request: the program's flags, the permission bits a file it creates gets
/// (its mode less its umask), and who asks.
pub struct OpenHow<'a> {
    pub flags: i32,
    pub mode: u32,
    /// The caller's credentials, when roam must check them (the kernel does not); asked
    /// only for an open that changes something.
    pub caller: &'a dyn Fn() -> Option<Caller>,
    /// Whether the frontend can serve a file kept in memory itself ([`Opened::Memory`]);
    /// if not, such a file is changed through a journaled copy like any other.
    pub memory: bool,
}

/// What [`Vfs::open`] gave: where the bytes are and what the frontend must watch.
#[derive(Debug)]
pub enum Opened {
    /// A local path the frontend opens with the program's flags: the file itself (a mount
    /// served in place, a local file a link leads to, a FIFO's entry), or an `O_PATH`
    /// open's entry.
    Local(PathBuf),
    /// The file an in-memory backend keeps, already truncated when `O_TRUNC` asked.
    Memory(Arc<MemoryFile>),
    /// A journaled copy: the change is delivered at the last writer's close
    /// ([`Vfs::last_close`]), so the frontend must see every close.
    Change(PathBuf),
    /// A copy whose ranges arrive on demand: a read of a range not here waits for
    /// [`Vfs::ensure_range`].
    Partial(PathBuf),
    /// A whole copy, or the skeleton directory holding a directory's listing.
    Copy(PathBuf),
}

impl Opened {
    /// What was decided, in words (for `-vv`).
    fn what(&self) -> &'static str {
        match self {
            Opened::Local(_) => "in place (a local file or entry)",
            Opened::Memory(_) => "in place (in memory)",
            Opened::Change(_) => "a journaled copy to change",
            Opened::Partial(_) => "in ranges, fetched as they are read",
            Opened::Copy(_) => "a whole copy",
        }
    }
}

impl Vfs {
    /// Opens `node` as the program asked, deciding between the file itself, a change, a
    /// partial copy and a whole one.
    pub fn open(&self, node: &Node, how: &OpenHow) -> Result<Opened> {
        let opened = self.decide_open(node, how);
        if let Ok(o) = &opened {
            tracing::debug!("open {}: {}", node.virt(), o.what());
        }
        opened
    }

    /// [`Vfs::open`]'s decision.
    fn decide_open(&self, node: &Node, how: &OpenHow) -> Result<Opened> {
        let flags = how.flags;
        if let Some(p) = self.special_path(node)? {
            return Ok(Opened::Local(p));
        }
        let changes = flags & libc::O_ACCMODE != libc::O_RDONLY
            || flags & (libc::O_TRUNC | libc::O_CREAT) != 0;
        if changes {
            return self.open_to_change(node, how);
        }
        if how.memory && self.in_memory(node) {
            return self.open_memory(node, how);
        }
        if flags & libc::O_PATH != 0 {
            return self.path_only(node, flags).map(Opened::Local);
        }
        if flags & libc::O_DIRECTORY == 0 {
            if let Some(part) = self.open_streaming(node)? {
                return Ok(Opened::Partial(part));
            }
        }
        match self.in_place(node) {
            Some(p) => Ok(Opened::Local(p)),
            None => {
                let copy = self.open_path(node)?;
                // A frontend may read it from a page cache roam never sees.
                crate::cache::read_access(&copy);
                Ok(Opened::Copy(copy))
            }
        }
    }

    /// An open that writes, truncates or may create.
    fn open_to_change(&self, node: &Node, how: &OpenHow) -> Result<Opened> {
        let flags = how.flags;
        if let Some(p) = self.in_place(node) {
            return Ok(Opened::Local(p));
        }
        let node = match self.write_target(node, flags)? {
            Ok(n) => n,
            Err(local) => return Ok(Opened::Local(local.into())),
        };
        if !self.writable(&node) {
            return self.open_read_only(&node, flags);
        }
        if let Some(caller) = (how.caller)() {
            // A name to make needs its directory; one there, itself.
            let need = match self.stat(&node) {
                Ok(_) => Need::Write,
                Err(_) => Need::ChangeNames,
            };
            self.may(&caller, &node, need)?;
        }
        if how.memory && self.in_memory(&node) {
            return self.open_memory(&node, how);
        }
        self.open_for_write(&node, flags, how.mode)
            .map(Opened::Change)
    }

    /// The file itself of an in-memory node, made when `O_CREAT` asks and truncated when
    /// `O_TRUNC` does.
    fn open_memory(&self, node: &Node, how: &OpenHow) -> Result<Opened> {
        let create = (how.flags & libc::O_CREAT != 0).then_some(NewFile {
            mode: how.mode,
            exclusive: how.flags & libc::O_EXCL != 0,
        });
        let file = self.open_in_memory(node, create)?;
        if how.flags & libc::O_TRUNC != 0 {
            file.set_len(0)
                .map_err(|e| Error::posix(e.raw_os_error().unwrap_or(libc::EIO), e.to_string()))?;
        }
        Ok(Opened::Memory(file))
    }

    /// A changing open of a name on a read-only mount: `O_CREAT` of an existing file
    /// without write access is a plain open; a missing name is still `ENOENT` when not
    /// creating; anything else `EROFS`.
    fn open_read_only(&self, node: &Node, flags: i32) -> Result<Opened> {
        let plain = flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0;
        match self.stat(node) {
            Ok(_) if plain && flags & libc::O_EXCL != 0 => Err(Error::posix(
                libc::EEXIST,
                format!("{}: exists", node.virt()),
            )),
            Ok(_) if plain => self.open_path(node).map(Opened::Copy),
            Err(e) if e.errno() != libc::ENOENT || flags & libc::O_CREAT == 0 => Err(e),
            _ => Err(Error::posix(
                libc::EROFS,
                format!("{}: this mount is read-only", node.virt()),
            )),
        }
    }

    /// The name a write open of `node` changes: as the kernel does, a final symlink is
    /// followed (so `touch LINK` and `echo > LINK` change its target), unless `O_NOFOLLOW`
    /// or `O_CREAT|O_EXCL` refuse it; a link to a missing name leads to that name, which
    /// `O_CREAT` makes. `Err`: a local path outside roam that a link leads to.
    fn write_target(&self, node: &Node, flags: i32) -> Result<std::result::Result<Node, String>> {
        let excl = libc::O_CREAT | libc::O_EXCL;
        let mut node = node.clone();
        if flags & libc::O_NOFOLLOW != 0 || flags & excl == excl {
            return Ok(Ok(node));
        }
        for _ in 0..MAX_SYMLINKS {
            let target = match self.link_target(&node) {
                Ok(Some((target, _))) => target,
                Ok(None) => return Ok(Ok(node)),
                Err(e) if e.errno() == libc::ENOENT => return Ok(Ok(node)),
                Err(e) => return Err(e),
            };
            node = match target {
                LinkTarget::Roam(v) => self.lookup(&v)?.ok_or_else(|| {
                    Error::posix(libc::ENOENT, format!("{v}: a link out of roam"))
                })?,
                LinkTarget::Local(p) => return Ok(Err(p)),
            };
        }
        Err(Error::posix(
            libc::ELOOP,
            format!("{}: too many levels of symbolic links", node.virt()),
        ))
    }

    /// What an `O_PATH` open of `node` gets: its skeleton entry, or, unless `O_NOFOLLOW`,
    /// that of where roam's rule leads a link (the kernel must not follow a link's entry
    /// itself).
    fn path_only(&self, node: &Node, flags: i32) -> Result<PathBuf> {
        if flags & libc::O_NOFOLLOW != 0 {
            return self.meta_path(node);
        }
        match self.follow(node.clone())? {
            Resolved::Node(n, _) => self.meta_path(&n),
            Resolved::Local(p) => Ok(Path::new(&p).to_path_buf()),
        }
    }
}
