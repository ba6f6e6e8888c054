//! roam's private on-disk cache (0700), shared by every roam process of the user, laid out
//! as mirrors of the namespace:
//!
//! - `meta/VIRT`: the skeleton (Ufo §5.2). Directories are real directories; a file is a
//!   sparse stub with the remote size, mtime and mode, or, once fetched, a hard link to its
//!   data. Metadata calls (`stat`, `access`, `getdents64`, `chdir`) are answered natively by
//!   the kernel from here, so `ls -l` runs at local speed.
//! - `data/VIRT`: published copies of whole remote versions; opens of remote files are
//!   redirected here. A copy enters `data/` only complete, by `rename`, and is never
//!   written after: a version being written is private to its roam process (`work.rs`).
//! - `info/VIRT`: a small JSON sidecar per data file (source, validators, fetch time).
//! - `locks`: the lock of each name (`locks.rs`), held while its copy is filled or published.
//! - `work/ID/`: each roam process's changes, partial copies and temporaries (`work.rs`).
//!
//! Because the trees mirror virtual names, a real path inside them maps straight back to
//! the virtual name (`unmap`), which is how the tracer understands a cwd or a dirfd that
//! points into the skeleton.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use roam_drivers::local::spell;
use roam_drivers::{Kind, Meta};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Mode of a file whose protocol has no permission bits: readable, and executable when
/// its first bytes say it is a program (ELF or `#!`).
const MODE_FILE: u32 = 0o444;
const MODE_PROGRAM: u32 = 0o555;
const MODE_DIR: u32 = 0o755;

/// What the cache knows about one fetched file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Info {
    pub source: String,
    pub etag: Option<String>,
    pub mtime: Option<u64>,
    pub size: u64,
    pub fetched_at: u64,
    /// mtime (ns) of the local copy when it was last equal to the remote version, so a
    /// change of the copy can be told from the copy alone (see `Vfs::flush`).
    #[serde(default)]
    pub copy_mtime_ns: Option<u128>,
    /// Seconds the server let this version be used without asking again when it was
    /// fetched ([`Meta::fresh_for`]); `None`: it did not say.
    #[serde(default)]
    pub fresh_for: Option<u64>,
}

impl Info {
    /// True when this copy was fetched less than `t_read` ago, and less than the server
    /// let it be used for.
    pub fn younger_than(&self, t_read: Duration) -> bool {
        let t_read = match self.fresh_for {
            Some(secs) => t_read.min(Duration::from_secs(secs)),
            None => t_read,
        };
        unix_secs(SystemTime::now()).saturating_sub(self.fetched_at) < t_read.as_secs().max(1)
            && t_read > Duration::ZERO
    }

    /// True when the copy matches what the server says now (as far as the server says).
    pub fn matches(&self, meta: &Meta) -> bool {
        let size_ok = meta.size.is_none_or(|s| s == self.size);
        let etag_ok = match (&meta.etag, &self.etag) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        // Listings give mtimes to the minute only; a closer change is caught by revalidation.
        let mtime_ok = match (meta.mtime, self.mtime) {
            (Some(a), Some(b)) => unix_secs(a).abs_diff(b) < 60,
            _ => true,
        };
        size_ok && etag_ok && mtime_ok
    }
}

/// A download being written (see [`DiskCache::begin_download`]): the open file and
/// where it lives.
pub struct Download {
    pub file: File,
    target: Target,
}

enum Target {
    Temp(PathBuf),
    /// A copy that stays this process's own (not published).
    Private(PathBuf),
    /// The skeleton stub, and the size and mtime it had.
    Stub {
        path: PathBuf,
        len: u64,
        mtime: Option<SystemTime>,
    },
}

/// (size, mtime in ns) of a local file: its identity for "has the copy changed?".
pub fn stamp(p: &Path) -> Option<(u64, u128)> {
    let md = fs::metadata(p).ok()?;
    let ns = md
        .modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some((md.len(), ns))
}

pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The cache directory and its three mirrors.
#[derive(Debug)]
pub struct DiskCache {
    root: PathBuf,
    meta: PathBuf,
    data: PathBuf,
    info: PathBuf,
    tmp: PathBuf,
    meta_prefix: String,
    data_prefix: String,
    /// Skeleton directories deeper than `PATH_MAX`, by (device, inode): the kernel cannot
    /// spell a cwd there (`/proc/PID/cwd`), so its virtual name is found by its identity.
    deep_dirs: std::sync::Mutex<HashMap<(u64, u64), String>>,
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Makes the cache directory at `root` (private: 0700) and returns its canonical path.
pub fn prepare_root(root: &Path) -> Result<PathBuf> {
    mk_private(root)?;
    fs::set_permissions(root, fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::cache(root, e))?;
    fs::canonicalize(root).map_err(|e| Error::cache(root, e))
}

fn mk_private(p: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| Error::cache(p, e))
}

impl DiskCache {
    /// Opens the cache at the canonical `root` (see [`prepare_root`]); files being written
    /// go to `tmp` (this process's own) until they are complete.
    pub fn open(root: &Path, tmp: PathBuf) -> Result<DiskCache> {
        let [meta, data, info] = ["meta", "data", "info"].map(|d| root.join(d));
        for d in [&meta, &data, &info] {
            mk_private(d)?;
        }
        let meta_prefix = meta.to_string_lossy().into_owned();
        let data_prefix = data.to_string_lossy().into_owned();
        Ok(DiskCache {
            root: root.to_path_buf(),
            meta,
            data,
            info,
            tmp,
            meta_prefix,
            data_prefix,
            deep_dirs: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn meta_path(&self, virt: &str) -> PathBuf {
        under(&self.meta, virt)
    }

    pub fn data_path(&self, virt: &str) -> PathBuf {
        under(&self.data, virt)
    }

    /// The virtual name of a real path inside the skeleton or the data mirror.
    pub fn unmap(&self, real: &str) -> Option<String> {
        [&self.meta_prefix, &self.data_prefix]
            .into_iter()
            .find_map(|prefix| crate::path::strip_dir_prefix(real, prefix).map(str::to_owned))
    }

    /// The virtual name of a real path inside the data mirror (an fd's target).
    pub fn unmap_data(&self, real: &str) -> Option<String> {
        crate::path::strip_dir_prefix(real, &self.data_prefix).map(str::to_owned)
    }

    /// Makes sure `meta/VIRT` is a directory (replacing a stale file stub); returns its
    /// name as the kernel takes it (through links past `PATH_MAX`).
    pub fn put_dir(&self, virt: &str) -> Result<PathBuf> {
        let p = self.meta_path(virt);
        ensure_dir(&p)?;
        let spelled = spell(&p).into_owned();
        if spelled != p {
            let md = fs::metadata(&spelled).map_err(|e| Error::cache(&p, e))?;
            let mut deep = self.deep_dirs.lock().unwrap();
            deep.insert((md.dev(), md.ino()), virt.to_owned());
        }
        Ok(spelled)
    }

    /// The virtual name of a skeleton directory deeper than `PATH_MAX` (one
    /// [`DiskCache::put_dir`] made), by its device and inode.
    pub fn deep_dir(&self, dev: u64, ino: u64) -> Option<String> {
        self.deep_dirs.lock().unwrap().get(&(dev, ino)).cloned()
    }

    /// Makes `meta/VIRT` describe `meta` (a file stub, a directory or a symlink).
    pub fn put_stub(&self, virt: &str, meta: &Meta) -> Result<PathBuf> {
        let p = self.meta_path(virt);
        match meta.kind {
            Kind::Dir => {
                if !p.is_dir() {
                    self.keeping_parents_mtime(&p, || ensure_dir(&p))?;
                }
                set_dir_mode(&p, meta.mode)?;
                if meta.mtime.is_some() {
                    self.set_dir_mtime(virt, meta.mtime)?;
                }
            }
            Kind::File if stub_matches(&p, meta) => set_mode_in_place(&p, meta.mode)?,
            Kind::File if self.shows_copy_of(virt, &p, meta) => {
                // The copy of this very version, shown so far with the mtime it was
                // written with (the server gave its own on upload): it keeps its inode,
                // which programs compare between `stat` and `fstat`.
                self.retime_copy(virt, &p, meta.mtime)?;
                set_mode_in_place(&p, meta.mode)?;
            }
            Kind::File => {
                let tmp = self.tmp_name();
                let f = File::create(&tmp).map_err(|e| Error::cache(&tmp, e))?;
                f.set_len(meta.size.unwrap_or(0))
                    .map_err(|e| Error::cache(&tmp, e))?;
                set_times(&f, meta.mtime, meta.atime, &tmp)?;
                fs::set_permissions(
                    &tmp,
                    fs::Permissions::from_mode(meta.mode.unwrap_or(MODE_FILE)),
                )
                .map_err(|e| Error::cache(&tmp, e))?;
                self.install(&tmp, &p)?;
            }
            Kind::Fifo | Kind::Socket if is_special(&p, meta.kind) => {
                set_mode_in_place(&p, meta.mode)?;
                // Its time too (`tar x`, `cp -a`, `touch` of a FIFO), as a symlink's.
                if meta.mtime.is_some_and(|t| mtime_of(&p) != Some(t)) {
                    set_link_times(&p, meta);
                }
            }
            Kind::Fifo | Kind::Socket => {
                // The real kind: the kernel carries a FIFO's bytes, whoever opens the entry.
                let tmp = self.tmp_name();
                make_special(&tmp, meta.kind, meta.mode.unwrap_or(MODE_FILE))?;
                set_link_times(&tmp, meta);
                self.install(&tmp, &p)?;
            }
            Kind::Symlink => {
                let target = meta.symlink_target.as_deref().unwrap_or("");
                if fs::read_link(&p).ok().as_deref() != Some(Path::new(target)) {
                    let tmp = self.tmp_name();
                    std::os::unix::fs::symlink(target, &tmp).map_err(|e| Error::cache(&tmp, e))?;
                    set_link_times(&tmp, meta);
                    self.install(&tmp, &p)?;
                } else if meta.mtime.is_some_and(|t| mtime_of(&p) != Some(t)) {
                    // The same link, given a time of its own since (`touch -h`).
                    set_link_times(&p, meta);
                }
            }
        }
        Ok(p)
    }

    /// Sets the mtime of a skeleton directory (after its entries were written).
    pub fn set_dir_mtime(&self, virt: &str, mtime: Option<SystemTime>) -> Result<()> {
        let p = self.meta_path(virt);
        let f = File::open(&p).map_err(|e| Error::cache(&p, e))?;
        set_times(&f, mtime, None, &p)
    }

    /// The mtime a skeleton directory shows now.
    pub fn dir_mtime(&self, virt: &str) -> Option<SystemTime> {
        fs::metadata(self.meta_path(virt)).ok()?.modified().ok()
    }

    /// Gives `virt`'s skeleton entry and copy (roam's stand-ins for the remote file,
    /// which `stat` shows) the access time the server was given.
    pub fn set_local_atime(&self, virt: &str, atime: SystemTime) {
        for p in [self.meta_path(virt), self.data_path(virt)] {
            let _ = set_own_times(&p, Some(atime), None);
        }
    }

    /// The modification and access times of `virt`'s copy while it holds the version
    /// `meta` describes: the mtime it was first shown with (a listing's may be to the
    /// minute, a fetch's to the second), and an access time that a read of the copy moves
    /// as the kernel's `relatime` moves a local file's (no request tells the server).
    pub fn copy_times(&self, virt: &str, meta: &Meta) -> Option<(SystemTime, SystemTime)> {
        let md = fs::symlink_metadata(self.data_path(virt)).ok()?;
        if !describes(&md, meta) {
            return None;
        }
        Some((md.modified().ok()?, md.accessed().ok()?))
    }

    /// Removes skeleton entries of `virt` whose names are not in `keep`.
    pub fn prune_dir(&self, virt: &str, keep: &HashSet<&str>) -> Result<()> {
        let p = self.meta_path(virt);
        let rd = fs::read_dir(&p).map_err(|e| Error::cache(&p, e))?;
        for entry in rd.flatten() {
            let name = entry.file_name();
            if !name.to_str().is_some_and(|n| keep.contains(n)) {
                remove_any(&entry.path()).map_err(|e| Error::cache(&entry.path(), e))?;
            }
        }
        Ok(())
    }

    /// Gives the copy of `virt` (its entry `p`) the server's `mtime`. Its sidecar's stamp
    /// of the uploaded copy moves with it: a stamp that no longer matched would read as
    /// writes made to the copy after its upload.
    fn retime_copy(&self, virt: &str, p: &Path, mtime: Option<SystemTime>) -> Result<()> {
        if mtime.is_none() || mtime_of(p) == mtime {
            return Ok(());
        }
        let before = stamp(p);
        set_own_times(p, None, mtime).map_err(|e| Error::cache(p, e))?;
        match self.info(virt) {
            Some(mut info)
                if info.copy_mtime_ns.is_some() && info.copy_mtime_ns == before.map(|s| s.1) =>
            {
                info.copy_mtime_ns = stamp(p).map(|s| s.1);
                self.put_info(virt, &info)
            }
            _ => Ok(()),
        }
    }

    /// Whether the entry `p` of `virt` is its copy, and that copy the version `meta`
    /// describes: by its ETag and size, or, where `meta` has no ETag (nginx's WebDAV
    /// listings), by its size and the time the server gave the copy's version (a copy
    /// just uploaded still has the time it was written, often a second before the
    /// server's).
    fn shows_copy_of(&self, virt: &str, p: &Path, meta: &Meta) -> bool {
        let Some(info) = self.info(virt) else {
            return false;
        };
        let same_version = match &meta.etag {
            Some(_) => info.etag == meta.etag,
            None => meta
                .mtime
                .zip(info.mtime)
                .is_some_and(|(now, then)| same_mtime(unix_secs(now), then)),
        };
        same_version
            && meta.size.is_none_or(|s| s == info.size)
            && same_file(p, &self.data_path(virt))
    }

    /// The sidecar of a fetched file, if it has one and the data is there.
    pub fn info(&self, virt: &str) -> Option<Info> {
        let data = fs::read(under(&self.info, virt)).ok()?;
        let info: Info = serde_json::from_slice(&data).ok()?;
        self.data_path(virt).is_file().then_some(info)
    }

    /// Rewrites the sidecar (e.g. to record a successful revalidation).
    pub fn put_info(&self, virt: &str, info: &Info) -> Result<()> {
        let tmp = self.tmp_name();
        let json = serde_json::to_vec(info).expect("Info serialises");
        fs::write(&tmp, json).map_err(|e| Error::cache(&tmp, e))?;
        self.install(&tmp, &under(&self.info, virt))
    }

    /// Where the first download of `virt` goes: its skeleton stub itself, when it is one,
    /// so the name keeps its inode (programs such as `cp` compare `stat` before the open
    /// with `fstat` after it); else a new file in `tmp/`.
    pub fn begin_download(&self, virt: &str, first: bool) -> Result<Download> {
        let stub = self.meta_path(virt);
        if first && is_plain_stub(&stub) {
            // The stub keeps its size while being filled: stat never sees it shrink.
            if let Ok(file) = OpenOptions::new().write(true).open(&stub) {
                let md = file.metadata().ok();
                let len = md.as_ref().map_or(0, |m| m.len());
                let mtime = md.and_then(|m| m.modified().ok());
                let target = Target::Stub {
                    path: stub,
                    len,
                    mtime,
                };
                return Ok(Download { file, target });
            }
        }
        let (tmp, file) = self.create_download()?;
        Ok(Download {
            file,
            target: Target::Temp(tmp),
        })
    }

    /// A download into `path` that stays private to this process.
    pub fn private_download(&self, path: PathBuf) -> Result<Download> {
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::cache(&path, e))?;
        Ok(Download {
            file,
            target: Target::Private(path),
        })
    }

    /// Gives up a download: a temporary goes, a stub is a stub again.
    pub fn abort_download(&self, d: &Download) {
        match &d.target {
            Target::Temp(p) | Target::Private(p) => {
                let _ = fs::remove_file(p);
            }
            Target::Stub { len, .. } => {
                let _ = d.file.set_len(*len);
                // What arrived must not hold the disk: the fetch may have failed for want of
                // it. Only a stub of its own: one linked to a copy holds that copy's bytes.
                if d.file.metadata().is_ok_and(|m| m.nlink() == 1) {
                    free_bytes_of(&d.file, *len);
                }
            }
        }
    }

    /// Makes a finished download (of `size` bytes) the copy of `virt`.
    pub fn commit(
        &self,
        d: &Download,
        virt: &str,
        size: u64,
        meta: &Meta,
        info: &Info,
    ) -> Result<PathBuf> {
        match &d.target {
            Target::Temp(tmp) | Target::Private(tmp) => self.commit_download(tmp, virt, meta, info),
            Target::Stub {
                path,
                len,
                mtime: shown,
            } => {
                d.file.set_len(size).map_err(|e| Error::cache(path, e))?;
                // The name keeps the mtime it showed when the fetched version is the one
                // it described: one identity before and after the fetch.
                let meta = &keep_shown_mtime(meta, size == *len, *shown);
                // A listing may have put a fresh stub in this one's place meanwhile (the
                // filling changed its mtime): link whatever stands there, and keep it only
                // if it is the inode we filled; else the bytes are copied from our fd.
                let link = self.tmp_name();
                fs::hard_link(path, &link).map_err(|e| Error::cache(&link, e))?;
                if !same_inode(&link, &d.file) {
                    let _ = fs::remove_file(&link);
                    return self.commit_copy_of(&d.file, virt, meta, info);
                }
                self.finish_copy(&link, meta)?;
                let data = self.data_path(virt);
                self.install(&link, &data)?;
                self.record_copy(virt, &data, info)?;
                Ok(data)
            }
        }
    }

    /// Commits a copy of the bytes of `file` (a stub that lost its name mid-download).
    fn commit_copy_of(&self, file: &File, virt: &str, meta: &Meta, info: &Info) -> Result<PathBuf> {
        use std::os::fd::AsRawFd;
        let (tmp, mut out) = self.create_download()?;
        // The stub was opened write-only; read it again through /proc.
        let mut src = File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|e| Error::cache(&tmp, e))?;
        if let Err(e) = std::io::copy(&mut src, &mut out) {
            let _ = fs::remove_file(&tmp);
            return Err(Error::cache(&tmp, e));
        }
        self.commit_download(&tmp, virt, meta, info)
    }

    /// Makes `part` (a private path) a sparse copy of `size` bytes of `virt`, to be filled in
    /// ranges, and opens it for writing: the skeleton stub's own inode where `use_stub`
    /// allows it and the stub is one (so the name keeps its inode: `cp` compares the `stat`
    /// before its open with the `fstat` after), else a new file.
    pub fn sparse_part(&self, virt: &str, size: u64, part: &Path, use_stub: bool) -> Result<File> {
        let stub = self.meta_path(virt);
        if use_stub && is_plain_stub(&stub) && fs::hard_link(&stub, part).is_ok() {
            match OpenOptions::new().write(true).open(part) {
                Ok(f) if f.set_len(size).is_ok() => return Ok(f),
                // Not ours to write (a read-only stub, as another user): a file of our own.
                _ => fs::remove_file(part).map_err(|e| Error::cache(part, e))?,
            }
        }
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(part)
            .map_err(|e| Error::cache(part, e))?;
        f.set_len(size).map_err(|e| Error::cache(part, e))?;
        Ok(f)
    }

    /// Publishes a completely filled part copy as the copy of `virt` (mtime, mode,
    /// sidecar), and makes the skeleton entry that copy if it is not already.
    pub fn publish_part(&self, virt: &str, part: &Path, meta: &Meta, info: &Info) -> Result<()> {
        self.finish_copy(part, meta)?;
        let link = self.tmp_name();
        fs::hard_link(part, &link).map_err(|e| Error::cache(&link, e))?;
        let data = self.data_path(virt);
        self.install(&link, &data)?;
        self.record_copy(virt, &data, info)?;
        if !same_file(&self.meta_path(virt), &data) {
            self.link_into_skeleton(virt, &self.data_path(virt))?;
        }
        Ok(())
    }

    /// Publishes `copy` (a version roam just uploaded, written by nobody any more) as the
    /// copy of `virt`, described by `info`.
    pub fn publish_copy(&self, virt: &str, copy: &Path, info: &Info) -> Result<()> {
        let data = self.data_path(virt);
        self.install(copy, &data)?;
        self.record_copy(virt, &data, info)?;
        self.link_into_skeleton(virt, &data)
    }

    /// Opens a new download file in `tmp/`.
    pub fn create_download(&self) -> Result<(PathBuf, File)> {
        let tmp = self.tmp_name();
        let f = OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| Error::cache(&tmp, e))?;
        Ok((tmp, f))
    }

    /// Moves a completed download into `data/VIRT` with the remote mtime and a mode, then
    /// hard-links it into the skeleton so `stat` and `fstat` agree on the inode.
    pub fn commit_download(
        &self,
        tmp: &Path,
        virt: &str,
        meta: &Meta,
        info: &Info,
    ) -> Result<PathBuf> {
        self.finish_copy(tmp, meta)?;
        let data = self.data_path(virt);
        self.install(tmp, &data)?;
        self.record_copy(virt, &data, info)?;
        self.link_into_skeleton(virt, &self.data_path(virt))?;
        Ok(data)
    }

    /// Gives a downloaded file the remote mtime and a mode.
    pub fn finish_copy(&self, p: &Path, meta: &Meta) -> Result<()> {
        let mode = meta.mode.unwrap_or_else(|| {
            if looks_executable(p) {
                MODE_PROGRAM
            } else {
                MODE_FILE
            }
        });
        let f = File::open(p).map_err(|e| Error::cache(p, e))?;
        set_times(&f, meta.mtime, meta.atime, p)?;
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| Error::cache(p, e))
    }

    /// Writes the sidecar of a new copy, with the copy's own stamp.
    fn record_copy(&self, virt: &str, data: &Path, info: &Info) -> Result<()> {
        let info = Info {
            copy_mtime_ns: stamp(data).map(|(_, ns)| ns),
            ..info.clone()
        };
        self.put_info(virt, &info)
    }

    /// Replaces the skeleton entry of `virt` by a hard link to `copy` (its data file, or a
    /// copy being written).
    pub fn link_into_skeleton(&self, virt: &str, copy: &Path) -> Result<()> {
        let tmp = self.tmp_name();
        fs::hard_link(copy, &tmp).map_err(|e| Error::cache(&tmp, e))?;
        self.install(&tmp, &self.meta_path(virt))
    }

    /// Makes the skeleton entry of `virt` (a file) its published copy, unless it is.
    pub fn show_copy(&self, virt: &str) -> Result<()> {
        let (entry, data) = (self.meta_path(virt), self.data_path(virt));
        let is_file = fs::symlink_metadata(&entry).is_ok_and(|m| m.is_file());
        if !is_file || same_file(&entry, &data) {
            return Ok(());
        }
        self.link_into_skeleton(virt, &data)
    }

    /// Every copy in `data/`: virtual name, size, and when it was last fetched or
    /// revalidated (its sidecar's mtime).
    pub fn copies(&self) -> Vec<(String, u64, SystemTime)> {
        let mut names = Vec::new();
        collect_files(&self.data, &self.data, &mut names);
        names
            .into_iter()
            .filter_map(|virt| {
                let size = fs::metadata(self.data_path(&virt)).ok()?.len();
                let at = fs::metadata(under(&self.info, &virt))
                    .and_then(|m| m.modified())
                    .unwrap_or(UNIX_EPOCH);
                Some((virt, size, at))
            })
            .collect()
    }

    /// Forgets the sidecar of `virt`'s published copy (the copy itself was moved away).
    pub fn forget_copy(&self, virt: &str) {
        let _ = fs::remove_file(under(&self.info, virt));
    }

    /// Removes the copy of `virt` and its sidecar.
    pub fn drop_copy(&self, virt: &str) -> Result<()> {
        for p in [self.data_path(virt), under(&self.info, virt)] {
            match fs::remove_file(&p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::cache(&p, e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Puts a stub at `meta/VIRT` even where a (hard-linked) copy stands.
    pub fn replace_with_stub(&self, virt: &str, meta: &Meta) -> Result<()> {
        let p = self.meta_path(virt);
        if fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            fs::remove_file(&p).map_err(|e| Error::cache(&p, e))?;
        }
        self.put_stub(virt, meta).map(drop)
    }

    /// Forgets everything cached under `virt` (skeleton, data, sidecars), e.g. after the
    /// remote object was removed or renamed. Journaled changes are kept.
    pub fn forget(&self, virt: &str) {
        for base in [&self.meta, &self.data, &self.info] {
            let _ = remove_any(&under(base, virt));
        }
    }

    /// Atomically puts `tmp` at `dest`, creating parents and clearing a stale directory.
    /// Puts `tmp` at `dest`. The directory keeps the mtime it showed: roam placing an
    /// entry is no change of the remote directory (`tar c` compares a directory's mtime
    /// before and after reading it, and a backend without directory times shows the
    /// skeleton's own).
    fn install(&self, tmp: &Path, dest: &Path) -> Result<()> {
        self.make_room(dest)?;
        self.keeping_parents_mtime(dest, || {
            fs::rename(tmp, dest).map_err(|e| {
                let _ = fs::remove_file(tmp);
                Error::cache(dest, e)
            })
        })
    }

    /// Runs `place`, which puts an entry at `dest`; a skeleton directory holding it keeps
    /// the mtime it showed (see [`DiskCache::install`]).
    fn keeping_parents_mtime(&self, dest: &Path, place: impl FnOnce() -> Result<()>) -> Result<()> {
        let parent = dest.parent().filter(|p| p.starts_with(&self.meta));
        let shown = parent.and_then(mtime_of);
        place()?;
        if let (Some(parent), Some(shown)) = (parent, shown) {
            let _ = set_own_times(parent, None, Some(shown));
        }
        Ok(())
    }

    /// Makes `dest` a place a file can be renamed to: its parents exist, and a stale
    /// directory there is gone.
    fn make_room(&self, dest: &Path) -> Result<()> {
        if let Some(parent) = dest.parent() {
            ensure_dir(parent)?;
        }
        if dest.is_dir() && !dest.is_symlink() {
            fs::remove_dir_all(dest).map_err(|e| Error::cache(dest, e))?;
        }
        Ok(())
    }

    fn tmp_name(&self) -> PathBuf {
        let n = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        self.tmp.join(format!("{}-{}", std::process::id(), n))
    }
}

pub(crate) fn under(base: &Path, virt: &str) -> PathBuf {
    let rel = virt.trim_start_matches('/');
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// `create_dir_all` that replaces stale file stubs standing where a directory must be.
pub(crate) fn ensure_dir(p: &Path) -> Result<()> {
    let spelled = spell(p);
    match fs::symlink_metadata(&spelled) {
        Ok(md) if md.is_dir() => return Ok(()),
        Ok(_) => fs::remove_file(&spelled).map_err(|e| Error::cache(p, e))?,
        Err(_) => {}
    }
    if let Some(parent) = p.parent() {
        ensure_dir(parent)?;
    }
    match fs::DirBuilder::new().mode(MODE_DIR).create(&spelled) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && spelled.is_dir() => Ok(()),
        Err(e) => Err(Error::cache(p, e)),
    }
}

/// Copies `src` to a new file `dest`, sharing its blocks (`FICLONE`) where the file system
/// can (btrfs, XFS), else by `copy_file_range` (what `io::copy` uses between files).
pub(crate) fn clone_or_copy(src: &Path, dest: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut from = roam_drivers::local::open_unread(src)?;
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)?;
    // SAFETY: FICLONE takes the source descriptor as its argument; both are open files.
    if unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) } == 0 {
        return Ok(());
    }
    std::io::copy(&mut from, &mut to).map(drop)
}

pub(crate) fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let p = entry.path();
        if p.is_dir() {
            collect_files(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(format!("/{}", rel.to_string_lossy()));
        }
    }
}

fn remove_any(p: &Path) -> std::io::Result<()> {
    if fs::symlink_metadata(p)?.is_dir() {
        fs::remove_dir_all(p)
    } else {
        fs::remove_file(p)
    }
}

/// Gives `f` the modification time `mtime` and the access time `atime` (`None`: the
/// mtime stands for it, on a backend that keeps none apart).
fn set_times(
    f: &File,
    mtime: Option<SystemTime>,
    atime: Option<SystemTime>,
    p: &Path,
) -> Result<()> {
    let t = mtime.unwrap_or(UNIX_EPOCH);
    f.set_times(
        FileTimes::new()
            .set_modified(t)
            .set_accessed(atime.unwrap_or(t)),
    )
    .map_err(|e| Error::cache(p, e))
}

/// Whether `p` is a special file of `kind`.
fn is_special(p: &Path, kind: Kind) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| match kind {
        Kind::Fifo => m.file_type().is_fifo(),
        _ => m.file_type().is_socket(),
    })
}

/// A FIFO (or a socket's name) at `p` with exactly `mode` (roam's umask left out).
fn make_special(p: &Path, kind: Kind, mode: u32) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|e| Error::cache(p, std::io::Error::other(e)))?;
    let format = match kind {
        Kind::Fifo => libc::S_IFIFO,
        _ => libc::S_IFSOCK,
    };
    // SAFETY: a valid C string; no device number is needed for these kinds.
    if unsafe { libc::mknod(c.as_ptr(), format | mode as libc::mode_t, 0) } != 0 {
        return Err(Error::cache(p, std::io::Error::last_os_error()));
    }
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| Error::cache(p, e))
}

/// The modification time of `p` itself (a symlink's own).
fn mtime_of(p: &Path) -> Option<SystemTime> {
    fs::symlink_metadata(p).and_then(|m| m.modified()).ok()
}

/// Gives a symlink's (or special file's) stub the remote times (`lstat` shows them); best
/// effort.
fn set_link_times(p: &Path, meta: &Meta) {
    if meta.mtime.is_some() {
        let _ = set_own_times(p, meta.atime.or(meta.mtime), meta.mtime);
    }
}

/// A read of the copy `p`, as Linux's default `relatime` counts one: its access time
/// moves to now when it is not after the last change or is a day old.
pub(crate) fn read_access(p: &Path) {
    const DAY: Duration = Duration::from_secs(86_400);
    let Ok(md) = fs::metadata(p) else { return };
    let (Ok(atime), Ok(mtime)) = (md.accessed(), md.modified()) else {
        return;
    };
    let stale = SystemTime::now()
        .duration_since(atime)
        .is_ok_and(|age| age > DAY);
    if md.is_file() && (atime <= mtime || stale) {
        let _ = set_own_times(p, Some(SystemTime::now()), None);
    }
}

pub(crate) use roam_drivers::local::set_own_times;

/// Whether `p` is a skeleton stub nobody links to (not a fetched copy).
fn is_plain_stub(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.nlink() == 1)
}

/// Whether two paths name one inode.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::symlink_metadata(a), fs::symlink_metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Whether the file at `p` is the open `file`.
fn same_inode(p: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::symlink_metadata(p), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// A stub is still right when its size, mtime and kind agree: a file's entry (maybe its
/// fetched copy) keeps its inode and mtime while the file is unchanged, whichever source
/// (a listing to the minute, a `HEAD` to the second) describes it next.
fn stub_matches(p: &Path, meta: &Meta) -> bool {
    fs::symlink_metadata(p).is_ok_and(|md| describes(&md, meta))
}

/// Whether a local file with metadata `md` is the version `meta` describes (see
/// [`stub_matches`]).
fn describes(md: &fs::Metadata, meta: &Meta) -> bool {
    let mtime_ok = match (meta.mtime, md.modified().ok()) {
        (Some(a), Some(b)) => same_mtime(unix_secs(a), unix_secs(b)),
        (None, _) => true,
        _ => false,
    };
    md.is_file() && meta.size.is_none_or(|s| s == md.len()) && mtime_ok
}

/// Whether two mtimes (in seconds) describe one version: equal, or one is a whole minute
/// (a listing that gives minutes, as nginx's and FTP's do) and the other falls in it.
fn same_mtime(a: u64, b: u64) -> bool {
    let within =
        |minute: u64, t: u64| minute.is_multiple_of(60) && (minute..minute + 60).contains(&t);
    a == b || within(a, b) || within(b, a)
}

/// `meta` with the mtime `shown` by the entry being filled, when the fetched version
/// (`same_size`, and an mtime [`same_mtime`] as it) is the one that entry described.
pub(crate) fn keep_shown_mtime(meta: &Meta, same_size: bool, shown: Option<SystemTime>) -> Meta {
    let same = |a: SystemTime, b: SystemTime| same_mtime(unix_secs(a), unix_secs(b));
    match (meta.mtime, shown) {
        (Some(fetched), Some(shown)) if same_size && same(fetched, shown) => Meta {
            mtime: Some(shown),
            ..meta.clone()
        },
        _ => meta.clone(),
    }
}

/// Gives a skeleton directory the remote mode. roam must still add and remove entries in
/// it: without root's override, the owner keeps `rwx` (so a remote `0500` shows `0700`).
pub(crate) fn set_dir_mode(p: &Path, mode: Option<u32>) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let owner = match unsafe { libc::geteuid() } == 0 {
        true => 0,
        false => 0o700,
    };
    set_mode_in_place(p, mode.map(|m| m | owner))
}

/// Keeps an up-to-date entry (maybe a fetched copy) but gives it the remote mode.
fn set_mode_in_place(p: &Path, mode: Option<u32>) -> Result<()> {
    let Some(mode) = mode else { return Ok(()) };
    let md = fs::symlink_metadata(p).map_err(|e| Error::cache(p, e))?;
    if md.permissions().mode() & 0o7777 != mode {
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| Error::cache(p, e))?;
    }
    Ok(())
}

fn looks_executable(p: &Path) -> bool {
    let mut head = [0u8; 4];
    let n = File::open(p)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head[..n].starts_with(b"\x7fELF") || head[..n].starts_with(b"#!")
}

/// Frees the blocks of the first `len` bytes of `file` (they read as zeros), keeping its
/// size, so that a stat meanwhile sees no change; where the file system cannot punch holes,
/// by truncating to nothing and back.
pub(crate) fn free_bytes_of(file: &File, len: u64) {
    use std::os::fd::AsRawFd;
    let flags = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: an fd of ours; fallocate reads no memory.
    let punched = unsafe { libc::fallocate(file.as_raw_fd(), flags, 0, len as libc::off_t) } == 0;
    if !punched {
        if let Err(e) = file.set_len(0).and_then(|()| file.set_len(len)) {
            tracing::warn!("could not free the bytes of a failed fetch: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    fn cache() -> (DiskCache, PathBuf) {
        let root = std::env::temp_dir().join(format!(
            "roam-cache-test-{}-{}",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let root = prepare_root(&root).unwrap();
        let tmp = root.join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        (DiskCache::open(&root, tmp).unwrap(), root)
    }

    fn file_meta(size: u64) -> Meta {
        Meta {
            size: Some(size),
            mtime: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            ..Meta::of_kind(Kind::File)
        }
    }

    #[test]
    fn cache_root_is_private_and_maps_back() {
        let (c, root) = cache();
        assert_eq!(fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        let m = c.meta_path("/http/h/a b");
        assert_eq!(c.unmap(m.to_str().unwrap()).unwrap(), "/http/h/a b");
        assert_eq!(c.unmap(c.data_path("/x").to_str().unwrap()).unwrap(), "/x");
        assert_eq!(c.unmap("/etc/passwd"), None);
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn stubs_carry_size_and_mtime_and_become_data() {
        let (c, root) = cache();
        let p = c.put_stub("/http/h/d/f", &file_meta(10_000_000)).unwrap();
        let md = fs::metadata(&p).unwrap();
        assert_eq!(
            (md.len(), md.mtime(), md.mode() & 0o777),
            (10_000_000, 1_700_000_000, 0o444)
        );
        assert!(md.blocks() < 16, "stub must be sparse");

        let (tmp, mut f) = c.create_download().unwrap();
        f.write_all(b"#!/bin/sh\necho hi\n").unwrap();
        let info = Info {
            source: "x".into(),
            etag: None,
            mtime: None,
            size: 18,
            fetched_at: 0,
            fresh_for: None,
            copy_mtime_ns: None,
        };
        let data = c
            .commit_download(&tmp, "/http/h/d/f", &file_meta(18), &info)
            .unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"#!/bin/sh\necho hi\n");
        let (dm, sm) = (fs::metadata(&data).unwrap(), fs::metadata(&p).unwrap());
        assert_eq!(dm.ino(), sm.ino(), "skeleton entry is the data file");
        assert_eq!(dm.mode() & 0o777, 0o555, "a script is executable");
        let got = c.info("/http/h/d/f").unwrap();
        assert_eq!(
            (got.size, got.copy_mtime_ns),
            (18, stamp(&data).map(|(_, ns)| ns))
        );

        // A directory that replaces a file, and pruning.
        c.put_stub("/http/h/d/f", &Meta::of_kind(Kind::Dir))
            .unwrap();
        assert!(p.is_dir());
        c.put_stub("/http/h/d/g", &file_meta(1)).unwrap();
        c.prune_dir("/http/h/d", &HashSet::from(["g"])).unwrap();
        assert!(!p.exists() && c.meta_path("/http/h/d/g").exists());
        fs::remove_dir_all(root).unwrap();
    }

    /// The storm flake: a listing replaced the stub a first download was filling (its
    /// mtime had moved), and the commit linked the fresh, empty stub as the data.
    #[test]
    fn a_stub_replaced_mid_download_keeps_the_downloaded_bytes() {
        let (c, root) = cache();
        let virt = "/http/h/d/deep.txt";
        c.put_stub(virt, &file_meta(32)).unwrap();
        let d = c.begin_download(virt, true).unwrap();
        (&d.file).write_all(&[b'x'; 32]).unwrap();
        c.put_stub(virt, &file_meta(32)).unwrap();
        let info = Info {
            source: "x".into(),
            etag: None,
            mtime: None,
            size: 32,
            fetched_at: 0,
            fresh_for: None,
            copy_mtime_ns: None,
        };
        let data = c.commit(&d, virt, 32, &file_meta(32), &info).unwrap();
        assert_eq!(fs::read(&data).unwrap(), [b'x'; 32]);
        assert_eq!(fs::read(c.meta_path(virt)).unwrap(), [b'x'; 32]);
        fs::remove_dir_all(root).unwrap();
    }

    /// One identity per file: a listing gives the minute (nginx), the fetch the second;
    /// the entry keeps its inode and the mtime it first showed until the file changes.
    #[test]
    fn a_file_keeps_its_inode_and_mtime_across_sources_of_different_precision() {
        let (c, root) = cache();
        let virt = "/http/h/d/main.c";
        let at = |s: u64| Meta {
            mtime: Some(UNIX_EPOCH + Duration::from_secs(s)),
            ..file_meta(4)
        };
        let (minute, second) = (1_699_999_980, 1_699_999_995);
        let stub = c.put_stub(virt, &at(minute)).unwrap();
        let id = |p: &Path| fs::metadata(p).map(|m| (m.ino(), m.mtime())).unwrap();
        let shown = id(&stub);
        let d = c.begin_download(virt, true).unwrap();
        (&d.file).write_all(b"abcd").unwrap();
        let info = Info {
            source: "x".into(),
            etag: None,
            mtime: Some(second),
            size: 4,
            fetched_at: 0,
            fresh_for: None,
            copy_mtime_ns: None,
        };
        let data = c.commit(&d, virt, 4, &at(second), &info).unwrap();
        assert_eq!((id(&data), id(&stub)), (shown, shown));
        for s in [second, minute] {
            c.put_stub(virt, &at(s)).unwrap();
            assert_eq!(id(&stub), shown, "described again at {s}");
        }
        // Changed on the server: a new entry.
        c.put_stub(virt, &at(minute + 60)).unwrap();
        assert_ne!(id(&stub), shown);
        // Until the copy is used again as that version: the name shows the copy.
        c.show_copy(virt).unwrap();
        assert_eq!(id(&stub), shown);
        fs::remove_dir_all(root).unwrap();
    }
}
