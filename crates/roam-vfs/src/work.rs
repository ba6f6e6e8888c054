//! One roam process's own corner of the shared cache, `CACHE/work/ID/`:
//!
//! - `copy/VIRT`: the copies this process's programs are writing. A change is private to
//!   the roam process that makes it until it is uploaded, as it would be to one client of a
//!   network file system: other processes sharing the cache keep seeing the published
//!   version (`data/`), which is never written in place.
//! - `journal/VIRT`: the record of each change (where it goes, the version it started
//!   from, and its [`ChangeState`]), so that it survives a crash.
//! - `base/VIRT`: the version a change started from, for resolvers that merge three ways.
//! - `part/N/VIRT`: copies of large files arriving in ranges, private until whole.
//! - `tmp/`: downloads and records being written, renamed into place only when complete.
//! - `owner`: locked (`flock`) for as long as the process lives. A work directory whose
//!   lock is free belongs to a process that died: the next roam that opens the cache to
//!   work adopts its changes ([`Work::adopt_orphans`]) and drops the rest. A change whose
//!   writer had not closed it is then *kept*: never uploaded without the user's word.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use roam_drivers::Leftover;
use serde::{Deserialize, Serialize};

use crate::cache::{collect_files, ensure_dir, under, Info};
use crate::{Error, Result};

/// Where a change stands.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub enum ChangeState {
    /// Programs may still be writing it: not a whole version yet.
    #[default]
    Open,
    /// Its last writer closed it: a whole version, due for upload.
    Sealed,
    /// Not to be uploaded without the user's word: a write to the copy failed, or its
    /// writer ended without closing it. `errno` is what a later `close` reports.
    Kept { errno: i32, why: String },
}

/// A change in progress: where it goes (`source`, and the explicit mount it was written
/// under), the remote version it started from (`None` for a new file, to detect a
/// conflicting change made behind roam's back), its state, and what its uploads may have
/// left on the server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Journal {
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<MountRecord>,
    pub base: Option<Info>,
    #[serde(default)]
    pub state: ChangeState,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leftovers: Vec<Litter>,
    /// Why its last upload failed (it waits for a retry, or `roam sync`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// The explicit mount (`-m LOCAL=URL`, `roam.toml`) a change was written under: a later
/// `roam sync` without that mount still knows where the change goes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountRecord {
    pub prefix: String,
    pub url: String,
}

impl Journal {
    /// A change of `source` (under `mount`) starting from `base`, open for writing.
    pub fn new(source: String, mount: Option<MountRecord>, base: Option<Info>) -> Journal {
        Journal {
            source,
            mount,
            base,
            state: ChangeState::Open,
            leftovers: Vec::new(),
            failure: None,
        }
    }
}

/// What an upload may leave on the server if it is cut off (a temporary, an S3 multipart
/// upload): journaled before it exists, so that whatever ends the upload, roam can remove
/// it later ([`roam_drivers::Leftover`], as a record).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Litter {
    /// Its driver path.
    pub path: String,
    /// An S3 multipart upload's id (none for a temporary file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_id: Option<String>,
}

impl From<&Leftover> for Litter {
    fn from(l: &Leftover) -> Litter {
        match l {
            Leftover::Temporary { path } => Litter {
                path: path.clone(),
                upload_id: None,
            },
            Leftover::Multipart { path, upload_id } => Litter {
                path: path.clone(),
                upload_id: Some(upload_id.clone()),
            },
        }
    }
}

impl Litter {
    /// What it is, named in the namespace of `virt`, the file whose upload left it.
    fn describe(&self, virt: &str) -> String {
        match &self.upload_id {
            Some(_) => format!("an unfinished multipart upload of {virt}"),
            None => {
                let (dir, _) = crate::path::split_name(virt);
                let (_, name) = crate::path::split_name(&self.path);
                format!("{}/{name}", dir.trim_end_matches('/'))
            }
        }
    }

    pub fn leftover(&self) -> Leftover {
        match &self.upload_id {
            None => Leftover::Temporary {
                path: self.path.clone(),
            },
            Some(id) => Leftover::Multipart {
                path: self.path.clone(),
                upload_id: id.clone(),
            },
        }
    }
}

/// A change recorded in some work directory of the cache (see [`pending_changes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    pub virt: String,
    pub state: ChangeState,
    /// The copy holding the change.
    pub copy: PathBuf,
    /// The roam process that owns it, while it lives (`None`: it died; the next `roam
    /// sync`, `run` or `mount` adopts it).
    pub owner: Option<u32>,
    /// What its uploads may have left on the server, for people (removed by its next
    /// upload, or `roam sync`).
    pub leftovers: Vec<String>,
    /// Why its last upload failed, if one did.
    pub failure: Option<String>,
}

/// This process's work directory.
pub(crate) struct Work {
    dir: PathBuf,
    copy: PathBuf,
    journal: PathBuf,
    base: PathBuf,
    part: PathBuf,
    tmp: PathBuf,
    copy_prefix: String,
    part_prefix: String,
    /// Held locked for the life of the process (see the module doc).
    _owner: File,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A file in each work directory holding room for journal records, given up when the
/// cache disk is full (see [`Work::write_atomically`]).
const RESERVE: &str = "reserve";

/// Room set aside for records: a few hundred of them.
const RESERVE_BYTES: libc::off_t = 256 << 10;

/// Sets [`RESERVE_BYTES`] aside at `path` (really allocated, not a sparse file); a disk
/// without that room goes without.
fn reserve_room(path: &Path) {
    use std::os::fd::AsRawFd;
    let Ok(f) = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    else {
        return;
    };
    // SAFETY: an fd of ours; fallocate reads no memory.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, RESERVE_BYTES) } != 0 {
        let _ = fs::remove_file(path);
    }
}

impl Work {
    /// Makes this process's work directory under `CACHE/work`: built and locked under a
    /// hidden name that adopters pass over, then renamed into view, so no other process
    /// ever takes it for the directory of a dead one.
    pub fn claim(cache_root: &Path) -> Result<Work> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let id = format!("{}-{nanos:08x}", std::process::id());
        let work = cache_root.join("work");
        let making = work.join(format!(".{id}"));
        for d in ["copy", "journal", "base", "part", "tmp"] {
            let d = making.join(d);
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(|e| Error::cache(&d, e))?;
        }
        let owner = lock_owner(&making.join("owner"), true)?
            .ok_or_else(|| Error::posix(libc::EBUSY, "a fresh work directory is locked"))?;
        reserve_room(&making.join(RESERVE));
        let dir = work.join(id);
        fs::rename(&making, &dir).map_err(|e| Error::cache(&dir, e))?;
        let [copy, journal, base, part, tmp] =
            ["copy", "journal", "base", "part", "tmp"].map(|d| dir.join(d));
        Ok(Work {
            copy_prefix: copy.to_string_lossy().into_owned(),
            part_prefix: part.to_string_lossy().into_owned(),
            dir,
            copy,
            journal,
            base,
            part,
            tmp,
            _owner: owner,
        })
    }

    /// Where this process writes the copy of `virt`.
    pub fn copy_path(&self, virt: &str) -> PathBuf {
        under(&self.copy, virt)
    }

    /// A new private place for a copy of `virt` arriving in ranges.
    pub fn part_path(&self, virt: &str) -> Result<PathBuf> {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = under(&self.part.join(n.to_string()), virt);
        ensure_dir(p.parent().expect("under a part directory"))?;
        Ok(p)
    }

    /// Removes a private part copy's name (and its directory).
    pub fn drop_part(&self, p: &Path) {
        let _ = fs::remove_file(p);
        if let Some(top) = self.part_dir_of(p) {
            let _ = fs::remove_dir_all(top);
        }
    }

    fn part_dir_of(&self, p: &Path) -> Option<PathBuf> {
        let rel = p.strip_prefix(&self.part).ok()?;
        Some(self.part.join(rel.components().next()?))
    }

    /// The directory for downloads and records being written.
    pub fn tmp_dir(&self) -> &Path {
        &self.tmp
    }

    /// The virtual name of a real path inside this process's copies or part copies.
    pub fn unmap(&self, real: &str) -> Option<String> {
        if let Some(v) = crate::path::strip_dir_prefix(real, &self.copy_prefix) {
            return Some(v.to_owned());
        }
        let rest = crate::path::strip_dir_prefix(real, &self.part_prefix)?;
        let (_, virt) = rest.trim_start_matches('/').split_once('/')?;
        Some(format!("/{virt}"))
    }

    pub fn put_journal(&self, virt: &str, rec: &Journal) -> Result<()> {
        let json = serde_json::to_vec(rec).expect("Journal serialises");
        self.write_atomically(&under(&self.journal, virt), &json)
    }

    pub fn journal(&self, virt: &str) -> Option<Journal> {
        read_journal(&under(&self.journal, virt))
    }

    /// Drops the record of a change, its copy and the base kept for it.
    pub fn drop_change(&self, virt: &str) -> Result<()> {
        use std::io::ErrorKind::{IsADirectory, NotFound};
        let names = [&self.journal, &self.copy, &self.base].map(|d| under(d, virt));
        for p in names {
            match fs::remove_file(&p) {
                // A directory here only holds the records of names below `virt`.
                Err(e) if !matches!(e.kind(), NotFound | IsADirectory) => {
                    return Err(Error::cache(&p, e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Keeps `clean` (the version a change starts from) as the change's base.
    pub fn keep_base(&self, virt: &str, clean: &Path) -> Result<()> {
        let dest = under(&self.base, virt);
        let tmp = self.tmp_name();
        crate::cache::clone_or_copy(clean, &tmp).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::cache(clean, e)
        })?;
        install(&tmp, &dest)
    }

    pub fn base_path(&self, virt: &str) -> Option<PathBuf> {
        Some(under(&self.base, virt)).filter(|p| p.is_file())
    }

    /// Every name with a recorded change here.
    pub fn journaled(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_files(&self.journal, &self.journal, &mut out);
        out
    }

    /// A unique name in this process's `tmp/`.
    pub fn tmp_name(&self) -> PathBuf {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        self.tmp.join(n.to_string())
    }

    /// Writes `bytes` to `dest` through a temporary: a reader sees all of it or none.
    fn write_atomically(&self, dest: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = self.tmp_name();
        let mut written = fs::write(&tmp, bytes);
        if written
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::ENOSPC))
            && fs::remove_file(self.dir.join(RESERVE)).is_ok()
        {
            // The disk filled (a program's copy took it): the room set aside at the start
            // lets what roam must remember of its changes be written still.
            tracing::warn!("the cache disk is full: using the room kept for roam's records");
            written = fs::write(&tmp, bytes);
        }
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(Error::cache(&tmp, e));
        }
        install(&tmp, dest)
    }

    /// Takes over the changes of processes that died with work left in the cache (and the
    /// records of the older, shared layout), and removes what else they left. A change
    /// whose writer had not closed it becomes [`ChangeState::Kept`]. Returns the names
    /// adopted.
    pub fn adopt_orphans(&self, cache_root: &Path) -> Vec<String> {
        let mut adopted = self.adopt_legacy(cache_root);
        let Ok(dirs) = fs::read_dir(cache_root.join("work")) else {
            return adopted;
        };
        for d in dirs.flatten().map(|e| e.path()) {
            if d == self.dir || is_hidden(&d) {
                continue;
            }
            // Locked by us from here on: a second roam starting now leaves it alone.
            let Ok(Some(_lock)) = lock_owner(&d.join("owner"), false) else {
                continue;
            };
            let (journal, copy, base) = (d.join("journal"), d.join("copy"), d.join("base"));
            adopted.extend(self.adopt_from(&journal, &copy, &base, ended_before_close(&d)));
            if collect(&d.join("journal")).is_empty() {
                let _ = fs::remove_dir_all(&d);
            }
        }
        adopted
    }

    /// Records kept by roam versions that journaled into the shared `CACHE/journal` and
    /// wrote copies in place in `data/`.
    fn adopt_legacy(&self, cache_root: &Path) -> Vec<String> {
        let legacy = cache_root.join("journal");
        let moved = self.dir.join("legacy-journal");
        // One process wins the rename; the others find nothing left.
        if fs::rename(&legacy, &moved).is_err() {
            return Vec::new();
        }
        let why = ChangeState::Kept {
            errno: libc::EIO,
            why: "written by an older roam that ended before the file's writer closed it".into(),
        };
        let base = cache_root.join("base");
        let adopted = self.adopt_from(&moved, &cache_root.join("data"), &base, why);
        let _ = fs::remove_dir_all(&moved);
        adopted
    }

    /// Moves every change recorded under `journal` (copies under `copy`, bases under
    /// `base`) into this work directory.
    fn adopt_from(
        &self,
        journal: &Path,
        copy: &Path,
        base: &Path,
        kept: ChangeState,
    ) -> Vec<String> {
        let mut adopted = Vec::new();
        for virt in collect(journal) {
            let Some(mut rec) = read_journal(&under(journal, &virt)) else {
                continue;
            };
            if self.journal(&virt).is_some() {
                continue; // this process changes it too: left for a later adopter
            }
            if rec.state == ChangeState::Open {
                rec.state = kept.clone();
            }
            let moved = install(&under(copy, &virt), &self.copy_path(&virt))
                .and_then(|()| self.put_journal(&virt, &rec));
            let kept_base = under(base, &virt);
            if kept_base.is_file() {
                let _ = install(&kept_base, &under(&self.base, &virt));
            }
            match moved {
                Ok(()) => {
                    let _ = fs::remove_file(under(journal, &virt));
                    adopted.push(virt);
                }
                Err(e) => tracing::warn!("could not adopt the pending change of {virt}: {e}"),
            }
        }
        adopted
    }

    /// Removes what goes with the process: part copies and temporaries, and the whole
    /// directory when it holds no change (a change stays, for `roam sync`).
    pub fn tidy(&self) {
        let _ = fs::remove_dir_all(&self.part);
        let _ = fs::remove_dir_all(&self.tmp);
        if self.journaled().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        self.tidy();
    }
}

/// Every change recorded in the work directories of the cache at `cache_root`, of live
/// roam processes and of dead ones, for `roam status`.
pub fn pending_changes(cache_root: &Path) -> Vec<PendingChange> {
    let mut out = Vec::new();
    let Ok(dirs) = fs::read_dir(cache_root.join("work")) else {
        return out;
    };
    for d in dirs.flatten().map(|e| e.path()).filter(|d| !is_hidden(d)) {
        let alive = matches!(lock_owner(&d.join("owner"), false), Ok(None));
        let owner = alive.then(|| pid_of(&d));
        for virt in collect(&d.join("journal")) {
            if let Some(rec) = read_journal(&under(&d.join("journal"), &virt)) {
                // What adopting it will make of it.
                let state = match (rec.state, owner) {
                    (ChangeState::Open, None) => ended_before_close(&d),
                    (state, _) => state,
                };
                out.push(PendingChange {
                    copy: under(&d.join("copy"), &virt),
                    leftovers: rec.leftovers.iter().map(|l| l.describe(&virt)).collect(),
                    failure: rec.failure,
                    virt,
                    state,
                    owner,
                });
            }
        }
    }
    out.sort_by(|a, b| a.virt.cmp(&b.virt));
    out
}

/// Locks a work directory's owner file (`flock`), waiting or not. `None`: someone holds it.
fn lock_owner(path: &Path, create: bool) -> Result<Option<File>> {
    let f = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => {
            // A directory without an owner file is one whose claim was cut short.
            return crate::locks::open_lock_file(path).and_then(|f| try_flock(f, path));
        }
        Err(e) => return Err(Error::cache(path, e)),
    };
    try_flock(f, path)
}

fn try_flock(f: File, path: &Path) -> Result<Option<File>> {
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(f));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(None),
        _ => Err(Error::cache(path, e)),
    }
}

fn read_journal(p: &Path) -> Option<Journal> {
    serde_json::from_slice(&fs::read(p).ok()?).ok()
}

fn collect(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    collect_files(dir, dir, &mut out);
    out
}

/// What a change still open in the work directory `dir` of a dead roam is: kept.
fn ended_before_close(dir: &Path) -> ChangeState {
    ChangeState::Kept {
        errno: libc::EIO,
        why: format!(
            "roam (pid {}) ended before the file's writer closed it",
            pid_of(dir)
        ),
    }
}

/// Whether a work directory is one still being claimed (its name starts with a dot).
fn is_hidden(dir: &Path) -> bool {
    dir.file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
}

/// The pid in a work directory's name (`PID-NANOS`).
fn pid_of(dir: &Path) -> u32 {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// Renames `from` to `to`, making `to`'s parents.
fn install(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        ensure_dir(parent)?;
    }
    fs::rename(from, to).map_err(|e| Error::cache(to, e))
}
