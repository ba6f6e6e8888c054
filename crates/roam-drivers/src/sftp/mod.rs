//! SFTP driver (SFTP v3 over SSH, as OpenSSH serves it), on `russh` and `russh-sftp`.
//!
//! - Where to connect, as whom and through what: the URL, then OpenSSH's own resolution
//!   (`ssh -G`) or roam's reading of `~/.ssh/config` (`ssh_config.rs`); `ProxyJump` and
//!   `ProxyCommand` (`connect.rs`).
//! - Trust: host key checking against the user's and the global known hosts files, as
//!   `StrictHostKeyChecking` says (`known_hosts.rs`, `connect.rs`).
//! - Login: ssh-agent's keys, certificates, then identity files (`auth.rs`).
//! - One SSH connection per driver, shared by all threads (SFTP multiplexes requests),
//!   opened on first use and again when it broke (`link.rs`). An operation that finds its
//!   connection broken runs once more on a fresh one if it is idempotent (stat, list,
//!   chmod, utimes; reads until they delivered bytes); other writes never do.
//! - Errors: SSH status codes, refined by Parrot's interview (`errors.rs`).
//! - Writes are atomic: a temporary sibling, then `posix-rename@openssh.com` over the name
//!   (`requests.rs`; without the extension, remove + rename, which is not atomic).
//!
//! The driver's API is synchronous; it owns a one-thread tokio runtime on which the SSH
//! connection runs, and each call blocks on it. Paths of a mount URL are absolute on the
//! server, so `/sftp/host/etc/x` is `/etc/x` for every user.

mod auth;
mod connect;
mod errors;
#[cfg(test)]
mod fuzz;
mod known_hosts;
mod link;
mod meta;
mod requests;
mod ssh_config;
mod url;

use std::cell::Cell;
use std::fmt;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use russh_sftp::protocol::{FileAttributes, OpenFlags, StatusCode};

use self::connect::Settings;
use self::errors::Action;
use self::link::{Fault, Link};
use self::meta::{meta_of, FileKind};
use self::requests::Simple;
use self::ssh_config::{Endpoint, Local, Resolver};
use self::url::Target;
use crate::{
    is_driver_path, is_safe_name, Capabilities, Driver, Error, ErrorKind, Expect, Fetched, Kind,
    Leftover, Listing, Meta, Pinned, Result, Upload, Validator,
};

/// Timeouts, OpenSSH files and trust settings of the SFTP driver.
#[derive(Clone, Debug)]
pub struct SftpConfig {
    /// For TCP, the SSH handshake, login and starting SFTP, together.
    pub connect_timeout: Duration,
    /// For each answer to a request: a transfer may take hours, but never stall.
    pub read_timeout: Duration,
    /// OpenSSH client configuration to read hosts from (`~/.ssh/config`).
    pub ssh_config: Option<PathBuf>,
    /// A known hosts file to use instead of the config's `UserKnownHostsFile` (as
    /// `ssh -o UserKnownHostsFile=...`); `None`: the config's, by default
    /// `~/.ssh/known_hosts` and `~/.ssh/known_hosts2`. Whether unknown keys are accepted is
    /// the config's `StrictHostKeyChecking`.
    pub known_hosts: Option<PathBuf>,
    /// Keys to offer, before any `IdentityFile` of the config (as `ssh -i`).
    pub identity_files: Vec<PathBuf>,
    /// The `ssh` program whose `ssh -G` settles hosts as OpenSSH does; `None`: roam's own
    /// reading of the config file (the default when no `ssh` is on `PATH`).
    pub ssh_program: Option<PathBuf>,
}

impl Default for SftpConfig {
    fn default() -> Self {
        let ssh_dir = home().map(|home| home.join(".ssh"));
        SftpConfig {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            ssh_config: ssh_dir.map(|d| d.join("config")),
            known_hosts: None,
            identity_files: Vec::new(),
            ssh_program: on_path("ssh"),
        }
    }
}

/// A tree on one SFTP server, rooted at a mount URL's path.
pub struct SftpDriver {
    target: Target,
    endpoint: Endpoint,
    settings: Settings,
    /// The connection, if one is open; replaced when it broke.
    link: Mutex<Option<Arc<Link>>>,
    /// Whether the server has linked a file with `hardlink@openssh.com` (so the next new
    /// file's temporary may be removed right behind its link).
    hardlinks: AtomicBool,
    // Last, so that the connection is dropped before the runtime it runs on.
    runtime: Runtime,
}

impl fmt::Debug for SftpDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SftpDriver")
            .field("url", &self.target.origin())
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl SftpDriver {
    /// Sets the times given (`None`: the one the server has stays), in whole seconds: SFTP
    /// v3 sets both at once. A symlink's own times are set (`lsetstat@openssh.com`), never
    /// its target's.
    fn setstat_times(
        &self,
        path: &str,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> Result<()> {
        let remote = self.remote(path)?;
        let seconds = |t: Option<SystemTime>| {
            t.map(|t| {
                meta::seconds(t).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidName,
                        format!(
                            "utimes {}: SFTP keeps times from 1970 to 2106 only",
                            self.describe(path)
                        ),
                    )
                })
            })
            .transpose()
        };
        let (atime, mtime) = (seconds(atime)?, seconds(mtime)?);
        self.run(
            || true,
            |link| {
                let explain = |f| self.explain(link, f, Action::SetAttr(&remote), "utimes", path);
                let now = link
                    .call(link.sftp.lstat(remote.as_str()))
                    .map_err(explain)?
                    .attrs;
                let mtime = mtime.or(now.mtime).unwrap_or(0);
                let atime = atime.or(now.atime).unwrap_or(mtime);
                if now.is_symlink() {
                    let set = requests::set_link_times(&link.sftp, &remote, atime, mtime);
                    return link.call(set).map_err(explain);
                }
                let times = FileAttributes {
                    atime: Some(atime),
                    mtime: Some(mtime),
                    ..FileAttributes::empty()
                };
                link.call(link.sftp.setstat(remote.as_str(), times))
                    .map(drop)
                    .map_err(explain)
            },
        )
    }
    /// A driver for `sftp://[user@]host[:port][/path]`. Nothing is sent until the first
    /// operation; the host, port, user and keys are settled now.
    pub fn new(cfg: SftpConfig, url: &str) -> Result<SftpDriver> {
        let target = Target::parse(url)?;
        let passwd = passwd();
        let resolver = Resolver {
            ssh: cfg.ssh_program.clone(),
            config: cfg.ssh_config.clone(),
            local: Local {
                home: home(),
                user: std::env::var("USER")
                    .ok()
                    .filter(|u| !u.is_empty())
                    .or_else(|| passwd.as_ref().map(|p| p.0.clone())),
                passwd_home: passwd.map(|p| p.1),
                host_name: host_name(),
                // SAFETY: geteuid(2) cannot fail and touches no memory.
                uid: unsafe { libc::geteuid() },
            },
            identity_files: cfg.identity_files.clone(),
            known_hosts: cfg.known_hosts.clone(),
        };
        let endpoint = resolver
            .resolve(&target.host, target.port, target.user.as_deref())
            .map_err(|e| Error::new(ErrorKind::InvalidName, format!("{}: {e}", target.origin())))?;
        Ok(SftpDriver {
            runtime: Runtime::new()
                .map_err(|e| Error::from_io("sftp: starting the runtime", &e))?,
            target,
            endpoint,
            settings: Settings {
                connect_timeout: cfg.connect_timeout,
                read_timeout: cfg.read_timeout,
            },
            link: Mutex::new(None),
            hardlinks: AtomicBool::new(false),
        })
    }

    /// The server path of a driver path, after checking it is one.
    fn remote(&self, path: &str) -> Result<String> {
        match is_driver_path(path) {
            true => Ok(self.target.remote(path)),
            false => Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "{}: {path:?} is not a normalised path",
                    self.target.origin()
                ),
            )),
        }
    }

    /// The open connection, or a new one. Threads that need one while it is being opened
    /// wait for it rather than open their own.
    fn link(&self) -> Result<Arc<Link>> {
        let mut slot = self.link.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(link) = slot.as_ref().filter(|l| l.usable()) {
            return Ok(link.clone());
        }
        *slot = None;
        let origin = self.target.origin();
        let link = self
            .runtime
            .block_on(connect::open(&self.endpoint, &self.settings, &origin))?;
        let link = Arc::new(link);
        *slot = Some(link.clone());
        Ok(link)
    }

    /// Runs `op` on the connection. If the connection broke under it (not a timeout: the
    /// server is slow, not gone) and `may_retry` says so, runs it once more on a fresh
    /// one: the server may have dropped an idle connection in a way we only see now.
    fn run<T>(
        &self,
        may_retry: impl Fn() -> bool,
        mut op: impl FnMut(&Link) -> Result<T>,
    ) -> Result<T> {
        let link = self.link()?;
        match op(&link) {
            Err(e) if link.is_broken() && e.kind != ErrorKind::TimedOut && may_retry() => {
                tracing::debug!("sftp: retrying on a fresh connection after: {e}");
                op(&*self.link()?)
            }
            result => result,
        }
    }

    /// The driver error of a failed request: `VERB URL: cause (server: message)`.
    fn explain(&self, link: &Link, fault: Fault, action: Action, verb: &str, path: &str) -> Error {
        let label = format!("{verb} {}", self.describe(path));
        match fault {
            Fault::Status { code, message } => {
                let kind = errors::interview(link, code, action);
                let server = match message.is_empty() {
                    true => String::new(),
                    false => format!(" (server: {message})"),
                };
                Error::new(kind, format!("{label}: {}{server}", kind.reason()))
            }
            Fault::Lost(why) => Error::new(
                ErrorKind::Io,
                format!("{label}: the connection was lost ({why})"),
            ),
            Fault::TimedOut => Error::new(
                ErrorKind::TimedOut,
                format!("{label}: no answer within {:?}", self.settings.read_timeout),
            ),
            Fault::Local(e) => e,
        }
    }

    /// The target of the symlink at the server path `remote`.
    fn read_link(&self, link: &Link, remote: &str, path: &str) -> Result<String> {
        link.call(requests::read_link(&link.sftp, remote))
            .map_err(|f| self.explain(link, f, Action::Stat(remote), "readlink", path))
    }

    /// Opens `path` for reading and runs `read` on the handle, counting the bytes it writes
    /// to `dest`: a failed attempt is retried only while none were written.
    fn download_into<T>(
        &self,
        path: &str,
        dest: &mut dyn Write,
        read: impl Fn(&Link, &str, &str, &mut Tally) -> Result<T>,
    ) -> Result<T> {
        let remote = self.remote(path)?;
        let written = Cell::new(0);
        self.run(
            || written.get() == 0,
            |link| {
                let mut tally = Tally {
                    dest: &mut *dest,
                    written: &written,
                };
                self.reading(link, &remote, path, |handle| {
                    read(link, handle, &remote, &mut tally)
                })
            },
        )
    }

    /// Opens `remote` for reading and runs `read` on the handle, closing it after.
    fn reading<T>(
        &self,
        link: &Link,
        remote: &str,
        path: &str,
        read: impl FnOnce(&str) -> Result<T>,
    ) -> Result<T> {
        let handle = link
            .call(
                link.sftp
                    .open(remote, OpenFlags::READ, FileAttributes::empty()),
            )
            .map_err(|f| self.explain(link, f, Action::Read(remote), "open", path))?
            .handle;
        let result = read(&handle);
        // Nothing to learn from closing a file we only read, and a broken session would
        // only make us wait for it.
        if !link.is_broken() {
            let _ = link.call(link.sftp.close(handle));
        }
        result
    }

    /// Streams the open file into `dest` unless `validator` still holds.
    fn fetch_open(
        &self,
        link: &Link,
        handle: &str,
        (remote, path): (&str, &str),
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let attrs = link
            .call(link.sftp.fstat(handle))
            .map_err(|f| self.explain(link, f, Action::Read(remote), "fstat", path))?
            .attrs;
        let meta = meta_of(&attrs, None);
        if meta.kind == Kind::Dir {
            let reason = ErrorKind::IsADirectory.reason();
            return Err(Error::new(
                ErrorKind::IsADirectory,
                format!("read {}: {reason}", self.describe(path)),
            ));
        }
        if validator.is_some_and(|v| meta::still_valid(v, &meta)) {
            return Ok(Fetched::NotModified);
        }
        let len = link
            .block_on(requests::download(link, handle, 0, u64::MAX, dest))
            .map_err(|f| self.explain(link, f, Action::Read(remote), "read", path))?;
        // The size may have moved during the transfer: the bytes we have are what counts,
        // and an etag of other bytes would validate the wrong copy.
        let etag = meta.etag.filter(|_| meta.size == Some(len));
        Ok(Fetched::Body(Meta {
            size: Some(len),
            etag,
            ..meta
        }))
    }

    /// Writes a temporary sibling, then puts it in place: readers see the old file or the
    /// new one, never a part. The temporary gets the mode of the file it replaces (else
    /// that of `attrs`) and the time of `attrs` before it is placed; when both were set,
    /// they and the size are what the name now has, and no `lstat` asks. The temporary is
    /// removed if anything fails.
    ///
    /// `how.expect` is checked on the name's `lstat` that goes out with the temporary's
    /// creation (so a stale upload sends no data), and again as the temporary is placed
    /// ([`SftpDriver::place`]).
    fn write_and_place(
        &self,
        path: &str,
        (src, len): (&mut dyn Read, u64),
        how: &Upload,
    ) -> Result<Meta> {
        let remote = self.remote(path)?;
        let temporary = crate::temporary_beside(self, "write", path, crate::TEMPORARY_PREFIX)?;
        let tmp = self.remote(&temporary)?;
        let what = format!("write {}", self.describe(path));
        how.announce(&what, &Leftover::Temporary { path: temporary })?;
        let mtime = how.attrs.mtime.and_then(meta::seconds);
        let atime = how.attrs.atime.and_then(meta::seconds);
        self.run(
            || false,
            |link| {
                let (handle, now) = self.open_temporary(link, &tmp, &remote, path)?;
                let kept = now.as_ref().filter(|m| m.kind == Kind::File);
                let mode = kept
                    .and_then(|m| m.mode)
                    .or(how.attrs.mode)
                    .map(|m| m & 0o7777);
                let set = requests::kept_attrs(mode, mtime, atime);
                let set_atime = set.as_ref().and_then(|a| a.atime);
                let placed = match how.expect.admits(now.as_ref()) {
                    false => {
                        let _ = link.call(link.sftp.close(handle));
                        Err(how.expect.mismatch(&what, now.as_ref()))
                    }
                    true => self
                        .write_temporary(link, (&tmp, handle), (&mut *src, len), set, path)
                        .and_then(|()| self.place(link, (&tmp, &remote), how.expect, path)),
                };
                if let Err(e) = placed {
                    self.discard(link, &tmp);
                    return Err(e);
                }
                let known = FileAttributes {
                    size: Some(len),
                    permissions: mode,
                    mtime,
                    atime: set_atime,
                    ..FileAttributes::empty()
                };
                if mode.is_some() && mtime.is_some() {
                    return Ok(meta_of(&known, None));
                }
                // The file is in place; metadata that cannot be had only leaves it sparse.
                let attrs = link.call(link.sftp.lstat(remote.as_str()));
                Ok(attrs.map_or_else(|_| meta_of(&known, None), |a| meta_of(&a.attrs, None)))
            },
        )
    }

    /// Puts the written temporary `tmp` at `remote` if what is there is what `expect`
    /// says. A new file is linked into place with `hardlink@openssh.com`, which fails if
    /// the name exists (atomically, as link(2)), and its temporary name removed in the same
    /// round trip; a replacement is checked by an `lstat` right before the rename, both
    /// under the lock roam clients take on the name ([`crate::under_name_lock`]: one round
    /// trip remains in which a client other than roam goes unseen). A server without the
    /// extension gets the same recheck for a new file.
    fn place(
        &self,
        link: &Link,
        (tmp, remote): (&str, &str),
        expect: &Expect,
        path: &str,
    ) -> Result<()> {
        let what = || format!("write {}", self.describe(path));
        if *expect == Expect::Absent {
            let pipelined = self.hardlinks.load(Ordering::Relaxed);
            match link.block_on(requests::link_into_place(link, tmp, remote, pipelined)) {
                Ok(()) => {
                    self.hardlinks.store(true, Ordering::Relaxed);
                    return Ok(());
                }
                Err(f) if f.is(StatusCode::OpUnsupported) => {}
                Err(f) => {
                    return Err(match self.now_at(link, remote, path)? {
                        Some(now) => expect.mismatch(&what(), Some(&now)),
                        None => self.explain(link, f, Action::Write(remote), "write", path),
                    })
                }
            }
        }
        let check_and_rename = |link: &mut &Link| {
            if *expect != Expect::Any {
                let now = self.now_at(link, remote, path)?;
                if !expect.admits(now.as_ref()) {
                    return Err(expect.mismatch(&what(), now.as_ref()));
                }
            }
            link.call(requests::rename(link, tmp, remote)).map_err(|f| {
                let action = Action::Rename {
                    from: tmp,
                    to: remote,
                };
                self.explain(link, f, action, "write", path)
            })
        };
        match crate::lock_beside(remote, ".roam-") {
            Some(lock) if *expect != Expect::Any => crate::under_name_lock(
                &mut &*link,
                |l| match l.call(requests::simple(&l.sftp, Simple::MakeDir(0o777), &lock)) {
                    Ok(()) => crate::Attempt::Made,
                    // OpenSSH says EEXIST as a plain failure.
                    Err(f) if f.is(StatusCode::Failure) => crate::Attempt::Held,
                    Err(_) => crate::Attempt::Failed,
                },
                |l| drop(l.call(requests::simple(&l.sftp, Simple::RemoveDir, &lock))),
                check_and_rename,
            ),
            _ => check_and_rename(&mut &*link),
        }
    }

    /// What `remote` is now (`lstat`); `None` if nothing.
    fn now_at(&self, link: &Link, remote: &str, path: &str) -> Result<Option<Meta>> {
        match link.call(link.sftp.lstat(remote)) {
            Ok(attrs) => Ok(Some(meta_of(&attrs.attrs, None))),
            Err(f) if f.is(StatusCode::NoSuchFile) => Ok(None),
            Err(f) => Err(self.explain(link, f, Action::Stat(remote), "lstat", path)),
        }
    }

    /// Creates the temporary `tmp` and asks what `remote` is now, in one round trip (the
    /// two requests are independent): the handle of `tmp`, and what the name has (`None`:
    /// nothing). A directory at `remote` is EISDIR before any byte is sent (and `tmp` goes
    /// again).
    fn open_temporary(
        &self,
        link: &Link,
        tmp: &str,
        remote: &str,
        path: &str,
    ) -> Result<(String, Option<Meta>)> {
        let flags = OpenFlags::CREATE | OpenFlags::EXCLUDE | OpenFlags::WRITE;
        let (sftp, target) = (link.sftp.clone(), remote.to_owned());
        let (existing, opened) = link.block_on(async {
            let existing = tokio::spawn(async move { sftp.lstat(target).await });
            let opened = link.sftp.open(tmp, flags, FileAttributes::empty()).await;
            (existing.await, opened)
        });
        let existing = match existing {
            Ok(answer) => answer.map(|a| a.attrs).map_err(|e| link.fault(e)),
            Err(e) => Err(Fault::Lost(e.to_string())),
        };
        let opened = opened.map_err(|e| link.fault(e));
        match (self.replaced(link, existing, remote, path), opened) {
            (Ok(now), Ok(handle)) => Ok((handle.handle, now)),
            (Err(e), Ok(handle)) => {
                if !link.is_broken() {
                    let _ = link.call(link.sftp.close(handle.handle));
                }
                self.discard(link, tmp);
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
            (Ok(_), Err(f)) => Err(self.explain(link, f, Action::Write(tmp), "write", path)),
        }
    }

    /// Writes the `len` bytes of `src` into the open temporary `tmp`, sets `attrs` (a mode
    /// exactly, not masked by the server's umask; times) when there are any, and closes it.
    fn write_temporary(
        &self,
        link: &Link,
        (tmp, handle): (&str, String),
        (src, len): (&mut dyn Read, u64),
        attrs: Option<FileAttributes>,
        path: &str,
    ) -> Result<()> {
        link.block_on(requests::upload(link, &handle, src, len, attrs))
            .and_then(|sent| match sent == len {
                true => Ok(()),
                false => Err(Fault::Local(Error::new(
                    ErrorKind::Io,
                    format!(
                        "write {}: the data ended after {sent} of {len} bytes",
                        self.describe(path)
                    ),
                ))),
            })
            .map_err(|f| self.explain(link, f, Action::Write(tmp), "write", path))
    }

    /// What `put` replaces, from its `lstat`: the name's metadata (`None`: nothing);
    /// EISDIR if it is a directory.
    fn replaced(
        &self,
        link: &Link,
        existing: std::result::Result<FileAttributes, Fault>,
        remote: &str,
        path: &str,
    ) -> Result<Option<Meta>> {
        match existing {
            Ok(attrs) if meta::type_of(&attrs) == FileKind::Dir => Err(Error::new(
                ErrorKind::IsADirectory,
                format!(
                    "write {}: {}",
                    self.describe(path),
                    ErrorKind::IsADirectory.reason()
                ),
            )),
            Ok(attrs) => Ok(Some(meta_of(&attrs, None))),
            Err(f) if f.is(StatusCode::NoSuchFile) => Ok(None),
            Err(f) => Err(self.explain(link, f, Action::Write(remote), "write", path)),
        }
    }

    /// Best-effort removal of a failed upload's temporary, on a fresh connection if the
    /// failure broke this one. Its own failure is only logged: the caller needs the
    /// upload's error, and a leftover temporary is at least a hidden name.
    fn discard(&self, link: &Link, tmp: &str) {
        let removed = match link.usable() {
            true => link
                .call(link.sftp.remove(tmp))
                .map_err(|f| format!("{f:?}")),
            false => self.link().map_err(|e| e.message).and_then(|fresh| {
                fresh
                    .call(fresh.sftp.remove(tmp))
                    .map_err(|f| format!("{f:?}"))
            }),
        };
        if let Err(e) = removed {
            tracing::warn!("sftp: could not remove the temporary {tmp}: {e}");
        }
    }

    /// One listing entry; a symlink's target is read, or left out if that fails.
    fn entry(
        &self,
        link: &Link,
        dir: &str,
        name: String,
        attrs: &FileAttributes,
    ) -> crate::DirEntry {
        let target = match meta::type_of(attrs) {
            FileKind::Symlink => {
                let full = format!("{}/{name}", dir.trim_end_matches('/'));
                link.call(requests::read_link(&link.sftp, &full))
                    .inspect_err(|f| tracing::debug!("sftp: readlink {full}: {f:?}"))
                    .ok()
            }
            _ => None,
        };
        crate::DirEntry {
            name,
            meta: meta_of(attrs, target),
        }
    }

    /// One request that needs nothing back. Only chmod may run twice: the others would
    /// fail the second time (EEXIST, ENOENT) after succeeding the first.
    fn simple(&self, request: Simple, path: &str) -> Result<()> {
        let remote = self.remote(path)?;
        let (verb, action) = match request {
            Simple::MakeDir(_) => ("mkdir", Action::MakeDir(&remote)),
            Simple::RemoveFile => ("remove", Action::RemoveFile(&remote)),
            Simple::RemoveDir => ("rmdir", Action::RemoveDir(&remote)),
            Simple::SetMode(_) => ("chmod", Action::SetAttr(&remote)),
            Simple::Symlink(_) => ("symlink", Action::Symlink(&remote)),
        };
        self.run(
            || matches!(request, Simple::SetMode(_)),
            |link| {
                link.call(requests::simple(&link.sftp, request, &remote))
                    .map_err(|f| self.explain(link, f, action, verb, path))
            },
        )
    }
}

/// A name from a listing, if it is safe to show. russh-sftp decodes names lossily, so a
/// name that was not UTF-8 arrives with U+FFFD and would address another file: dropped.
fn listed_name(name: String) -> Option<String> {
    match is_safe_name(&name) && !name.contains('\u{fffd}') {
        true => Some(name),
        false => {
            if name != "." && name != ".." {
                tracing::warn!("sftp: dropping the unsafe or undecodable name {name:?}");
            }
            None
        }
    }
}

/// Counts what reaches `dest`, so that a failed read is retried only if it gave nothing.
struct Tally<'a> {
    dest: &'a mut dyn Write,
    written: &'a Cell<u64>,
}

impl Write for Tally<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.dest.write(buf)?;
        self.written.set(self.written.get() + n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.dest.flush()
    }
}

impl Driver for SftpDriver {
    /// A Unix file system over SSH: ranges are pipelined reads of a handle, so roam
    /// streams its large files as it does HTTP's.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            serves_links: true,
            symlinks: true,
            set_atime: true,
            ..Capabilities::writable()
                .with_modes_and_times()
                .with_ranges()
        }
    }

    fn describe(&self, path: &str) -> String {
        self.target.describe(path)
    }

    fn sources(&self) -> Vec<(String, String)> {
        let e = &self.endpoint;
        let paths = |files: &[std::path::PathBuf]| {
            let shown: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            shown.join(", ")
        };
        vec![
            ("host".into(), format!("{}@{}:{}", e.user, e.host, e.port)),
            ("route".into(), format!("{:?}", e.proxy)),
            ("agent".into(), format!("{:?}", e.agent)),
            ("identity files".into(), paths(&e.identities)),
            ("certificates".into(), paths(&e.certificates)),
            ("known hosts".into(), paths(&e.trust.user_files)),
            ("global known hosts".into(), paths(&e.trust.global_files)),
            ("host key checking".into(), format!("{:?}", e.trust.strict)),
        ]
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let remote = self.remote(path)?;
        self.run(
            || true,
            |link| {
                let attrs = link
                    .call(link.sftp.lstat(remote.as_str()))
                    .map_err(|f| self.explain(link, f, Action::Stat(&remote), "lstat", path))?
                    .attrs;
                let target = match meta::type_of(&attrs) {
                    FileKind::Symlink => Some(self.read_link(link, &remote, path)?),
                    _ => None,
                };
                Ok(meta_of(&attrs, target))
            },
        )
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let remote = self.remote(path)?;
        self.run(
            || true,
            |link| {
                let entries = link
                    .call(requests::read_dir(&link.sftp, &remote))
                    .map_err(|f| self.explain(link, f, Action::List(&remote), "readdir", path))?;
                let entries = entries
                    .into_iter()
                    .filter_map(|(name, attrs)| Some((listed_name(name)?, attrs)))
                    .map(|(name, attrs)| self.entry(link, &remote, name, &attrs))
                    .collect();
                Ok(Listing {
                    entries,
                    complete: true,
                    stands_alone: true,
                })
            },
        )
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        self.download_into(path, dest, |link, handle, remote, tally| {
            self.fetch_open(link, handle, (remote, path), tally, validator)
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
        self.download_into(path, dest, |link, handle, remote, tally| {
            if let Some(of) = of {
                // The handle holds the version its fstat describes.
                let attrs = link
                    .call(link.sftp.fstat(handle))
                    .map_err(|f| self.explain(link, f, Action::Read(remote), "fstat", path))?
                    .attrs;
                of.check(
                    &meta_of(&attrs, None),
                    &format!("read {}", self.describe(path)),
                )?;
            }
            link.block_on(requests::download(link, handle, offset, len, tally))
                .map_err(|f| self.explain(link, f, Action::Read(remote), "read", path))
        })
    }

    /// The mode and time go up with the contents: set on the temporary before it is
    /// placed, so no `setstat` and `stat` follow.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        self.write_and_place(path, (src, len), how)
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        match self.simple(Simple::RemoveFile, leftover.path()) {
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// The mode travels with the MKDIR, which the server narrows by its umask (OpenSSH's
    /// `sftp-server`: its sshd's, usually 022); where that could have dropped a bit asked
    /// for (group or other write, the special bits), one SETSTAT puts it back.
    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.simple(Simple::MakeDir(mode), path)?;
        match mode & 0o7022 {
            0 => Ok(()),
            _ => self.set_mode(path, mode),
        }
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.simple(Simple::RemoveFile, path)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.simple(Simple::RemoveDir, path)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (old, new) = (self.remote(from)?, self.remote(to)?);
        self.run(
            || false,
            |link| {
                link.call(requests::rename(link, &old, &new)).map_err(|f| {
                    let action = Action::Rename {
                        from: &old,
                        to: &new,
                    };
                    self.explain(link, f, action, "rename", from)
                })
            },
        )
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.simple(Simple::SetMode(mode), path)
    }

    /// SFTP v3 sets both times at once, in whole seconds: the access time is kept.
    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.setstat_times(path, None, Some(mtime))
    }

    /// Both in one `SETSTAT`, or the access time alone (the modification time kept).
    fn set_times(&self, path: &str, atime: SystemTime, mtime: Option<SystemTime>) -> Result<()> {
        self.setstat_times(path, Some(atime), mtime)
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.simple(Simple::Symlink(target), path)
    }
}

/// The driver's tokio runtime: one worker thread runs the SSH connection's tasks, while
/// callers block on their own requests. Dropped without waiting, so that dropping a
/// driver never blocks (nor panics inside another runtime).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> std::io::Result<Runtime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("roam-sftp")
            .enable_io()
            .enable_time()
            .build()?;
        Ok(Runtime(Some(runtime)))
    }

    fn block_on<F: std::future::Future>(&self, work: F) -> F::Output {
        let runtime = self.0.as_ref();
        runtime
            .expect("the runtime lives as long as the driver")
            .block_on(work)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `program` if a directory of `PATH` has it (executable).
fn on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The machine's host name (gethostname(2)).
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).ok()
}

/// The name and home directory of the effective uid's passwd entry.
fn passwd() -> Option<(String, PathBuf)> {
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids), filled in below.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found = std::ptr::null_mut();
    // SAFETY: the re-entrant lookup writes only into `entry` and `buf`, whose sizes we
    // pass, and sets `found` to `&entry` or NULL.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` and `pw_dir` point to NUL-terminated strings in `buf`.
    let (name, dir) = unsafe {
        (
            std::ffi::CStr::from_ptr(entry.pw_name),
            std::ffi::CStr::from_ptr(entry.pw_dir),
        )
    };
    Some((
        name.to_str().ok()?.to_owned(),
        PathBuf::from(dir.to_str().ok()?),
    ))
}
