//! The one error type of all drivers: a POSIX-meaningful kind plus a one-line message that
//! says what failed, where, and why (e.g. `GET http://h/f: 404 Not Found`).

/// The POSIX meaning of a remote failure. Each kind maps to exactly one errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    NotFound,
    PermissionDenied,
    IsADirectory,
    NotADirectory,
    /// The host cannot be reached: refused connection, unknown name, no route.
    Unreachable,
    TimedOut,
    ReadOnly,
    Unsupported,
    AlreadyExists,
    NotEmpty,
    NoSpace,
    QuotaExceeded,
    /// A rename or link across mounts or devices.
    CrossDevice,
    InvalidName,
    /// An upload's precondition failed ([`crate::Expect`]): another client changed,
    /// created or removed the file since the version the upload started from. ESTALE, as
    /// NFS says of a file that changed on the server under a client.
    Changed,
    /// Anything else: a 5xx reply, a protocol violation, a local I/O failure.
    Io,
}

impl ErrorKind {
    /// The errno a program sees for this kind.
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::PermissionDenied => libc::EACCES,
            ErrorKind::IsADirectory => libc::EISDIR,
            ErrorKind::NotADirectory => libc::ENOTDIR,
            ErrorKind::Unreachable => libc::EHOSTUNREACH,
            ErrorKind::TimedOut => libc::ETIMEDOUT,
            ErrorKind::ReadOnly => libc::EROFS,
            ErrorKind::Unsupported => libc::ENOTSUP,
            ErrorKind::AlreadyExists => libc::EEXIST,
            ErrorKind::NotEmpty => libc::ENOTEMPTY,
            ErrorKind::NoSpace => libc::ENOSPC,
            ErrorKind::QuotaExceeded => libc::EDQUOT,
            ErrorKind::CrossDevice => libc::EXDEV,
            ErrorKind::InvalidName => libc::EINVAL,
            ErrorKind::Changed => libc::ESTALE,
            ErrorKind::Io => libc::EIO,
        }
    }

    /// What a server's answer of this kind means, in strerror's words, for messages.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "no such file or directory",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::IsADirectory => "is a directory",
            ErrorKind::NotADirectory => "not a directory",
            ErrorKind::AlreadyExists => "file exists",
            ErrorKind::NotEmpty => "directory not empty",
            ErrorKind::NoSpace => "no space left on the server",
            ErrorKind::Unsupported => "not supported by the server",
            ErrorKind::InvalidName => "the server refused the name",
            ErrorKind::Changed => "changed by another client",
            _ => "the server failed",
        }
    }
}

/// A driver failure: its POSIX kind and a one-line message for roam's stderr.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    pub fn errno(&self) -> i32 {
        self.kind.errno()
    }

    /// Maps a local I/O error (of a local file or a socket) onto the closest kind.
    pub fn from_io(context: impl std::fmt::Display, err: &std::io::Error) -> Error {
        use std::io::ErrorKind as K;
        let kind = match err.kind() {
            K::NotFound => ErrorKind::NotFound,
            K::PermissionDenied => ErrorKind::PermissionDenied,
            K::TimedOut | K::WouldBlock => ErrorKind::TimedOut,
            K::ConnectionRefused
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::AddrNotAvailable => ErrorKind::Unreachable,
            K::IsADirectory => ErrorKind::IsADirectory,
            K::NotADirectory => ErrorKind::NotADirectory,
            K::ReadOnlyFilesystem => ErrorKind::ReadOnly,
            K::AlreadyExists => ErrorKind::AlreadyExists,
            K::DirectoryNotEmpty => ErrorKind::NotEmpty,
            K::StorageFull => ErrorKind::NoSpace,
            K::QuotaExceeded => ErrorKind::QuotaExceeded,
            K::CrossesDevices => ErrorKind::CrossDevice,
            _ => match err.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENAMETOOLONG) => ErrorKind::InvalidName,
                _ => ErrorKind::Io,
            },
        };
        Error::new(kind, format!("{context}: {err}"))
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_posix_errnos() {
        assert_eq!(ErrorKind::NotFound.errno(), libc::ENOENT);
        assert_eq!(ErrorKind::PermissionDenied.errno(), libc::EACCES);
        assert_eq!(ErrorKind::Unreachable.errno(), libc::EHOSTUNREACH);
        assert_eq!(ErrorKind::TimedOut.errno(), libc::ETIMEDOUT);
        assert_eq!(ErrorKind::Io.errno(), libc::EIO);
        assert_eq!(ErrorKind::Changed.errno(), libc::ESTALE);
    }

    #[test]
    fn io_errors_keep_their_meaning() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = Error::from_io("GET http://127.0.0.1:1/x", &refused);
        assert_eq!(e.kind, ErrorKind::Unreachable);
        assert!(e.message.starts_with("GET http://127.0.0.1:1/x: "));
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(Error::from_io("stat /x", &missing).errno(), libc::ENOENT);
    }
}
