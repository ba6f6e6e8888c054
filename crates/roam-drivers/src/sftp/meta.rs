//! SFTP v3 attributes as driver metadata, and the validator SFTP affords: SFTP has no
//! ETag, so a file's is `SIZE-MTIME` (seconds), which changes with any write that moves the
//! size or the clock's second.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use russh_sftp::protocol::FileAttributes;

use crate::{Kind, Meta, Validator};

/// The file type bits of an SFTP `permissions` field (POSIX `S_IFMT`).
const TYPE_MASK: u32 = 0o170_000;
const DIRECTORY: u32 = 0o040_000;
const SYMLINK: u32 = 0o120_000;

/// What kind of object attributes describe; devices, fifos and sockets count as files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FileKind {
    Dir,
    Symlink,
    File,
}

pub(super) fn type_of(attrs: &FileAttributes) -> FileKind {
    match attrs.permissions.map(|p| p & TYPE_MASK) {
        Some(DIRECTORY) => FileKind::Dir,
        Some(SYMLINK) => FileKind::Symlink,
        _ => FileKind::File,
    }
}

/// The metadata of `attrs`, with the target of a symlink when it was read.
pub(super) fn meta_of(attrs: &FileAttributes, symlink_target: Option<String>) -> Meta {
    let kind = match type_of(attrs) {
        FileKind::Dir => Kind::Dir,
        FileKind::Symlink => Kind::Symlink,
        FileKind::File => Kind::File,
    };
    let etag = match (kind, attrs.size, attrs.mtime) {
        (Kind::File, Some(size), Some(mtime)) => Some(format!("{size}-{mtime}")),
        _ => None,
    };
    Meta {
        kind,
        size: attrs.size,
        mtime: attrs
            .mtime
            .map(|t| UNIX_EPOCH + Duration::from_secs(t.into())),
        mode: attrs.permissions.map(|p| p & 0o7777),
        etag,
        symlink_target,
        nlink: None,
        atime: attrs
            .atime
            .map(|t| UNIX_EPOCH + Duration::from_secs(t.into())),
        fresh_for: None,
    }
}

/// Whether what the cache holds is still what the server has: the same etag, or, for a
/// validator without one, the same modification time to the second (SFTP's resolution).
pub(super) fn still_valid(validator: &Validator, meta: &Meta) -> bool {
    match (&validator.etag, validator.mtime) {
        (Some(etag), _) => meta.etag.as_ref() == Some(etag),
        (None, Some(held)) => meta
            .mtime
            .and_then(seconds)
            .is_some_and(|now| Some(now) == seconds(held)),
        (None, None) => false,
    }
}

/// Whole seconds since the epoch; `None` outside SFTP v3's unsigned 32-bit range.
pub(super) fn seconds(time: SystemTime) -> Option<u32> {
    let secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
    u32::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(permissions: u32, size: u64, mtime: u32) -> FileAttributes {
        FileAttributes {
            permissions: Some(permissions),
            size: Some(size),
            mtime: Some(mtime),
            ..FileAttributes::empty()
        }
    }

    #[test]
    fn kinds_modes_and_etags() {
        let file = meta_of(&attrs(0o100_644, 5, 1000), None);
        assert_eq!(
            (file.kind, file.mode, file.size),
            (Kind::File, Some(0o644), Some(5))
        );
        assert_eq!(file.etag.as_deref(), Some("5-1000"));
        assert_eq!(file.mtime, Some(UNIX_EPOCH + Duration::from_secs(1000)));
        let dir = meta_of(&attrs(0o040_755, 4096, 1), None);
        assert_eq!(
            (dir.kind, dir.mode, dir.etag),
            (Kind::Dir, Some(0o755), None)
        );
        let link = meta_of(&attrs(0o120_777, 3, 1), Some("a b".into()));
        assert_eq!(
            (link.kind, link.symlink_target.as_deref()),
            (Kind::Symlink, Some("a b"))
        );
        assert_eq!(type_of(&FileAttributes::empty()), FileKind::File);
    }

    #[test]
    fn validators() {
        let meta = meta_of(&attrs(0o100_644, 5, 1000), None);
        let etag = Validator {
            etag: meta.etag.clone(),
            mtime: None,
        };
        assert!(still_valid(&etag, &meta));
        let grown = meta_of(&attrs(0o100_644, 6, 1000), None);
        assert!(!still_valid(&etag, &grown));
        let by_time = Validator {
            etag: None,
            mtime: Some(UNIX_EPOCH + Duration::from_millis(1_000_400)),
        };
        assert!(still_valid(&by_time, &meta));
        assert!(!still_valid(&Validator::default(), &meta));
        assert_eq!(seconds(UNIX_EPOCH - Duration::from_secs(1)), None);
        assert_eq!(seconds(UNIX_EPOCH + Duration::from_secs(1 << 32)), None);
    }
}
