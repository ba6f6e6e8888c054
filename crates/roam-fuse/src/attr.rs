//! File attributes for the kernel, from a local file's metadata (files served in place,
//! copies being written) or from what a server said ([`Meta`]).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};
use roam_vfs::{Kind, Meta};

/// Who owns remote files: the user who mounted them.
#[derive(Clone, Copy)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    pub fn current() -> Owner {
        // SAFETY: getuid/getgid cannot fail.
        unsafe {
            Owner {
                uid: libc::getuid(),
                gid: libc::getgid(),
            }
        }
    }
}

pub fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
    }
}

/// Attributes of a local file, as they are.
pub fn from_local(ino: u64, md: &Metadata) -> FileAttr {
    let time = |s: i64, ns: i64| {
        let d = Duration::new(s.unsigned_abs(), ns as u32);
        if s >= 0 {
            UNIX_EPOCH + d
        } else {
            UNIX_EPOCH - d
        }
    };
    FileAttr {
        ino: INodeNo(ino),
        size: md.size(),
        blocks: md.blocks(),
        atime: time(md.atime(), md.atime_nsec()),
        mtime: time(md.mtime(), md.mtime_nsec()),
        ctime: time(md.ctime(), md.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: FileType::from_std(md.file_type()).unwrap_or(FileType::RegularFile),
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: md.rdev() as u32,
        blksize: md.blksize() as u32,
        flags: 0,
    }
}

/// Attributes of roam's copy of a remote file: the copy's, with one link, as a remote file
/// has (the cache may give the copy's inode other names of its own).
pub fn from_copy(ino: u64, md: &Metadata) -> FileAttr {
    FileAttr {
        nlink: 1,
        ..from_local(ino, md)
    }
}

/// Attributes of a remote object from its metadata; what the server did not say gets the
/// usual defaults (0644 files, 0755 directories, the mount time).
pub fn from_meta(ino: u64, meta: &Meta, owner: Owner, mounted: SystemTime) -> FileAttr {
    let size = match meta.kind {
        Kind::Symlink => meta.symlink_target.as_ref().map_or(0, |t| t.len() as u64),
        _ => meta.size.unwrap_or(0),
    };
    let perm = meta.mode.unwrap_or(match meta.kind {
        Kind::File | Kind::Fifo | Kind::Socket => 0o644,
        Kind::Dir | Kind::Symlink => 0o755,
    });
    let mtime = meta.mtime.unwrap_or(mounted);
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: meta.atime.unwrap_or(mtime),
        mtime,
        ctime: mtime,
        crtime: mtime,
        kind: file_type(meta.kind),
        perm: (perm & 0o7777) as u16,
        nlink: meta
            .nlink
            .unwrap_or(if meta.kind == Kind::Dir { 2 } else { 1 }),
        uid: owner.uid,
        gid: owner.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// A directory roam makes up (`/`, `/http`, the parents of a mount point).
pub fn synthetic_dir(ino: u64, owner: Owner, mounted: SystemTime) -> FileAttr {
    let meta = Meta {
        mode: Some(0o755),
        mtime: Some(mounted),
        ..Meta::of_kind(Kind::Dir)
    };
    from_meta(ino, &meta, owner, mounted)
}

/// The entry of a name that does not exist: number 0, which tells the kernel so (the
/// attributes themselves are not looked at).
pub fn absent(owner: Owner, mounted: SystemTime) -> FileAttr {
    from_meta(0, &Meta::of_kind(Kind::File), owner, mounted)
}

/// The symlink `SCHEME:` → `SCHEME` at the root of the whole namespace (URLs as paths).
pub fn alias(ino: u64, scheme: &str, owner: Owner, mounted: SystemTime) -> FileAttr {
    let meta = Meta {
        mode: Some(0o777),
        mtime: Some(mounted),
        symlink_target: Some(scheme.to_owned()),
        ..Meta::of_kind(Kind::Symlink)
    };
    from_meta(ino, &meta, owner, mounted)
}
