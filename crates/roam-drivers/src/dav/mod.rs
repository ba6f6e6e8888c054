//! WebDAV driver (RFC 4918): a remote tree on a WebDAV server (nginx with its `dav` and
//! `dav-ext` modules, Apache mod_dav ...), read and written. Mounts `/dav/HOST/...` and
//! `/davs/HOST/...` become `http://HOST/...` and `https://HOST/...` bases.
//!
//! `stat` and `list` are `PROPFIND`s (depth 0 and 1); `fetch` is the HTTP driver's
//! conditional `GET`, `read_range` a `GET` with `Range`. Writes are `PUT`, `MKCOL`, `DELETE`
//! and `MOVE`; an upload goes to a hidden temporary sibling first and is then moved over
//! the name, so no reader ever sees a half-written file. A replacement that must not
//! overwrite another client's change takes a short exclusive lock on the name for its
//! check and move ([`DavDriver::place`]); no other lock is ever taken.
//!
//! WebDAV is coarser than POSIX in two ways, and the driver makes up for both:
//! - Its statuses say less: a 409 does not say which ancestor is wrong, and nginx answers
//!   500 for a `PUT` into a missing directory. Where a failure is ambiguous the driver asks
//!   the server follow-up questions (Parrot's "interview") to return ENOENT, ENOTDIR or EISDIR.
//! - It does more: `DELETE` and an overwriting `MOVE` of a collection take all its members
//!   with them, where `rmdir(2)` and `rename(2)` refuse a non-empty directory. The driver
//!   looks before it deletes or replaces a directory. Servers that hide names from listings
//!   (nginx hides dot files) defeat that look: such a directory seems empty.

mod errors;
#[cfg(test)]
mod fuzz;
mod members;
pub(crate) mod multistatus;

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ureq::http::{Request, Response, StatusCode};
use ureq::{AsSendBody, Body, SendBody};

use self::members::members;
use self::multistatus::Resource;
use crate::http::url::Base;
use crate::http::{read_page, HttpClient, HttpDriver};
use crate::{
    is_driver_path, Capabilities, Driver, Error, ErrorKind, Expect, Fetched, Kind, Leftover,
    Listing, Meta, Pinned, Result, Upload, Validator,
};

/// The requests this driver sends itself (its reads go through the HTTP driver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Propfind,
    Put,
    Mkcol,
    Delete,
    Move,
    Copy,
    Lock,
    Unlock,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Propfind => "PROPFIND",
            Method::Put => "PUT",
            Method::Mkcol => "MKCOL",
            Method::Delete => "DELETE",
            Method::Move => "MOVE",
            Method::Copy => "COPY",
            Method::Lock => "LOCK",
            Method::Unlock => "UNLOCK",
        }
    }
}

/// A remote tree on a WebDAV server, rooted at `base` (`http://host:port/prefix`).
#[derive(Debug)]
pub struct DavDriver {
    /// The HTTP driver of the same tree: it holds the client and the base URL, and its
    /// conditional `GET` is WebDAV's read.
    http: HttpDriver,
    /// Whether the server refused a `LOCK` as unknown (no WebDAV class 2).
    no_locks: AtomicBool,
}

impl DavDriver {
    /// A driver for `base`: `http://` or `https://`, an optional `user:pass@` (sent as
    /// Basic authorization, never shown), host, optional port and path prefix.
    pub fn new(client: HttpClient, base: &str) -> Result<DavDriver> {
        Ok(DavDriver {
            http: HttpDriver::new(client, base)?,
            no_locks: AtomicBool::new(false),
        })
    }

    fn base(&self) -> &Base {
        &self.http.base
    }

    /// Checks that `path` is a driver path, since a `..` that slipped through would address
    /// a different resource on the server.
    fn check(&self, method: Method, path: &str) -> Result<()> {
        if is_driver_path(path) {
            Ok(())
        } else {
            let url = self.base().url(path);
            Err(fail(
                ErrorKind::InvalidName,
                method,
                &url,
                "not a normalised path",
            ))
        }
    }

    /// Sends one request and returns its response if it succeeded as `method` should;
    /// any other status is an error.
    fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: impl AsSendBody,
    ) -> Result<Response<Body>> {
        let response = self.exchange(method, url, headers, body)?;
        if succeeded(method, response.status()) {
            Ok(response)
        } else {
            Err(errors::status(method, url, response.status()))
        }
    }

    /// Sends one request and returns its response, whatever its status.
    fn exchange(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: impl AsSendBody,
    ) -> Result<Response<Body>> {
        let name = method.as_str();
        let mut request = Request::builder().method(name).uri(url);
        if let Some(authorization) = self.base().authorization() {
            request = request.header("authorization", authorization);
        }
        for (header, value) in headers {
            request = request.header(*header, *value);
        }
        let request = request
            .body(body)
            .map_err(|e| fail(ErrorKind::InvalidName, method, url, &e.to_string()))?;
        let agent = &self.http.client.agent;
        let request = agent
            .configure_request(request)
            // PROPFIND, MKCOL, MOVE, LOCK and UNLOCK are WebDAV's methods, not HTTP/1.1's.
            .allow_non_standard_methods(true)
            // On a 301 or 302, ureq (like curl) would resend any of these as a GET.
            .max_redirects(0)
            .build();
        self.http
            .client
            .run(request)
            .map_err(|e| crate::http::errors::transport(name, url, e))
    }

    /// The resources a `PROPFIND` of `url` at `depth` describes.
    fn propfind(&self, url: &str, depth: &str) -> Result<Vec<Resource>> {
        let headers = [
            ("depth", depth),
            ("content-type", "application/xml; charset=utf-8"),
        ];
        let request = multistatus::REQUEST.as_bytes();
        let response = self.send(Method::Propfind, url, &headers, request)?;
        let reply = read_page(response, Method::Propfind.as_str(), url)?;
        multistatus::parse(&reply).map_err(|why| {
            let why = format!("unreadable reply: {why}");
            fail(ErrorKind::Io, Method::Propfind, url, &why)
        })
    }

    /// Checks that the parent of `path` is a directory: ENOENT when it is missing, ENOTDIR
    /// when it is a file (messages name `method` and `url`, the request this is about).
    fn check_parent(&self, method: Method, path: &str, url: &str) -> Result<()> {
        let Some(parent) = parent_of(path) else {
            return Ok(());
        };
        let (kind, why) = match self.stat(parent) {
            Ok(meta) if meta.kind == Kind::Dir => return Ok(()),
            Ok(_) => (ErrorKind::NotADirectory, "the parent is not a directory"),
            Err(e) if e.kind == ErrorKind::NotFound => {
                (ErrorKind::NotFound, "the parent directory does not exist")
            }
            Err(e) => return Err(e),
        };
        Err(fail(kind, method, url, why))
    }

    /// The errno a failed creation of `path` deserves. A 409 does not say which ancestor is
    /// wrong (and nginx answers a `PUT` into a missing directory with 500), so the parent
    /// is asked about: ENOENT or ENOTDIR if it is to blame; otherwise `err` stands.
    fn explain(&self, method: Method, path: &str, url: &str, err: Error) -> Error {
        if !matches!(err.kind, ErrorKind::NotFound | ErrorKind::Io) {
            return err;
        }
        match self.check_parent(method, path, url) {
            Err(why) if matches!(why.kind, ErrorKind::NotFound | ErrorKind::NotADirectory) => why,
            _ => err,
        }
    }

    /// [`DavDriver::explain`] for an upload, which may also have met a directory at its
    /// name (nginx refuses to move a file over a collection with 409).
    fn explain_put(&self, path: &str, url: &str, err: Error) -> Error {
        if !matches!(err.kind, ErrorKind::NotFound | ErrorKind::Io) {
            return err;
        }
        if self.stat(path).is_ok_and(|meta| meta.kind == Kind::Dir) {
            return fail(ErrorKind::IsADirectory, Method::Put, url, "is a directory");
        }
        self.explain(Method::Put, path, url, err)
    }

    /// Uploads exactly `len` bytes of `src` to `url`.
    fn send_body(&self, url: &str, src: &mut dyn Read, len: u64) -> Result<()> {
        let length = len.to_string();
        let mut body = Exact { src, left: len };
        // A declared length rather than chunks: the server can refuse too large a body
        // before it arrives, and knows a cut-off upload for one.
        let headers = [("content-length", length.as_str())];
        self.send(Method::Put, url, &headers, SendBody::from_reader(&mut body))
            .map(drop)
    }

    /// Moves the uploaded temporary `temp` over `url` (of `path`) if what is there is what
    /// `expect` says. nginx ignores `If-Match` and `If-None-Match` on `PUT` and `MOVE`, so:
    /// - a new file is moved with `Overwrite: F`, which fails (412) if the name exists: the
    ///   server's own check, right before its rename;
    /// - a replacement takes an exclusive write lock on the name, checks its version
    ///   (`PROPFIND`), moves with the lock's token, and unlocks: no other client's `PUT`,
    ///   `MOVE` or `DELETE` can reach the name meanwhile (423). On a server without locks
    ///   (no class 2), the version is checked right before the move under the lock roam
    ///   clients take on the name, which leaves a round trip in which a client other than
    ///   roam goes unseen.
    ///
    /// A name locked by another client (423) counts as changed: someone is writing it.
    fn place(&self, temp: &str, (path, url): (&str, &str), expect: &Expect) -> Result<()> {
        let what = format!("PUT {url}");
        match expect {
            Expect::Any => self.move_to(temp, url),
            Expect::Absent => self.move_checked(temp, url, &[("overwrite", "F")], &what),
            Expect::Version { .. } => match self.lock(url, &what)? {
                Locked::Unsupported => {
                    self.check_and_move_under_roam_lock(temp, (path, url), expect)
                }
                Locked::Existing(token) => {
                    let moved = self.check_and_move(temp, (path, url), expect, Some(&token));
                    self.unlock(url, &token);
                    moved
                }
                // The lock made an empty file where there was none: the version is gone.
                Locked::Created(token) => {
                    let tagged = format!("<{url}> (<{token}>)");
                    let headers = [("if", tagged.as_str())];
                    if let Err(e) = self.send(Method::Delete, url, &headers, SendBody::none()) {
                        tracing::warn!("{what}: the lock left an empty file: {e}");
                        self.unlock(url, &token);
                    }
                    Err(expect.mismatch(&what, None))
                }
            },
        }
    }

    /// [`Self::check_and_move`] on a server without locks, under the lock roam clients take
    /// on the name ([`crate::under_name_lock`]: `MKCOL` fails if the collection exists).
    fn check_and_move_under_roam_lock(
        &self,
        temp: &str,
        (path, url): (&str, &str),
        expect: &Expect,
    ) -> Result<()> {
        let check_and_move = |_: &mut ()| self.check_and_move(temp, (path, url), expect, None);
        let Some(lock) = crate::lock_beside(path, ".roam-") else {
            return check_and_move(&mut ());
        };
        // Bare requests: one each (no check of the parent, nor of emptiness).
        let lock = self.base().dir_url(&lock);
        crate::under_name_lock(
            &mut (),
            |_| match self.exchange(Method::Mkcol, &lock, &[], SendBody::none()) {
                Ok(r) if succeeded(Method::Mkcol, r.status()) => crate::Attempt::Made,
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => crate::Attempt::Held,
                _ => crate::Attempt::Failed,
            },
            |_| drop(self.exchange(Method::Delete, &lock, &[], SendBody::none())),
            check_and_move,
        )
    }

    /// Checks that `url` (of `path`) is what `expect` says, then moves `temp` over it,
    /// with the lock's `token` if there is one.
    fn check_and_move(
        &self,
        temp: &str,
        (path, url): (&str, &str),
        expect: &Expect,
        token: Option<&str>,
    ) -> Result<()> {
        let what = format!("PUT {url}");
        let now = match self.stat(path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if !expect.admits(now.as_ref()) {
            return Err(expect.mismatch(&what, now.as_ref()));
        }
        let tagged = token.map(|token| format!("<{url}> (<{token}>)"));
        let mut headers = vec![("overwrite", "T")];
        headers.extend(tagged.as_deref().map(|t| ("if", t)));
        self.move_checked(temp, url, &headers, &what)
    }

    /// `MOVE` of `from` to `to` with `headers`; a failed precondition (412) or a lock of
    /// another client's (423) is [`ErrorKind::Changed`].
    fn move_checked(
        &self,
        from: &str,
        to: &str,
        headers: &[(&str, &str)],
        what: &str,
    ) -> Result<()> {
        let mut all = vec![("destination", to)];
        all.extend_from_slice(headers);
        let response = self.exchange(Method::Move, from, &all, SendBody::none())?;
        match response.status().as_u16() {
            412 => Err(crate::changed(what, "something has its name")),
            423 => Err(crate::changed(what, "another client has locked it")),
            _ if succeeded(Method::Move, response.status()) => Ok(()),
            _ => Err(errors::status(Method::Move, from, response.status())),
        }
    }

    /// An exclusive write lock on `url`, for as short a time as the server allows; a lock
    /// held by another client is waited for a moment ([`LOCK_WAITS`]), then is
    /// [`ErrorKind::Changed`]. Remembers a server without locks, so it is asked once.
    fn lock(&self, url: &str, what: &str) -> Result<Locked> {
        if self.no_locks.load(Ordering::Relaxed) {
            return Ok(Locked::Unsupported);
        }
        let headers = [
            ("depth", "0"),
            ("timeout", LOCK_TIMEOUT),
            ("content-type", "application/xml; charset=utf-8"),
        ];
        let mut waits = LOCK_WAITS.iter().map(|&ms| Duration::from_millis(ms));
        loop {
            let response = self.exchange(Method::Lock, url, &headers, LOCK_REQUEST.as_bytes())?;
            let status = response.status().as_u16();
            let token = response
                .headers()
                .get("lock-token")
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    v.trim()
                        .trim_start_matches('<')
                        .trim_end_matches('>')
                        .to_owned()
                });
            match (status, token) {
                (200, Some(token)) => return Ok(Locked::Existing(token)),
                (201, Some(token)) => return Ok(Locked::Created(token)),
                (200 | 201, None) => {
                    let why = "no Lock-Token in the reply";
                    return Err(fail(ErrorKind::Io, Method::Lock, url, why));
                }
                (405 | 501, _) => {
                    tracing::debug!("{}: no WebDAV locks ({status})", self.describe("/"));
                    self.no_locks.store(true, Ordering::Relaxed);
                    return Ok(Locked::Unsupported);
                }
                (423, _) => match waits.next() {
                    Some(pause) => std::thread::sleep(pause),
                    None => return Err(crate::changed(what, "another client keeps it locked")),
                },
                _ => return Err(errors::status(Method::Lock, url, response.status())),
            }
        }
    }

    /// Releases the lock `token` on `url`. A failure is logged: the lock expires anyway.
    fn unlock(&self, url: &str, token: &str) {
        let header = format!("<{token}>");
        let headers = [("lock-token", header.as_str())];
        if let Err(e) = self.send(Method::Unlock, url, &headers, SendBody::none()) {
            tracing::warn!("{url} stays locked until the lock expires: {e}");
        }
    }

    /// Moves `from` to `to` (both URLs), replacing what is at `to` as `rename(2)` does.
    /// Callers make sure a replaced directory is empty: servers delete its members.
    fn move_to(&self, from: &str, to: &str) -> Result<()> {
        let headers = [("destination", to), ("overwrite", "T")];
        self.send(Method::Move, from, &headers, SendBody::none())
            .map(drop)
    }

    /// Deletes the temporary of a failed upload. Failing to only leaves a hidden file
    /// behind, so it is logged, not returned in place of the upload's own error.
    fn discard(&self, url: &str) {
        match self.send(Method::Delete, url, &[], SendBody::none()) {
            Err(e) if e.kind != ErrorKind::NotFound => {
                tracing::warn!("leaving a temporary upload behind: {e}")
            }
            _ => {}
        }
    }

    /// Checks that `to` may receive `from`, an object of `kind`, as `rename(2)` allows:
    /// a directory replaces only an empty directory, a file only a file, and a new name
    /// needs an existing parent directory.
    fn check_target(&self, kind: Kind, from: &str, to: &str) -> Result<()> {
        let url = self.base().url(to);
        let target = match self.stat(to) {
            Ok(meta) => meta.kind,
            // A new name. nginx would create a missing parent, so it is checked, unless it
            // is the source's own (and so existing) directory: the common rename.
            Err(e) if e.kind == ErrorKind::NotFound && parent_of(from) == parent_of(to) => {
                return Ok(())
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                return self.check_parent(Method::Move, to, &url)
            }
            Err(e) => return Err(e),
        };
        let (errno, why) = match (kind, target) {
            (Kind::Dir, Kind::Dir) if self.list(to)?.entries.is_empty() => return Ok(()),
            (Kind::Dir, Kind::Dir) => (ErrorKind::NotEmpty, "directory not empty"),
            (Kind::Dir, _) => (ErrorKind::NotADirectory, "not a directory"),
            (_, Kind::Dir) => (ErrorKind::IsADirectory, "is a directory"),
            _ => return Ok(()),
        };
        Err(fail(errno, Method::Move, &url, why))
    }
}

impl Driver for DavDriver {
    /// WebDAV keeps names and bytes: no modes, no times (the server's), no links; files
    /// are copied on the server (`COPY`).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            server_copy: true,
            ..Capabilities::writable().with_ranges()
        }
    }

    fn describe(&self, path: &str) -> String {
        self.http.describe(path)
    }

    fn sources(&self) -> Vec<(String, String)> {
        self.http.sources()
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        self.check(Method::Propfind, path)?;
        let url = self.base().url(path);
        // Depth 0 asks for the resource alone, so the one response is it, whatever href a
        // proxy in between may have given it.
        let own = self.propfind(&url, "0")?.into_iter().next();
        own.map(|resource| resource.meta)
            .ok_or_else(|| fail(ErrorKind::Io, Method::Propfind, &url, "empty reply"))
    }

    /// Lists with `complete: true`, although nginx leaves dot files out of its replies (as
    /// its autoindex does): the protocol has no way to ask for them.
    fn list(&self, path: &str) -> Result<Listing> {
        self.check(Method::Propfind, path)?;
        // The collection's own URL, with its slash (RFC 4918 §8.3), which servers that
        // redirect `/dir` to `/dir/` (Apache) answer without a redirect.
        let url = self.base().dir_url(path);
        let members = members(&url, self.propfind(&url, "1")?);
        if members.own.is_some_and(|own| own.kind != Kind::Dir) {
            return Err(fail(
                ErrorKind::NotADirectory,
                Method::Propfind,
                &url,
                "not a directory",
            ));
        }
        Ok(Listing {
            entries: members.entries,
            complete: true,
            stands_alone: true,
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        self.http.fetch(path, dest, validator)
    }

    /// Plain HTTP: the HTTP driver's `GET` with `Range`.
    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        self.http.read_range(path, offset, len, of, dest)
    }

    /// Uploads to a temporary sibling, then moves it over `path` (`rename(2)` on nginx, so
    /// readers see the old file or the new one, never a part), as [`place`] says.
    ///
    /// [`place`]: DavDriver::place
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        self.check(Method::Put, path)?;
        let url = self.base().url(path);
        let temporary = crate::temporary_beside(self, "PUT", path, crate::TEMPORARY_PREFIX)?;
        let temp = self.base().url(&temporary);
        how.announce(
            &format!("PUT {url}"),
            &Leftover::Temporary { path: temporary },
        )?;
        let stored = self
            .send_body(&temp, src, len)
            .and_then(|()| self.place(&temp, (path, &url), how.expect));
        if let Err(err) = stored {
            self.discard(&temp);
            return Err(match err.kind {
                ErrorKind::Changed => err,
                _ => self.explain_put(path, &url, err),
            });
        }
        self.stat(path)
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        self.check(Method::Delete, leftover.path())?;
        let url = self.base().url(leftover.path());
        match self.send(Method::Delete, &url, &[], SendBody::none()) {
            Err(e) if e.kind != ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn mkdir(&self, path: &str, _mode: u32) -> Result<()> {
        self.check(Method::Mkcol, path)?;
        // With its slash: nginx creates collections only at collection URLs.
        let url = self.base().dir_url(path);
        self.send(Method::Mkcol, &url, &[], SendBody::none())
            .map(drop)
            .map_err(|err| self.explain(Method::Mkcol, path, &url, err))
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.check(Method::Delete, path)?;
        let url = self.base().url(path);
        // DELETE of a collection takes all its members (RFC 4918 §9.6.1), where unlink(2)
        // refuses a directory: ask first.
        if self.stat(path)?.kind == Kind::Dir {
            return Err(fail(
                ErrorKind::IsADirectory,
                Method::Delete,
                &url,
                "is a directory",
            ));
        }
        self.send(Method::Delete, &url, &[], SendBody::none())
            .map(drop)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.check(Method::Delete, path)?;
        let url = self.base().dir_url(path);
        if path == "/" {
            let why = "the root of a mount cannot be removed";
            return Err(fail(ErrorKind::PermissionDenied, Method::Delete, &url, why));
        }
        // rmdir(2) removes only an empty directory, DELETE a whole tree: look first. The
        // listing also fails with ENOTDIR for a file and ENOENT for nothing.
        if !self.list(path)?.entries.is_empty() {
            return Err(fail(
                ErrorKind::NotEmpty,
                Method::Delete,
                &url,
                "directory not empty",
            ));
        }
        self.send(Method::Delete, &url, &[], SendBody::none())
            .map(drop)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.check(Method::Move, from)?;
        self.check(Method::Move, to)?;
        let url = self.base().url(from);
        // rename(2) refuses this with EINVAL; nginx 1.22 would copy the directory into
        // itself until the names grew too long.
        if from == "/" || to.starts_with(&format!("{from}/")) {
            let why = "cannot move a directory into itself";
            return Err(fail(ErrorKind::InvalidName, Method::Move, &url, why));
        }
        let kind = self.stat(from)?.kind;
        if from == to {
            return Ok(());
        }
        self.check_target(kind, from, to)?;
        if kind == Kind::Dir {
            // Both with slashes: nginx moves collections only between collection URLs.
            self.move_to(&self.base().dir_url(from), &self.base().dir_url(to))
        } else {
            self.move_to(&url, &self.base().url(to))
        }
    }

    /// `COPY` of one file (`Depth: 0`), over a file at `to`.
    fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.check(Method::Copy, from)?;
        self.check(Method::Copy, to)?;
        let url = self.base().url(from);
        if self.stat(from)?.kind == Kind::Dir {
            return Err(fail(
                ErrorKind::IsADirectory,
                Method::Copy,
                &url,
                "is a directory",
            ));
        }
        if from == to {
            return Ok(());
        }
        self.check_target(Kind::File, from, to)?;
        let to = self.base().url(to);
        let headers = [("destination", &to[..]), ("overwrite", "T"), ("depth", "0")];
        self.send(Method::Copy, &url, &headers, SendBody::none())
            .map(drop)
    }
}

/// Whether `status` is the success `method` expects. A `PROPFIND` answers 207 Multi-Status;
/// for the others a 207 lists members that failed (a partly done `DELETE` or `MOVE`).
fn succeeded(method: Method, status: StatusCode) -> bool {
    match method {
        Method::Propfind => status == StatusCode::MULTI_STATUS,
        _ => status.is_success() && status != StatusCode::MULTI_STATUS,
    }
}

/// What [`DavDriver::lock`] got.
enum Locked {
    /// A lock on the existing resource, with this token.
    Existing(String),
    /// A lock on a name that had nothing: the server made an empty file (RFC 4918 §7.3).
    Created(String),
    /// The server has no locks.
    Unsupported,
}

/// The lock asked for: exclusive, for writing.
const LOCK_REQUEST: &str = r#"<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>roam</D:owner></D:lockinfo>"#;

/// How long a lock should last if roam never releases it (its holder died): servers that
/// honour the `Timeout` header (nginx's dav-ext uses its own, a minute by default).
const LOCK_TIMEOUT: &str = "Second-30";

/// Pauses (ms) before asking again for a lock another client holds: roam's own locks last
/// a few round trips.
const LOCK_WAITS: [u64; 4] = [50, 100, 200, 400];

fn fail(kind: ErrorKind, method: Method, url: &str, why: &str) -> Error {
    Error::new(kind, format!("{} {url}: {why}", method.as_str()))
}

/// The parent directory of a driver path; `None` for the root.
fn parent_of(path: &str) -> Option<&str> {
    match path.rsplit_once('/')? {
        ("", "") => None,
        ("", _) => Some("/"),
        (parent, _) => Some(parent),
    }
}

/// The body of an upload: exactly `left` more bytes of `src`. A source that ends early
/// fails the request, instead of leaving the server waiting for bytes the Content-Length
/// promised; the server then drops the incomplete upload.
struct Exact<'a> {
    src: &'a mut dyn Read,
    left: u64,
}

impl Read for Exact<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.src.read(&mut buf[..want])?;
        if n == 0 {
            let why = format!("the data to upload ended {} bytes short", self.left);
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, why));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents() {
        assert_eq!(parent_of("/"), None);
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/a/b c"), Some("/a"));
    }

    #[test]
    fn uploads_are_exactly_as_long_as_announced() {
        let mut long: &[u8] = b"0123456789";
        let mut body = Vec::new();
        Exact {
            src: &mut long,
            left: 4,
        }
        .read_to_end(&mut body)
        .unwrap();
        assert_eq!(body, b"0123");
        let mut short: &[u8] = b"012";
        let err = Exact {
            src: &mut short,
            left: 5,
        }
        .read_to_end(&mut Vec::new())
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(err.to_string(), "the data to upload ended 2 bytes short");
    }

    /// Against nginx with dav-ext's locks (from roam-testkit): another client cannot write
    /// a name while roam holds its lock, and every way out of a replacement unlocks.
    #[test]
    fn replacements_lock_the_name_and_always_unlock_it() {
        use crate::http::{HttpClient, HttpConfig};
        use roam_testkit::{dav::nginx_dav, write_file, Scratch};
        let scratch = Scratch::new("dav-locks");
        let www = scratch.join("www");
        write_file(&www.join("f"), b"base", 0o644);
        let server = nginx_dav(&www, &scratch.join("run"));
        let driver = || DavDriver::new(HttpClient::new(&HttpConfig::default()), &server.url());
        let (d, other) = (driver().unwrap(), driver().unwrap());
        let url = d.base().url("/f");
        let put = |data: &[u8]| {
            let length = data.len().to_string();
            let headers = [("content-length", length.as_str())];
            let reply = other.exchange(Method::Put, &url, &headers, data).unwrap();
            reply.status().as_u16()
        };
        let Locked::Existing(token) = d.lock(&url, "test").unwrap() else {
            panic!("an existing file is locked as it is");
        };
        assert_eq!(put(b"theirs"), 423, "another client's PUT during the lock");
        d.unlock(&url, &token);
        assert_eq!(put(b"theirs"), 204, "after the unlock");

        let base = d.stat("/f").unwrap();
        let missing = d.base().url("/.roam-put-missing");
        let expect = Expect::version_of(Some(&base));
        let failed = d.place(&missing, ("/f", &url), &expect).unwrap_err();
        assert_eq!(failed.kind, ErrorKind::NotFound, "{}", failed.message);
        assert_eq!(put(b"theirs"), 204, "unlocked after a failed move");
        let stale = Expect::Version {
            etag: None,
            size: 999,
            mtime: None,
        };
        let refused = d.place(&missing, ("/f", &url), &stale).unwrap_err();
        assert_eq!(refused.kind, ErrorKind::Changed, "{}", refused.message);
        assert_eq!(put(b"theirs"), 204, "unlocked after a stale version");

        // A lock on a name with nothing makes an empty file (RFC 4918 §7.3), which a
        // replacement of a removed version takes away again, lock and all.
        let base = d.stat("/f").unwrap();
        std::fs::remove_file(www.join("f")).unwrap();
        let gone = d.place(&missing, ("/f", &url), &Expect::version_of(Some(&base)));
        assert_eq!(gone.unwrap_err().kind, ErrorKind::Changed);
        assert!(!www.join("f").exists(), "the lock's empty file stayed");
        assert_eq!(put(b"new"), 201, "unlocked after a removed version");
    }

    /// A multistatus naming a 300-byte member: no real file system holds one (NAME_MAX is
    /// 255), hence a scripted server. Listed, it would fail every lookup in the directory
    /// (ENAMETOOLONG): it is left out, and the rest of the reply stands.
    #[test]
    fn names_longer_than_name_max_are_left_out_of_listings() {
        let member = |href: &str, size: u32| {
            format!(
                "<D:response><D:href>{href}</D:href><D:propstat><D:prop>\
                 <D:getcontentlength>{size}</D:getcontentlength><D:resourcetype/>\
                 </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
            )
        };
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\" ?><D:multistatus xmlns:D=\"DAV:\">\
             <D:response><D:href>/dir/</D:href><D:propstat><D:prop><D:resourcetype>\
             <D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status>\
             </D:propstat></D:response>{}{}</D:multistatus>",
            member(&format!("/dir/{}", "x".repeat(300)), 5),
            member("/dir/ok.txt", 2),
        );
        let reply = format!(
            "HTTP/1.1 207 Multi-Status\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{xml}",
            xml.len()
        );
        let (port, _server) = crate::http::tests::scripted(vec![reply]);
        let client = crate::http::HttpClient::new(&crate::http::HttpConfig::default());
        let d = DavDriver::new(client, &format!("http://127.0.0.1:{port}")).unwrap();
        let listing = d.list("/dir").unwrap();
        let names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["ok.txt"]);
    }

    #[test]
    fn success_depends_on_the_method() {
        assert!(succeeded(Method::Propfind, StatusCode::MULTI_STATUS));
        assert!(!succeeded(Method::Propfind, StatusCode::OK));
        assert!(succeeded(Method::Put, StatusCode::CREATED));
        assert!(succeeded(Method::Move, StatusCode::NO_CONTENT));
        assert!(!succeeded(Method::Delete, StatusCode::MULTI_STATUS));
        assert!(!succeeded(Method::Mkcol, StatusCode::METHOD_NOT_ALLOWED));
    }
}
