//! The questions the driver (and its interview) ask over one connection, in absolute
//! server paths: a directory's entries, a path's metadata, a file's size and time. Each
//! uses the best command the server has: MLSD/MLST where advertised, else LIST, SIZE, MDTM.

use std::io;
use std::time::SystemTime;

use super::control::{Conn, Fault, Reply};
use super::listing::{self, etag, Format};
use super::time::parse_timeval;
use crate::calendar::unix_secs;
use crate::{Kind, Listing, Meta, Validator};

/// Largest listing we read (it is parsed in memory): about two million LIST lines.
const MAX_LISTING: u64 = 256 << 20;

/// The parent and last name of an absolute server path; `None` for `/`.
pub(super) fn split(path: &str) -> Option<(&str, &str)> {
    let slash = path.rfind('/').filter(|_| path != "/")?;
    let parent = if slash == 0 { "/" } else { &path[..slash] };
    Some((parent, &path[slash + 1..]))
}

/// The command that lists a directory on this connection, for messages.
pub(super) fn list_command(conn: &Conn) -> &'static str {
    match conn.features.mlst {
        true => "MLSD",
        false => "LIST",
    }
}

/// The entries of the directory `dir`. LIST runs inside the directory (after CWD) rather
/// than naming it, because servers glob LIST's argument (`a*b` would list other names)
/// and some take `-a` only as the sole argument.
pub(super) fn list(conn: &mut Conn, dir: &str) -> Result<Listing, Fault> {
    let format = match conn.features.mlst {
        true => Format::Facts,
        false => Format::List,
    };
    let command = match format {
        Format::Facts => format!("MLSD {dir}"),
        Format::List => {
            conn.expect(&format!("CWD {dir}"), 2)?;
            // `-a`: dotfiles too (vsftpd, ProFTPD and pure-ftpd honour it).
            "LIST -a".to_owned()
        }
    };
    let mut data = Vec::new();
    let read = conn.retrieve(&command, &mut data, MAX_LISTING)?;
    let mut listing = listing::parse(&data, format, SystemTime::now(), &conn.url(dir));
    listing.complete &= read < MAX_LISTING;
    Ok(listing)
}

/// Metadata of `path`: MLST, else its entry in the parent's listing (refined by MDTM),
/// else what CWD and SIZE/MDTM tell when the parent cannot be listed.
pub(super) fn stat(conn: &mut Conn, path: &str) -> Result<Meta, Fault> {
    if conn.features.mlst {
        let reply = conn.expect(&format!("MLST {path}"), 2)?;
        let facts = reply.lines.iter().skip(1).find(|l| l.starts_with(' '));
        let meta = facts.and_then(|line| listing::mlst_meta(line));
        // A 250 without a fact line is no answer: reported as the odd reply it is.
        return meta.ok_or(Fault::Refused(reply));
    }
    let Some((parent, name)) = split(path) else {
        return probe(conn, path);
    };
    match list(conn, parent) {
        Ok(listing) => {
            let entry = listing.entries.into_iter().find(|e| e.name == name);
            refine(conn, path, entry.ok_or(Fault::Absent)?.meta)
        }
        Err(Fault::Refused(_)) => probe(conn, path),
        Err(other) => Err(other),
    }
}

/// What `path` is now, for an upload's precondition, in as few commands as the server
/// allows: MLST, else SIZE and MDTM (a name neither knows is taken for nothing there: a
/// directory, which SIZE refuses too, makes the rename fail anyway). `None`: nothing.
pub(super) fn now_at(conn: &mut Conn, path: &str) -> Result<Option<Meta>, Fault> {
    if conn.features.mlst {
        return match stat(conn, path) {
            Ok(meta) => Ok(Some(meta)),
            Err(Fault::Refused(reply)) if reply.code >= 500 => Ok(None),
            Err(other) => Err(other),
        };
    }
    let stamp = Stamp::of(conn, path)?;
    Ok(
        (stamp.size.is_some() || stamp.mtime.is_some()).then(|| Meta {
            size: stamp.size,
            mtime: stamp.mtime,
            etag: stamp.etag(),
            ..Meta::of_kind(Kind::File)
        }),
    )
}

/// Metadata without a listing: a directory if CWD enters it, else a file if SIZE knows it.
fn probe(conn: &mut Conn, path: &str) -> Result<Meta, Fault> {
    if enter(conn, path)? {
        return Ok(Meta::of_kind(Kind::Dir));
    }
    let reply = conn.expect(&format!("SIZE {path}"), 2)?;
    let meta = Meta {
        size: Some(number(&reply).ok_or(Fault::Refused(reply))?),
        ..Meta::of_kind(Kind::File)
    };
    refine(conn, path, meta)
}

/// A LIST entry's time is in minutes (and the server's zone); MDTM gives the exact UTC
/// second of a file, and with it the validator.
fn refine(conn: &mut Conn, path: &str, mut meta: Meta) -> Result<Meta, Fault> {
    if meta.kind != Kind::File {
        return Ok(meta);
    }
    if let Some(mtime) = mdtm(conn, path)? {
        meta.mtime = Some(mtime);
        meta.etag = meta.size.map(|size| etag(size, mtime));
    }
    Ok(meta)
}

/// Whether CWD into `path` works.
pub(super) fn enter(conn: &mut Conn, path: &str) -> Result<bool, Fault> {
    Ok(conn.command(&format!("CWD {path}"))?.is(2))
}

/// A file's size and modification time as SIZE and MDTM tell them now: FTP's stand-in for
/// a conditional GET. Either may be unknown (command refused or missing).
#[derive(Clone, Copy, Default)]
pub(super) struct Stamp {
    pub size: Option<u64>,
    pub mtime: Option<SystemTime>,
}

impl Stamp {
    /// The stamp of a file known to have `size` bytes and the time `mtime`.
    pub fn new(size: u64, mtime: SystemTime) -> Stamp {
        Stamp {
            size: Some(size),
            mtime: Some(mtime),
        }
    }

    pub fn of(conn: &mut Conn, path: &str) -> Result<Stamp, Fault> {
        let size = conn.command(&format!("SIZE {path}"))?;
        let size = (size.code == 213).then(|| number(&size)).flatten();
        Ok(Stamp {
            size,
            mtime: mdtm(conn, path)?,
        })
    }

    /// The validator of this stamp, when both halves are known.
    pub fn etag(&self) -> Option<String> {
        Some(etag(self.size?, self.mtime?))
    }

    /// Whether what the cache holds is still current: same etag (size and time), or, for
    /// a validator without one, the same modification time to the second.
    pub fn satisfies(&self, validator: &Validator) -> bool {
        match (&validator.etag, validator.mtime) {
            (Some(held), _) => self.etag().as_ref() == Some(held),
            (None, Some(held)) => self.mtime.is_some_and(|now| same_second(now, held)),
            (None, None) => false,
        }
    }

    /// Whether a transfer of `len` bytes brought the whole file. In stream mode the end of
    /// the data connection is the end of the file, so a connection cut on the way (the
    /// server's `226` may already be on the control connection) looks like a shorter
    /// file: fewer bytes than `SIZE` said is a broken transfer, never a short copy.
    pub fn whole(&self, len: u64) -> Result<(), Fault> {
        match self.size {
            Some(size) if len < size => Err(Fault::Transport(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the data connection ended after {len} of {size} bytes"),
            ))),
            _ => Ok(()),
        }
    }

    /// Metadata of the file after `len` bytes of it arrived.
    pub fn meta(&self, len: u64) -> Meta {
        // The stamp was taken before the transfer: if the size moved meanwhile, the file
        // changed and the stamp does not describe these bytes.
        let current = self.size == Some(len);
        Meta {
            size: Some(len),
            mtime: self.mtime,
            etag: self.etag().filter(|_| current),
            ..Meta::of_kind(Kind::File)
        }
    }
}

fn same_second(a: SystemTime, b: SystemTime) -> bool {
    unix_secs(a) == unix_secs(b)
}

/// MDTM's time of `path`; `None` if the server will not say.
fn mdtm(conn: &mut Conn, path: &str) -> Result<Option<SystemTime>, Fault> {
    let reply = conn.command(&format!("MDTM {path}"))?;
    Ok((reply.code == 213)
        .then(|| parse_timeval(argument(&reply)))
        .flatten())
}

/// The number a `213` reply carries (SIZE).
fn number(reply: &Reply) -> Option<u64> {
    argument(reply).parse().ok()
}

/// The text after the code of a one-line reply.
fn argument(reply: &Reply) -> &str {
    reply.lines[0].get(4..).unwrap_or("").trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn paths_split_into_parent_and_name() {
        assert_eq!(split("/"), None);
        assert_eq!(split("/a"), Some(("/", "a")));
        assert_eq!(split("/pub/a b"), Some(("/pub", "a b")));
    }

    #[test]
    fn stamps_validate() {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let stamp = Stamp {
            size: Some(5),
            mtime: Some(t),
        };
        let by_etag = Validator {
            etag: stamp.etag(),
            mtime: None,
        };
        assert!(stamp.satisfies(&by_etag));
        let grown = Stamp {
            size: Some(6),
            ..stamp
        };
        assert!(!grown.satisfies(&by_etag));
        let by_time = Validator {
            etag: None,
            mtime: Some(t + Duration::from_millis(300)),
        };
        assert!(stamp.satisfies(&by_time) && grown.satisfies(&by_time));
        assert!(!Stamp::default().satisfies(&by_time));
        assert!(!stamp.satisfies(&Validator::default()));
    }

    #[test]
    fn meta_keeps_the_etag_only_if_the_size_held() {
        let stamp = Stamp {
            size: Some(5),
            mtime: Some(UNIX_EPOCH),
        };
        assert_eq!(stamp.meta(5).etag, stamp.etag());
        assert_eq!(stamp.meta(7).etag, None);
        assert_eq!(stamp.meta(7).size, Some(7));
    }
}
