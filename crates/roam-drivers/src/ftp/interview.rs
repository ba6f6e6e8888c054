//! Parrot's interview (seed 001, §4). FTP answers "550" for almost every failure: no such
//! file, permission denied, is a directory, exists already. POSIX wants the precise
//! reason, so when a command is refused this way we ask the server follow-up questions,
//! each answered by a command that either works or does not:
//!
//! - can we CWD into the path? then it is a directory;
//! - can we CWD into its parent? if not, find out why, one level up;
//! - is the name in the parent's listing? if not, it does not exist; if so, it exists
//!   and the refusal was about permission (or its kind explains it).
//!
//! The answer for each operation then follows from what exists (see [`ask`]).

use super::control::{Conn, Fault};
use super::session::{enter, list, split};
use crate::{ErrorKind, Kind};

/// The operation whose command was refused, which decides what a finding means.
#[derive(Clone, Copy)]
pub(super) enum Action<'a> {
    /// Read a file (RETR).
    Read,
    /// Look at or change an existing object (MLST, SIZE, RNFR, SITE CHMOD).
    Stat,
    /// Set an object's modification time (MFMT).
    SetTime,
    /// List a directory (CWD, MLSD, LIST).
    List,
    /// Create or replace a file (STOR, and the RNTO onto it).
    Write,
    MakeDir,
    RemoveFile,
    RemoveDir,
    /// Rename `from` onto the path (RNTO).
    RenameTo {
        from: &'a str,
    },
}

/// What exists at a path, as far as the server lets us see.
#[derive(Clone, Copy)]
enum Found {
    /// CWD entered it.
    Dir,
    /// Its parent lists it (as a directory only if CWD into it was refused).
    Listed(Kind),
    /// Its parent is a directory we can list, without this name.
    Absent,
    /// A component above it is missing (`NotFound`) or not a directory (`NotADirectory`).
    Missing(ErrorKind),
    /// We may not look: a parent we cannot enter or list.
    Blocked,
}

/// The precise error for `action` on `path` after a 550-like refusal. Each question is
/// one command on `conn`; a transport failure ends the interview.
pub(super) fn ask(conn: &mut Conn, action: Action, path: &str) -> Result<ErrorKind, Fault> {
    use ErrorKind as E;
    use Found::*;
    let found = locate(conn, path)?;
    let dir = matches!(found, Dir | Listed(Kind::Dir));
    let kind = match (action, found) {
        (_, Missing(kind)) => kind,
        (Action::MakeDir, Dir | Listed(_)) => E::AlreadyExists,
        (Action::Read | Action::Write | Action::RemoveFile, _) if dir => E::IsADirectory,
        // MFMT names a file (pyftpdlib refuses it on a directory): the server cannot
        // express a directory's time, which is not a matter of permission.
        (Action::SetTime, _) if dir => E::Unsupported,
        // Absent from an existing parent: missing, unless the command was to create it.
        (Action::Write | Action::MakeDir | Action::RenameTo { .. }, Absent) => E::PermissionDenied,
        (_, Absent) => E::NotFound,
        (Action::List | Action::RemoveDir, Listed(Kind::File | Kind::Symlink)) => E::NotADirectory,
        (Action::RemoveDir, Dir) => not_empty_or_denied(conn, path)?,
        (Action::RenameTo { from }, Dir) if enter(conn, from)? => not_empty_or_denied(conn, path)?,
        (Action::RenameTo { .. }, Dir) => E::IsADirectory,
        (Action::RenameTo { from }, Listed(Kind::File | Kind::Symlink)) if enter(conn, from)? => {
            E::NotADirectory
        }
        // It exists (or might), and the server still said no.
        _ => E::PermissionDenied,
    };
    Ok(kind)
}

/// Why a directory could not be removed or replaced: it has entries, or we may not.
fn not_empty_or_denied(conn: &mut Conn, dir: &str) -> Result<ErrorKind, Fault> {
    Ok(match list(conn, dir) {
        Ok(listing) if !listing.entries.is_empty() => ErrorKind::NotEmpty,
        Ok(_) | Err(Fault::Refused(_)) => ErrorKind::PermissionDenied,
        Err(other) => return Err(other),
    })
}

/// What exists at `path`.
fn locate(conn: &mut Conn, path: &str) -> Result<Found, Fault> {
    match enter(conn, path)? {
        true => Ok(Found::Dir),
        false => beyond_reach(conn, path),
    }
}

/// What exists at `path`, which CWD did not enter: ask its parent.
fn beyond_reach(conn: &mut Conn, path: &str) -> Result<Found, Fault> {
    let Some((parent, name)) = split(path) else {
        // Not even the root can be entered.
        return Ok(Found::Blocked);
    };
    if !enter(conn, parent)? {
        return Ok(match beyond_reach(conn, parent)? {
            Found::Listed(Kind::File | Kind::Symlink | Kind::Fifo | Kind::Socket) => {
                Found::Missing(ErrorKind::NotADirectory)
            }
            Found::Absent => Found::Missing(ErrorKind::NotFound),
            Found::Missing(kind) => Found::Missing(kind),
            Found::Dir | Found::Listed(Kind::Dir) | Found::Blocked => Found::Blocked,
        });
    }
    Ok(match list(conn, parent) {
        Ok(listing) => match listing.entries.iter().find(|e| e.name == name) {
            Some(entry) => Found::Listed(entry.meta.kind),
            None => Found::Absent,
        },
        Err(Fault::Refused(_)) => Found::Blocked,
        Err(other) => return Err(other),
    })
}
