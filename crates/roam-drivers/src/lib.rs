//! Protocol drivers: one file (or folder) per protocol behind the [`Driver`] trait.
//!
//! Drivers are leaves of the roam workspace: they import nothing of ours, so each can be
//! tested alone against its real server. A driver speaks in *driver paths*: absolute,
//! `/`-separated, already normalised (no `.`/`..`, no trailing slash except the root `/`),
//! with names decoded (a space is a space, not `%20`). The namespace layer above turns the
//! names programs use into driver paths; a driver turns them into requests.

mod calendar;
mod capabilities;
pub mod chirp;
pub mod dav;
mod error;
pub mod ftp;
pub mod http;
pub mod layer;
pub mod local;
pub mod mem;
pub mod netrc;
pub mod s3;
pub mod secrets;
pub mod sftp;
mod url;
mod version;

// Lets the fuzz properties bound what one parse allocates (roam_testkit::fuzz::bounded).
#[cfg(test)]
#[global_allocator]
static ALLOC: roam_testkit::fuzz::CountingAlloc = roam_testkit::fuzz::CountingAlloc;

use std::fmt::Debug;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::SystemTime;

pub use capabilities::Capabilities;
pub use error::{Error, ErrorKind, Result};
pub use version::{Pinned, Validator};

/// What kind of object a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A named pipe (made by `mkfifo`; `mem:` only).
    Fifo,
    /// A unix socket's name (made by `bind`; `mem:` only).
    Socket,
}

/// Metadata of one remote object, as precise as the protocol allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// `None` when the server did not say (e.g. a listing without exact sizes).
    pub size: Option<u64>,
    pub mtime: Option<SystemTime>,
    /// Permission bits (`0o7777` mask) where the protocol has them.
    pub mode: Option<u32>,
    /// Opaque validator (HTTP ETag, S3 ETag ...), used for cache revalidation.
    pub etag: Option<String>,
    /// Target of a symbolic link, for `Kind::Symlink`.
    pub symlink_target: Option<String>,
    /// The link count where the backend keeps one (`mem:`'s directories: 2 and one per
    /// subdirectory, as on a local disk); `None` for the usual (1, directories 2).
    pub nlink: Option<u32>,
    /// The access time where the backend keeps one apart (`mem:`'s files); `None`: the
    /// modification time stands for it.
    pub atime: Option<SystemTime>,
    /// How long the server lets these contents be used without asking it again (HTTP's
    /// `Cache-Control`); `None` when it says nothing, and T_read alone decides.
    pub fresh_for: Option<FreshFor>,
}

/// A time contents stay fresh, in whole seconds (up to about 136 years), in four bytes
/// with `Option`'s `None` in the same space: [`Meta`] travels in errors, which must stay
/// small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshFor(std::num::NonZeroU32);

impl FreshFor {
    pub fn from_secs(secs: u64) -> FreshFor {
        let secs = u32::try_from(secs).unwrap_or(u32::MAX);
        // Stored plus one, so that zero (revalidate every time) is a value too.
        FreshFor(std::num::NonZeroU32::MIN.saturating_add(secs))
    }

    pub fn as_secs(self) -> u64 {
        u64::from(self.0.get() - 1)
    }
}

impl Meta {
    /// Metadata that says only what kind of object this is.
    pub fn of_kind(kind: Kind) -> Meta {
        Meta {
            kind,
            size: None,
            mtime: None,
            mode: None,
            etag: None,
            symlink_target: None,
            nlink: None,
            atime: None,
            fresh_for: None,
        }
    }
}

/// One entry of a directory listing. `name` is a single validated component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub meta: Meta,
}

/// A directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<DirEntry>,
    /// `true` when the listing is known to name every entry, so a name absent from it does
    /// not exist. `false` when the server gave only a partial or unrecognised page.
    pub complete: bool,
    /// `true` when the directory exists on its own, so it stays when its last entry goes
    /// (every file system; on S3 only a directory with a marker object: one that exists
    /// through its keys vanishes with the last of them).
    pub stands_alone: bool,
}

/// Outcome of [`Driver::fetch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The whole body was written to the destination; here is its fresh metadata.
    Body(Meta),
    /// The validator still holds; nothing was written.
    NotModified,
}

/// What roam believes about a file (or directory) it is about to remove (from a fresh listing or stat), so
/// a driver whose protocol deletes missing names without complaint (S3) need not ask the
/// server before every deletion.
#[derive(Clone, Copy, Debug)]
pub struct Known<'a> {
    /// The file as last seen; its ETag lets S3 make the deletion conditional.
    pub meta: &'a Meta,
    /// Whether its directory outlives this entry: it holds others, or it stands alone
    /// (see [`Listing::stands_alone`]).
    pub siblings: bool,
    /// For a directory: roam's fresh, complete listing of it names nothing, so `rmdir`
    /// need not ask whether it is empty.
    pub empty: bool,
}

/// The driver path of a fresh temporary sibling of `path`, for an atomic replace by
/// rename: a dot name starting with `prefix` (`.roam-put-`, or a name the server hides),
/// unique across processes and hosts (64 random bits), so no two uploads anywhere share
/// one and [`Driver::remove_leftover`] never removes another's. EISDIR when `path` is the
/// root (no parent); `op` names the request in the message.
pub(crate) fn temporary_beside(
    d: &(impl Driver + ?Sized),
    op: &str,
    path: &str,
    prefix: &str,
) -> Result<String> {
    match path.rsplit_once('/') {
        Some((parent, name)) if !name.is_empty() => {
            Ok(format!("{parent}/{prefix}{:016x}", random_u64()))
        }
        _ => {
            let why = ErrorKind::IsADirectory.reason();
            Err(Error::new(
                ErrorKind::IsADirectory,
                format!("{op} {}: {why}", d.describe(path)),
            ))
        }
    }
}

/// The prefix of the temporary names of uploads.
pub(crate) const TEMPORARY_PREFIX: &str = ".roam-put-";

/// The lock roam clients of one server take on `path` around the last check and the rename
/// of an upload (see [`under_name_lock`]): a hidden sibling directory.
pub(crate) fn lock_beside(path: &str, prefix: &str) -> Option<String> {
    let (parent, name) = path.rsplit_once('/')?;
    (!name.is_empty()).then(|| format!("{parent}/{prefix}lock-{name}"))
}

/// Whether `name`, seen in a listing, shows a roam client's upload under way in that
/// directory: its temporary, or its lock on the name it is about to put in place (Chirp's
/// are never listed). A listing is not atomic with a rename, so a name the same listing
/// lacks may be the one being replaced.
pub fn shows_an_upload_under_way(name: &str) -> bool {
    name.starts_with(TEMPORARY_PREFIX) || name.starts_with(".roam-lock-")
}

/// An attempt to make a name's lock directory.
pub(crate) enum Attempt {
    /// Made: this client holds the lock.
    Made,
    /// It exists: another client holds it.
    Held,
    /// Neither can be told (a broken connection): go on without it.
    Failed,
}

/// How long an upload waits for another roam client's lock on its name. A holder keeps it
/// for two or three round trips; one kept longer was left by a client that died.
pub(crate) const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// Runs `critical` (an upload's last check of the name and its rename, on protocols with
/// no conditional rename: FTP, SFTP) holding the lock roam clients of the server take on
/// the name, so no other roam upload can replace it between the check and the rename.
/// Making a directory is atomic on every protocol and fails if it exists: `make` tries
/// that, `remove` removes it. A lock held past [`LOCK_PATIENCE`] was abandoned: it is
/// broken and taken once; failing that, `critical` runs unlocked (the protocol's window).
/// Clients other than roam do not take the lock (docs/SEMANTICS.md).
pub(crate) fn under_name_lock<C, T>(
    conn: &mut C,
    make: impl Fn(&mut C) -> Attempt,
    remove: impl Fn(&mut C),
    critical: impl FnOnce(&mut C) -> T,
) -> T {
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    let mut pause = std::time::Duration::from_millis(2);
    let held = loop {
        match make(conn) {
            Attempt::Made => break true,
            Attempt::Failed => break false,
            Attempt::Held if std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(100));
            }
            Attempt::Held => {
                tracing::warn!("taking a lock on a name left by a roam client that stopped");
                remove(conn);
                break matches!(make(conn), Attempt::Made);
            }
        }
    };
    let out = critical(conn);
    if held {
        remove(conn);
    }
    out
}

/// 64 unpredictable bits: SipHash of a counter under `RandomState`'s keys, which the
/// standard library draws from the OS once per thread (and varies per instance).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// What an upload gives the file besides its contents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    /// The modification time.
    pub mtime: Option<SystemTime>,
    /// The permission bits (`0o7777` mask).
    pub mode: Option<u32>,
    /// The access time, where the backend keeps one apart ([`Capabilities::set_atime`]);
    /// elsewhere, or `None`, the upload's.
    pub atime: Option<SystemTime>,
}

/// What an upload must find at its name to go ahead: the precondition that keeps two
/// clients who started from the same version from both replacing it. The driver checks it
/// as atomically as its protocol can (docs/SEMANTICS.md, "Concurrent writers", says how
/// and what window remains); on a mismatch the upload fails with [`ErrorKind::Changed`]
/// and the server's file is left as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Expect {
    /// No check: replace whatever is there, or create.
    #[default]
    Any,
    /// Create only: nothing may have the name (a file, directory or symlink is a change).
    Absent,
    /// Replace only this version of a file: the same ETag where both sides have one, else
    /// the same size and modification time (to the second, the coarsest time a protocol
    /// keeps). A missing file, or something else at the name, is a change too.
    Version {
        etag: Option<String>,
        size: u64,
        mtime: Option<SystemTime>,
    },
}

impl Expect {
    /// The version `meta` describes (its size unknown counts as 0, which only a file that
    /// is empty matches), for a file; `Absent` for nothing.
    pub fn version_of(meta: Option<&Meta>) -> Expect {
        match meta {
            None => Expect::Absent,
            Some(m) => Expect::Version {
                etag: m.etag.clone(),
                size: m.size.unwrap_or(0),
                mtime: m.mtime,
            },
        }
    }

    /// Whether `now` (what the name has now: `None` for nothing) is what this expects.
    pub fn admits(&self, now: Option<&Meta>) -> bool {
        match (self, now) {
            (Expect::Any, _) => true,
            (Expect::Absent, now) => now.is_none(),
            (Expect::Version { .. }, None) => false,
            (Expect::Version { etag, size, mtime }, Some(now)) => {
                now.kind == Kind::File
                    && match (etag, &now.etag) {
                        (Some(a), Some(b)) => a == b,
                        _ => now.size == Some(*size) && now.mtime.map(secs) == mtime.map(secs),
                    }
            }
        }
    }

    /// The error of an upload that found `now` where it expected `self`.
    pub(crate) fn mismatch(&self, what: &str, now: Option<&Meta>) -> Error {
        let found = match now {
            None => "it is gone".to_owned(),
            Some(m) if m.kind != Kind::File => format!("a {:?} has its name", m.kind),
            Some(m) => match self {
                Expect::Absent => "it exists".to_owned(),
                _ => format!("it is now another version ({} bytes)", m.size.unwrap_or(0)),
            },
        };
        changed(what, &found)
    }
}

/// [`ErrorKind::Changed`] for the upload `what` (`PUT http://h/f`), saying why.
pub(crate) fn changed(what: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Changed,
        format!("{what}: {}: {why}", ErrorKind::Changed.reason()),
    )
}

/// Whole seconds of a time, for comparing times that protocols keep at different
/// precisions (SFTP, FTP and HTTP dates keep seconds).
pub(crate) fn secs(t: SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
    }
}

/// Something an upload may leave on the server if it is cut off (roam killed, the host
/// down) before it finishes or cleans up: see [`Upload::leftovers`] and
/// [`Driver::remove_leftover`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Leftover {
    /// A temporary file, at this driver path (a hidden sibling of the file uploaded).
    Temporary { path: String },
    /// An S3 multipart upload of the object at this driver path, with its upload id:
    /// its parts take space (and are billed) until it is aborted.
    Multipart { path: String, upload_id: String },
}

impl Leftover {
    /// The driver path it is at.
    pub fn path(&self) -> &str {
        match self {
            Leftover::Temporary { path } | Leftover::Multipart { path, .. } => path,
        }
    }
}

/// Hears of each [`Leftover`] an upload may leave, before it can exist: the caller
/// journals it (durably) and returns `Ok`; an error stops the upload before the leftover
/// is made, and the upload fails with it.
pub type LeftoverHook<'a> = &'a dyn Fn(&Leftover) -> std::io::Result<()>;

/// How an upload ([`Driver::upload`]) goes: what the file gets, what it must replace,
/// what roam already knows of its place, and who hears of what it may leave behind.
#[derive(Clone, Copy, Default)]
pub struct Upload<'a> {
    /// Time and mode, kept where the backend keeps them.
    pub attrs: Attrs,
    /// The precondition; [`Expect::Any`] uploads unconditionally.
    pub expect: &'a Expect,
    /// Roam knows the parent to be a directory and the name not to be one (a fresh
    /// listing says so): each outcome gets the same errno, but a driver may ask fewer
    /// questions first (S3 lists the parent and the name otherwise: a key needs no
    /// directory).
    pub known_dir: bool,
    /// Told of each leftover before it may exist (see [`LeftoverHook`]); `None`: nobody
    /// journals them (the driver still removes them when the upload fails).
    pub leftovers: Option<LeftoverHook<'a>>,
}

impl Debug for Upload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("attrs", &self.attrs)
            .field("expect", self.expect)
            .field("known_dir", &self.known_dir)
            .field("leftovers", &self.leftovers.is_some())
            .finish()
    }
}

impl<'a> Upload<'a> {
    /// An upload of `attrs` with no precondition.
    pub fn with(attrs: Attrs) -> Upload<'a> {
        Upload {
            attrs,
            ..Upload::default()
        }
    }

    /// Tells the hook (if any) of `leftover`, before it is made; its refusal is the
    /// upload's error (`what` names the upload).
    pub(crate) fn announce(&self, what: &str, leftover: &Leftover) -> Result<()> {
        match self.leftovers {
            Some(hook) => hook(leftover)
                .map_err(|e| Error::from_io(format_args!("{what}: journaling {leftover:?}"), &e)),
            None => Ok(()),
        }
    }
}

impl Default for &Expect {
    fn default() -> Self {
        static ANY: Expect = Expect::Any;
        &ANY
    }
}

/// How [`Driver::open_in_place`] makes a missing file.
#[derive(Clone, Copy, Debug)]
pub struct NewFile {
    /// Its permission bits.
    pub mode: u32,
    /// `O_EXCL`: an existing file is `AlreadyExists`.
    pub exclusive: bool,
}

/// One protocol, rooted at one remote location (`http://host:port/prefix`, a local dir ...).
pub trait Driver: Send + Sync + Debug {
    /// A short human name for a path, for messages: `http://127.0.0.1:8080/dir/f`.
    fn describe(&self, path: &str) -> String;

    /// What this mount read to reach its server and log in (for `roam doctor URL`): pairs
    /// of what and where it came from, never a secret. None for backends without logins.
    fn sources(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Metadata of `path`. Does not follow a final symlink (lstat semantics).
    fn stat(&self, path: &str) -> Result<Meta>;

    /// Entries of the directory `path` (without `.` and `..`).
    fn list(&self, path: &str) -> Result<Listing>;

    /// Write the whole contents of the file `path` into `dest`, unless `validator` still holds.
    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched>;

    /// A local path that *is* this object, when the driver can serve it without copying
    /// (the local driver). The cache then redirects to it instead of fetching.
    fn local_path(&self, _path: &str) -> Option<PathBuf> {
        None
    }

    /// What this backend can express ([`Capabilities`]): a plain value, computed without
    /// asking the server (it may depend on the configuration, or on what the server said
    /// when a connection was made). What it leaves out fails with the errno its field says.
    fn capabilities(&self) -> Capabilities;

    /// The file `path` itself, shared by everyone who has it open (where
    /// [`Capabilities::in_memory`]). With `create` it is made first when missing.
    fn open_in_place(
        &self,
        path: &str,
        _create: Option<NewFile>,
    ) -> Result<std::sync::Arc<mem::Contents>> {
        Err(unsupported(self, "open files in place", path))
    }

    /// Writes `len` bytes of the file `path` starting at `offset` into `dest`; returns how
    /// many were written (fewer only at the end of the file). For fetching large files on
    /// demand instead of whole.
    ///
    /// With `of`, the bytes must be that version's: a server that says it is sending
    /// another (its ETag or time, where the protocol tells) fails with
    /// [`ErrorKind::Changed`] before a byte is written, so pieces of one file read at
    /// different times are never pieces of two versions.
    fn read_range(
        &self,
        path: &str,
        _offset: u64,
        _len: u64,
        _of: Option<&Pinned>,
        _dest: &mut dyn Write,
    ) -> Result<u64> {
        Err(unsupported(self, "read byte ranges", path))
    }

    // ---- The write side. Every method defaults to "this backend cannot" (EROFS), so a
    // ---- read-only protocol needs to implement nothing here.

    /// Replaces (or creates) the file `path` with the `len` bytes of `src`, atomically where
    /// the protocol allows (temporary name + rename, or one PUT): a reader never sees a
    /// half-written file. Returns the new metadata.
    ///
    /// `how` says what else goes with it:
    /// - `attrs`: the time and mode the file gets where the backend keeps them (`cp -p`,
    ///   `tar` and `make` rely on the time; a file keeps its mode across new contents);
    ///   what it cannot keep is left out, and the metadata returned is after all of it.
    /// - `expect`: the precondition ([`Expect`]). On a mismatch the upload fails with
    ///   [`ErrorKind::Changed`] (ESTALE) and the server's file is untouched; the caller
    ///   keeps its copy aside as a conflict. Each protocol checks with its own atomic tool
    ///   where it has one (S3 `If-Match`/`If-None-Match`, a WebDAV lock, an SFTP hard
    ///   link), else by asking right before its final rename; docs/SEMANTICS.md lists the
    ///   window that remains per protocol.
    /// - `known_dir`: see [`Upload::known_dir`].
    /// - `leftovers`: told of each temporary file or multipart upload before it may exist.
    ///   On a failure the driver removes what it made itself (best effort, within its
    ///   timeouts) before returning the error. A caller that journals leftovers forgets
    ///   them when this returns `Ok`, and calls [`Driver::remove_leftover`] for each after
    ///   an `Err` (the driver's own cleanup may have failed with the connection) or after a
    ///   crash.
    fn upload(&self, path: &str, _src: &mut dyn Read, _len: u64, _how: &Upload) -> Result<Meta> {
        Err(read_only(self, "write files", path))
    }

    /// [`Driver::upload`] without attributes or precondition.
    fn put(&self, path: &str, src: &mut dyn Read, len: u64) -> Result<Meta> {
        self.upload(path, src, len, &Upload::default())
    }

    /// [`Driver::upload`] of `attrs`, without precondition.
    fn put_with(&self, path: &str, src: &mut dyn Read, len: u64, attrs: Attrs) -> Result<Meta> {
        self.upload(path, src, len, &Upload::with(attrs))
    }

    /// [`Driver::put_with`] of a file whose parent roam knows to be a directory and whose
    /// name it knows not to be one ([`Upload::known_dir`]).
    fn put_in_known_dir(
        &self,
        path: &str,
        src: &mut dyn Read,
        len: u64,
        attrs: Attrs,
    ) -> Result<Meta> {
        let how = Upload {
            known_dir: true,
            ..Upload::with(attrs)
        };
        self.upload(path, src, len, &how)
    }

    /// Removes what an upload may have left ([`Upload::leftovers`]): deletes the
    /// temporary file, aborts the multipart upload. Idempotent: one already gone (removed,
    /// renamed into place, completed) is `Ok`.
    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        Err(read_only(self, "remove files", leftover.path()))
    }

    /// Creates the directory `path` (EEXIST if it exists, ENOENT if its parent does not)
    /// with the permission bits `mode` (the caller's, less its umask) where the protocol
    /// keeps them; the server's own umask does not apply.
    fn mkdir(&self, path: &str, _mode: u32) -> Result<()> {
        Err(read_only(self, "create directories", path))
    }

    /// [`Driver::mkdir`] of a name roam knows to be absent from a directory it knows exists
    /// (a fresh listing says so). Each outcome gets the same errno; a driver may only ask
    /// fewer questions first. Returns the new directory's metadata where the driver knows
    /// all of it without asking (an S3 directory has nothing but its kind), else `None`.
    fn mkdir_in_known_dir(&self, path: &str, mode: u32) -> Result<Option<Meta>> {
        self.mkdir(path, mode).map(|()| None)
    }

    /// Removes the file (or symlink) `path` (EISDIR for a directory).
    fn remove_file(&self, path: &str) -> Result<()> {
        Err(read_only(self, "remove files", path))
    }

    /// [`Driver::remove_file`] of a file roam believes exists as `known` says. Each outcome
    /// gets the same errno; a driver may only ask fewer questions first.
    fn remove_known_file(&self, path: &str, _known: Known) -> Result<()> {
        self.remove_file(path)
    }

    /// Removes the empty directory `path` (ENOTEMPTY if it is not empty, ENOTDIR for a file).
    fn remove_dir(&self, path: &str) -> Result<()> {
        Err(read_only(self, "remove directories", path))
    }

    /// [`Driver::remove_dir`] of a directory roam believes exists as `known` says. Each
    /// outcome gets the same errno; a driver may only ask fewer questions after.
    fn remove_known_dir(&self, path: &str, _known: Known) -> Result<()> {
        self.remove_dir(path)
    }

    /// Renames `from` to `to`, replacing a file at `to` as POSIX `rename` does.
    fn rename(&self, from: &str, _to: &str) -> Result<()> {
        Err(read_only(self, "rename files", from))
    }

    /// Copies the file `from` to `to` on the server itself, its bytes never crossing the
    /// network (S3 `CopyObject`, WebDAV `COPY`, the kernel's copy of a local file), and
    /// replacing a file at `to`; where [`Capabilities::server_copy`] says so, else
    /// `ENOTSUP`. `from` missing or `to`'s directory missing is `ENOENT`, a directory at
    /// either name `EISDIR`.
    fn copy(&self, from: &str, _to: &str) -> Result<()> {
        Err(unsupported(self, "copy files on the server", from))
    }

    /// Sets permission bits, where the protocol keeps them.
    fn set_mode(&self, path: &str, _mode: u32) -> Result<()> {
        Err(unsupported(self, "keep permission bits", path))
    }

    /// Sets the modification time, where the protocol keeps it.
    fn set_mtime(&self, path: &str, _mtime: SystemTime) -> Result<()> {
        Err(unsupported(self, "set modification times", path))
    }

    /// Sets the access time, where the protocol keeps one apart
    /// ([`Capabilities::set_atime`]), and the modification time with it when `mtime` is
    /// given (one request where the protocol sets both at once); of a symlink itself, as
    /// `set_mtime`.
    fn set_times(&self, path: &str, _atime: SystemTime, _mtime: Option<SystemTime>) -> Result<()> {
        Err(unsupported(self, "keep access times", path))
    }

    /// Creates the symbolic link `path` pointing to `target`, where the protocol has them.
    fn symlink(&self, _target: &str, path: &str) -> Result<()> {
        Err(unsupported(self, "create symbolic links", path))
    }

    /// Gives the file (symlink, FIFO, socket) `from` the second name `to`, where the
    /// backend keeps hard links apart from the kernel (`mem:`; [`Capabilities::hard_links`]).
    fn hard_link(&self, from: &str, _to: &str) -> Result<()> {
        Err(unsupported(self, "make hard links", from))
    }

    /// Creates the FIFO or socket name `path` (`kind`: [`Kind::Fifo`], [`Kind::Socket`])
    /// with the permission bits `mode`, where the backend keeps special files (`mem:`).
    fn make_special(&self, path: &str, _kind: Kind, _mode: u32) -> Result<()> {
        Err(unsupported(self, "create special files", path))
    }
}

fn read_only<D: Driver + ?Sized>(d: &D, what: &str, path: &str) -> Error {
    Error::new(
        ErrorKind::ReadOnly,
        format!("{}: this backend cannot {what}", d.describe(path)),
    )
}

pub(crate) fn unsupported<D: Driver + ?Sized>(d: &D, what: &str, path: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("{}: this backend cannot {what}", d.describe(path)),
    )
}

/// Checks that a name that came from a server is one safe path component: not empty, not
/// `.` or `..`, without `/` or NUL, and at most [`NAME_MAX`] bytes. Names that fail are
/// dropped by the drivers (with a warning), so nothing a server sends can climb out of a
/// mount or out of roam's cache, nor make a whole directory unlistable.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0')
}

/// The longest name a Linux file system takes, in bytes: a longer one in a listing would
/// make every lookup in its directory fail (ENAMETOOLONG).
pub const NAME_MAX: usize = 255;

/// Whether `path` is a driver path as the layer above promises it: `/`, or `/`-separated
/// safe names. The drivers check anyway, because a `..` that slipped through would address
/// a file outside the mount.
pub(crate) fn is_driver_path(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(is_safe_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_names() {
        assert!(is_safe_name("a.txt"));
        assert!(is_safe_name("..a"));
        for bad in ["", ".", "..", "a/b", "/", "a\0b"] {
            assert!(!is_safe_name(bad), "{bad:?} must be refused");
        }
        assert!(is_safe_name(&"x".repeat(255)));
        assert!(!is_safe_name(&"x".repeat(256)));
        // Bytes, not characters: 128 two-byte letters are 256 bytes.
        assert!(!is_safe_name(&"\u{fc}".repeat(128)));
    }

    #[test]
    fn expectations_compare_etags_else_sizes_and_seconds() {
        let at = |secs: u64, millis: u64| {
            Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(secs * 1000 + millis))
        };
        let file = |etag: Option<&str>, size: u64, mtime| Meta {
            etag: etag.map(str::to_owned),
            size: Some(size),
            mtime,
            ..Meta::of_kind(Kind::File)
        };
        let seen = file(Some("\"e1\""), 5, at(100, 200));
        let version = Expect::version_of(Some(&seen));
        assert!(version.admits(Some(&seen)));
        // An ETag decides where both sides have one, whatever size and time say.
        assert!(!version.admits(Some(&file(Some("\"e2\""), 5, at(100, 200)))));
        assert!(version.admits(Some(&file(Some("\"e1\""), 6, at(101, 0)))));
        // Else size and time to the second.
        assert!(version.admits(Some(&file(None, 5, at(100, 900)))));
        assert!(!version.admits(Some(&file(None, 5, at(101, 0)))));
        assert!(!version.admits(Some(&file(None, 4, at(100, 200)))));
        assert!(!version.admits(None), "a removed version is a change");
        assert!(!version.admits(Some(&Meta::of_kind(Kind::Dir))));
        assert!(Expect::Absent.admits(None));
        assert!(!Expect::Absent.admits(Some(&Meta::of_kind(Kind::Symlink))));
        assert!(Expect::Any.admits(Some(&seen)) && Expect::Any.admits(None));
        assert_eq!(Expect::version_of(None), Expect::Absent);
        let err = version.mismatch("PUT u", None);
        assert_eq!(err.errno(), libc::ESTALE);
        assert_eq!(err.message, "PUT u: changed by another client: it is gone");
    }

    #[test]
    fn temporaries_are_hidden_siblings_with_distinct_names() {
        let d = mem::MemDriver::new();
        let a = temporary_beside(&d, "PUT", "/dir/f", TEMPORARY_PREFIX).unwrap();
        let b = temporary_beside(&d, "PUT", "/dir/f", TEMPORARY_PREFIX).unwrap();
        assert!(a.starts_with("/dir/.roam-put-") && a.len() == "/dir/.roam-put-".len() + 16);
        assert!(is_driver_path(&a), "{a}");
        assert_ne!(a, b);
        let top = temporary_beside(&d, "PUT", "/f", TEMPORARY_PREFIX).unwrap();
        assert!(top.starts_with("/.roam-put-"), "{top}");
        let root = temporary_beside(&d, "PUT", "/", TEMPORARY_PREFIX).unwrap_err();
        assert_eq!(root.kind, ErrorKind::IsADirectory);
    }

    #[test]
    fn driver_paths_are_checked() {
        for good in ["/", "/a", "/a b/c", "/a b/ü", "/..a", "/a/b c"] {
            assert!(is_driver_path(good), "{good}");
        }
        let bad = [
            "", "a", "//", "//a", "/a/", "/a/../b", "/.", "/./a", "/a\0", "/a\0b",
        ];
        for bad in bad {
            assert!(!is_driver_path(bad), "{bad:?}");
        }
    }
}
