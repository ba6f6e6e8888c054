//! roam's namespace, cache and consistency: the one place that knows what a path means.
//!
//! Frontends (the tracer, later FUSE) hand the [`Vfs`] normalised absolute *virtual* names.
//! The vfs says whether a name is roam's ([`Vfs::lookup`]) and, for each kind of call, which
//! *local* path answers it natively:
//! - metadata calls → [`Vfs::meta_path`]: a skeleton entry carrying the remote metadata;
//! - opens → [`Vfs::open_path`]: the fetched file, or a skeleton directory filled from the
//!   remote listing;
//! - `chdir` → [`Vfs::dir_path`]: a skeleton directory, so relative names resolve there.
//!
//! Consistency follows Ufo: metadata, listings and file contents younger than `T_read` are
//! used as they are; older ones are revalidated (ETag / Last-Modified) before use.

mod access;
mod archive;
mod cache;
mod consistency;
mod delivery;
mod error;
mod ext_codec;
mod ext_layer;
mod fingerprint;
mod guard;
mod lazy_ext;
mod links;
mod listings;
mod locks;
mod merge;
mod mounts;
mod observe;
mod open;
mod partial;
pub mod path;
mod query;
mod readahead;
mod source;
mod speed;
mod suspend;
mod usage;
mod watched;
mod work;
mod write;

use std::collections::{HashMap, HashSet};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use roam_drivers::http::HttpConfig;
use roam_drivers::{ErrorKind, Fetched, Validator};

// What frontends speak with the core in (a name's kind and metadata, a file to create, the
// file an in-memory backend keeps): the drivers' vocabulary, given by the vfs so that the
// frontends depend on it alone.
pub use roam_drivers::local::set_own_times;
pub use roam_drivers::mem::Contents as MemoryFile;
pub use roam_drivers::{is_safe_name, secrets, Kind, Meta, NewFile, Pinned};

pub use access::{Caller, Need};
pub use cache::Info;
pub use consistency::{Consistency, TRead};
pub use delivery::{conflict, Closing, Settled};
pub use error::{Error, Result};
pub use fingerprint::XATTRS;
pub use lazy_ext::LoadExtension;
pub use links::LinkTarget;
pub use merge::ExtResolvers;
pub use mounts::{Node, Remote, IMPLICIT_SCHEMES};
pub use observe::{Direction, RemoteStats, Transfer};
pub use open::{OpenHow, Opened};
pub use readahead::{ReadAheadPolicy, DEADLINE as READAHEAD_DEADLINE};
pub use suspend::{Change, Copied, Holder};
pub use usage::{CacheReport, EvictionPolicy, Stats};
pub use watched::Watched;
pub use work::{pending_changes, ChangeState, PendingChange};
pub use write::{Conflict, ConflictResolver, Flushed, KeepBoth, Resolution};

use cache::{unix_secs, DiskCache};
use locks::NameLocks;
use mounts::Mounts;
use path::split_name;
use work::Work;

/// Most symlinks followed while resolving one name (as Linux's `MAXSYMLINKS`).
const MAX_SYMLINKS: usize = 40;

/// Everything the namespace needs to start.
#[derive(Clone, Debug)]
pub struct VfsConfig {
    /// The private cache directory (`$XDG_CACHE_HOME/roam`).
    pub cache_dir: PathBuf,
    /// Ufo's T_read: how old cached metadata and data may be before revalidation, per name.
    pub consistency: Consistency,
    /// Explicit mounts as `(LOCAL, URL)`.
    pub mounts: Vec<(String, String)>,
    /// Most bytes of file copies kept; least recently used copies go first.
    pub max_cache_bytes: u64,
    pub http: HttpConfig,
    /// TLS choices per `host[:port]` (a CA file, or no verification at all).
    pub tls: Vec<(String, roam_drivers::http::TlsOptions)>,
    /// Where the extensions of `ext:NAME:URL` and `query:NAME:...@URL` mounts are (none:
    /// such mounts are refused).
    pub extensions: Option<PathBuf>,
    /// Take over the changes that roam processes which died left in the cache (for the
    /// commands that deliver changes: run, mount, sync; not for status or find).
    pub adopt_orphans: bool,
    /// Ufo's T_write: how long after the last close a change is uploaded (0: in the close).
    pub t_write: Duration,
}

/// What a name resolves to after following symlinks.
#[derive(Debug)]
pub enum Resolved {
    /// A local path outside roam (an absolute symlink out of a mount).
    Local(String),
    /// A roam node with its metadata.
    Node(Node, Meta),
}

/// The namespace and its cache.
pub struct Vfs {
    consistency: Consistency,
    max_cache_bytes: u64,
    usage: usage::Usage,
    cache: DiskCache,
    /// This process's changes, partial copies and temporaries.
    work: Work,
    /// Locks on names shared with every roam process on this cache.
    locks: NameLocks,
    /// How long roam waits for another process filling the copy of a name (then it
    /// fetches a private one), or for a stream that brings nothing (then the read fails).
    patience: Duration,
    /// The window of the low-speed limit on transfers (the read timeout; `speed.rs`).
    speed_window: Duration,
    mounts: Mounts,
    state: Mutex<State>,
    fetch_locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Large files being fetched in ranges.
    partials: partial::Partials,
    /// Ufo's T_write, and the deliveries waiting for their time (`delivery.rs`).
    t_write: Duration,
    later: delivery::Later,
    /// The gate changes pass, closed while the namespace is suspended (`suspend.rs`).
    gate: suspend::Gate,
    /// Holds what the gate cannot see while suspended (`suspend.rs`).
    holder: Mutex<Option<Arc<dyn suspend::Holder>>>,
    /// Asked when an upload meets a remote change.
    resolver: Box<dyn ConflictResolver>,
    /// An extension that picks eviction victims instead of plain LRU (none: LRU).
    policy: Option<EvictionPolicy>,
    /// The archive extension that shows zip/tar files as directories (none: they are files).
    archives: Option<archive::Archives>,
    /// The digest extension that fingerprints files (none: no fingerprints).
    fingerprints: Option<fingerprint::Fingerprints>,
    /// The access-control policy extension (none: every name may be used).
    guard: Option<guard::Guard>,
    /// The read-ahead policy extension (none: nothing fetched ahead but streams).
    readahead: Option<readahead::ReadAhead>,
}

/// Metadata learnt from the servers, with the time it was learnt.
#[derive(Default)]
struct State {
    /// `stat` answers (positive, or `NotFound`) by virtual name.
    attrs: HashMap<String, (std::result::Result<Meta, roam_drivers::Error>, Instant)>,
    /// Listings by virtual directory name.
    listings: HashMap<String, (Arc<DirIndex>, Instant)>,
    /// Directories whose listing failed (e.g. no autoindex), so lookups use per-name requests.
    unlistable: HashMap<String, Instant>,
    /// Names with a journaled change not yet uploaded: their local copy is the truth.
    dirty: HashSet<String>,
    /// Changes kept from upload (errno, why), known here even when their journal could
    /// not record it (the cache disk that failed the write may refuse the record too).
    kept: HashMap<String, (i32, String)>,
    /// Names roam itself just put on a server, and when: a listing asked for before that
    /// (answered while the upload was under way) must not drop them.
    placed: HashMap<String, (Meta, Instant)>,
}

#[derive(Clone)]
struct DirIndex {
    entries: HashMap<String, Meta>,
    complete: bool,
    /// See [`roam_drivers::Listing::stands_alone`].
    stands_alone: bool,
    /// Another roam client was putting a file in place here when the listing was made
    /// ([`roam_drivers::shows_an_upload_under_way`]): a name it lacks is asked about, not
    /// taken as absent.
    busy: bool,
    /// Names changed here since the listing (created, removed, renamed): the listing
    /// cannot say what they are; a per-name stat does. Patching the listing instead of
    /// dropping it keeps a directory being filled (`tar x`, `cp -r`) from being listed
    /// again after every file.
    unknown: HashSet<String>,
}

impl Vfs {
    pub fn new(cfg: &VfsConfig) -> Result<Vfs> {
        let root = cache::prepare_root(&cfg.cache_dir)?;
        // Names past PATH_MAX (deep trees served in place, their skeleton) go through
        // links kept here, in the private cache.
        roam_drivers::local::keep_links_in(root.join("long-names"));
        let work = Work::claim(&root)?;
        if cfg.adopt_orphans {
            // Changes of roam processes that died stay pending here.
            work.adopt_orphans(&root);
        }
        let cache = DiskCache::open(&root, work.tmp_dir().to_path_buf())?;
        let locks = NameLocks::open(&root.join("locks"))?;
        let dirty = work.journaled().into_iter().collect();
        let mounts = Mounts::new(&cfg.mounts, &cfg.http, &cfg.tls, cfg.extensions.as_deref())?;
        let usage = usage::Usage::default();
        usage.bytes_cached.store(
            cache.copies().iter().map(|c| c.1).sum(),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(Vfs {
            consistency: cfg.consistency.clone(),
            max_cache_bytes: cfg.max_cache_bytes,
            usage,
            cache,
            work,
            locks,
            patience: cfg.http.connect_timeout + cfg.http.read_timeout * 2,
            speed_window: cfg.http.read_timeout,
            mounts,
            state: Mutex::new(State {
                dirty,
                ..State::default()
            }),
            fetch_locks: Mutex::new(HashMap::new()),
            partials: Mutex::new(HashMap::new()),
            t_write: cfg.t_write,
            later: delivery::Later::default(),
            gate: suspend::Gate::default(),
            holder: Mutex::new(None),
            resolver: Box::new(KeepBoth),
            policy: None,
            archives: None,
            fingerprints: None,
            guard: None,
            readahead: None,
        })
    }

    /// The node a normalised absolute name stands for, `None` for a local name; `EACCES`
    /// for a remote object the access policy refuses.
    pub fn lookup(&self, virt: &str) -> Result<Option<Node>> {
        let found = self.lookup_unguarded(virt)?;
        if let Some(Node::Remote(r)) = &found {
            self.guard(r)?;
        }
        Ok(found)
    }

    fn lookup_unguarded(&self, virt: &str) -> Result<Option<Node>> {
        match self.archive_lookup(virt)? {
            Some(member) => Ok(Some(member)),
            None => match self.mounts.lookup(virt)? {
                Some(node) => self.beyond_links_above(node, 0),
                None => Ok(None),
            },
        }
    }

    /// Whether [`Vfs::lookup`] of `virt` may ask a server (through an archive, or about
    /// the directories on its way), so a frontend that must not wait should look it up
    /// on another thread.
    pub fn lookup_may_wait(&self, virt: &str) -> bool {
        self.archive_lookup_may_wait(virt, false) || self.links_above_unknown(virt)
    }

    /// Whether roam knows what `virt` is without asking (a fresh stat or listing).
    fn knows_kind_of(&self, virt: &str) -> bool {
        self.fresh_attr(virt).is_some() || self.lookup_in_listing(virt).is_some()
    }

    /// Path prefixes under which roam names live.
    pub fn prefixes(&self) -> Vec<String> {
        let mut prefixes = self.mounts.prefixes();
        if self.archives.is_some() {
            prefixes.push(archive::VIEW_ROOT.to_owned());
        }
        prefixes
    }

    /// The local directories that hold roam's mount points (`/` holds `/http` ...).
    pub fn mount_parents(&self) -> Vec<String> {
        let mut dirs: Vec<String> = Vec::new();
        for prefix in self.mounts.prefixes() {
            let parent = split_name(&prefix).0;
            if prefix != "/" && !dirs.iter().any(|d| d == parent) {
                dirs.push(parent.to_owned());
            }
        }
        dirs
    }

    /// The names of roam's mounts directly under the local directory `dir` that are not
    /// local names there (`http`, `s3` ... under `/`; `b` under `/a` for a mount at
    /// `/a/b`), each with the inode of its skeleton directory: what a listing of `dir`
    /// must add to show them, as a mount point shows in its parent's listing.
    pub fn mount_names_under(&self, dir: &str) -> Vec<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        let local = Path::new(dir);
        self.mounts
            .prefixes()
            .iter()
            .filter(|p| p.as_str() != "/" && split_name(p).0 == dir)
            .filter(|p| std::fs::symlink_metadata(local.join(split_name(p).1)).is_err())
            .filter_map(|p| {
                let md = match std::fs::metadata(self.cache.meta_path(p)) {
                    Ok(md) => md,
                    Err(_) => std::fs::metadata(self.cache.put_dir(p).ok()?).ok()?,
                };
                Some((split_name(p).1.to_owned(), md.ino()))
            })
            .collect()
    }

    /// This process is done with the cache: its partial copies and temporaries go, and
    /// its work directory too unless changes wait in it (for `roam sync`).
    pub fn finish(&self) {
        self.drop_unfinished();
        self.work.tidy();
    }

    /// The private cache directory.
    pub fn cache_root(&self) -> &Path {
        self.cache.root()
    }

    /// The virtual name of a real path inside roam's skeleton or one of its copies.
    pub fn unmap(&self, real: &str) -> Option<String> {
        self.cache.unmap(real).or_else(|| self.work.unmap(real))
    }

    /// The virtual name of a skeleton directory past `PATH_MAX`, which the kernel cannot
    /// spell (a cwd there), found by its device and inode.
    pub fn unmap_deep_dir(&self, dev: u64, ino: u64) -> Option<String> {
        self.cache.deep_dir(dev, ino)
    }

    /// The virtual name of a real path that is one of roam's copies (published, being
    /// written, or arriving in ranges): an fd on such a path is a program's open copy of a
    /// remote file.
    pub fn unmap_copy(&self, real: &str) -> Option<String> {
        self.cache
            .unmap_data(real)
            .or_else(|| self.work.unmap(real))
    }

    /// The local copy of `virt` a program gets (whether or not it exists): the one this
    /// process is writing, else the published one.
    pub fn copy_path(&self, virt: &str) -> PathBuf {
        match self.is_dirty(virt) {
            true => self.work.copy_path(virt),
            false => self.cache.data_path(virt),
        }
    }

    /// Where the symbolic link `node` leads (by the rule of `links.rs`), and the server's
    /// text of it; `None` when `node` is no link.
    pub fn link_target(&self, node: &Node) -> Result<Option<(LinkTarget, String)>> {
        let Node::Remote(r) = node else {
            return Ok(None);
        };
        if r.driver.local_path(&r.path).is_some() {
            return Ok(None); // served in place: the kernel's own links
        }
        let meta = self.stat(node)?;
        Ok(match (meta.kind, meta.symlink_target) {
            (Kind::Symlink, Some(text)) => Some((links::resolve(r, &text), text)),
            _ => None,
        })
    }

    /// Makes the skeleton entry of `r` describe `meta`. The kernel follows a link's entry
    /// by itself, so it points at the skeleton entry of where the link leads (or at the
    /// local file a local directory's link names), never at the server's text.
    fn put_stub(&self, r: &Remote, meta: &Meta) -> Result<PathBuf> {
        let Some(text) = meta
            .symlink_target
            .as_deref()
            .filter(|_| meta.kind == Kind::Symlink)
        else {
            return self.cache.put_stub(&r.virt, meta);
        };
        let inside = match links::resolve(r, text) {
            LinkTarget::Roam(v) => self.cache.meta_path(&v).to_string_lossy().into_owned(),
            LinkTarget::Local(p) => p,
        };
        let safe = Meta {
            symlink_target: Some(inside),
            ..meta.clone()
        };
        self.cache.put_stub(&r.virt, &safe)
    }

    /// Metadata of a node, without following a final symlink.
    pub fn stat(&self, node: &Node) -> Result<Meta> {
        match node {
            Node::SchemeRoot { .. } => Ok(Meta {
                mode: Some(0o755),
                ..Meta::of_kind(Kind::Dir)
            }),
            Node::Remote(r) => self.stat_remote(r).map(|m| self.with_copy_times(r, m)),
        }
    }

    /// `meta` with the access time of roam's copy of the file, where the backend keeps one
    /// apart: reads of the copy move it (the kernel's `relatime`), not the server's. (Not
    /// its mtime: a change within the minute must still reach FUSE's page cache.)
    fn with_copy_times(&self, r: &Remote, mut meta: Meta) -> Meta {
        let caps = r.driver.capabilities();
        if meta.kind != Kind::File || caps.in_memory || caps.in_place || !caps.set_atime {
            return meta;
        }
        if let Some((_, atime)) = self.cache.copy_times(&r.virt, &meta) {
            meta.atime = Some(atime);
        }
        meta
    }

    /// A local path whose metadata is the node's: the skeleton entry, or the local file
    /// itself for the local driver.
    pub fn meta_path(&self, node: &Node) -> Result<PathBuf> {
        match node {
            Node::SchemeRoot { virt } => self.cache.put_dir(virt),
            Node::Remote(r) if self.is_dirty(&r.virt) => Ok(self.dirty_meta_path(&r.virt)),
            Node::Remote(r) => match r.driver.local_path(&r.path) {
                Some(p) => Ok(p),
                None => {
                    let mut meta = self.stat_remote(r)?;
                    if meta.kind == Kind::File && meta.size.is_none() {
                        // The server did not say how big it is: only the body tells.
                        self.fetch_file(r, &meta)?;
                        meta = self.stat_remote(r)?;
                    }
                    self.put_stub(r, &meta)
                }
            },
        }
    }

    /// A local path to open in place of the node: the fetched file, or a skeleton directory
    /// holding the remote listing. Follows symlinks.
    pub fn open_path(&self, node: &Node) -> Result<PathBuf> {
        if let Node::Remote(r) = node {
            if let Some(p) = r.driver.local_path(&r.path) {
                return Ok(p);
            }
            if self.is_dirty(&r.virt) {
                return Ok(self.dirty_meta_path(&r.virt));
            }
        }
        match self.follow(node.clone())? {
            Resolved::Local(p) => Ok(PathBuf::from(p)),
            Resolved::Node(Node::SchemeRoot { virt }, _) => self.cache.put_dir(&virt),
            Resolved::Node(Node::Remote(r), meta) if meta.kind == Kind::Dir => {
                let dir = self.list_dir(&r)?;
                self.settle_changed_children(&r)?;
                self.show_dirty_children(&r.virt)?;
                Ok(dir)
            }
            Resolved::Node(Node::Remote(r), meta) => self.fetch_file(&r, &meta),
        }
    }

    /// The names the last listing of `dir` had that `entries`, a new one, lacks: a listing
    /// racing another client's replacement of a name (a rename over it) may miss it, so
    /// such a name is asked about (a stat) rather than taken as gone.
    fn vanished(&self, dir: &str, entries: &HashMap<String, Meta>) -> HashSet<String> {
        let st = self.state.lock().unwrap();
        let Some((before, _)) = st.listings.get(dir) else {
            return HashSet::new();
        };
        before
            .entries
            .keys()
            .filter(|name| !entries.contains_key(*name))
            .cloned()
            .collect()
    }

    /// Makes the skeleton of `dir` show the explicit mounts `inner` inside it, as
    /// directories (a mount's root is one).
    fn show_mount_points(&self, dir: &str, inner: &[String]) -> Result<()> {
        for name in inner {
            let virt = crate::path::join(dir, name);
            if !self.cache.meta_path(&virt).is_dir() {
                self.cache.put_dir(&virt)?;
            }
        }
        Ok(())
    }

    /// A directory to make the real cwd when a program changes into `node`.
    pub fn dir_path(&self, node: &Node) -> Result<PathBuf> {
        match self.follow(node.clone())? {
            Resolved::Local(p) => Ok(PathBuf::from(p)),
            Resolved::Node(n, meta) if meta.kind == Kind::Dir => self.cache.put_dir(n.virt()),
            Resolved::Node(n, _) => Err(Error::posix(
                libc::ENOTDIR,
                format!("{}: not a directory", n.virt()),
            )),
        }
    }

    /// The skeleton entry of `virt`, being written, made a link of its copy: unlike the
    /// copy's own path, it stays valid when the copy is published (renamed into `data/`)
    /// while a program's `stat` or `open` is on its way to the kernel. The copy's path
    /// where the entry cannot be made.
    fn dirty_meta_path(&self, virt: &str) -> PathBuf {
        let copy = self.work.copy_path(virt);
        let stub = self.cache.meta_path(virt);
        if cache::same_file(&copy, &stub) {
            return stub;
        }
        match self.cache.link_into_skeleton(virt, &copy) {
            Ok(()) => stub,
            // Published meanwhile: the entry is the published copy now.
            Err(_) if !copy.exists() => stub,
            Err(_) => copy,
        }
    }

    /// Follows final symlinks of a node (at most [`MAX_SYMLINKS`]), by the rule of
    /// `links.rs`: a link never leads out of its mount, but from a local directory's.
    pub fn follow(&self, mut node: Node) -> Result<Resolved> {
        for _ in 0..MAX_SYMLINKS {
            let meta = self.stat(&node)?;
            let Node::Remote(r) = &node else {
                return Ok(Resolved::Node(node, meta));
            };
            if meta.kind != Kind::Symlink {
                return Ok(Resolved::Node(node, meta));
            }
            let target = meta.symlink_target.unwrap_or_default();
            let next = match links::resolve(r, &target) {
                LinkTarget::Roam(v) => v,
                LinkTarget::Local(p) => return Ok(Resolved::Local(p)),
            };
            node = self.lookup(&next)?.ok_or_else(|| {
                Error::posix(libc::ENOENT, format!("{}: a link out of roam", r.virt))
            })?;
        }
        Err(Error::posix(
            libc::ELOOP,
            format!("{}: too many levels of symbolic links", node.virt()),
        ))
    }

    /// [`Vfs::stat`] of a remote name. A name that is not there is `ENOENT` only where its
    /// directory is one, as in the kernel's path walk: under a file it is `ENOTDIR`, under
    /// a symlink loop `ELOOP`.
    fn stat_remote(&self, r: &Remote) -> Result<Meta> {
        match self.stat_remote_name(r) {
            Err(e) if e.errno() == libc::ENOENT => Err(self.why_absent(r).unwrap_or(e)),
            other => other,
        }
    }

    /// Why `r` is not there, when its directory is not one (see [`Vfs::stat_remote`]);
    /// `None` when `ENOENT` is right. Asks about the directory, which a listing made to
    /// find `r` has usually answered already.
    pub(crate) fn why_absent(&self, r: &Remote) -> Option<Error> {
        if r.path == "/" {
            return None;
        }
        let parent = r.parent();
        let not_a_dir = || Error::posix(libc::ENOTDIR, format!("{}: not a directory", parent.virt));
        match self.stat_remote(&parent) {
            Ok(m) if m.kind == Kind::Dir => None,
            Ok(m) if m.kind != Kind::Symlink => Some(not_a_dir()),
            Ok(_) => match self.follow(Node::Remote(parent.clone())) {
                Ok(Resolved::Node(_, m)) if m.kind != Kind::Dir => Some(not_a_dir()),
                Err(e) if e.errno() != libc::ENOENT => Some(e),
                _ => None,
            },
            Err(e) if e.errno() == libc::ENOENT => None,
            Err(e) => Some(e),
        }
    }

    fn stat_remote_name(&self, r: &Remote) -> Result<Meta> {
        if let Some(local) = self.dirty_meta(&r.virt) {
            return local;
        }
        if r.driver.capabilities().in_memory || r.driver.local_path(&r.path).is_some() {
            // Changed in place by frontends (or by the kernel, for a directory served in
            // place), behind the caches: asked every time. A name that is not there cost
            // no request, so it is nothing to tell the user about.
            return r.driver.stat(&r.path).map_err(|e| match e.kind {
                ErrorKind::NotFound => Error::Absent(r.virt.clone()),
                _ => Error::from(e),
            });
        }
        if let Some(hit) = self.fresh_attr(&r.virt) {
            return hit.map_err(Error::from);
        }
        // A listing's "absent" is asked again where asking is cheap (see `Capabilities::cheap_stat`).
        let trusted = |hit: &Result<Meta>| {
            !(r.driver.capabilities().cheap_stat && matches!(hit, Err(Error::Absent(_))))
        };
        if let Some(hit) = self.lookup_in_listing(&r.virt).filter(trusted) {
            return hit;
        }
        if let Some(hit) = self.lookup_via_parent_listing(r).filter(trusted) {
            return hit;
        }
        let res = r
            .driver
            .stat(&r.path)
            .map(|m| self.as_shown_before(&r.virt, m));
        let keep = match &res {
            Ok(_) => true,
            Err(e) => e.kind == ErrorKind::NotFound,
        };
        if keep {
            self.state
                .lock()
                .unwrap()
                .attrs
                .insert(r.virt.clone(), (res.clone(), Instant::now()));
        }
        res.map_err(Error::from)
    }

    /// T_read for `virt`, whose last known mtime is `mtime`: how long a frontend (the FUSE
    /// kernel cache) may trust what roam said about it.
    pub fn t_read(&self, virt: &str, mtime: Option<SystemTime>) -> Duration {
        self.consistency.t_read(virt).for_mtime(mtime)
    }

    /// T_read for a directory's listing (its mtime, if known, ages it).
    fn t_read_dir(&self, virt: &str) -> Duration {
        let mtime = self
            .state
            .lock()
            .unwrap()
            .attrs
            .get(virt)
            .and_then(|(r, _)| r.as_ref().ok()?.mtime);
        self.t_read(virt, mtime)
    }

    fn fresh_attr(&self, virt: &str) -> Option<std::result::Result<Meta, roam_drivers::Error>> {
        let (res, at) = self.state.lock().unwrap().attrs.get(virt).cloned()?;
        let mtime = res.as_ref().ok().and_then(|m| m.mtime);
        (at.elapsed() < self.t_read(virt, mtime)).then_some(res)
    }

    /// Answers a stat from the parent's fresh listing when it says enough: the entry with an
    /// exact size, or its absence from a complete listing.
    /// `meta` with the mtime roam showed before for this version (a listing's is to the
    /// minute, a `HEAD`'s to the second), however old that answer: one identity while
    /// the file is unchanged, as `roam run`'s skeleton entry keeps it.
    fn as_shown_before(&self, virt: &str, meta: Meta) -> Meta {
        let st = self.state.lock().unwrap();
        let (parent, name) = split_name(virt);
        let before = match st.attrs.get(virt) {
            Some((Ok(m), _)) => Some(m),
            _ => st
                .listings
                .get(parent)
                .and_then(|(i, _)| i.entries.get(name)),
        };
        // Two ETags that differ are two versions, whatever their times.
        let other = |b: &Meta| matches!((&b.etag, &meta.etag), (Some(x), Some(y)) if x != y);
        match before {
            Some(b) if b.kind == meta.kind && !other(b) => {
                crate::cache::keep_shown_mtime(&meta, b.size == meta.size, b.mtime)
            }
            _ => meta,
        }
    }

    fn lookup_in_listing(&self, virt: &str) -> Option<Result<Meta>> {
        if self.mounts.is_mount_point(virt) {
            return None;
        }
        let (parent, name) = split_name(virt);
        let t_read = self.t_read_dir(parent);
        let st = self.state.lock().unwrap();
        let (index, at) = st.listings.get(parent)?;
        if at.elapsed() >= t_read {
            return None;
        }
        if index.unknown.contains(name) {
            return None;
        }
        match index.entries.get(name) {
            Some(m) if m.kind != Kind::File || m.size.is_some() => Some(Ok(m.clone())),
            Some(_) => None,
            None if index.complete && !index.busy => Some(Err(Error::Absent(virt.to_owned()))),
            None => None,
        }
    }

    /// Lists the parent directory to answer a stat: one request serves every later lookup
    /// in that directory, which is what compilers (`-I` dirs) and Python imports (probing
    /// many names that do not exist) need. Falls back to a per-name request when the
    /// directory cannot be listed.
    fn lookup_via_parent_listing(&self, r: &Remote) -> Option<Result<Meta>> {
        if r.path == "/" {
            return None;
        }
        let parent = r.parent();
        if let Some(e) = self.known_not_a_dir(&parent.virt) {
            return Some(Err(e));
        }
        if self.recently_unlistable(&parent.virt) {
            return None;
        }
        match self.list_dir(&parent) {
            Ok(_) => self.lookup_in_listing(&r.virt),
            Err(e) => match e.errno() {
                // The parent is missing or a file: so is the child's lookup. Listing the
                // grandparent instead lets `known_not_a_dir` answer the next name probed
                // there without a request.
                libc::ENOENT | libc::ENOTDIR => {
                    let _ = self.lookup_via_parent_listing(&parent);
                    Some(Err(e))
                }
                // The server is down: asking again per name would only wait again.
                libc::EHOSTUNREACH | libc::ETIMEDOUT => Some(Err(e)),
                _ => {
                    self.state
                        .lock()
                        .unwrap()
                        .unlistable
                        .insert(parent.virt, Instant::now());
                    None
                }
            },
        }
    }

    /// Why `dir` cannot hold names, when a fresh listing says so: it, or a directory above
    /// it, is absent from its parent's complete listing, or is a file there. A compiler
    /// probing each system header under `-I.` looks for `./bits/...`, `./sys/...`: without
    /// this, every such name would cost a listing request that fails.
    fn known_not_a_dir(&self, dir: &str) -> Option<Error> {
        let mut d = dir;
        while d.len() > 1 {
            match self.lookup_in_listing(d) {
                Some(Err(e)) => return Some(e),
                Some(Ok(m)) if m.kind == Kind::File => {
                    return Some(Error::posix(libc::ENOTDIR, format!("{d}: not a directory")))
                }
                // A directory (or a symlink, which may lead to one): names may live there.
                Some(Ok(_)) => return None,
                None => d = split_name(d).0,
            }
        }
        None
    }

    fn recently_unlistable(&self, virt: &str) -> bool {
        let t_read = self.t_read_dir(virt);
        let st = self.state.lock().unwrap();
        st.unlistable
            .get(virt)
            .is_some_and(|at| at.elapsed() < t_read)
    }

    /// Fills the skeleton directory of `r` from a fresh listing.
    fn list_dir(&self, r: &Remote) -> Result<PathBuf> {
        // An in-memory backend is listed every time: files change in place behind the
        // caches, and a listing costs no more than reading a saved one.
        let t_read = match r.driver.capabilities().in_memory {
            true => Duration::ZERO,
            false => self.t_read_dir(&r.virt),
        };
        let fresh = {
            let st = self.state.lock().unwrap();
            st.listings
                .get(&r.virt)
                .is_some_and(|(_, at)| at.elapsed() < t_read)
        };
        if fresh {
            return Ok(self.cache.meta_path(&r.virt));
        }
        // A listing saved by an earlier run still within T_read, or a fresh one.
        let asked = Instant::now();
        let (mut listing, age) =
            match listings::load(self.cache.root(), &r.virt).filter(|(_, age)| *age < t_read) {
                Some(saved) => saved,
                None => {
                    let listing = r.driver.list(&r.path)?;
                    if !r.driver.capabilities().in_memory {
                        listings::save(self.cache.root(), &r.virt, &listing);
                    }
                    (listing, Duration::ZERO)
                }
            };
        self.add_placed_since(
            &r.virt,
            asked.checked_sub(age).unwrap_or(asked),
            &mut listing,
        );
        let dir = self.cache.put_dir(&r.virt)?;
        // The mtime the parent's listing gave it, unless its own stat says otherwise.
        let prior = self.cache.dir_mtime(&r.virt);
        // A mount inside this directory is its own root, whatever this server has there.
        let inner = self.mounts.mount_points_in(&r.virt);
        for e in listing.entries.iter().filter(|e| !inner.contains(&e.name)) {
            self.put_stub(&r.child(&e.name), &e.meta)?;
        }
        if listing.complete {
            let names = listing.entries.iter().map(|e| e.name.as_str());
            let keep: HashSet<&str> = names.chain(inner.iter().map(String::as_str)).collect();
            self.cache.prune_dir(&r.virt, &keep)?;
        }
        self.show_mount_points(&r.virt, &inner)?;
        let dir_mtime = self
            .fresh_attr(&r.virt)
            .and_then(|m| m.ok())
            .and_then(|m| m.mtime)
            .or(prior);
        self.cache.set_dir_mtime(&r.virt, dir_mtime)?;
        let entries: HashMap<String, Meta> = listing
            .entries
            .into_iter()
            .map(|e| (e.name, e.meta))
            .collect();
        let index = DirIndex {
            unknown: self.vanished(&r.virt, &entries),
            busy: entries
                .keys()
                .any(|name| roam_drivers::shows_an_upload_under_way(name)),
            entries,
            complete: listing.complete,
            stands_alone: listing.stands_alone,
        };
        self.state.lock().unwrap().listings.insert(
            r.virt.clone(),
            (
                Arc::new(index),
                Instant::now().checked_sub(age).unwrap_or_else(Instant::now),
            ),
        );
        Ok(dir)
    }

    /// Adds to a listing of `dir` asked for at `asked` the files roam put there since (a
    /// listing answered during an upload would say they are not there).
    fn add_placed_since(&self, dir: &str, asked: Instant, listing: &mut roam_drivers::Listing) {
        let mut st = self.state.lock().unwrap();
        st.placed
            .retain(|_, (_, at)| at.elapsed() < Duration::from_secs(600));
        for (virt, (meta, at)) in &st.placed {
            let (parent, name) = split_name(virt);
            if parent != dir || *at < asked {
                continue;
            }
            listing.entries.retain(|e| e.name != name);
            listing.entries.push(roam_drivers::DirEntry {
                name: name.to_owned(),
                meta: meta.clone(),
            });
        }
    }

    /// The data file of `r`: the cached copy if young enough or still valid, else fetched.
    fn fetch_file(&self, r: &Remote, meta: &Meta) -> Result<PathBuf> {
        let lock = self.fetch_lock(&r.virt);
        let _guard = lock.lock().unwrap();
        self.fetch_file_locked(r, meta)
    }

    /// [`Vfs::fetch_file`] for a caller that holds the file's lock.
    fn fetch_file_locked(&self, r: &Remote, meta: &Meta) -> Result<PathBuf> {
        if let Some(hit) = self.young_copy(r, meta) {
            tracing::debug!("{}: cache hit (the copy is younger than T_read)", r.virt);
            return Ok(hit);
        }
        // One process at a time fills and publishes a name's copy; the others wait, then
        // use what it published. One that waits too long fetches a private copy instead.
        let guard = self.locks.lock(&r.virt, self.patience)?;
        if guard.is_some() {
            if let Some(hit) = self.young_copy(r, meta) {
                return Ok(hit);
            }
        }
        let cached = self.valid_copy(r, meta);
        let validator = cached.as_ref().map(|i| Validator {
            etag: i.etag.clone(),
            mtime: i
                .mtime
                .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
        });
        self.ensure_space(meta.size.unwrap_or(0), &r.virt)?;
        self.mounts.observer().expect_size(r.describe(), meta.size);
        let (download, private) = match guard {
            Some(_) => (self.cache.begin_download(&r.virt, cached.is_none())?, None),
            None => {
                let p = self.work.part_path(&r.virt)?;
                tracing::info!(
                    "{}: another roam process is fetching it: fetching a copy of its own",
                    r.virt
                );
                (self.cache.private_download(p.clone())?, Some(p))
            }
        };
        let fetched = match self.download(r, &download, validator.as_ref()) {
            Ok(f) => f,
            Err(e) => {
                self.cache.abort_download(&download);
                return Err(e);
            }
        };
        match fetched {
            (Fetched::NotModified, _) => {
                tracing::debug!("{}: revalidated: unchanged on the server", r.virt);
                self.cache.abort_download(&download);
                let mut info = cached.expect("a validator implies a cached copy");
                info.fetched_at = unix_secs(SystemTime::now());
                if guard.is_some() {
                    self.cache.put_info(&r.virt, &info)?;
                }
                Ok(self.copy_hit(&r.virt))
            }
            (Fetched::Body(mut fresh), size) => {
                let why = match validator {
                    Some(_) => "revalidated: changed on the server",
                    None => "not cached",
                };
                tracing::debug!("{}: {why}: fetched whole, {size} bytes", r.virt);
                fresh.size = Some(size);
                // A fetch that tells no mode (FTP's RETR) leaves the one roam knew (the
                // listing's), not the mode of a file without one.
                if fresh.mode.is_none() {
                    fresh.mode = meta.mode;
                }
                let info = Info {
                    source: r.describe(),
                    etag: fresh.etag.clone(),
                    mtime: fresh.mtime.map(unix_secs),
                    size,
                    fetched_at: unix_secs(SystemTime::now()),
                    copy_mtime_ns: None,
                    fresh_for: fresh.fresh_for.map(|d| d.as_secs()),
                };
                // The version that was shown keeps the mtime it was shown with (a listing's,
                // to the minute): one identity before and after the fetch, in every
                // frontend. The sidecar keeps the server's, to revalidate with.
                let mut fresh =
                    crate::cache::keep_shown_mtime(&fresh, meta.size == Some(size), meta.mtime);
                if fresh.mtime == meta.mtime && meta.atime.is_some() {
                    // The same version: roam's own read of the server's file (which may
                    // have moved its access time) is no program's access.
                    fresh.atime = meta.atime;
                }
                let data = match private {
                    None => self.cache.commit(&download, &r.virt, size, &fresh, &info)?,
                    Some(p) => {
                        self.cache.finish_copy(&p, &fresh)?;
                        p
                    }
                };
                usage::Usage::add(&self.usage.misses, 1);
                usage::Usage::add(&self.usage.bytes_fetched, size);
                usage::Usage::add(&self.usage.bytes_cached, size);
                self.touch_copy(&r.virt);
                self.enforce_limit(&r.virt)?;
                self.state
                    .lock()
                    .unwrap()
                    .attrs
                    .insert(r.virt.clone(), (Ok(fresh), Instant::now()));
                Ok(data)
            }
        }
    }

    /// The published copy of `r` if it is the version `meta` describes and young enough to
    /// be used without asking the server.
    fn young_copy(&self, r: &Remote, meta: &Meta) -> Option<PathBuf> {
        let info = self.valid_copy(r, meta)?;
        let mtime = info
            .mtime
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        if !info.younger_than(self.t_read(&r.virt, mtime)) {
            return None;
        }
        Some(self.copy_hit(&r.virt))
    }

    /// The published copy of `virt`, used again. Its name shows that copy: a listing may
    /// have put a stub there for a version the copy is (to the listing's precision), and
    /// `cp` compares the `stat` of the name with the `fstat` of what it opened.
    fn copy_hit(&self, virt: &str) -> PathBuf {
        usage::Usage::add(&self.usage.hits, 1);
        self.touch_copy(virt);
        let data = self.cache.data_path(virt);
        if let Err(e) = self.cache.show_copy(virt) {
            tracing::debug!("{virt}: the skeleton entry stays a stub: {e}");
        }
        data
    }

    /// The record of the published copy of `r`, if it is the version `meta` describes.
    fn valid_copy(&self, r: &Remote, meta: &Meta) -> Option<Info> {
        let source = r.describe();
        self.cache
            .info(&r.virt)
            .filter(|i| i.source == source && i.matches(meta))
    }

    /// Downloads `r` into `d` (unless `validator` still holds); returns what came and how
    /// many bytes. A failure to write the copy (a full cache disk) is reported as such,
    /// not as the transfer error it causes.
    fn download(
        &self,
        r: &Remote,
        d: &cache::Download,
        validator: Option<&Validator>,
    ) -> Result<(Fetched, u64)> {
        let counted = Counted {
            inner: BufWriter::with_capacity(1 << 20, &d.file),
            n: 0,
            failed: None,
        };
        let mut out = speed::LowSpeed::new(counted, self.speed_window, r.describe());
        let fetched = r.driver.fetch(&r.path, &mut out, validator);
        if let Some(e) = out.pace.stalled() {
            return Err(e);
        }
        let out = out.get_mut();
        let flushed = out.inner.flush();
        let local = out.failed.take().or(flushed.err());
        if let Some(e) = local {
            return Err(Error::cache(&self.cache.data_path(&r.virt), e));
        }
        Ok((fetched?, out.n))
    }

    fn fetch_lock(&self, virt: &str) -> Arc<Mutex<()>> {
        self.fetch_locks
            .lock()
            .unwrap()
            .entry(virt.to_owned())
            .or_default()
            .clone()
    }
}

/// A writer that counts the bytes that pass through it, and keeps its first failure (the
/// driver sees only that the transfer broke).
struct Counted<W> {
    inner: W,
    n: u64,
    failed: Option<std::io::Error>,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf).inspect_err(|e| {
            let copy = std::io::Error::new(e.kind(), e.to_string());
            self.failed.get_or_insert(match e.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => copy,
            });
        })?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
