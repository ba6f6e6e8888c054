//! Chirp driver: the POSIX-like remote I/O protocol of cctools (Parrot's own, seed 001),
//! served by `chirp_server`. One TCP connection per client carries authentication and then
//! strict request/reply RPCs that mirror system calls: `lstat`, `getlongdir`, `open` +
//! `pread`, `putfile`, `mkdir`, `unlink`, `rmdir`, `rename`, `chmod`, `utime`, `symlink`,
//! `readlink`. Replies carry errno-like codes ([`codes`]), so most outcomes map to POSIX
//! exactly; where the server's access-control checks blur them (a missing parent reads as
//! "not authorized", a file listed as a directory as "doesn't exist"), the driver asks a
//! follow-up question, as Parrot's interviews do.
//!
//! Access on the server is governed by per-directory ACL files (`.__acl`) that grant rights
//! (`rwldpa...`) to subjects such as `unix:alice`, `hostname:h.example.org` or
//! `address:10.0.0.1`, which is why the authentication method matters ([`ChirpAuth`]).

mod auth;
mod codes;
mod conn;
#[cfg(test)]
mod fuzz;
mod pool;
mod proto;
mod rpc;
mod url;

use std::io::{Read, Write};
use std::time::{Duration, SystemTime};

use self::conn::{Conn, Failure, Reply};
use self::pool::{Pool, Retry};
use self::proto::{encode_path, is_plain_word, secs_of, Stat};
use self::url::{parent, Target};
use crate::{
    is_driver_path, is_safe_name, Capabilities, DirEntry, Driver, Error, ErrorKind, Expect,
    Fetched, Kind, Leftover, Listing, Meta, Pinned, Result, Upload, Validator,
};

/// Mode asked for new directories (new files get it without the execute bits); the
/// server's umask (077 for `chirp_server`) narrows it.
const NEW_MODE: u32 = 0o755;

/// An authentication method, tried in the order of [`ChirpConfig::auth`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChirpAuth {
    /// Proves the local user name by creating a file the server names; only a server on
    /// this host can check it (the driver skips it for others). Subject `unix:USER`.
    Unix,
    /// The server's reverse lookup of our address. Subject `hostname:NAME`.
    Hostname,
    /// Our address as the server sees it. Subject `address:IP`.
    Address,
}

impl ChirpAuth {
    /// The method's name in the protocol (and in ACL subjects).
    pub fn as_str(self) -> &'static str {
        match self {
            ChirpAuth::Unix => "unix",
            ChirpAuth::Hostname => "hostname",
            ChirpAuth::Address => "address",
        }
    }
}

/// Timeouts and authentication of a Chirp client.
#[derive(Clone, Debug)]
pub struct ChirpConfig {
    /// Limit for establishing a TCP connection (zero: the system's).
    pub connect_timeout: Duration,
    /// Limit for each read or write on a connection, so a hung server fails with
    /// ETIMEDOUT instead of hanging the program (zero: no limit).
    pub read_timeout: Duration,
    /// Methods tried in this order until the server accepts one.
    pub auth: Vec<ChirpAuth>,
}

impl Default for ChirpConfig {
    fn default() -> Self {
        ChirpConfig {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            auth: vec![ChirpAuth::Unix, ChirpAuth::Hostname, ChirpAuth::Address],
        }
    }
}

/// A directory tree on a Chirp server, `chirp://host[:port][/prefix]`.
#[derive(Debug)]
pub struct ChirpDriver {
    pool: Pool,
}

impl ChirpDriver {
    /// A driver for `url` (port 9094 by default). Connects lazily, on the first request.
    pub fn new(cfg: ChirpConfig, url: &str) -> Result<ChirpDriver> {
        Ok(ChirpDriver {
            pool: Pool::new(Target::parse(url)?, cfg),
        })
    }

    /// The server path of `path` and the context of messages (`VERB URL`), after checking
    /// that `path` is a driver path.
    fn request(&self, verb: &str, path: &str) -> Result<(String, String)> {
        let context = format!("{verb} {}", self.describe(path));
        if !is_driver_path(path) {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!("{context}: not a normalised path"),
            ));
        }
        Ok((self.pool.target().remote(path), context))
    }

    /// Sends one request whose reply is only a status.
    fn simple(&self, context: &str, retry: Retry, line: &str) -> Result<()> {
        self.pool.run(context, retry, |c| c.call(line).map(drop))
    }

    /// What `remote` names, following symlinks, or the kind of error that asking gave:
    /// the question of an interview, whose own message is never shown.
    fn kind_at(&self, remote: &str) -> std::result::Result<Kind, ErrorKind> {
        let context = format!("stat {remote}");
        match self
            .pool
            .run(&context, Retry::Idempotent, |c| c.stat(true, remote))
        {
            Ok(st) => Ok(st.kind()),
            Err(e) => Err(e.kind),
        }
    }

    /// Listing a file fails with "doesn't exist" (the server looks for the directory's ACL
    /// first); POSIX says ENOTDIR.
    fn refine_listing(&self, context: &str, remote: &str, err: Error) -> Error {
        match (err.kind, self.kind_at(remote)) {
            (ErrorKind::NotFound, Ok(Kind::File)) => Error::new(
                ErrorKind::NotADirectory,
                format!("{context}: not a directory"),
            ),
            _ => err,
        }
    }

    /// Creating `remote` (mkdir, putfile, symlink, the target of rename) checks the ACL of
    /// its parent first, so a missing parent reads as "not authorized" and a parent that is
    /// a file as "doesn't exist"; POSIX says ENOENT and ENOTDIR.
    fn refine_creation(&self, context: &str, remote: &str, err: Error) -> Error {
        if !matches!(err.kind, ErrorKind::NotFound | ErrorKind::PermissionDenied) {
            return err;
        }
        match self.kind_at(parent(remote)) {
            Err(ErrorKind::NotFound) => Error::new(
                ErrorKind::NotFound,
                format!("{context}: the parent directory does not exist"),
            ),
            Ok(Kind::File) => Error::new(
                ErrorKind::NotADirectory,
                format!("{context}: the parent is not a directory"),
            ),
            _ => err,
        }
    }

    /// POSIX lets a directory replace an empty one by rename, but on a Chirp server no
    /// directory is truly empty (its `.__acl` stays): remove the visibly empty target and
    /// rename again. Unlike rename(2) this is two steps, between which `to` is absent.
    fn rename_over_empty_dir(&self, context: &str, from: &str, to: &str, err: Error) -> Result<()> {
        let replaceable = err.kind == ErrorKind::NotEmpty
            && self.kind_at(from) == Ok(Kind::Dir)
            && self
                .pool
                .run(context, Retry::Idempotent, |c| c.getlongdir(to))
                .is_ok_and(|entries| {
                    entries
                        .iter()
                        .all(|(name, _)| name == b"." || name == b"..")
                });
        if !replaceable {
            return Err(err);
        }
        self.simple(
            context,
            Retry::Never,
            &format!("rmdir {}\n", encode_path(to)),
        )?;
        self.simple(context, Retry::Never, &rename_line(from, to))
    }

    /// chirp_server refuses a rename over a dangling symlink (`ENOENT`: it follows the
    /// link), which rename(2) replaces: the link goes, then the rename is made (a link
    /// holds no contents to lose between the two).
    fn rename_over_link(&self, context: &str, from: &str, to: &str, err: Error) -> Result<()> {
        let own_kind = |remote: &str| {
            self.pool
                .run(context, Retry::Idempotent, |c| c.stat(false, remote))
                .map(|st| st.kind())
        };
        let replaceable = err.kind == ErrorKind::NotFound
            && own_kind(to).is_ok_and(|k| k == Kind::Symlink)
            && own_kind(from).is_ok();
        if !replaceable {
            return Err(err);
        }
        let unlink = format!("unlink {}\n", encode_path(to));
        self.simple(context, Retry::Never, &unlink)?;
        self.simple(context, Retry::Never, &rename_line(from, to))
    }

    /// Uploads to the hidden sibling `tmp`, gives it `mode` (a replaced file keeps its
    /// permission bits; without one, the server's umask narrows [`NEW_MODE`]) and `mtime`,
    /// then renames it over `remote` if what is there is still what `expect` says: Chirp
    /// has no conditional rename, so an `lstat` asks right before it, both under the lock
    /// roam clients take on the name ([`crate::under_name_lock`]: one round trip remains in
    /// which a client other than roam goes unseen). The contents are `Ok(Err(..))` when
    /// the name was not as expected.
    fn put_via(
        &self,
        context: &str,
        (tmp, remote): (&str, &str),
        (mode, mtime): (Option<u32>, Option<SystemTime>),
        (src, len): (&mut dyn Read, u64),
        expect: &Expect,
    ) -> Result<std::result::Result<(), Option<Meta>>> {
        self.pool.run(context, Retry::Never, |c| {
            c.putfile(tmp, mode.unwrap_or(NEW_MODE & 0o666), src, len)?;
            if let Some(mode) = mode {
                // `putfile` creates with the server's umask, which may narrow the mode.
                c.call(&format!("chmod {} {mode}\n", encode_path(tmp)))?;
            }
            if let Some(mtime) = mtime {
                let (atime, mtime) = (secs_of(SystemTime::now()), secs_of(mtime));
                c.call(&format!("utime {} {atime} {mtime}\n", encode_path(tmp)))?;
            }
            let check_and_rename = |c: &mut _| {
                if *expect != Expect::Any {
                    let now = match Conn::stat(c, false, remote) {
                        Ok(st) => Some(st.meta(None)),
                        Err(Failure::Code(code))
                            if codes::describe(code).0 == ErrorKind::NotFound =>
                        {
                            None
                        }
                        Err(other) => return Err(other),
                    };
                    if !expect.admits(now.as_ref()) {
                        return Ok(Err(now));
                    }
                }
                Conn::call(c, &rename_line(tmp, remote)).map(|_| Ok(()))
            };
            match crate::lock_beside(remote, ".__roam-") {
                Some(lock) if *expect != Expect::Any => crate::under_name_lock(
                    c,
                    |c| match c.call(&format!("mkdir {} {NEW_MODE}\n", encode_path(&lock))) {
                        Ok(_) => crate::Attempt::Made,
                        Err(Failure::Code(_)) => crate::Attempt::Held,
                        Err(_) => crate::Attempt::Failed,
                    },
                    |c| drop(c.call(&format!("rmdir {}\n", encode_path(&lock)))),
                    check_and_rename,
                ),
                _ => check_and_rename(c),
            }
        })
    }
}

fn rename_line(from: &str, to: &str) -> String {
    format!("rename {} {}\n", encode_path(from), encode_path(to))
}

/// `dir/name` on the server.
fn join(dir: &str, name: &str) -> String {
    match dir {
        "/" => format!("/{name}"),
        _ => format!("{dir}/{name}"),
    }
}

/// The prefix of an upload's temporary name. Names starting with `.__` are the server's
/// own (like `.__acl`) and never listed, so no reader sees the partial file.
const TEMPORARY_PREFIX: &str = ".__roam-put-";

/// Metadata of `remote` without following a final symlink.
fn lstat_meta(c: &mut Conn, remote: &str) -> Reply<Meta> {
    let st = c.stat(false, remote)?;
    Ok(st.meta(link_target(c, remote, &st)?))
}

/// The target of a symlink. Reading it takes the `r` right where stat takes `l`: without
/// it the metadata simply lacks the target.
fn link_target(c: &mut Conn, remote: &str, st: &Stat) -> Reply<Option<String>> {
    if st.kind() != Kind::Symlink {
        return Ok(None);
    }
    match c.readlink(remote) {
        Ok(target) => Ok(Some(target)),
        Err(Failure::Code(_)) => Ok(None),
        Err(other) => Err(other),
    }
}

/// The listing of `remote`, names checked, symlink targets read after the listing (no
/// request may interleave with its stream).
fn list_dir(c: &mut Conn, remote: &str) -> Reply<Listing> {
    let mut named = Vec::new();
    for (raw, st) in c.getlongdir(remote)? {
        match String::from_utf8(raw) {
            Ok(name) if is_safe_name(&name) => named.push((name, st)),
            Ok(name) if name == "." || name == ".." => {}
            other => tracing::warn!("chirp {remote}: skipping the unsafe name {other:?}"),
        }
    }
    let mut entries = Vec::with_capacity(named.len());
    for (name, st) in named {
        let target = link_target(c, &join(remote, &name), &st)?;
        entries.push(DirEntry {
            meta: st.meta(target),
            name,
        });
    }
    Ok(Listing {
        entries,
        complete: true,
        stands_alone: true,
    })
}

/// Opens `remote` for reading, runs `read` on it and closes it. The record `open` returns
/// describes exactly the file that is read, which a separate stat could not promise.
fn with_open_file<T>(
    c: &mut Conn,
    remote: &str,
    read: impl FnOnce(&mut Conn, u64, &Stat) -> Reply<T>,
) -> Reply<T> {
    let (fd, st) = c.open_read(remote)?;
    // The server lets a directory be opened for reading, so programs can fstat it.
    let result = match st.kind() {
        Kind::Dir => Err(Failure::Local(Error::new(
            ErrorKind::IsADirectory,
            "is a directory",
        ))),
        _ => read(c, fd, &st),
    };
    if let Err(Failure::Broken(_)) = result {
        // The descriptor went with the connection.
        return result;
    }
    let closed = c.close(fd);
    result.and_then(|value| closed.map(|()| value))
}

/// Copies up to `len` bytes of the open `fd` from `offset` into `dest`; returns the count.
fn copy_range(c: &mut Conn, fd: u64, offset: u64, len: u64, dest: &mut dyn Write) -> Reply<u64> {
    let mut done = 0u64;
    while done < len {
        let want = usize::try_from(len - done).map_or(rpc::READ_CHUNK, |n| n.min(rpc::READ_CHUNK));
        let got = c.pread(fd, offset + done, want, dest)?;
        done += got as u64;
        // A short read is the end of the file.
        if got < want {
            break;
        }
    }
    Ok(done)
}

/// Whether what the cache holds is still what the server has.
fn still_valid(validator: &Validator, meta: &Meta) -> bool {
    match (&validator.etag, validator.mtime) {
        (Some(etag), _) => meta.etag.as_ref() == Some(etag),
        (None, Some(mtime)) => meta.mtime == Some(mtime),
        (None, None) => false,
    }
}

impl Driver for ChirpDriver {
    /// A Unix file system over the wire: everything but hard links and special files.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            serves_links: true,
            symlinks: true,
            ..Capabilities::writable()
                .with_ranges()
                .with_modes_and_times()
        }
    }

    fn describe(&self, path: &str) -> String {
        self.pool.target().url(path)
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let (remote, context) = self.request("lstat", path)?;
        self.pool
            .run(&context, Retry::Idempotent, |c| lstat_meta(c, &remote))
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let (remote, context) = self.request("getlongdir", path)?;
        self.pool
            .run(&context, Retry::Idempotent, |c| list_dir(c, &remote))
            .map_err(|e| self.refine_listing(&context, &remote, e))
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let (remote, context) = self.request("read", path)?;
        // Retrying is safe: the first reply (of `open`) comes before any byte is written.
        self.pool.run(&context, Retry::Idempotent, |c| {
            with_open_file(c, &remote, |c, fd, st| {
                let meta = st.meta(None);
                if validator.is_some_and(|v| still_valid(v, &meta)) {
                    return Ok(Fetched::NotModified);
                }
                let size = copy_range(c, fd, 0, u64::MAX, dest)?;
                Ok(Fetched::Body(Meta {
                    size: Some(size),
                    ..meta
                }))
            })
        })
    }

    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        let (remote, context) = self.request("read", path)?;
        self.pool.run(&context, Retry::Idempotent, |c| {
            with_open_file(c, &remote, |c, fd, st| {
                // The descriptor holds the version its stat describes.
                if let Some(of) = of {
                    of.check(&st.meta(None), &context).map_err(Failure::Local)?;
                }
                copy_range(c, fd, offset, len, dest)
            })
        })
    }

    /// `how.expect` is checked on the `lstat` that finds the mode to keep (so a stale
    /// upload sends no data), and again right before the rename.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        let (remote, context) = self.request("putfile", path)?;
        let now = match self.stat(path) {
            Ok(meta) if meta.kind == Kind::Dir => {
                return Err(Error::new(
                    ErrorKind::IsADirectory,
                    format!("{context}: is a directory"),
                ))
            }
            Ok(meta) => Some(meta),
            // A name we may not stat may be new.
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::PermissionDenied) => None,
            Err(e) => return Err(e),
        };
        if !how.expect.admits(now.as_ref()) {
            return Err(how.expect.mismatch(&context, now.as_ref()));
        }
        // A symlink is replaced, as rename does, and its bits are not the file's.
        let kept = now.filter(|m| m.kind == Kind::File).and_then(|m| m.mode);
        let mode = kept.or(how.attrs.mode).map(|m| m & 0o7777);
        let temporary = crate::temporary_beside(self, "putfile", path, TEMPORARY_PREFIX)?;
        let (tmp, _) = self.request("putfile", &temporary)?;
        how.announce(&context, &Leftover::Temporary { path: temporary })?;
        let placed = self.put_via(
            &context,
            (&tmp, &remote),
            (mode, how.attrs.mtime),
            (src, len),
            how.expect,
        );
        if !matches!(placed, Ok(Ok(()))) {
            // Best effort: the upload may have stopped anywhere.
            let unlink = format!("unlink {}\n", encode_path(&tmp));
            let _ = self.simple(&context, Retry::Idempotent, &unlink);
        }
        match placed {
            Ok(Ok(())) => self.stat(path),
            Ok(Err(now)) => Err(how.expect.mismatch(&context, now.as_ref())),
            Err(err) => Err(self.refine_creation(&context, &remote, err)),
        }
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        match self.remove_file(leftover.path()) {
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// The server narrows the mode by its umask (chirp_server's: 077), so a mode with
    /// group or other bits, or special bits, is set again after.
    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let (remote, context) = self.request("mkdir", path)?;
        let line = format!("mkdir {} {}\n", encode_path(&remote), mode & 0o7777);
        self.simple(&context, Retry::Never, &line)
            .map_err(|e| self.refine_creation(&context, &remote, e))?;
        match mode & 0o7077 {
            0 => Ok(()),
            _ => self.set_mode(path, mode & 0o7777),
        }
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        let (remote, context) = self.request("unlink", path)?;
        self.simple(
            &context,
            Retry::Never,
            &format!("unlink {}\n", encode_path(&remote)),
        )
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        let (remote, context) = self.request("rmdir", path)?;
        self.simple(
            &context,
            Retry::Never,
            &format!("rmdir {}\n", encode_path(&remote)),
        )
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (remote_from, _) = self.request("rename", from)?;
        let (remote_to, _) = self.request("rename", to)?;
        let context = format!("rename {} to {}", self.describe(from), self.describe(to));
        self.simple(
            &context,
            Retry::Never,
            &rename_line(&remote_from, &remote_to),
        )
        .or_else(|e| self.rename_over_empty_dir(&context, &remote_from, &remote_to, e))
        .or_else(|e| self.rename_over_link(&context, &remote_from, &remote_to, e))
        .map_err(|e| self.refine_creation(&context, &remote_to, e))
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        let (remote, context) = self.request("chmod", path)?;
        let line = format!("chmod {} {}\n", encode_path(&remote), mode & 0o7777);
        self.simple(&context, Retry::Idempotent, &line)
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        let (remote, context) = self.request("utime", path)?;
        let path = encode_path(&remote);
        // `utime` sets both times: keep the access time as it is. The server follows a
        // symlink there (and fails for a relative target): a link's own times, which
        // `tar x` and `rsync -a` set, are beyond the protocol.
        let link = self.pool.run(&context, Retry::Idempotent, |c| {
            let now = c.stat(false, &remote)?;
            if now.kind() == Kind::Symlink {
                return Ok(true);
            }
            c.call(&format!("utime {path} {} {}\n", now.atime, secs_of(mtime)))
                .map(|_| false)
        })?;
        match link {
            true => Err(Error::new(
                ErrorKind::Unsupported,
                format!("{context}: Chirp cannot set a symbolic link's own times"),
            )),
            false => Ok(()),
        }
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        let (remote, context) = self.request("symlink", path)?;
        if !is_plain_word(target) {
            // The server takes the target verbatim, as one word of the request line.
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!("{context}: Chirp cannot store a link target that is empty or has spaces or control characters"),
            ));
        }
        let line = format!("symlink {target} {}\n", encode_path(&remote));
        self.simple(&context, Retry::Never, &line)
            .map_err(|e| self.refine_creation(&context, &remote, e))
    }
}
