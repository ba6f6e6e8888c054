//! Permission checks for a caller whose credentials are not roam's. A program under `roam
//! run` that changed its user (a daemon dropping its privileges, `setpriv`, `su`) still acts
//! on roam names through roam, which runs as the user who started it: before anything
//! changes, roam checks what the kernel would, with the caller's credentials against the
//! owner and mode roam shows (a remote name's owner is roam's user; a name served in place
//! has its own). A caller with roam's own uid, or root, is not asked about: the modes are
//! its own to pass (the server's checks stand).

use std::os::unix::fs::MetadataExt;

use crate::{Error, Node, Result, Vfs};

/// A program's credentials (its file-system uid and gid, and its groups).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// What a call needs of a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// To read the file, or list the directory.
    Read,
    /// To write the file (truncate, open for writing).
    Write,
    /// To make, remove or rename names in its directory (write and search there).
    ChangeNames,
    /// To be its owner (chmod, setting times other than now).
    Owner,
}

impl Vfs {
    /// Whether `caller` may do what `need` says to `node`; `EACCES` (`EPERM` for
    /// [`Need::Owner`]) as the kernel would say.
    pub fn may(&self, caller: &Caller, node: &Node, need: Need) -> Result<()> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if caller.uid == 0 || caller.uid == unsafe { libc::geteuid() } {
            return Ok(());
        }
        let Node::Remote(r) = node else {
            return Ok(()); // made-up directories: nothing there to change
        };
        let (on, bits) = match need {
            Need::ChangeNames => (Node::Remote(r.parent()), 0o3),
            Need::Read => (node.clone(), 0o4),
            Need::Write => (node.clone(), 0o2),
            Need::Owner => (node.clone(), 0),
        };
        let (mode, uid, gid) = self.shown_owner_and_mode(&on)?;
        let granted = if caller.uid == uid {
            mode >> 6
        } else if caller.gid == gid || caller.groups.contains(&gid) {
            mode >> 3
        } else {
            mode
        } & 0o7;
        let why = |errno, what: &str| {
            Error::posix(
                errno,
                format!("{}: {what} (uid {})", node.virt(), caller.uid),
            )
        };
        match need {
            Need::Owner if caller.uid != uid => Err(why(libc::EPERM, "not the owner")),
            _ if granted & bits != bits => Err(why(libc::EACCES, "permission denied")),
            _ => Ok(()),
        }
    }

    /// The mode, owner and group roam shows for `node`: a name served in place, its own;
    /// any other, roam's user and the server's mode (0755 for a directory, 0644 for a file
    /// where the server keeps none).
    fn shown_owner_and_mode(&self, node: &Node) -> Result<(u32, u32, u32)> {
        if let Node::Remote(r) = node {
            if let Some(p) = r.driver.local_path(&r.path) {
                let md = std::fs::symlink_metadata(&p).map_err(|e| Error::cache(&p, e))?;
                return Ok((md.mode() & 0o7777, md.uid(), md.gid()));
            }
        }
        let meta = self.stat(node)?;
        let mode = meta.mode.unwrap_or(match meta.kind {
            roam_drivers::Kind::Dir => 0o755,
            _ => 0o644,
        });
        // SAFETY: geteuid and getegid have no preconditions and cannot fail.
        Ok((mode, unsafe { libc::geteuid() }, unsafe { libc::getegid() }))
    }
}
