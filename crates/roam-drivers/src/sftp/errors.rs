//! How SFTP status codes become errnos. SFTP v3 (what OpenSSH speaks) has only eight
//! codes, and OpenSSH's server folds errnos into them: ENOTDIR and ELOOP become
//! NO_SUCH_FILE, EEXIST, EISDIR, ENOTEMPTY, ENOSPC and most others become FAILURE. So, as
//! Parrot's FTP driver did, we *interview* the server after such an answer: a few `lstat`s
//! (and a directory read) on the same session say which errno it really was.
//!
//! | SSH status | errno |
//! |---|---|
//! | NO_SUCH_FILE | ENOENT; ENOTDIR when a path component, or the object an operation needs to be a directory, is not one |
//! | PERMISSION_DENIED | EACCES |
//! | FAILURE | mkdir, symlink: EEXIST if the name exists; unlink: EISDIR on a directory; rmdir: ENOTEMPTY on a non-empty directory; rename: EISDIR / ENOTDIR / ENOTEMPTY by the kinds of both names; read: EISDIR; write, mkdir, symlink: ENOSPC when `statvfs@openssh.com` shows no block or inode left; otherwise EIO |
//! | BAD_MESSAGE | EINVAL |
//! | OP_UNSUPPORTED | ENOTSUP |
//! | EOF (where data was due), NO_CONNECTION, CONNECTION_LOST | EIO |

use russh_sftp::client::RawSftpSession;
use russh_sftp::protocol::StatusCode;

use super::link::Link;
use super::meta::{type_of, FileKind};
use crate::ErrorKind;

/// What the failed request was trying to do, with its server path(s).
#[derive(Clone, Copy, Debug)]
pub(super) enum Action<'a> {
    Stat(&'a str),
    List(&'a str),
    Read(&'a str),
    /// Creating a file at this path (through a temporary sibling).
    Write(&'a str),
    MakeDir(&'a str),
    RemoveFile(&'a str),
    RemoveDir(&'a str),
    Rename {
        from: &'a str,
        to: &'a str,
    },
    SetAttr(&'a str),
    Symlink(&'a str),
}

/// The errno of a status answer to `action`, asking the server follow-up questions
/// where the code alone does not tell.
pub(super) fn interview(link: &Link, code: StatusCode, action: Action) -> ErrorKind {
    match code {
        StatusCode::NoSuchFile => missing(link, action),
        StatusCode::PermissionDenied => ErrorKind::PermissionDenied,
        StatusCode::Failure => failure(link, action),
        StatusCode::BadMessage => ErrorKind::InvalidName,
        StatusCode::OpUnsupported => ErrorKind::Unsupported,
        StatusCode::Ok
        | StatusCode::Eof
        | StatusCode::NoConnection
        | StatusCode::ConnectionLost => ErrorKind::Io,
    }
}

/// NO_SUCH_FILE: really missing, or (ENOTDIR) something on the way is not a directory.
fn missing(link: &Link, action: Action) -> ErrorKind {
    let subject = match action {
        // opendir follows a final symlink, rmdir does not.
        Action::List(p) if probe(link, p, true).is_not_dir() => return ErrorKind::NotADirectory,
        Action::RemoveDir(p) if probe(link, p, false).is_not_dir() => {
            return ErrorKind::NotADirectory
        }
        Action::Rename { from, to } => match probe(link, from, false) {
            Found::Is(from_kind) => {
                if let Some(kind) = rename_conflict(link, from_kind, to) {
                    return kind;
                }
                to
            }
            _ => from,
        },
        Action::Stat(p)
        | Action::List(p)
        | Action::Read(p)
        | Action::Write(p)
        | Action::MakeDir(p)
        | Action::RemoveFile(p)
        | Action::RemoveDir(p)
        | Action::SetAttr(p)
        | Action::Symlink(p) => p,
    };
    first_existing_ancestor(link, subject)
}

/// Walks up from the parent of `path`: the first ancestor that exists decides. A
/// directory means the name is simply missing; anything else makes the path ENOTDIR.
fn first_existing_ancestor(link: &Link, path: &str) -> ErrorKind {
    let mut current = path;
    while let Some(parent) = parent_of(current) {
        match probe(link, parent, true) {
            Found::Is(FileKind::Dir) | Found::Unknown => return ErrorKind::NotFound,
            Found::Is(_) => return ErrorKind::NotADirectory,
            Found::Missing => current = parent,
        }
    }
    ErrorKind::NotFound
}

/// FAILURE: OpenSSH's catch-all. What exists where tells which errno it hid.
fn failure(link: &Link, action: Action) -> ErrorKind {
    let found = match action {
        Action::MakeDir(p) | Action::Symlink(p) if probe(link, p, false) != Found::Missing => {
            Some(ErrorKind::AlreadyExists)
        }
        Action::RemoveFile(p) if probe(link, p, false) == Found::Is(FileKind::Dir) => {
            Some(ErrorKind::IsADirectory)
        }
        Action::Read(p) if probe(link, p, true) == Found::Is(FileKind::Dir) => {
            Some(ErrorKind::IsADirectory)
        }
        Action::RemoveDir(p) if probe(link, p, false) == Found::Is(FileKind::Dir) => {
            has_entries(link, p).then_some(ErrorKind::NotEmpty)
        }
        Action::Rename { from, to } => match probe(link, from, false) {
            Found::Is(kind) => rename_conflict(link, kind, to),
            _ => None,
        },
        Action::Write(p) | Action::MakeDir(p) | Action::Symlink(p) => parent_of(p)
            .filter(|dir| file_system_full(link, dir))
            .map(|_| ErrorKind::NoSpace),
        _ => None,
    };
    found.unwrap_or(ErrorKind::Io)
}

/// Whether the file system holding `dir` has no block or no inode left (OpenSSH's
/// `statvfs@openssh.com`): then a failed creation or write was ENOSPC. Asked while the
/// failed upload's temporary still fills the disk. Servers without the extension: no.
fn file_system_full(link: &Link, dir: &str) -> bool {
    match link.call(link.sftp.statvfs(dir)) {
        Ok(fs) => fs.blocks_avail == 0 || fs.blocks_free == 0 || fs.inodes_avail == 0,
        Err(f) => {
            tracing::debug!("sftp: interview: statvfs {dir}: {f:?}");
            false
        }
    }
}

/// Why `rename(from, to)` fails when both exist: POSIX's EISDIR, ENOTDIR and ENOTEMPTY.
fn rename_conflict(link: &Link, from: FileKind, to: &str) -> Option<ErrorKind> {
    let Found::Is(to_kind) = probe(link, to, false) else {
        return None;
    };
    match (from == FileKind::Dir, to_kind == FileKind::Dir) {
        (false, true) => Some(ErrorKind::IsADirectory),
        (true, false) => Some(ErrorKind::NotADirectory),
        (true, true) if has_entries(link, to) => Some(ErrorKind::NotEmpty),
        _ => None,
    }
}

/// What the server says is at a path during an interview.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    Is(FileKind),
    Missing,
    /// The question failed too: the interview cannot tell.
    Unknown,
}

impl Found {
    /// Something is there, and it is not a directory.
    fn is_not_dir(self) -> bool {
        matches!(self, Found::Is(kind) if kind != FileKind::Dir)
    }
}

/// `stat` (`follow`) or `lstat` of `path`.
fn probe(link: &Link, path: &str, follow: bool) -> Found {
    let sftp = &link.sftp;
    let answer = match follow {
        true => link.call(sftp.stat(path)),
        false => link.call(sftp.lstat(path)),
    };
    match answer {
        Ok(attrs) => Found::Is(type_of(&attrs.attrs)),
        Err(f) if f.is(StatusCode::NoSuchFile) => Found::Missing,
        Err(f) => {
            tracing::debug!("sftp: interview: stat {path}: {f:?}");
            Found::Unknown
        }
    }
}

/// Whether the directory `path` holds anything besides `.` and `..`.
fn has_entries(link: &Link, path: &str) -> bool {
    link.call(first_names(&link.sftp, path))
        .is_ok_and(|names| names.iter().any(|n| n != "." && n != ".."))
}

/// The first batch of names of a directory listing.
async fn first_names(
    sftp: &RawSftpSession,
    path: &str,
) -> Result<Vec<String>, russh_sftp::client::error::Error> {
    let handle = sftp.opendir(path).await?.handle;
    let names = sftp.readdir(handle.as_str()).await;
    let _ = sftp.close(handle).await;
    Ok(names?.files.into_iter().map(|f| f.filename).collect())
}

/// The parent of an absolute server path; `None` for `/`.
pub(super) fn parent_of(path: &str) -> Option<&str> {
    let cut = path.trim_end_matches('/').rfind('/')?;
    Some(if cut == 0 { "/" } else { &path[..cut] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents() {
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/"), None);
    }
}
