//! Errors of the namespace layer, each with the errno a program must see.

/// A failure of a namespace operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The remote side failed; the driver chose the errno.
    #[error(transparent)]
    Remote(#[from] roam_drivers::Error),
    /// The name is known not to exist from a fresh directory listing: no request was made,
    /// so there is nothing worth telling the user.
    #[error("not in the listing of its directory")]
    Absent(String),
    /// A POSIX refusal decided by roam itself (e.g. `ENOTDIR`, `ELOOP`).
    #[error("{message}")]
    Posix { errno: i32, message: String },
    /// A transfer into a partial copy failed (the server, or the cache disk): told to the
    /// user, unlike [`Error::Posix`], since neither the program nor roam chose it.
    #[error("{message}")]
    Transfer { errno: i32, message: String },
    /// roam's own cache directory failed (full disk, permissions ...).
    #[error("cache {path}: {source}")]
    Cache {
        path: String,
        source: std::io::Error,
    },
    /// Bad configuration (mount table).
    #[error("{0}")]
    Config(String),
    /// A change that is not uploaded without the user's word (`roam sync --force`).
    /// (One message, so that every `Result` of roam stays small.)
    #[error("{message}")]
    Kept { errno: i32, message: String },
}

impl Error {
    pub fn errno(&self) -> i32 {
        match self {
            Error::Remote(e) => e.errno(),
            Error::Absent(_) => libc::ENOENT,
            Error::Posix { errno, .. } | Error::Transfer { errno, .. } => *errno,
            Error::Cache { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Config(_) => libc::EINVAL,
            Error::Kept { errno, .. } => *errno,
        }
    }

    /// Whether this is a change kept from upload: trying again changes nothing until the
    /// user says what to do with it.
    pub fn is_kept(&self) -> bool {
        matches!(self, Error::Kept { .. })
    }

    /// Whether the user should hear about this failure on stderr.
    pub fn worth_telling(&self) -> bool {
        !matches!(self, Error::Absent(_) | Error::Posix { .. })
    }

    pub(crate) fn posix(errno: i32, message: impl Into<String>) -> Error {
        Error::Posix {
            errno,
            message: message.into(),
        }
    }

    pub(crate) fn cache(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Cache {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
