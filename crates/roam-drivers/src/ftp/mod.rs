//! FTP driver (RFC 959 and its extensions), on our own client over `TcpStream`: POSIX
//! precision needs every reply code, and Parrot's interview needs follow-up commands on
//! the same session.
//!
//! - Login from the URL, else `~/.netrc`, else anonymous; passive mode; binary transfers.
//! - A small pool of logged-in control connections per driver (`pool.rs`); an operation
//!   that finds its connection broken is retried once on a fresh one if it is idempotent
//!   (stat, list, fetch, read_range) and has not yet delivered bytes; writes never are.
//! - Metadata from MLST/MLSD where advertised, else LIST (Unix and DOS formats) refined
//!   by SIZE and MDTM (`session.rs`, `listing.rs`). FTP has no conditional GET: a fetch
//!   compares SIZE and MDTM with the cached copy's validator instead.
//! - A refusal with 550 (or 450/501/553) starts the interview (`interview.rs`) that turns
//!   it into ENOENT, EACCES, EISDIR, ENOTDIR, EEXIST or ENOTEMPTY; `errors.rs` maps the
//!   other reply codes.
//!
//! - `ftps://`: explicit FTPS (`tls.rs`), certificates verified as for HTTPS.
//!
//! Paths: a mount URL's path is absolute on the server (not relative to the login
//! directory), so `/ftp/host/pub/x` is `/pub/x` for every user.

mod control;
mod errors;
#[cfg(test)]
mod fuzz;
mod interview;
mod listing;
mod pool;
mod session;
mod time;
mod tls;
mod url;

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use self::control::{Conn, Fault, Login, Timeouts};
use self::errors::Verdict;
use self::interview::Action;
use self::pool::Pool;
use self::session::{list_command, Stamp};
use self::tls::Ftps;
use self::url::{is_driver_path, Site};
use crate::http::TlsOptions;
use crate::{
    Attrs, Capabilities, Driver, Error, ErrorKind, Expect, Fetched, Leftover, Listing, Meta,
    Pinned, Result, Upload, Validator,
};

/// The password anonymous FTP asks for (by convention an e-mail address; any will do).
const ANONYMOUS_PASSWORD: &str = "roam@";

/// Timeouts, pooling and credentials of the FTP driver.
#[derive(Clone, Debug)]
pub struct FtpConfig {
    pub connect_timeout: Duration,
    /// For every read of a reply or of data: a transfer may take hours, but never stall.
    pub read_timeout: Duration,
    /// How long an idle control connection stays open for the next operation.
    pub idle_keep: Duration,
    /// The netrc file to take logins from, if any.
    pub netrc: Option<PathBuf>,
    /// How an `ftps://` server's certificate is verified (its `[tls."HOST:PORT"]`).
    pub tls: TlsOptions,
}

impl Default for FtpConfig {
    fn default() -> Self {
        FtpConfig {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            idle_keep: Duration::from_secs(60),
            netrc: crate::netrc::default_path(),
            tls: TlsOptions::default(),
        }
    }
}

/// A tree on one FTP server, rooted at a mount URL's path.
pub struct FtpDriver {
    site: Site,
    login: Login,
    /// Where the login came from, in words (never the password).
    login_source: String,
    timeouts: Timeouts,
    /// TLS for `ftps://`.
    ftps: Option<Ftps>,
    pool: Pool,
    /// Whether the server's FEAT offered MFMT, from the last login (false before one).
    mfmt: AtomicBool,
}

// By hand: the login holds a password.
impl fmt::Debug for FtpDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FtpDriver")
            .field("site", &self.site)
            .finish()
    }
}

/// Whether an operation may run again after its connection broke.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    Idempotent,
    Never,
}

impl FtpDriver {
    /// A driver for `ftp://[user[:password]@]host[:port][/prefix]`, or `ftps://...`.
    /// Nothing is sent until the first operation; the credentials and TLS choices are
    /// settled now.
    pub fn new(cfg: FtpConfig, url: &str) -> Result<FtpDriver> {
        let site = Site::parse(url)?;
        let (login, login_source) = login_for(&site, cfg.netrc.as_deref());
        if [&login.user, &login.password]
            .iter()
            .any(|s| s.contains(['\r', '\n']))
        {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!("{}: a login may not contain a line break", site.origin()),
            ));
        }
        let ftps = match site.secure {
            true => Some(Ftps::new(&cfg.tls, &site.host, &site.authority)?),
            false => None,
        };
        Ok(FtpDriver {
            ftps,
            site,
            login,
            login_source,
            timeouts: Timeouts {
                connect: cfg.connect_timeout,
                read: cfg.read_timeout,
            },
            pool: Pool::new(cfg.idle_keep),
            mfmt: AtomicBool::new(false),
        })
    }

    /// The server path of a driver path, after checking it is one.
    fn remote(&self, path: &str) -> Result<String> {
        match is_driver_path(path) {
            true => Ok(self.site.remote(path)),
            false => Err(Error::new(
                ErrorKind::InvalidName,
                format!("{}: {path:?} is not a normalised path", self.site.origin()),
            )),
        }
    }

    /// A new logged-in connection. A refused login is EACCES (530), a busy server EIO
    /// (421), no server EHOSTUNREACH.
    fn connect(&self) -> Result<Conn> {
        let conn = Conn::open(&self.site, &self.login, self.timeouts, self.ftps.as_ref())
            .map_err(|fault| self.fail(&format!("connect {}", self.site.origin()), fault))?;
        self.mfmt.store(conn.features.mfmt, Ordering::Relaxed);
        Ok(conn)
    }

    /// Runs `op` on a pooled (or new) connection and pools the connection again. An
    /// idempotent operation whose connection broke before it delivered anything runs once
    /// more on a fresh connection: a pooled connection may have been closed by the server
    /// since its last use. A timeout is not retried: the server is slow, not gone.
    fn run<T>(&self, retry: Retry, mut op: impl FnMut(&mut Conn) -> Result<T>) -> Result<T> {
        let mut conn = match self.pool.take() {
            Some(conn) => conn,
            None => self.connect()?,
        };
        conn.begin();
        let first = match op(&mut conn) {
            Err(e)
                if retry == Retry::Idempotent
                    && conn.is_broken()
                    && !conn.delivered()
                    && e.kind != ErrorKind::TimedOut =>
            {
                e
            }
            result => {
                self.pool.give(conn);
                return result;
            }
        };
        tracing::debug!("ftp: retrying on a fresh connection after: {first}");
        let mut fresh = self.connect()?;
        let result = op(&mut fresh);
        self.pool.give(fresh);
        result
    }

    /// Turns a fault of `command` on the server path `path` into the driver error,
    /// interviewing the server about a 550-like refusal.
    fn explain(
        &self,
        conn: &mut Conn,
        fault: Fault,
        action: Action,
        command: &str,
        path: &str,
    ) -> Error {
        let label = format!("{command} {}", conn.url(path));
        let reply = match fault {
            Fault::Refused(reply) if errors::verdict(reply.code) == Verdict::Ask => reply,
            other => return self.fail(&label, other),
        };
        let kind = interview::ask(conn, action, path).unwrap_or_else(|e| {
            tracing::debug!("ftp: the interview about {label} failed: {e:?}");
            ErrorKind::PermissionDenied
        });
        errors::refused(&label, kind, &reply)
    }

    /// The error of a fault, by what it says by itself. A refusal that would need an
    /// interview (none is possible here) is taken as EACCES: something exists that we
    /// may not use.
    fn fail(&self, label: &str, fault: Fault) -> Error {
        match fault {
            Fault::Refused(reply) => {
                let kind = match errors::verdict(reply.code) {
                    Verdict::Known(kind) => kind,
                    Verdict::Ask => ErrorKind::PermissionDenied,
                };
                errors::refused(label, kind, &reply)
            }
            Fault::Transport(e) => errors::transport(label, &e, self.timeouts.read),
            Fault::NoTls(reply) => Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{label}: the server does not speak FTPS: it refused AUTH TLS ({reply}); \
                     roam does not fall back to plain FTP for ftps://"
                ),
            ),
            Fault::Local(e) => Error::from_io(label, &e),
            Fault::Absent => Error::new(
                ErrorKind::NotFound,
                format!("{label}: {}", ErrorKind::NotFound.reason()),
            ),
        }
    }

    /// STOR to a temporary sibling, then RNFR/RNTO onto the name: readers see the old file
    /// or the new one, never a part. The temporary is deleted if anything fails. The mode
    /// (SITE CHMOD) and time (MFMT) of `attrs` are set on the temporary, so the name gets
    /// them with its contents; a time the server took is the file's time, and then no SIZE
    /// and MDTM need ask what the upload made. FTP has no conditional rename: `how.expect`
    /// is checked right before RNFR (MLST, else SIZE and MDTM), which leaves the round trips
    /// of RNFR and RNTO in which another client's write goes unseen.
    fn store(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        let remote = self.remote(path)?;
        let temporary = crate::temporary_beside(self, "STOR", path, crate::TEMPORARY_PREFIX)?;
        let tmp = self.remote(&temporary)?;
        let what = format!("STOR {}", self.describe(path));
        how.announce(&what, &Leftover::Temporary { path: temporary })?;
        self.run(Retry::Never, |conn| {
            let stored = conn
                .store(&format!("STOR {tmp}"), src, len)
                .and_then(|sent| match sent == len {
                    true => Ok(()),
                    false => Err(Fault::Local(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the data ended after {sent} of {len} bytes"),
                    ))),
                })
                .and_then(|()| stamp_on(conn, &tmp, how.attrs))
                .and_then(|kept| Ok((kept, place(conn, (&tmp, &remote), how.expect)?)))
                .map(|(kept, found)| match found {
                    Found::Expected => Ok(kept),
                    Found::Other(now) => Err(how.expect.mismatch(&what, now.as_ref())),
                });
            match stored {
                Ok(Ok((Some(mtime), mode))) => Ok(Meta {
                    mode,
                    ..Stamp::new(len, mtime).meta(len)
                }),
                // The file is in place; a time or stamp that cannot be had is left out.
                Ok(Ok((None, mode))) => Ok(Meta {
                    mode,
                    ..Stamp::of(conn, &remote).unwrap_or_default().meta(len)
                }),
                Ok(Err(changed)) => {
                    self.discard(conn, &tmp);
                    Err(changed)
                }
                Err(fault) => {
                    let err = self.explain(conn, fault, Action::Write, "STOR", &remote);
                    self.discard(conn, &tmp);
                    Err(err)
                }
            }
        })
    }

    /// One command that succeeds with a 2xx reply (MKD, DELE, RMD, SITE CHMOD, MFMT).
    fn simple(&self, command: &str, argument: &str, action: Action, path: &str) -> Result<()> {
        let remote = self.remote(path)?;
        self.run(Retry::Never, |conn| {
            let line = format!("{command} {argument}{remote}");
            conn.expect(&line, 2)
                .map(drop)
                .map_err(|fault| self.explain(conn, fault, action, command, &remote))
        })
    }

    /// Best-effort removal of a failed upload's temporary file, on a fresh connection if
    /// the failure broke this one. Its own failure is ignored: the caller needs the
    /// upload's error, and a leftover temporary is at least a hidden name.
    fn discard(&self, conn: &mut Conn, tmp: &str) {
        let dele = format!("DELE {tmp}");
        if !conn.is_broken() {
            let _ = conn.command(&dele);
        } else if let Ok(mut fresh) = self.connect() {
            let _ = fresh.command(&dele);
            self.pool.give(fresh);
        }
    }
}

/// Who logs in: the URL's user and password, else netrc's entry for the host (and the
/// URL's user, if it names one), else anonymous; and where that came from, in words.
fn login_for(site: &Site, netrc: Option<&Path>) -> (Login, String) {
    let found = match &site.password {
        Some(_) => None,
        None => netrc.and_then(|path| crate::netrc::read(path, &site.host, site.user.as_deref())),
    };
    let source = match (&found, netrc) {
        _ if site.password.is_some() => "user and password from the URL".to_owned(),
        (Some(entry), Some(file)) => crate::netrc::describe(file, entry),
        _ if site.user.is_some() => "user from the URL, no password".to_owned(),
        _ => "anonymous".to_owned(),
    };
    let found = found.unwrap_or_default();
    let user = site
        .user
        .clone()
        .or(found.login)
        .unwrap_or_else(|| "anonymous".into());
    let anonymous = control::is_anonymous(&user);
    let password = site
        .password
        .clone()
        .or(found.password)
        .unwrap_or_else(|| match anonymous {
            true => ANONYMOUS_PASSWORD.into(),
            false => String::new(),
        });
    (Login { user, password }, source)
}

/// Sets the mode and time of `attrs` on the uploaded temporary `tmp`, where the server
/// can; returns the time (in whole seconds, as MFMT sent it) and the mode it now has, each
/// `None` when not set. Only a broken connection is a fault: a refused SITE CHMOD or MFMT
/// leaves the file without that attribute, as a server without them would.
fn stamp_on(
    conn: &mut Conn,
    tmp: &str,
    attrs: Attrs,
) -> std::result::Result<(Option<SystemTime>, Option<u32>), Fault> {
    let mut kept = (None, None);
    if let Some(mode) = attrs.mode.map(|m| m & 0o7777) {
        kept.1 = conn
            .command(&format!("SITE CHMOD {mode:04o} {tmp}"))?
            .is(2)
            .then_some(mode);
    }
    if let Some(t) = attrs.mtime.filter(|_| conn.features.mfmt) {
        let sent = time::format_timeval(t);
        kept.0 = conn
            .command(&format!("MFMT {sent} {tmp}"))?
            .is(2)
            .then(|| time::parse_timeval(&sent))
            .flatten();
    }
    Ok(kept)
}

/// Whether an upload may replace what `remote` is now.
enum Found {
    Expected,
    /// Not what the upload expected: this is there (`None`: nothing).
    Other(Option<Meta>),
}

/// Asks what `remote` is now, unless `expect` takes anything.
fn expected(conn: &mut Conn, remote: &str, expect: &Expect) -> std::result::Result<Found, Fault> {
    if *expect == Expect::Any {
        return Ok(Found::Expected);
    }
    let now = session::now_at(conn, remote)?;
    Ok(match expect.admits(now.as_ref()) {
        true => Found::Expected,
        false => Found::Other(now),
    })
}

/// Renames the temporary `tmp` onto `remote` if what is there is what `expect` says: the
/// check and the rename under the lock roam clients take on the name (FTP has no
/// conditional rename; see [`crate::under_name_lock`]).
fn place(
    conn: &mut Conn,
    (tmp, remote): (&str, &str),
    expect: &Expect,
) -> std::result::Result<Found, Fault> {
    let check_and_rename = |conn: &mut Conn| match expected(conn, remote, expect)? {
        Found::Expected => rename_on(conn, tmp, remote).map(|()| Found::Expected),
        other => Ok(other),
    };
    match crate::lock_beside(remote, ".roam-") {
        Some(lock) if *expect != Expect::Any => crate::under_name_lock(
            conn,
            |c| match c.expect(&format!("MKD {lock}"), 2) {
                Ok(_) => crate::Attempt::Made,
                Err(_) if c.is_broken() => crate::Attempt::Failed,
                // 550 says "exists" and "not allowed" alike; the temporary was just made
                // here, so it is the lock.
                Err(_) => crate::Attempt::Held,
            },
            |c| drop(c.command(&format!("RMD {lock}"))),
            check_and_rename,
        ),
        _ => check_and_rename(conn),
    }
}

/// RNFR + RNTO.
fn rename_on(conn: &mut Conn, from: &str, to: &str) -> std::result::Result<(), Fault> {
    conn.expect(&format!("RNFR {from}"), 3)?;
    conn.expect(&format!("RNTO {to}"), 2)?;
    Ok(())
}

impl Driver for FtpDriver {
    /// Modes by SITE CHMOD, which servers refuse anonymous users (`EACCES`); times by MFMT
    /// where the server's FEAT offers it, known once a connection has logged in; no links
    /// made (a server's own are shown, and followed by it in the middle of a path).
    fn capabilities(&self) -> Capabilities {
        let chmod = !control::is_anonymous(&self.login.user);
        Capabilities {
            serves_links: true,
            file_modes: chmod,
            dir_modes: chmod,
            set_mtime: self.mfmt.load(Ordering::Relaxed),
            ..Capabilities::writable().with_ranges()
        }
    }

    fn describe(&self, path: &str) -> String {
        self.site.describe(path)
    }

    fn sources(&self) -> Vec<(String, String)> {
        let mut sources = vec![("login".into(), self.login_source.clone())];
        if let Some(ftps) = &self.ftps {
            sources.push(("CA".into(), ftps.authorities.clone()));
        }
        sources
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        let remote = self.remote(path)?;
        self.run(Retry::Idempotent, |conn| {
            let command = match conn.features.mlst {
                true => "MLST",
                false => "LIST",
            };
            session::stat(conn, &remote)
                .map_err(|fault| self.explain(conn, fault, Action::Stat, command, &remote))
        })
    }

    fn list(&self, path: &str) -> Result<Listing> {
        let remote = self.remote(path)?;
        self.run(Retry::Idempotent, |conn| {
            let command = list_command(conn);
            session::list(conn, &remote)
                .map_err(|fault| self.explain(conn, fault, Action::List, command, &remote))
        })
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let remote = self.remote(path)?;
        self.run(Retry::Idempotent, |conn| {
            let fetched = Stamp::of(conn, &remote).and_then(|stamp| {
                if validator.is_some_and(|v| stamp.satisfies(v)) {
                    return Ok(Fetched::NotModified);
                }
                let len = conn.retrieve(&format!("RETR {remote}"), dest, u64::MAX)?;
                stamp.whole(len)?;
                Ok(Fetched::Body(stamp.meta(len)))
            });
            fetched.map_err(|fault| self.explain(conn, fault, Action::Read, "RETR", &remote))
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
        let remote = self.remote(path)?;
        self.run(Retry::Idempotent, |conn| {
            if let Some(of) = of {
                // No conditional RETR: the version is asked for right before (MLST, else
                // SIZE and MDTM), which leaves one round trip's window.
                let now = session::now_at(conn, &remote)
                    .map_err(|fault| self.explain(conn, fault, Action::Read, "MLST", &remote))?;
                if let Some(now) = now {
                    of.check(&now, &format!("RETR {}", self.describe(path)))?;
                }
            }
            let restarted = match offset {
                0 => Ok(()),
                _ => conn.expect(&format!("REST {offset}"), 3).map(drop),
            };
            let read = restarted.and_then(|()| conn.retrieve(&format!("RETR {remote}"), dest, len));
            match read {
                // RFC 1123: 554 refuses a REST position, which here means one past the end:
                // like pread(2) there, nothing to read.
                Err(Fault::Refused(reply)) if reply.code == 554 && offset > 0 => Ok(0),
                other => {
                    other.map_err(|fault| self.explain(conn, fault, Action::Read, "RETR", &remote))
                }
            }
        })
    }

    /// The mode and time go with the upload, on the same connection.
    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        self.store(path, src, len, how)
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        match self.simple("DELE", "", Action::RemoveFile, leftover.path()) {
            Err(e) if e.kind == ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// MKD takes no mode: the directory gets the server's (0777 less its umask, 0755 as a
    /// rule), so another mode follows with SITE CHMOD (where the server has none, or
    /// refuses it to an anonymous user, the server's mode stays: the directory is made).
    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.simple("MKD", "", Action::MakeDir, path)?;
        if mode & 0o7777 == 0o755 || !self.capabilities().dir_modes {
            return Ok(());
        }
        match self.set_mode(path, mode & 0o7777) {
            Err(e) if e.kind == ErrorKind::Unsupported => Ok(()),
            other => other,
        }
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.simple("DELE", "", Action::RemoveFile, path)
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.simple("RMD", "", Action::RemoveDir, path)
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (source, target) = (self.remote(from)?, self.remote(to)?);
        self.run(Retry::Never, |conn| {
            conn.expect(&format!("RNFR {source}"), 3)
                .map_err(|fault| self.explain(conn, fault, Action::Stat, "RNFR", &source))?;
            let action = Action::RenameTo { from: &source };
            conn.expect(&format!("RNTO {target}"), 2)
                .map(drop)
                .map_err(|fault| self.explain(conn, fault, action, "RNTO", &target))
        })
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.simple(
            "SITE CHMOD",
            &format!("{:04o} ", mode & 0o7777),
            Action::Stat,
            path,
        )
    }

    /// MFMT (draft-somers-ftp-mfxx), where FEAT advertises it.
    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        let remote = self.remote(path)?;
        self.run(Retry::Never, |conn| {
            if !conn.features.mfmt {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "MFMT {}: the server cannot set modification times",
                        conn.url(&remote)
                    ),
                ));
            }
            let line = format!("MFMT {} {remote}", time::format_timeval(mtime));
            conn.expect(&line, 2)
                .map(drop)
                .map_err(|fault| self.explain(conn, fault, Action::SetTime, "MFMT", &remote))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_come_from_the_url_then_netrc_then_anonymous() {
        let dir = std::env::temp_dir().join(format!("roam-ftp-netrc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let netrc = dir.join("netrc");
        std::fs::write(&netrc, "machine h login alice password fromnetrc\n").unwrap();
        let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
        std::fs::set_permissions(&netrc, owner_only).unwrap();
        let login = |url: &str, file: Option<&Path>| {
            let (l, _) = login_for(&Site::parse(url).unwrap(), file);
            (l.user, l.password)
        };
        let pair = |u: &str, p: &str| (u.to_owned(), p.to_owned());
        assert_eq!(login("ftp://bob:pw@h/", Some(&netrc)), pair("bob", "pw"));
        assert_eq!(login("ftp://h/", Some(&netrc)), pair("alice", "fromnetrc"));
        assert_eq!(
            login("ftp://alice@h/", Some(&netrc)),
            pair("alice", "fromnetrc")
        );
        assert_eq!(login("ftp://carol@h/", Some(&netrc)), pair("carol", ""));
        assert_eq!(
            login("ftp://other/", Some(&netrc)),
            pair("anonymous", "roam@")
        );
        assert_eq!(
            login("ftp://h/", Some(&dir.join("missing"))),
            pair("anonymous", "roam@")
        );
        assert_eq!(login("ftp://h/", None), pair("anonymous", "roam@"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_paths_and_logins_are_refused_before_any_connection() {
        let cfg = FtpConfig {
            netrc: None,
            ..FtpConfig::default()
        };
        // Port 1 on loopback: nothing listens, but nothing must be sent anyway.
        let driver = FtpDriver::new(cfg.clone(), "ftp://127.0.0.1:1/pub").unwrap();
        for bad in ["relative", "/a/../b", "/a\r\nDELE /x", "/trailing/"] {
            assert_eq!(
                driver.stat(bad).unwrap_err().kind,
                ErrorKind::InvalidName,
                "{bad:?}"
            );
        }
        let err = FtpDriver::new(cfg, "ftp://u:p%0d%0aDELE%20x@127.0.0.1/").unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidName);
        assert!(!err.message.contains("DELE"), "{}", err.message);
    }

    #[test]
    fn debug_output_hides_the_password() {
        let cfg = FtpConfig {
            netrc: None,
            ..FtpConfig::default()
        };
        let driver = FtpDriver::new(cfg, "ftp://u:hunter2@127.0.0.1:2121/pub").unwrap();
        let shown = format!("{driver:?}");
        assert!(
            shown.contains("ftp://u@127.0.0.1:2121/pub") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert_eq!(driver.describe("/a b"), "ftp://u@127.0.0.1:2121/pub/a b");
    }
}
