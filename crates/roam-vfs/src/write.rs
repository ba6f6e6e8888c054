//! The write path (Ufo §5.3, with stronger guarantees). A program that opens a remote file
//! for writing writes into a copy private to its roam process (`work/ID/copy/`); the change
//! is *journaled* from that moment (the copy plus a record of the remote version it started
//! from and of its state), and uploaded atomically by the driver when the last writer
//! closes it (T_write = 0: the upload's error is the error of `close`). Once uploaded and
//! written by nobody, the copy is published as the cached copy of the new version.
//!
//! Only whole versions are uploaded. A change is *sealed* when its last writer closes it;
//! one whose writer died without closing it, or whose copy saw a write fail (a full cache
//! disk), is *kept*: never uploaded without the user's word (`roam sync --force`), and
//! named by `roam status`.
//!
//! A remote file changed behind roam's back meanwhile is a conflict: it is offered to the
//! resolver (a resolver extension, per glob, studies the base, local and remote versions and
//! answers a patch of the remote one, which is checked and applied; see `merge.rs`);
//! unmerged, the remote file is left as it is and the local version is uploaded beside it
//! as `NAME.roam-conflict-<time>`. Name operations (mkdir, unlink, rename ...) go straight
//! to the driver and update the caches.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use roam_drivers::{Attrs, ErrorKind, Expect, Kind, Known, Leftover, Meta, NewFile, Upload};

use crate::cache::{stamp, unix_secs};
use crate::path::split_name;
use crate::work::{ChangeState, Journal, Litter};
use crate::{Error, Info, Node, Remote, Result, Vfs};

/// Room a journal record needs on the cache disk.
const RECORD_ROOM: u64 = 64 << 10;

/// What to do with a change that meets a remote version changed meanwhile (the hook where
/// resolver extensions plug in: an ID3 tag merge, a three-way text merge ...).
pub trait ConflictResolver: Send + Sync {
    /// Whether changes of `virt` should keep the version they start from (a copy in the
    /// cache, dropped with the change), so that a conflict can be merged three ways.
    fn wants_base(&self, _virt: &str) -> bool {
        false
    }

    fn resolve(&self, conflict: &Conflict) -> Resolution;
}

/// A conflict as a resolver sees it: three versions of one file.
pub struct Conflict<'a> {
    pub virt: &'a str,
    /// The version the change started from, if it was kept (see
    /// [`ConflictResolver::wants_base`]).
    pub base: Option<&'a std::path::Path>,
    /// The local version: the change being written back.
    pub local: &'a std::path::Path,
    /// The server's version now.
    pub remote: &'a Meta,
    /// Reads `len` bytes at `off` of the server's version (by ranges where the protocol
    /// can; else it is fetched whole once).
    pub read_remote: &'a dyn Fn(u64, u32) -> std::io::Result<Vec<u8>>,
}

/// A resolver's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Leave the remote version; upload the local one beside it (`NAME.roam-conflict-TIME`).
    KeepBoth,
    /// Upload this file (a merge of both) in place of the remote version.
    Merged(std::path::PathBuf),
    /// Apply this (checked) patch to the remote version and upload the result in its place.
    Patch(roam_ext::resolve::Patch),
}

/// The default: never merge, keep both versions.
pub struct KeepBoth;

impl ConflictResolver for KeepBoth {
    fn resolve(&self, _conflict: &Conflict) -> Resolution {
        Resolution::KeepBoth
    }
}

/// What [`Vfs::flush`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Flushed {
    /// Nothing was pending.
    Clean,
    Uploaded,
    /// The remote changed since the copy was taken: the local version went to this name.
    Conflict(String),
    /// Left for later (T_write > 0): [`Vfs::deliver_due`] uploads it.
    Later,
}

impl Vfs {
    /// Installs the resolver asked about conflicts (default: [`KeepBoth`]).
    pub fn set_resolver(&mut self, resolver: Box<dyn ConflictResolver>) {
        self.resolver = resolver;
    }

    /// Whether writes may go to this node.
    pub fn writable(&self, node: &Node) -> bool {
        matches!(node, Node::Remote(r) if r.driver.capabilities().write)
    }

    /// The local path that *is* this node (the local driver serves files in place); all
    /// calls on it, writes included, can then go to the kernel unchanged.
    pub fn in_place(&self, node: &Node) -> Option<std::path::PathBuf> {
        match node {
            Node::Remote(r) => r.driver.local_path(&r.path),
            Node::SchemeRoot { .. } => None,
        }
    }

    /// Whether `node`'s backend keeps its files in memory (`mem:`): a frontend then reads
    /// and writes them in place ([`Vfs::open_in_memory`]) instead of through
    /// [`Vfs::open_for_write`]'s journaled copy.
    pub fn in_memory(&self, node: &Node) -> bool {
        matches!(node, Node::Remote(r) if r.driver.capabilities().in_memory)
    }

    /// The file itself of an in-memory node, made first (with `create`) when missing. Its
    /// changes need no upload, so nothing is journaled; roam's caches do not hold such
    /// files ([`Vfs::stat`] asks the backend each time).
    pub fn open_in_memory(
        &self,
        node: &Node,
        create: Option<NewFile>,
    ) -> Result<std::sync::Arc<crate::MemoryFile>> {
        let _change = create.is_some().then(|| self.change());
        let r = writable_remote(node)?;
        Ok(r.driver.open_in_place(&r.path, create)?)
    }

    /// Prepares `node` to be opened with `flags` (which include write access or `O_CREAT`)
    /// and returns the local copy the program must open instead. Journals the change first.
    /// `mode` is the permission bits a new file gets (the program's, less its umask).
    pub fn open_for_write(&self, node: &Node, flags: i32, mode: u32) -> Result<std::path::PathBuf> {
        let _change = self.change();
        let r = writable_remote(node)?;
        // One decision at a time per file, and never while its upload is deciding.
        let lock = self.fetch_lock(&r.virt);
        let _guard = lock.lock().unwrap();
        if self.is_dirty(&r.virt) {
            // Another writer already holds the copy: share it, as the kernel would.
            if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
                return Err(posix(libc::EEXIST, &r.virt, "exists"));
            }
            self.await_copy(&r.virt)?;
            self.reopen_change(&r.virt, flags & libc::O_TRUNC != 0)?;
            return self.writable_copy(&r.virt);
        }
        let existing = match self.stat_remote(r) {
            Ok(m) => Some(m),
            Err(e) if e.errno() == libc::ENOENT => None,
            Err(e) => return Err(e),
        };
        // O_EXCL is asked first: any name there, a directory too, is EEXIST (open(2)).
        match existing {
            Some(_) if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 => {
                Err(posix(libc::EEXIST, &r.virt, "exists"))
            }
            Some(m) if m.kind == Kind::Dir => Err(posix(libc::EISDIR, &r.virt, "is a directory")),
            Some(m) => self.start_change(r, &m, flags & libc::O_TRUNC != 0),
            None if flags & libc::O_CREAT == 0 => Err(Error::Absent(r.virt.clone())),
            None => self.start_new(r, flags, mode),
        }
    }

    /// Changes an existing file: its current contents (unless truncated) become the
    /// change's copy. Where a resolver may merge the file, they are also kept as the
    /// change's base, even when truncated (an editor's save truncates, and a merge needs
    /// what it started from).
    fn start_change(&self, r: &Remote, meta: &Meta, truncate: bool) -> Result<PathBuf> {
        let keep_base = self.resolver.wants_base(&r.virt);
        let copy = self.fresh_copy_place(&r.virt)?;
        let mut base = info_of(r, meta);
        let mut clean = None;
        if !truncate || keep_base {
            let fetched = self.fetch_file_locked(r, meta)?;
            // The version fetched, which may be newer than what `meta` said.
            base = info_of(r, &self.stat_remote(r)?);
            if keep_base {
                self.work.keep_base(&r.virt, &fetched)?;
            }
            clean = Some(fetched);
        }
        self.take_copy(&r.virt, clean.as_deref(), &copy)?;
        if truncate {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&copy)
                .map_err(|e| Error::cache(&copy, e))?;
        }
        if let Some(mode) = meta.mode {
            // The copy answers for the file while it is written: its mode is the file's.
            std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(|e| Error::cache(&copy, e))?;
        }
        self.journal(r, Some(base))?;
        self.writable_copy(&r.virt)
    }

    /// Makes the file programs read as `virt` the change's copy: the published copy itself
    /// is moved, not copied, so that programs reading it see the writes as they would on a
    /// local disk (and a truncating change costs no fetch); `clean` (the version to change,
    /// when one is needed) is copied when it is another process's to publish.
    fn take_copy(&self, virt: &str, clean: Option<&Path>, copy: &Path) -> Result<()> {
        let published = self.cache.data_path(virt);
        let from = clean.unwrap_or(&published);
        let moved = if *from == published {
            match self.locks.lock(virt, self.patience)? {
                Some(_name) if published.is_file() => {
                    let moved = std::fs::rename(&published, copy).is_ok();
                    if moved {
                        self.cache.forget_copy(virt);
                    }
                    moved
                }
                _ => false,
            }
        } else {
            // A private download: this process's own.
            std::fs::rename(from, copy).is_ok()
        };
        if moved || clean.is_none() {
            return Ok(());
        }
        // The version's access time goes with it (the copy itself reads it).
        let atime = std::fs::metadata(from).and_then(|m| m.accessed()).ok();
        crate::cache::clone_or_copy(from, copy).map_err(|e| {
            let _ = std::fs::remove_file(copy);
            Error::cache(copy, e)
        })?;
        let _ = crate::cache::set_own_times(copy, atime, None);
        Ok(())
    }

    /// Creates a new file. With `O_EXCL` the program's own `open` creates the copy, so the
    /// exclusivity is the kernel's; otherwise roam creates it at once, so that a second
    /// writer sharing it finds it.
    fn start_new(&self, r: &Remote, flags: i32, mode: u32) -> Result<PathBuf> {
        let (parent_virt, _) = split_name(&r.virt);
        let parent = self
            .lookup(parent_virt)?
            .ok_or_else(|| posix(libc::EXDEV, &r.virt, "parent outside the mount"))?;
        match self.stat(&parent)?.kind {
            Kind::Dir => {}
            _ => return Err(posix(libc::ENOTDIR, parent_virt, "not a directory")),
        }
        let copy = self.fresh_copy_place(&r.virt)?;
        self.journal(r, None)?;
        if flags & libc::O_EXCL == 0 {
            let f = File::create(&copy).map_err(|e| Error::cache(&copy, e))?;
            f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(|e| Error::cache(&copy, e))?;
        }
        Ok(copy)
    }

    /// Where this process's copy of `virt` goes: its directory made, nothing left there.
    fn fresh_copy_place(&self, virt: &str) -> Result<PathBuf> {
        let copy = self.work.copy_path(virt);
        crate::cache::ensure_dir(copy.parent().expect("copies live in a directory"))?;
        match std::fs::remove_file(&copy) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::cache(&copy, e)),
            _ => Ok(copy),
        }
    }

    /// Lets the owner write this process's copy of `virt` (a fetched copy is read-only).
    fn writable_copy(&self, virt: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let copy = self.work.copy_path(virt);
        let md = std::fs::metadata(&copy).map_err(|e| Error::cache(&copy, e))?;
        let mode = md.permissions().mode() | 0o200;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode))
            .map_err(|e| Error::cache(&copy, e))?;
        Ok(copy)
    }

    /// Waits briefly for the copy of a new file whose creator (with `O_EXCL`) has not opened
    /// it yet, then creates it: a second writer must never fail on a file being created.
    fn await_copy(&self, virt: &str) -> Result<()> {
        let copy = self.work.copy_path(virt);
        for _ in 0..20 {
            if copy.exists() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&copy)
            .map(drop)
            .map_err(|e| Error::cache(&copy, e))
    }

    fn journal(&self, r: &Remote, base: Option<Info>) -> Result<()> {
        self.work.put_journal(
            &r.virt,
            &Journal::new(r.describe(), self.mounts.origin(&r.virt), base),
        )?;
        self.state.lock().unwrap().dirty.insert(r.virt.clone());
        Ok(())
    }

    /// Rewrites the state of the change of `virt` with `f` (nothing without a change).
    fn restate(&self, virt: &str, f: impl FnOnce(&ChangeState) -> ChangeState) -> Result<()> {
        let Some(mut rec) = self.work.journal(virt) else {
            return Ok(());
        };
        let next = f(&rec.state);
        if next != rec.state {
            rec.state = next;
            self.work.put_journal(virt, &rec)?;
        }
        Ok(())
    }

    /// A frontend that sees writes: `virt`, sealed at a close, is written again (through
    /// an fd that outlived that close): no whole version until the next close.
    pub fn writing_again(&self, virt: &str) -> Result<()> {
        self.reopen_change(virt, false)
    }

    /// Another writer opens a change: it is not whole any more; one that truncates starts
    /// it over, so what made it kept is gone.
    fn reopen_change(&self, virt: &str, truncate: bool) -> Result<()> {
        if truncate {
            self.state.lock().unwrap().kept.remove(virt);
        }
        self.restate(virt, |s| match s {
            ChangeState::Kept { .. } if !truncate => s.clone(),
            _ => ChangeState::Open,
        })
    }

    /// The last writer of `virt` closed it: its copy is a whole version, due for upload
    /// (now, or after T_write). Frontends call this at that close. `writes_seen`: the
    /// frontend sees every write to the copy (and reports one that fails); one that does
    /// not cannot tell a write lost to a full cache disk, so a full disk keeps the change.
    pub fn seal(&self, virt: &str, writes_seen: bool) -> Result<()> {
        if !writes_seen && crate::usage::cache_disk_full(self.cache.root()) {
            // A frontend that does not see the program's writes (`roam run`) cannot tell
            // whether one failed for want of room: the copy may lack bytes.
            let why = "the cache disk was full when it was closed: a write to roam's copy may have failed";
            return self.keep(virt, libc::ENOSPC, why.into());
        }
        let lock = self.fetch_lock(virt);
        let _guard = lock.lock().unwrap();
        self.restate(virt, |s| match s {
            ChangeState::Open => ChangeState::Sealed,
            other => other.clone(),
        })
    }

    /// A program's write to its copy of `virt` failed with `errno` (ENOSPC, EDQUOT, EFBIG,
    /// EIO): the copy may lack bytes the program meant to write, so it is kept, never
    /// uploaded over the server's version.
    pub fn write_failed(&self, virt: &str, errno: i32) -> Result<()> {
        let why = format!(
            "a write to roam's copy failed ({})",
            std::io::Error::from_raw_os_error(errno)
        );
        self.keep(virt, errno, why)
    }

    /// A program writing `virt` was killed (by `signal`) before it closed the file: the copy
    /// may be half-written, so it is kept, never uploaded.
    pub fn writer_killed(&self, virt: &str, pid: i32, signal: i32) -> Result<()> {
        if self
            .work
            .journal(virt)
            .is_none_or(|rec| rec.state != ChangeState::Open)
        {
            return Ok(()); // closed whole before (sealed, waiting for T_write), or gone
        }
        let why = format!("its writer (pid {pid}) was killed by signal {signal} before closing it");
        self.keep(virt, libc::EIO, why)
    }

    fn keep(&self, virt: &str, errno: i32, why: String) -> Result<()> {
        let lock = self.fetch_lock(virt);
        let _guard = lock.lock().unwrap();
        tracing::warn!("{virt}: {why}: the change is kept, not uploaded (roam status)");
        let mut st = self.state.lock().unwrap();
        st.kept
            .entry(virt.to_owned())
            .or_insert((errno, why.clone()));
        drop(st);
        let keep = |s: &ChangeState| match s {
            ChangeState::Kept { .. } => s.clone(),
            _ => ChangeState::Kept {
                errno,
                why: why.clone(),
            },
        };
        match self.restate(virt, keep) {
            // A full disk: room for the record, if older copies can give it.
            Err(e) if e.errno() == libc::ENOSPC => {
                self.ensure_space(RECORD_ROOM, virt)?;
                self.restate(virt, keep)
            }
            other => other,
        }
    }

    /// A change kept in memory whose journal does not say so (see [`Vfs::keep`]).
    fn kept_in_memory(&self, virt: &str) -> Option<ChangeState> {
        let st = self.state.lock().unwrap();
        let (errno, why) = st.kept.get(virt)?.clone();
        Some(ChangeState::Kept { errno, why })
    }

    /// The user's word on a kept change of `virt`: upload it as it is (`force`), or drop it.
    pub fn settle_kept(&self, virt: &str, force: bool) -> Result<()> {
        let lock = self.fetch_lock(virt);
        let _guard = lock.lock().unwrap();
        self.state.lock().unwrap().kept.remove(virt);
        match force {
            true => self.restate(virt, |_| ChangeState::Sealed),
            false => {
                if let (Some(mut rec), Ok(Some(Node::Remote(r)))) =
                    (self.work.journal(virt), self.lookup(virt))
                {
                    self.clear_leftovers(&r, &mut rec)?;
                }
                self.forget_change(virt)?;
                self.invalidate(virt);
                Ok(())
            }
        }
    }

    /// Whether `virt` is a file created here and not yet uploaded.
    fn is_new_here(&self, virt: &str) -> bool {
        self.is_dirty(virt) && self.work.journal(virt).is_some_and(|j| j.base.is_none())
    }

    /// Whether `virt` has a journaled change not yet uploaded.
    pub fn is_dirty(&self, virt: &str) -> bool {
        self.state.lock().unwrap().dirty.contains(virt)
    }

    /// Every journaled change (of this run and of earlier, interrupted ones).
    pub fn dirty(&self) -> Vec<String> {
        let mut v: Vec<String> = self.state.lock().unwrap().dirty.iter().cloned().collect();
        v.sort();
        v
    }

    /// Puts the copies of files being written in `dir` into its skeleton, so a listing
    /// shows a new file before its upload, as a local directory would.
    pub(crate) fn show_dirty_children(&self, dir: &str) -> Result<()> {
        let children: Vec<String> = self
            .state
            .lock()
            .unwrap()
            .dirty
            .iter()
            .filter(|v| split_name(v).0 == dir)
            .cloned()
            .collect();
        for virt in children {
            let copy = self.work.copy_path(&virt);
            if copy.exists() {
                self.cache.link_into_skeleton(&virt, &copy)?;
            }
        }
        Ok(())
    }

    /// Metadata of a dirty name: its local copy is the truth until uploaded.
    pub(crate) fn dirty_meta(&self, virt: &str) -> Option<Result<Meta>> {
        if !self.is_dirty(virt) {
            return None;
        }
        let copy = self.work.copy_path(virt);
        Some(match std::fs::metadata(&copy) {
            Ok(md) => Ok(Meta {
                size: Some(md.len()),
                mtime: md.modified().ok(),
                atime: md.accessed().ok(),
                ..Meta::of_kind(Kind::File)
            }),
            // Published meanwhile: what roam remembers of the new version answers.
            Err(_) if !self.is_dirty(virt) => return None,
            Err(_) => Err(Error::Absent(virt.to_owned())),
        })
    }

    /// Where the change `rec` of `virt` goes: the name in today's mount table if that is
    /// the place it was written for, else under the mount it was written under (the `-m`
    /// of a run that ended). Never somewhere else that now has its name.
    fn destination(&self, virt: &str, rec: &Journal) -> Result<Node> {
        let same =
            |n: &Option<Node>| matches!(n, Some(Node::Remote(r)) if r.describe() == rec.source);
        let now = self.lookup(virt)?;
        if same(&now) {
            return Ok(now.expect("matched"));
        }
        if let Some(m) = &rec.mount {
            let then = self.mounts.under(&m.prefix, &m.url, virt)?;
            if same(&then) {
                return Ok(then.expect("matched"));
            }
        }
        let why = match now {
            None => format!("no longer mounted (the change is for {})", rec.source),
            Some(_) => format!("mounted elsewhere now (the change is for {})", rec.source),
        };
        Err(posix(libc::ENOENT, virt, &why))
    }

    /// Uploads the change of `virt`. `still_written` tells whether some program still
    /// holds the copy open for writing (an fsync, or a writer that shares the copy): the
    /// change then stays journaled after the upload. A change nobody writes any more is
    /// sealed first; a kept one is not uploaded ([`Error::Kept`]).
    pub fn flush(&self, virt: &str, still_written: &dyn Fn() -> bool) -> Result<Flushed> {
        let done = self.flush_once(virt, still_written);
        if let Err(e) = &done {
            if !e.is_kept() {
                self.note_failure(virt, e);
            }
        }
        done
    }

    /// Journals why an upload of `virt` failed, for `roam status` (best effort: the
    /// failure itself is what the caller reports).
    fn note_failure(&self, virt: &str, e: &Error) {
        let lock = self.fetch_lock(virt);
        let _guard = lock.lock().unwrap();
        if let Some(mut rec) = self.work.journal(virt) {
            rec.failure = Some(e.to_string());
            if let Err(e) = self.work.put_journal(virt, &rec) {
                tracing::debug!("{virt}: the upload's failure not journaled: {e}");
            }
        }
    }

    /// [`Vfs::flush`], once.
    fn flush_once(&self, virt: &str, still_written: &dyn Fn() -> bool) -> Result<Flushed> {
        let lock = self.fetch_lock(virt);
        let _guard = lock.lock().unwrap();
        let Some(mut rec) = self.work.journal(virt).or_else(|| self.late_writes(virt)) else {
            self.state.lock().unwrap().dirty.remove(virt);
            return Ok(Flushed::Clean);
        };
        let copy = self.work.copy_path(virt);
        if let Some(kept) = self.kept_in_memory(virt) {
            rec.state = kept;
        }
        if let ChangeState::Kept { errno, why } = &rec.state {
            return Err(Error::Kept {
                errno: *errno,
                message: format!(
                    "{virt}: not uploaded: {why}; the change is kept at {} (roam status)",
                    copy.display()
                ),
            });
        }
        // Sealed before anything is asked of the server: an upload that fails leaves a
        // whole version due for `roam sync`, not one whose writer seems still at work.
        if rec.state == ChangeState::Open && !still_written() {
            rec.state = ChangeState::Sealed;
            self.work.put_journal(virt, &rec)?;
        }
        let node = self.destination(virt, &rec)?;
        let r = writable_remote(&node)?;
        self.clear_leftovers(r, &mut rec)?;
        if stamp(&copy).is_none() {
            // The copy is gone (the file was removed meanwhile): nothing left to deliver.
            self.forget_change(virt)?;
            return Ok(Flushed::Clean);
        }
        if rec.base.as_ref().and_then(uploaded_stamp) == stamp(&copy) {
            // Uploaded as it is already (at an earlier close of a writer still open then).
            if !still_written() {
                let info = rec.base.expect("an uploaded stamp is a base");
                self.publish(virt, &copy, &info)?;
            }
            return Ok(Flushed::Uploaded);
        }
        let (current, conflict) = self.remote_now(r, &rec)?;
        let merged = conflict && self.merge(r, &copy, current.as_ref())?;
        // Stamped after a merge, which replaced the copy.
        let Some(before) = stamp(&copy) else {
            return Err(posix(
                libc::EIO,
                virt,
                "the copy vanished during the upload",
            ));
        };
        if conflict && !merged {
            return self.keep_beside(r, &copy, before.0);
        }
        // A file's mode stays the server's; a new file gets its copy's.
        let mode = match &current {
            Some(m) => m.mode,
            None => std::fs::metadata(&copy)
                .ok()
                .map(|md| std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o7777),
        };
        // Replace only what roam just saw there: a change by another client since is a
        // conflict too, however late it comes (as atomically as the protocol allows).
        let expect = Expect::version_of(current.as_ref());
        let uploaded = match self.upload(r, &copy, &r.path, mode, before.0, &expect) {
            Err(Error::Remote(e)) if e.kind == ErrorKind::Changed => {
                return self.keep_beside(r, &copy, before.0)
            }
            other => other?,
        };
        let now = Meta {
            size: Some(before.0),
            // A server that showed the file's mode but did not say it now: the mode it
            // was given (a backend without modes shows none, and the copy's answers).
            mode: uploaded
                .mode
                .or(current.as_ref().and_then(|m| m.mode).and(mode)),
            ..uploaded
        };
        let info = Info {
            copy_mtime_ns: Some(before.1),
            ..info_of(r, &now)
        };
        // No writer holds the copy and none can open it while this runs (the lock), so this
        // stays true to the end.
        if stamp(&copy) == Some(before) && !still_written() {
            self.remember(virt, now);
            self.publish(virt, &copy, &info)?;
        } else {
            // Written again meanwhile (or still open to writers): the next close delivers
            // what comes, from this new base. A sealed copy unchanged stays sealed.
            rec.base = Some(info);
            if stamp(&copy) != Some(before) {
                rec.state = ChangeState::Open;
            }
            self.work.put_journal(virt, &rec)?;
            // What roam knows must be the new version before a reader asks.
            self.cache.link_into_skeleton(virt, &copy)?;
            self.remember(virt, now);
        }
        Ok(Flushed::Uploaded)
    }

    /// Uploads the change of `r` beside the server's version, which changed meanwhile
    /// (`NAME.roam-conflict-TIME`, never over another such file); the name itself is then
    /// the server's version again.
    fn keep_beside(&self, r: &Remote, copy: &Path, len: u64) -> Result<Flushed> {
        let stem = format!("{}.roam-conflict-{}", r.path, unix_secs(SystemTime::now()));
        let mut n = 1;
        let beside = loop {
            let name = match n {
                1 => stem.clone(),
                _ => format!("{stem}-{n}"),
            };
            match self.upload(r, copy, &name, None, len, &Expect::Absent) {
                Err(Error::Remote(e)) if e.kind == ErrorKind::Changed && n < 10 => n += 1,
                other => break other.map(|_| name)?,
            }
        };
        // The copy is the conflict file's now; the name itself is the remote's version.
        self.forget_change(&r.virt)?;
        self.cache.forget(&r.virt);
        self.invalidate(&r.virt);
        Ok(Flushed::Conflict(r.driver.describe(&beside)))
    }

    /// Removes what earlier uploads of the change may have left on the server (roam was
    /// killed during one, or its own cleanup failed); what still cannot go stays recorded.
    fn clear_leftovers(&self, r: &Remote, rec: &mut Journal) -> Result<()> {
        if rec.leftovers.is_empty() {
            return Ok(());
        }
        rec.leftovers
            .retain(|l| match r.driver.remove_leftover(&l.leftover()) {
                Ok(()) => false,
                Err(e) => {
                    tracing::warn!("{}: {e}", r.virt);
                    true
                }
            });
        self.work.put_journal(&r.virt, rec)
    }

    /// Records in the journal of `virt` what an upload is about to leave on the server.
    fn note_leftover(&self, virt: &str, l: &Leftover) -> std::io::Result<()> {
        let mut rec = self
            .work
            .journal(virt)
            .ok_or_else(|| std::io::Error::other("the change has no journal record"))?;
        rec.leftovers.push(Litter::from(l));
        self.work
            .put_journal(virt, &rec)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// A change made to the published copy of `virt` after roam published it: a writer
    /// that kept the copy mapped, or wrote through an fd of it after a close that
    /// delivered it. It becomes this process's change again, from the uploaded version.
    fn late_writes(&self, virt: &str) -> Option<Journal> {
        let info = self.cache.info(virt)?;
        let published = self.cache.data_path(virt);
        if uploaded_stamp(&info).is_none() || stamp(&published) == uploaded_stamp(&info) {
            return None;
        }
        let copy = self.fresh_copy_place(virt).ok()?;
        let _name = self.locks.lock(virt, self.patience).ok()??;
        std::fs::rename(&published, &copy).ok()?;
        self.cache.forget_copy(virt);
        let rec = Journal::new(info.source.clone(), self.mounts.origin(virt), Some(info));
        self.work.put_journal(virt, &rec).ok()?;
        self.state.lock().unwrap().dirty.insert(virt.to_owned());
        Some(rec)
    }

    /// The change of `virt` was delivered: its copy becomes the published copy of the new
    /// version (when no other process is publishing that name; else it is dropped, and the
    /// next open fetches the version).
    fn publish(&self, virt: &str, copy: &Path, info: &Info) -> Result<()> {
        // Not dirty first: from now on roam answers for `virt` from what it remembers of
        // the new version, not from the copy about to move.
        self.state.lock().unwrap().dirty.remove(virt);
        match self.locks.lock(virt, self.patience)? {
            Some(_name) => self.cache.publish_copy(virt, copy, info)?,
            None => self.cache.forget(virt),
        }
        self.work.drop_change(virt)
    }

    /// Offers a conflict to the resolver; when it merges, the merged file becomes the copy
    /// (and is uploaded over the remote version, which the merge took into account).
    fn merge(&self, r: &Remote, copy: &std::path::Path, remote: Option<&Meta>) -> Result<bool> {
        let Some(remote) = remote else {
            return Ok(false);
        };
        let server = crate::merge::ServerVersion::new(r, &self.cache, remote);
        let base = self.work.base_path(&r.virt);
        let read_remote = |off, len| server.read(off, len);
        let conflict = Conflict {
            virt: &r.virt,
            base: base.as_deref(),
            local: copy,
            remote,
            read_remote: &read_remote,
        };
        let merged = match self.resolver.resolve(&conflict) {
            Resolution::KeepBoth => return Ok(false),
            Resolution::Merged(file) => file,
            Resolution::Patch(patch) => match server.patched(&patch, remote) {
                Ok(file) => file,
                Err(why) => {
                    tracing::warn!(
                        "{}: merge not applied: {why}; keeping both versions",
                        r.virt
                    );
                    return Ok(false);
                }
            },
        };
        // The merge is written into the copy in place, not renamed over it: a program may
        // still hold the copy open (a shell's child closing an inherited descriptor makes
        // this upload) and must go on writing to the file that is uploaded next. Written
        // over, then cut to length (not truncated first), a reader never finds it empty.
        let rewritten = File::open(&merged).and_then(|mut src| {
            let mut dest = std::fs::OpenOptions::new().write(true).open(copy)?;
            let len = std::io::copy(&mut src, &mut dest)?;
            dest.set_len(len)
        });
        let _ = std::fs::remove_file(&merged);
        rewritten.map_err(|e| Error::cache(copy, e))?;
        Ok(true)
    }

    /// The remote version now (`None`: there is none), and whether it conflicts with the
    /// version the change started from.
    fn remote_now(&self, r: &Remote, rec: &Journal) -> Result<(Option<Meta>, bool)> {
        if let Some((None, _)) = self.listed(&r.virt) {
            // A new name (`cp -r`): a fresh listing of its directory says nothing is there,
            // which is all a stat would say within T_read.
            return Ok((None, false));
        }
        let current = match r.driver.stat(&r.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind == ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let conflict = match (&rec.base, &current) {
            (None, Some(_)) => true,
            (Some(base), Some(now)) => !same_version(base, now),
            _ => false,
        };
        Ok((current, conflict))
    }

    fn forget_change(&self, virt: &str) -> Result<()> {
        self.work.drop_change(virt)?;
        let mut st = self.state.lock().unwrap();
        st.dirty.remove(virt);
        st.kept.remove(virt);
        Ok(())
    }

    /// Uploads the first `len` bytes of the copy to `target` (the length stamped before: a
    /// writer still appending must not make the upload longer than the version roam
    /// records as uploaded, or the next upload would take the server's copy for someone
    /// else's change), keeping the mtime the program gave it (`touch -d`, `cp -p`, `tar` and
    /// `make` rely on it) and the file's mode (new contents do not change a file's
    /// permissions), where the backend can keep them.
    ///
    /// Only if what the server has at `target` is what `expect` says; what the upload may
    /// leave there if cut off is journaled before it exists, and removed after a failure.
    fn upload(
        &self,
        r: &Remote,
        copy: &Path,
        target: &str,
        mode: Option<u32>,
        len: u64,
        expect: &Expect,
    ) -> Result<Meta> {
        let mut file = roam_drivers::local::open_unread(copy).map_err(|e| Error::cache(copy, e))?;
        let md = file.metadata().map_err(|e| Error::cache(copy, e))?;
        let mut file = std::io::Read::take(&mut file, len);
        // Where a fresh listing shows the name absent or a file, its directory exists.
        let known_dir = target == r.path
            && self
                .listed(&r.virt)
                .is_some_and(|(m, _)| m.is_none_or(|m| m.kind == Kind::File));
        let note = |l: &Leftover| self.note_leftover(&r.virt, l);
        let how = Upload {
            attrs: Attrs {
                mtime: md.modified().ok(),
                mode,
                // A write leaves the access time, as a local file's.
                atime: md.accessed().ok(),
            },
            expect,
            known_dir,
            leftovers: Some(&note),
        };
        let meta = match r.driver.upload(target, &mut file, len, &how) {
            Ok(meta) => meta,
            Err(e) => {
                if let Some(mut rec) = self.work.journal(&r.virt) {
                    self.clear_leftovers(r, &mut rec)?;
                }
                return Err(e.into());
            }
        };
        tracing::debug!("{}: uploaded, {len} bytes", r.virt);
        crate::usage::Usage::add(&self.usage.uploads, 1);
        crate::usage::Usage::add(&self.usage.bytes_uploaded, len);
        Ok(meta)
    }

    /// `mknod` (`mode`: file type and permission bits, less the caller's umask): a FIFO or
    /// a socket's name on a backend that keeps special files (`mem:`, whose names roam-vfs
    /// does not cache); elsewhere, and for devices, `EPERM`, as Linux says for a file
    /// system without them.
    pub fn mknod(&self, node: &Node, mode: u32) -> Result<()> {
        let _change = self.change();
        let r = writable_remote(node)?;
        let kind = match mode & libc::S_IFMT {
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            _ => return Err(posix(libc::EPERM, &r.virt, "no device files here")),
        };
        match r.driver.make_special(&r.path, kind, mode & 0o7777) {
            Err(e) if e.kind == ErrorKind::Unsupported => Err(posix(
                libc::EPERM,
                &r.virt,
                "this backend has no special files (FIFOs, sockets, devices)",
            )),
            made => Ok(made?),
        }
    }

    /// The skeleton entry of a FIFO or a socket's name (`mem:`'s): a real one, which the
    /// kernel opens itself, so every process that opens it meets the same pipe. `None` for
    /// anything else (only backends in memory keep such names: no stat is asked elsewhere).
    pub fn special_path(&self, node: &Node) -> Result<Option<PathBuf>> {
        let Node::Remote(r) = node else {
            return Ok(None);
        };
        if !r.driver.capabilities().in_memory {
            return Ok(None);
        }
        match self.stat(node) {
            Ok(m) if matches!(m.kind, Kind::Fifo | Kind::Socket) => self.put_stub(r, &m).map(Some),
            _ => Ok(None),
        }
    }

    /// Where the kernel binds (`bind`: `Some(mode)`, the socket's permission bits less the
    /// caller's umask) or finds (`connect`: `None`) the unix socket named `node`: the
    /// local name of a tree served in place; on a backend in memory, the name is kept
    /// there and the socket lives at its skeleton entry (which every process meets, as
    /// for a FIFO). Elsewhere a bind is `EPERM` (no special files) and a connect finds no
    /// socket: `ECONNREFUSED` for a name that is there.
    /// The name is spelled to fit a `sockaddr_un` where roam's is longer (through a link in
    /// the private cache to its directory).
    pub fn unix_socket(&self, node: &Node, bind: Option<u32>) -> Result<PathBuf> {
        self.unix_socket_here(node, bind)
            .map(|p| roam_drivers::local::spell_within(&p, SOCKET_NAME_MAX).into_owned())
    }

    fn unix_socket_here(&self, node: &Node, bind: Option<u32>) -> Result<PathBuf> {
        if let Some(local) = self.in_place(node) {
            return Ok(local);
        }
        let Some(mode) = bind else {
            return match self.special_path(node)? {
                Some(p) => Ok(p),
                None => self
                    .stat(node)
                    .and_then(|_| Err(posix(libc::ECONNREFUSED, node.virt(), "not a socket"))),
            };
        };
        self.mknod(node, libc::S_IFSOCK | mode)
            .map_err(|e| match e.errno() {
                libc::EEXIST => posix(libc::EADDRINUSE, node.virt(), "the name exists"),
                _ => e,
            })?;
        let Node::Remote(r) = node else {
            return Err(posix(libc::EPERM, node.virt(), "no sockets here"));
        };
        let entry = self.cache.meta_path(&r.virt);
        self.cache.put_dir(crate::path::split_name(&r.virt).0)?;
        // The name was free on the backend: whatever the skeleton still has there is a
        // leftover, and the kernel's bind needs the name free.
        match std::fs::remove_file(&entry) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::cache(&entry, e)),
            _ => Ok(entry),
        }
    }

    /// Makes the directory with the permission bits `mode` (the caller's, less its umask).
    pub fn mkdir(&self, node: &Node, mode: u32) -> Result<()> {
        let _change = self.change();
        let done = self.mkdir_here(node, mode);
        self.in_its_directory(node, done)
    }

    fn mkdir_here(&self, node: &Node, mode: u32) -> Result<()> {
        let r = writable_remote(node)?;
        // Where a fresh listing shows the name absent, its parent exists and it does not.
        let made = match self.listed(&r.virt) {
            Some((Some(_), _)) => return Err(exists(&r.virt)),
            Some((None, _)) => r.driver.mkdir_in_known_dir(&r.path, mode)?,
            _ => r
                .driver
                .mkdir(&r.path, mode)
                .map(|()| None)
                .map_err(|e| self.refused_creation(r, e))?,
        };
        // The mode a stat shows: the one asked for where directories keep modes, else the
        // server's own (a later `chmod` is refused, as it is by every frontend).
        let shown = match r.driver.capabilities().dir_modes {
            true => Some(mode),
            false => made.as_ref().and_then(|m| m.mode),
        };
        match made {
            Some(meta) => self.remember(&r.virt, meta),
            None => self.invalidate(&r.virt),
        }
        let dir = self.cache.put_dir(&r.virt)?;
        crate::cache::set_dir_mode(&dir, shown)?;
        // Whatever an earlier directory of this name left in the skeleton is gone.
        self.cache.prune_dir(&r.virt, &Default::default())?;
        // roam made it empty: its listing is known without asking (until T_read), so the
        // first name `cp -r` or `tar x` puts there costs no listing request.
        let empty = crate::DirIndex {
            entries: Default::default(),
            complete: true,
            stands_alone: true,
            busy: false,
            unknown: Default::default(),
        };
        self.state.lock().unwrap().listings.insert(
            r.virt.clone(),
            (std::sync::Arc::new(empty), std::time::Instant::now()),
        );
        Ok(())
    }

    pub fn remove_file(&self, node: &Node) -> Result<()> {
        let _change = self.change();
        let done = self.remove_file_here(node);
        self.in_its_directory(node, done)
    }

    fn remove_file_here(&self, node: &Node) -> Result<()> {
        let r = writable_remote(node)?;
        if matches!(self.listed(&r.virt), Some((Some(m), _)) if m.kind == Kind::Dir) {
            return Err(posix(libc::EISDIR, &r.virt, "is a directory"));
        }
        // Not while the file's upload runs (a T_write delivery on its own thread): removed
        // meanwhile, a new file's copy vanished under the upload, which then put it on the
        // server after the delete (`rm -r` then failed: directory not empty). After it, the
        // uploaded file goes too; before it, the upload finds nothing left to deliver.
        let lock = self.fetch_lock(&r.virt);
        let _guard = lock.lock().unwrap();
        // A file created here and not uploaded yet exists only in roam's journal.
        let only_here = self.is_new_here(&r.virt);
        let removed = match self.known_file(&r.virt) {
            Some((meta, siblings)) => r.driver.remove_known_file(
                &r.path,
                Known {
                    meta: &meta,
                    siblings,
                    empty: false,
                },
            ),
            None => r.driver.remove_file(&r.path),
        };
        match removed {
            Err(e) if !(only_here && e.kind == ErrorKind::NotFound) => return Err(e.into()),
            _ => {}
        }
        self.cache.forget(&r.virt);
        self.forget_change(&r.virt)?;
        self.remember_gone(&r.virt);
        Ok(())
    }

    /// What a fresh listing of its parent says of the file `virt` (or failing that, a fresh
    /// stat): its metadata, and whether the listing names other entries. `rm -r` lists a
    /// directory, then removes its entries one by one: each removal may then skip the
    /// questions a driver would ask first.
    fn known_file(&self, virt: &str) -> Option<(Meta, bool)> {
        let meta = match self.listed(virt) {
            Some((Some(meta), siblings)) => return Some((meta, siblings)),
            // A fresh listing without the name: roam knows nothing to skip.
            Some((None, _)) => return None,
            None => self.fresh_attr(virt)?.ok()?,
        };
        Some((meta, false))
    }

    /// What a listing of the parent of `virt` younger than T_read says: the entry (`None`:
    /// no such name) and whether the parent outlives it (other entries, or a directory
    /// that stands alone); `None` without such a listing, or when it lacks the name but
    /// shows another roam's upload under way (it may be that name's).
    fn listed(&self, virt: &str) -> Option<(Option<Meta>, bool)> {
        let (parent, name) = split_name(virt);
        let t_read = self.t_read_dir(parent);
        let st = self.state.lock().unwrap();
        st.listings
            .get(parent)
            .filter(|(index, at)| at.elapsed() < t_read && !index.unknown.contains(name))
            .filter(|(index, _)| !index.busy || index.entries.contains_key(name))
            .map(|(index, _)| {
                let stays = index.entries.len() > 1 || index.stands_alone;
                (index.entries.get(name).cloned(), stays)
            })
    }

    /// Whether a complete listing of the directory `virt` younger than T_read names nothing.
    fn listed_empty(&self, virt: &str) -> bool {
        let t_read = self.t_read_dir(virt);
        let st = self.state.lock().unwrap();
        st.listings.get(virt).is_some_and(|(index, at)| {
            at.elapsed() < t_read
                && index.complete
                && index.entries.is_empty()
                && index.unknown.is_empty()
        })
    }

    pub fn remove_dir(&self, node: &Node) -> Result<()> {
        let _change = self.change();
        let done = self.remove_dir_here(node);
        self.in_its_directory(node, done)
    }

    fn remove_dir_here(&self, node: &Node) -> Result<()> {
        let r = writable_remote(node)?;
        match self.listed(&r.virt) {
            // What a fresh listing knows, rmdir(2) says (S3 deletes what is not there).
            Some((None, _)) => return Err(Error::Absent(r.virt.clone())),
            Some((Some(meta), _)) if meta.kind != Kind::Dir => {
                return Err(posix(libc::ENOTDIR, &r.virt, "not a directory"))
            }
            Some((Some(meta), siblings)) if meta.kind == Kind::Dir => r.driver.remove_known_dir(
                &r.path,
                Known {
                    meta: &meta,
                    siblings,
                    empty: self.listed_empty(&r.virt),
                },
            )?,
            _ => r.driver.remove_dir(&r.path)?,
        }
        self.forget_all(&r.virt)
    }

    /// Renames within one mount (EXDEV across mounts, as between file systems).
    pub fn rename(&self, from: &Node, to: &Node) -> Result<()> {
        let _change = self.change();
        let done = self.rename_here(from, to);
        self.in_its_directory(from, done)
    }

    fn rename_here(&self, from: &Node, to: &Node) -> Result<()> {
        let (a, b) = (writable_remote(from)?, writable_remote(to)?);
        if !std::sync::Arc::ptr_eq(&a.driver, &b.driver) {
            return Err(posix(libc::EXDEV, &a.virt, "rename across mounts"));
        }
        self.may_rename(a, b)?;
        if self.is_dirty(&a.virt) {
            // Upload first, so the rename moves the program's latest bytes.
            self.flush(&a.virt, &|| true)?;
        }
        a.driver.rename(&a.path, &b.path)?;
        self.forget_all(&a.virt)?;
        self.forget_all(&b.virt)?;
        // The server gave both directories a new mtime.
        self.directory_changed(split_name(&a.virt).0);
        self.directory_changed(split_name(&b.virt).0);
        Ok(())
    }

    /// Forgets the attributes of the directory `dir` (not its listing), whose mtime the
    /// server moved when roam changed a name in it: `rsync` sets a directory's time, renames
    /// its temporaries into it, then sets the time again only if a `stat` says it moved.
    fn directory_changed(&self, dir: &str) {
        let (parent, name) = split_name(dir);
        let mut st = self.state.lock().unwrap();
        st.attrs.remove(dir);
        if let Some((index, _)) = st.listings.get_mut(parent) {
            if index.entries.contains_key(name) {
                let index = std::sync::Arc::make_mut(index);
                index.entries.remove(name);
                index.unknown.insert(name.to_owned());
            }
        }
        drop(st);
        crate::listings::drop(self.cache.root(), parent);
    }

    /// rename(2)'s checks, in the kernel's order, before a server is asked (servers refuse
    /// some of these moves with errors of their own, or allow them): the source and the
    /// target's directory exist (ENOENT, ENOTDIR), a directory does not move into itself
    /// (EINVAL) nor anything over a directory above it (ENOTEMPTY), and a file and a
    /// directory do not replace each other (EISDIR, ENOTDIR).
    fn may_rename(&self, a: &Remote, b: &Remote) -> Result<()> {
        // Both directories are walked, the source's first, before either last name is
        // looked at.
        if let Some(e) = self.walk(a).or_else(|| self.walk(b)) {
            return Err(e);
        }
        let from = self.stat_remote(a)?;
        let below = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.starts_with('/'));
        let to = self.stat_remote(b).ok();
        match (from.kind, to.map(|m| m.kind)) {
            _ if below(&b.virt, &a.virt) => {
                Err(posix(libc::EINVAL, &b.virt, "inside the directory moved"))
            }
            // Over a directory above the source: that directory holds it.
            (_, Some(_)) if below(&a.virt, &b.virt) => {
                Err(posix(libc::ENOTEMPTY, &b.virt, "directory not empty"))
            }
            (Kind::Dir, Some(k)) if k != Kind::Dir => {
                Err(posix(libc::ENOTDIR, &b.virt, "not a directory"))
            }
            (k, Some(Kind::Dir)) if k != Kind::Dir => {
                Err(posix(libc::EISDIR, &b.virt, "is a directory"))
            }
            _ => Ok(()),
        }
    }

    /// What walking to `r`'s directory meets, as the kernel's path walk: `ENOTDIR` (a
    /// file on the way), `ENOENT` (a missing directory), or nothing.
    fn walk(&self, r: &Remote) -> Option<Error> {
        if r.path == "/" {
            return None;
        }
        let missing = || match self.stat_remote(&r.parent()) {
            Err(e) if e.errno() == libc::ENOENT => Some(e),
            _ => None,
        };
        self.why_absent(r).or_else(missing)
    }

    /// What walking to `node`'s directory meets (rename(2)'s first check): `ENOTDIR`,
    /// `ENOENT`, or nothing.
    pub fn walk_to(&self, node: &Node) -> Option<Error> {
        match node {
            Node::Remote(r) => self.walk(r),
            Node::SchemeRoot { .. } => None,
        }
    }

    /// link(2) of a remote name: the kernel's checks in its order (the source; the new
    /// name's directory; the new name: `EEXIST`; a directory: `EPERM`; another mount:
    /// `EXDEV`), then a second name where the backend keeps hard links and the frontend
    /// serves its files in place (`memory`: `mem:` through FUSE, where both names are one
    /// open file; under `roam run` its files go through copies and whole uploads, as
    /// SFTP's do, which would split the names). Else `EPERM`, Linux's errno for a file
    /// system without hard links.
    pub fn link(&self, from: &Node, to: &Node, memory: bool) -> Result<()> {
        let source = self.stat(from)?;
        if let Some(e) = writable_remote(to).ok().and_then(|b| self.walk(b)) {
            return Err(e);
        }
        if self.stat(to).is_ok() {
            return Err(exists(to.virt()));
        }
        let no_links = || {
            posix(
                libc::EPERM,
                to.virt(),
                "hard links are not supported on remote mounts",
            )
        };
        let (Node::Remote(a), Node::Remote(b)) = (from, to) else {
            return Err(no_links());
        };
        if source.kind == Kind::Dir {
            return Err(posix(libc::EPERM, &a.virt, "a directory has no hard links"));
        }
        if !std::sync::Arc::ptr_eq(&a.driver, &b.driver) {
            return Err(posix(libc::EXDEV, &a.virt, "link across mounts"));
        }
        if !(memory && self.in_memory(from) && a.driver.capabilities().hard_links) {
            return Err(no_links());
        }
        let _change = self.change();
        a.driver.hard_link(&a.path, &b.path)?;
        self.invalidate(&b.virt);
        Ok(())
    }

    pub fn symlink(&self, target: &str, node: &Node) -> Result<()> {
        let _change = self.change();
        let done = self.symlink_here(target, node);
        self.in_its_directory(node, done)
    }

    fn symlink_here(&self, target: &str, node: &Node) -> Result<()> {
        let r = writable_remote(node)?;
        if matches!(self.listed(&r.virt), Some((Some(_), _))) {
            return Err(exists(&r.virt));
        }
        r.driver
            .symlink(target, &r.path)
            .map_err(|e| self.refused_creation(r, e))?;
        self.invalidate(&r.virt);
        Ok(())
    }

    /// chmod. A backend without permission bits (WebDAV) keeps them in roam's copy only,
    /// so `chmod +x` of a program built there works as long as the copy is cached.
    pub fn set_mode(&self, node: &Node, mode: u32) -> Result<()> {
        let _change = self.change();
        let perms = std::os::unix::fs::PermissionsExt::from_mode(mode);
        let done = self.through_final_links(
            node,
            |n| self.set_mode_here(n, mode),
            |p| std::fs::set_permissions(p, perms),
        );
        self.in_its_directory(node, done)
    }

    fn set_mode_here(&self, node: &Node, mode: u32) -> Result<()> {
        let r = writable_remote(node)?;
        if self.is_new_here(&r.virt) {
            // Not on the server yet: the copy's mode goes with its upload (`tar` and
            // `install` chmod a file before closing it).
            let copy = self.work.copy_path(&r.virt);
            return std::fs::set_permissions(
                &copy,
                std::os::unix::fs::PermissionsExt::from_mode(mode),
            )
            .map_err(|e| Error::cache(&copy, e));
        }
        if self.is_dirty(&r.virt) {
            // A file created here must exist on the server to get a mode.
            self.flush(&r.virt, &|| true)?;
        }
        let on_server = match r.driver.set_mode(&r.path, mode) {
            Ok(()) => true,
            Err(e) if e.kind == ErrorKind::Unsupported && self.copy_to_keep_mode(r)? => false,
            Err(e) => return Err(e.into()),
        };
        if self.is_dirty(&r.virt) || !on_server {
            // The copy answers stat (and exec) for this name.
            let copy = self.copy_path(&r.virt);
            std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(|e| Error::cache(&copy, e))?;
        }
        if on_server {
            self.invalidate(&r.virt);
            self.rebase(r)?;
        }
        Ok(())
    }

    /// Whether roam holds a copy of `r` to keep a mode its backend cannot (WebDAV, S3),
    /// fetching one for a file it does not hold: a `chmod` then does the same whether or
    /// not the file was cached (`rsync`'s chmod of a temporary it has just written).
    /// Not for a directory: its name in the data mirror (made when a file below it was
    /// cached) is no copy, and the mode would go nowhere.
    fn copy_to_keep_mode(&self, r: &Remote) -> Result<bool> {
        if self.copy_path(&r.virt).is_file() {
            return Ok(true);
        }
        let meta = self.stat_remote(r)?;
        if meta.kind != Kind::File {
            return Ok(false);
        }
        self.fetch_file(r, &meta)?;
        Ok(self.copy_path(&r.virt).is_file())
    }

    pub fn set_mtime(&self, node: &Node, mtime: SystemTime) -> Result<()> {
        let _change = self.change();
        let done = self.set_mtime_here(node, mtime);
        self.in_its_directory(node, done)
    }

    fn set_mtime_here(&self, node: &Node, mtime: SystemTime) -> Result<()> {
        let r = writable_remote(node)?;
        if self.is_dirty(&r.virt) {
            self.flush(&r.virt, &|| true)?;
        }
        r.driver.set_mtime(&r.path, mtime)?;
        self.invalidate(&r.virt);
        self.rebase(r)
    }

    /// Sets the times of `node` itself (`None`: left as it is): the modification time as
    /// [`Vfs::set_mtime`] does, the access time where the backend keeps one apart, both in
    /// one request where it can. Elsewhere the mtime stands for the access time, and
    /// setting it is accepted for a name that is there (as on a `noatime` mount, nothing
    /// keeps it).
    pub fn set_times(
        &self,
        node: &Node,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> Result<()> {
        let _change = self.change();
        let r = writable_remote(node)?;
        let Some(atime) = atime.filter(|_| r.driver.capabilities().set_atime) else {
            return match mtime {
                Some(mtime) => self.set_mtime(node, mtime),
                None => self.stat(node).map(drop),
            };
        };
        let done = self.set_times_here(r, atime, mtime);
        self.in_its_directory(node, done)
    }

    fn set_times_here(
        &self,
        r: &Remote,
        atime: SystemTime,
        mtime: Option<SystemTime>,
    ) -> Result<()> {
        if self.is_dirty(&r.virt) {
            if mtime.is_none() {
                // The program's copy answers stat until its upload, which keeps its atime.
                let copy = self.copy_path(&r.virt);
                return crate::cache::set_own_times(&copy, Some(atime), None)
                    .map_err(|e| Error::cache(&copy, e));
            }
            self.flush(&r.virt, &|| true)?;
        }
        r.driver.set_times(&r.path, atime, mtime)?;
        self.invalidate(&r.virt);
        self.cache.set_local_atime(&r.virt, atime);
        self.rebase(r)
    }

    /// roam itself changed the remote version of a file still being written (`fchmod`,
    /// `futimens` on its fd, as `tar` does before `close`): the journaled change now starts
    /// from that version, so its upload is no conflict.
    fn rebase(&self, r: &Remote) -> Result<()> {
        if !self.is_dirty(&r.virt) {
            return Ok(());
        }
        let now = r.driver.stat(&r.path)?;
        let Some(mut rec) = self.work.journal(&r.virt) else {
            return Ok(());
        };
        rec.base = Some(info_of(r, &now));
        self.work.put_journal(&r.virt, &rec)
    }

    /// `truncate(path, len)`: a change of contents like any other, uploaded at once.
    pub fn truncate(&self, node: &Node, len: u64) -> Result<()> {
        let _change = self.change();
        let done = self.through_final_links(
            node,
            |n| self.truncate_here(n, len),
            |p| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)?
                    .set_len(len)
            },
        );
        self.in_its_directory(node, done)
    }

    /// Runs a call that follows final symlinks (chmod, truncate) on what `node` leads to:
    /// `remote` on a roam node, `local` on a local file a link leads out to.
    fn through_final_links(
        &self,
        node: &Node,
        remote: impl FnOnce(&Node) -> Result<()>,
        local: impl FnOnce(&std::path::Path) -> std::io::Result<()>,
    ) -> Result<()> {
        match self.follow(node.clone())? {
            crate::Resolved::Node(n, _) => remote(&n),
            crate::Resolved::Local(p) => local(std::path::Path::new(&p)).map_err(|e| {
                Error::posix(e.raw_os_error().unwrap_or(libc::EIO), format!("{p}: {e}"))
            }),
        }
    }

    fn truncate_here(&self, node: &Node, len: u64) -> Result<()> {
        // To zero, nothing of the old contents is needed (and a kept change starts over).
        let flags = if len == 0 { libc::O_TRUNC } else { 0 };
        let data = self.open_for_write(node, flags, 0o644)?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&data)
            .map_err(|e| Error::cache(&data, e))?;
        f.set_len(len).map_err(|e| Error::cache(&data, e))?;
        self.flush(node.virt(), &|| false).map(drop)
    }

    /// Drops what roam believes about `virt`; its parent's listing stays, with the name
    /// marked as changed.
    pub(crate) fn invalidate(&self, virt: &str) {
        self.drop_beliefs(virt, true);
    }

    /// Forgets `virt`'s attributes and listing and takes it out of its parent's listing,
    /// where it is then `unknown` (changed, to ask again) or not (known gone); the saved
    /// listings of both go.
    fn drop_beliefs(&self, virt: &str, unknown: bool) {
        let (parent, name) = split_name(virt);
        let mut st = self.state.lock().unwrap();
        st.attrs.remove(virt);
        st.listings.remove(virt);
        st.placed.remove(virt);
        if let Some((index, _)) = st.listings.get_mut(parent) {
            let index = std::sync::Arc::make_mut(index);
            index.entries.remove(name);
            if unknown {
                index.unknown.insert(name.to_owned());
            } else {
                index.unknown.remove(name);
            }
        }
        drop(st);
        crate::listings::drop(self.cache.root(), parent);
        crate::listings::drop(self.cache.root(), virt);
    }

    /// Puts the names changed in `r` since its listing into its skeleton (a symlink made,
    /// a file renamed here), so a listing of the skeleton shows them.
    pub(crate) fn settle_changed_children(&self, r: &Remote) -> Result<()> {
        let changed: Vec<String> = match self.state.lock().unwrap().listings.get(&r.virt) {
            Some((index, _)) => index.unknown.iter().cloned().collect(),
            None => return Ok(()),
        };
        for name in changed {
            let child = r.child(&name);
            if self.is_dirty(&child.virt) {
                continue;
            }
            match self.stat_remote(&child) {
                Ok(meta) => {
                    self.put_stub(&child, &meta)?;
                    self.remember(&child.virt, meta);
                }
                Err(e) if e.errno() == libc::ENOENT => {
                    self.cache.forget(&child.virt);
                    let mut st = self.state.lock().unwrap();
                    if let Some((index, _)) = st.listings.get_mut(&r.virt) {
                        std::sync::Arc::make_mut(index).unknown.remove(&name);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// After roam itself removed `virt`: the parent's listing, if fresh, loses the name (so
    /// the next lookup answers ENOENT without a request) and `virt`'s own listing goes.
    fn remember_gone(&self, virt: &str) {
        self.drop_beliefs(virt, false);
    }

    fn forget_all(&self, virt: &str) -> Result<()> {
        self.cache.forget(virt);
        self.forget_change(virt)?;
        self.invalidate(virt);
        Ok(())
    }

    /// After roam itself made `virt` (now `meta`): the parent's listing, if fresh, is patched
    /// instead of dropped. `cp -r`, `make`, `tar x` and `rm -r` change one name after another
    /// in a directory; dropping its listing each time made every next lookup there list it
    /// again (on S3, WebDAV, FTP: a request growing with the directory).
    fn remember(&self, virt: &str, meta: Meta) {
        let (parent, name) = split_name(virt);
        let mut st = self.state.lock().unwrap();
        if let Some((index, _)) = st.listings.get_mut(parent) {
            let index = std::sync::Arc::make_mut(index);
            index.entries.insert(name.to_owned(), meta.clone());
            index.unknown.remove(name);
        }
        let now = std::time::Instant::now();
        st.placed.insert(virt.to_owned(), (meta.clone(), now));
        st.attrs.insert(virt.to_owned(), (Ok(meta), now));
        drop(st);
        // A later run lists again rather than trust a saved listing roam has since changed.
        crate::listings::drop(self.cache.root(), parent);
    }
}

impl Vfs {
    /// A name operation's result, with `ENOENT` refined as the kernel's path walk would:
    /// `ENOTDIR` under a file, `ELOOP` under a symlink loop (see [`Vfs::stat_remote`]).
    fn in_its_directory(&self, node: &Node, done: Result<()>) -> Result<()> {
        match (done, node) {
            (Err(e), Node::Remote(r)) if e.errno() == libc::ENOENT => {
                Err(self.why_absent(r).unwrap_or(e))
            }
            (done, _) => done,
        }
    }
}

/// The longest name a `sockaddr_un` holds (108 bytes with its NUL).
const SOCKET_NAME_MAX: usize = 107;

fn writable_remote(node: &Node) -> Result<&Remote> {
    match node {
        Node::Remote(r) if r.driver.capabilities().write => Ok(r),
        _ => Err(posix(libc::EROFS, node.virt(), "this mount is read-only")),
    }
}

impl Vfs {
    /// A server's refusal to make a name that is there (chirp_server says EACCES) is EEXIST.
    fn refused_creation(&self, r: &Remote, e: roam_drivers::Error) -> Error {
        self.invalidate(&r.virt);
        match self.stat_remote(r) {
            Ok(_) => exists(&r.virt),
            Err(_) => e.into(),
        }
    }
}

/// A name made where a fresh listing shows one already: EEXIST, as the kernel checks
/// before a file system is asked (some servers refuse it with another error).
fn exists(virt: &str) -> Error {
    posix(libc::EEXIST, virt, "exists")
}

fn posix(errno: i32, virt: &str, why: &str) -> Error {
    Error::Posix {
        errno,
        message: format!("{virt}: {why}"),
    }
}

fn info_of(r: &Remote, m: &Meta) -> Info {
    Info {
        source: r.describe(),
        etag: m.etag.clone(),
        mtime: m.mtime.map(unix_secs),
        size: m.size.unwrap_or(0),
        fetched_at: unix_secs(SystemTime::now()),
        copy_mtime_ns: None,
        fresh_for: m.fresh_for.map(|d| d.as_secs()),
    }
}

/// The stamp a copy had when roam uploaded it, if `info` records such an upload.
fn uploaded_stamp(info: &Info) -> Option<(u64, u128)> {
    info.copy_mtime_ns.map(|ns| (info.size, ns))
}

/// Whether the remote object is still the version a change started from.
fn same_version(base: &Info, now: &Meta) -> bool {
    match (&base.etag, &now.etag) {
        (Some(a), Some(b)) => a == b,
        _ => Some(base.size) == now.size && base.mtime == now.mtime.map(unix_secs),
    }
}
