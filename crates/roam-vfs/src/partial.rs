//! Large remote files without waiting for them: a *partial copy* is a sparse local file of
//! the remote size whose byte ranges arrive on demand. The frontend opens it at once and
//! asks [`Vfs::ensure_range`] before each read that touches a range not yet here:
//! - a read far from the others (`tail`, a database page) fetches just its chunk;
//! - reads that follow each other start one streaming request that stays a bounded window
//!   ahead of the reader (so `cat` runs at the speed of a plain download, while `head -c`
//!   transfers one chunk);
//! - with a read-ahead policy (`readahead.rs`), a read that fetches also fetches, in the
//!   background, the ranges the policy expects next (a strided reader's next records).
//!
//! A partial copy is private to the process that fills it (`work/ID/part/`): no other
//! process can know which of its bytes are there. When every byte is here it is published
//! as an ordinary cached copy, by the process that holds the name's lock.
//!
//! A transfer that fails is tried again at most once per read; a stream that brings nothing
//! for longer than the drivers' timeouts allow is given up, and so is any transfer slower
//! than the low-speed limit (`speed.rs`: a server dripping bytes). Either way the read fails
//! with the transfer's errno (ETIMEDOUT, EHOSTUNREACH, ENOSPC when the cache disk is full ...).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use roam_drivers::{Kind, Meta, Pinned, Validator};

use crate::cache::unix_secs;
use crate::locks::NameGuard;
use crate::readahead::HISTORY;
use crate::speed::{LowSpeed, Pace};
use crate::{Error, Info, Node, Remote, Result, Vfs};

/// Files at least this big are opened as partial copies.
pub const STREAM_THRESHOLD: u64 = 8 << 20;
/// Granularity of on-demand fetches.
const CHUNK: u64 = 1 << 20;
/// How far a stream may run ahead of the furthest byte a reader asked for.
const WINDOW: u64 = 32 << 20;
/// A stream with no reader to serve for this long stops (a reader that comes back restarts it).
const IDLE_STREAM: Duration = Duration::from_secs(20);
/// Transfers one read may start: the first, and one more after a failure.
const TRIES_PER_READ: u32 = 2;
/// How long a failed transfer answers the reads that come after it (`failed_just_before`).
const FAILED_JUST_NOW: Duration = Duration::from_secs(1);

/// Byte ranges present in a partial copy: sorted, disjoint, merged.
#[derive(Default, Debug)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        self.0.push((start, end));
        self.0.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.0.len());
        for &(s, e) in &self.0 {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        self.0 = merged;
    }

    fn covers(&self, start: u64, end: u64) -> bool {
        start >= end || self.0.iter().any(|&(s, e)| s <= start && end <= e)
    }
}

struct State {
    have: Ranges,
    /// The next byte an active stream will write, and how far it may go.
    stream: Option<(u64, u64)>,
    /// Why transfers fail (errno, message: the first failure since the last success, which
    /// says what happened; a retry that cannot even connect says less) and when the last
    /// one did.
    failed: Option<(i32, String, Instant)>,
    /// When bytes last arrived (or a transfer started).
    progress: Instant,
    /// Chunk fetches under way (they write the copy outside this lock).
    fetching: u32,
    /// The last reads programs asked for (`[start, end)`, oldest first), for the
    /// read-ahead policy.
    history: VecDeque<(u64, u64)>,
    /// Ranges being fetched ahead of reads (`[start, end)`): a read inside one waits.
    ahead: Vec<(u64, u64)>,
}

impl State {
    fn note_failure(&mut self, e: &Error) {
        let now = Instant::now();
        match &mut self.failed {
            Some((_, _, at)) => *at = now,
            None => self.failed = Some((e.errno(), e.to_string(), now)),
        }
    }
}

pub(crate) struct Partial {
    remote: Remote,
    meta: Meta,
    /// The version its ranges must come from (see [`Partial::version`]).
    version: Pinned,
    size: u64,
    /// The private copy programs open.
    copy: PathBuf,
    file: File,
    /// The name's lock, held when this process may publish the copy once whole.
    lock: Mutex<Option<NameGuard>>,
    state: Mutex<State>,
    cond: Condvar,
    /// Bytes downloaded into the copy so far (for the cache counters).
    fetched: AtomicU64,
    /// The window of the low-speed limit on its transfers.
    speed_window: Duration,
}

pub(crate) type Partials = Mutex<HashMap<String, Arc<Partial>>>;

impl Partial {
    /// The version every range must come from: the one the copy was opened as. A file
    /// replaced on the server meanwhile fails the reads still to come with `ESTALE`,
    /// rather than giving pieces of two versions (and the copy is never published).
    fn version(&self) -> &Pinned {
        &self.version
    }
}

impl Vfs {
    /// The partial copy of `virt` for a new reader, unless the server no longer has its
    /// version: such a copy serves only the fds that hold it (what they have not read
    /// yet: `ESTALE`) and is never published, so its name lock goes, and a new reader
    /// takes the new version.
    fn current_partial(&self, virt: &str) -> Option<Arc<Partial>> {
        let p = self.partials.lock().unwrap().get(virt).cloned()?;
        if p.version.changed() {
            p.lock.lock().unwrap().take();
            return None;
        }
        Some(p)
    }

    /// Opens `node` as a partial copy when it is a large remote file not cached yet; returns
    /// the copy to open, or `None` when a whole-file open is the right thing.
    pub fn open_streaming(&self, node: &Node) -> Result<Option<PathBuf>> {
        let Node::Remote(r) = node else {
            return Ok(None);
        };
        if self.partials.lock().unwrap().contains_key(&r.virt) {
            return Ok(self.current_partial(&r.virt).map(|p| p.copy.clone()));
        }
        if r.driver.local_path(&r.path).is_some()
            || !r.driver.capabilities().stream_large_files
            || self.is_dirty(&r.virt)
        {
            return Ok(None);
        }
        let meta = self.stat(node)?;
        let size = match (meta.kind, meta.size) {
            (Kind::File, Some(s)) if s >= STREAM_THRESHOLD => s,
            _ => return Ok(None),
        };
        if self
            .cache
            .info(&r.virt)
            .is_some_and(|i| i.source == r.describe() && i.matches(&meta))
        {
            return Ok(None); // a whole copy is here: revalidate it the usual way
        }
        let lock = self.fetch_lock(&r.virt);
        let _guard = lock.lock().unwrap();
        let mut partials = self.partials.lock().unwrap();
        if let Some(p) = partials.get(&r.virt) {
            return Ok(Some(p.copy.clone()));
        }
        // The stub's own inode may be filled only by the process that will publish it.
        let name_lock = self.locks.try_lock(&r.virt)?;
        self.ensure_space(size, &r.virt)?;
        let copy = self.work.part_path(&r.virt)?;
        let file = self
            .cache
            .sparse_part(&r.virt, size, &copy, name_lock.is_some())?;
        let p = Partial {
            remote: r.clone(),
            version: Pinned::new(Validator::of(&meta)),
            meta,
            size,
            copy: copy.clone(),
            file,
            lock: Mutex::new(name_lock),
            state: Mutex::new(State {
                have: Ranges::default(),
                stream: None,
                failed: None,
                progress: Instant::now(),
                fetching: 0,
                history: VecDeque::with_capacity(HISTORY),
                ahead: Vec::new(),
            }),
            cond: Condvar::new(),
            fetched: AtomicU64::new(0),
            speed_window: self.speed_window,
        };
        partials.insert(r.virt.clone(), Arc::new(p));
        Ok(Some(copy))
    }

    /// Whether `virt` is a partial copy still missing bytes of `[off, off + len)`.
    pub fn range_missing(&self, virt: &str, off: u64, len: u64) -> bool {
        let Some(p) = self.partials.lock().unwrap().get(virt).cloned() else {
            return false;
        };
        let end = off.saturating_add(len).min(p.size);
        let mut st = p.state.lock().unwrap();
        // A frontend may ask about one read twice (the tracer does, at the call and
        // when serving it): one entry.
        let read = (off.min(end), end);
        if st.history.back() != Some(&read) {
            if st.history.len() == HISTORY {
                st.history.pop_front();
            }
            st.history.push_back(read);
        }
        let missing = !st.have.covers(off.min(end), end);
        if !missing && st.have.covers(0, p.size) {
            // Every byte came (a stream ahead of its reader): a cached copy from now on.
            drop(st);
            self.complete_if_whole(&p);
            return false;
        }
        // A reader moving through bytes already here pulls the stream's window along, so the
        // stream never stops and restarts (which would halve its speed).
        pull_window(&p, &mut st, end + WINDOW);
        missing
    }

    /// Blocks until `[off, off + len)` of the partial copy of `virt` is on disk, or fails
    /// with the errno of the transfer that could not bring it.
    pub fn ensure_range(&self, virt: &str, off: u64, len: u64) -> Result<()> {
        let Some(p) = self.partials.lock().unwrap().get(virt).cloned() else {
            return Ok(());
        };
        let began = Instant::now();
        let end = off.saturating_add(len).min(p.size);
        let off = off.min(end);
        let mut tries = 0;
        let mut st = p.state.lock().unwrap();
        loop {
            if st.have.covers(off, end) {
                drop(st);
                self.complete_if_whole(&p);
                return Ok(());
            }
            if st.ahead.iter().any(|&(s, e)| s <= off && end <= e) {
                // Fetched ahead of this read: wait for it (a failure leaves the range).
                st = p.cond.wait_timeout(st, Duration::from_secs(1)).unwrap().0;
                continue;
            }
            if let Some((pos, limit)) = st.stream {
                if off >= pos.saturating_sub(CHUNK) && off <= pos + WINDOW {
                    // The stream will get there: let it run far enough, and wait.
                    if pos < limit && st.progress.elapsed() > self.patience {
                        return Err(stalled(&p, self.patience));
                    }
                    pull_window(&p, &mut st, end + WINDOW);
                    st = p.cond.wait_timeout(st, Duration::from_secs(1)).unwrap().0;
                    continue;
                }
            }
            if tries == TRIES_PER_READ || (tries == 0 && failed_just_before(&st, began)) {
                let (errno, message, _) =
                    st.failed
                        .clone()
                        .unwrap_or((libc::EIO, "no data".into(), Instant::now()));
                if errno == libc::ENOSPC {
                    p.give_back_space(&mut st);
                }
                return Err(Error::Transfer { errno, message });
            }
            tries += 1;
            st.progress = Instant::now();
            if st.stream.is_none() && off > 0 && st.have.covers(off - 1, off) {
                // Reading on from bytes already here: stream the rest.
                let start = off - off % CHUNK;
                st.stream = Some((start, end + WINDOW));
                let streamed = p.clone();
                std::thread::spawn(move || stream(&streamed, start));
                continue;
            }
            // Anywhere else (first read, tail, random access): fetch its chunks, and what
            // the read-ahead policy expects next.
            st.fetching += 1;
            let history: Vec<(u64, u64)> = st.history.iter().map(|&(s, e)| (s, e - s)).collect();
            drop(st);
            let (a, b) = (
                off - off % CHUNK,
                end.div_ceil(CHUNK).saturating_mul(CHUNK).min(p.size),
            );
            let ahead = self.advise_readahead(virt, p.size, CHUNK, &history);
            if !ahead.is_empty() {
                fetch_ahead(&p, &mut p.state.lock().unwrap(), &ahead, (a, b));
            }
            let got = fetch_chunk(&p, a, b);
            st = p.state.lock().unwrap();
            st.fetching -= 1;
            match got {
                Ok(n) => {
                    st.have.insert(a, a + n);
                    st.failed = None;
                }
                Err(e) => st.note_failure(&e),
            }
            p.cond.notify_all();
        }
    }

    /// The process ends: the bytes of copies that never became whole are given back (the
    /// skeleton stub a partial copy fills in place would otherwise keep them, outside
    /// what the cache counts and evicts).
    pub(crate) fn drop_unfinished(&self) {
        for (_, p) in self.partials.lock().unwrap().drain() {
            crate::cache::free_bytes_of(&p.file, p.size);
            self.work.drop_part(&p.copy);
        }
    }

    /// Up to `len` bytes of the file `node` from `off`, without fetching the rest of it (a
    /// query extension reads a file's tags, not its audio): from the file itself when it is
    /// served in place or being written, from roam's copy when that is current, else the
    /// range from the server where it serves ranges, else the file fetched as an open
    /// would. Ranges from the server are of version `of` (`ESTALE` if it changed), so a
    /// reader taking a file in pieces never gets pieces of two versions.
    pub fn read_range(&self, node: &Node, off: u64, len: u64, of: &Pinned) -> Result<Vec<u8>> {
        let Node::Remote(r) = node else {
            return Err(Error::posix(
                libc::EISDIR,
                format!("{}: a directory", node.virt()),
            ));
        };
        let partial = self.current_partial(&r.virt);
        let here = match r.driver.local_path(&r.path) {
            Some(p) => Some(p),
            None if self.is_dirty(&r.virt) => Some(self.copy_path(&r.virt)),
            None if partial.is_some() => {
                self.ensure_range(&r.virt, off, len)?;
                partial.map(|p| p.copy.clone())
            }
            None => self.young_copy(r, &self.stat(node)?),
        };
        if let Some(path) = here {
            return read_at(&path, off, len);
        }
        if r.driver.capabilities().read_ranges {
            let mut buf = Vec::new();
            r.driver.read_range(&r.path, off, len, Some(of), &mut buf)?;
            return Ok(buf);
        }
        read_at(&self.open_path(node)?, off, len)
    }

    /// Waits for every byte (for `mmap`, or when the fd could not be watched).
    pub fn ensure_whole(&self, virt: &str) -> Result<()> {
        self.ensure_range(virt, 0, u64::MAX)
    }

    /// Publishes a finished partial copy as an ordinary cached copy (when this process may:
    /// it holds the name's lock, or can take it and nobody published that version
    /// meanwhile); its private name goes either way.
    fn complete_if_whole(&self, p: &Arc<Partial>) {
        if !p.state.lock().unwrap().have.covers(0, p.size) {
            return;
        }
        let mut partials = self.partials.lock().unwrap();
        match partials.get(&p.remote.virt) {
            Some(q) if Arc::ptr_eq(p, q) => partials.remove(&p.remote.virt),
            _ => return, // another thread finished it
        };
        drop(partials);
        let held = p.lock.lock().unwrap().take();
        let lock = match held {
            Some(g) => Some(g),
            None => self.locks.try_lock(&p.remote.virt).ok().flatten(),
        };
        if lock.is_some() && self.valid_copy(&p.remote, &p.meta).is_none() {
            let info = Info {
                source: p.remote.describe(),
                etag: p.meta.etag.clone(),
                mtime: p.meta.mtime.map(unix_secs),
                size: p.size,
                fetched_at: unix_secs(SystemTime::now()),
                copy_mtime_ns: None,
                fresh_for: p.meta.fresh_for.map(|d| d.as_secs()),
            };
            if let Err(e) = self
                .cache
                .publish_part(&p.remote.virt, &p.copy, &p.meta, &info)
            {
                tracing::warn!("{}: could not keep the downloaded copy: {e}", p.remote.virt);
            }
            crate::usage::Usage::add(&self.usage.bytes_cached, p.size);
        }
        drop(lock);
        self.work.drop_part(&p.copy);
        crate::usage::Usage::add(&self.usage.misses, 1);
        crate::usage::Usage::add(&self.usage.bytes_fetched, p.fetched.load(Ordering::Relaxed));
    }
}

impl Partial {
    /// Frees the bytes of a copy that filled the cache disk, so that the disk does not
    /// stay full of a file that cannot be had whole (later reads fetch them again).
    /// Only while nothing writes the copy: no stream runs and no chunk is being fetched.
    fn give_back_space(&self, st: &mut State) {
        if st.stream.is_some() || st.fetching > 0 {
            return;
        }
        st.have = Ranges::default();
        crate::cache::free_bytes_of(&self.file, self.size);
    }
}

/// Lets the stream run on to `want`. Only a stream paused at its limit is woken (a running
/// one sees the new limit when it gets there): waking the condition's waiters at every
/// read made the readers waiting for the stream wake each other in turn, round and round,
/// and starve the stream itself of the CPU (a 1 GiB `cat` through FUSE at a third of
/// curl's speed, docs/BENCHMARKS.md).
fn pull_window(p: &Partial, st: &mut State, want: u64) {
    let Some((pos, limit)) = st.stream else {
        return;
    };
    if want <= limit {
        return;
    }
    st.stream = Some((pos, want));
    if pos >= limit {
        // Paused for want of a reader: from now on it owes us bytes.
        st.progress = Instant::now();
        p.cond.notify_all();
    }
}

/// Starts a background fetch of each range `(offset, length)` of `ahead` that is neither
/// here, nor being fetched ahead, nor inside `own` (the chunk the read fetches itself).
/// A failure only drops the range: the read that wants it then fetches it.
fn fetch_ahead(p: &Arc<Partial>, st: &mut State, ahead: &[(u64, u64)], own: (u64, u64)) {
    for &(off, len) in ahead {
        let end = off + len;
        let inside = |&(s, e): &(u64, u64)| s <= off && end <= e;
        if st.have.covers(off, end) || inside(&own) || st.ahead.iter().any(inside) {
            continue;
        }
        st.ahead.push((off, end));
        st.fetching += 1;
        let p = p.clone();
        std::thread::spawn(move || {
            let got = fetch_chunk(&p, off, end);
            let mut st = p.state.lock().unwrap();
            st.fetching -= 1;
            st.ahead.retain(|&r| r != (off, end));
            if let Ok(n) = got {
                st.have.insert(off, off + n);
            }
            p.cond.notify_all();
        });
    }
}

/// Whether the server failed a transfer a moment before a read that `began` then: that
/// read (the one the kernel's failed read-ahead stood for; a program's retry) gets the
/// failure rather than waiting for another transfer to fail the same way. A read that
/// waited on the transfer itself still tries once more, and so does one after a full
/// cache disk (which gave its bytes back).
fn failed_just_before(st: &State, began: Instant) -> bool {
    st.failed.as_ref().is_some_and(|(errno, _, at)| {
        *errno != libc::ENOSPC && *at <= began && began.duration_since(*at) < FAILED_JUST_NOW
    })
}

/// The error of a stream that brought nothing for too long.
fn stalled(p: &Partial, limit: Duration) -> Error {
    Error::Transfer {
        errno: libc::ETIMEDOUT,
        message: format!(
            "{}: no data from the server for {} s",
            p.remote.describe(),
            limit.as_secs()
        ),
    }
}

/// Fetches `[a, b)` into the copy; returns how many bytes came.
fn fetch_chunk(p: &Partial, a: u64, b: u64) -> Result<u64> {
    let at = At {
        p,
        pos: a,
        local: None,
    };
    let mut out = LowSpeed::new(at, p.speed_window, p.remote.describe());
    let got = p
        .remote
        .driver
        .read_range(&p.remote.path, a, b - a, Some(p.version()), &mut out);
    if let Some(e) = out.pace.stalled() {
        return Err(e);
    }
    if let Some(e) = out.get_mut().local.take() {
        return Err(Error::cache(&p.copy, e));
    }
    let n = got?;
    p.fetched.fetch_add(n, Ordering::Relaxed);
    if n < b - a {
        return Err(Error::Transfer {
            errno: libc::EIO,
            message: format!(
                "{}: the file shrank on the server while being read",
                p.remote.describe()
            ),
        });
    }
    Ok(n)
}

/// One streaming request from `start` to the end, kept at most a window ahead of readers.
fn stream(p: &Arc<Partial>, start: u64) {
    let remote = &p.remote;
    let mut w = Streamer {
        p,
        pos: start,
        published: start,
        buf: Vec::with_capacity(PUBLISH as usize),
        local: None,
        idle: false,
        pace: Pace::new(p.speed_window, remote.describe()),
    };
    let result = remote.driver.read_range(
        &remote.path,
        start,
        p.size - start,
        Some(p.version()),
        &mut w,
    );
    let flushed = w.flush();
    let failure = match (w.pace.stalled(), w.local.take(), result, flushed) {
        (Some(e), _, _, _) => Some(e),
        (None, Some(e), _, _) => Some(Error::cache(&p.copy, e)),
        _ if w.idle => None,
        (None, None, Err(e), _) => Some(Error::from(e)),
        (None, None, Ok(_), Err(e)) => Some(Error::cache(&p.copy, e)),
        (None, None, Ok(_), Ok(())) => None,
    };
    let mut st = p.state.lock().unwrap();
    st.stream = None;
    match failure {
        Some(e) => {
            tracing::debug!("{}: stream stopped: {e}", remote.virt);
            st.note_failure(&e);
        }
        None => st.failed = None,
    }
    p.cond.notify_all();
}

/// How much a stream gathers before writing it to the copy and waking readers.
const PUBLISH: u64 = 1 << 20;

/// Writes a stream into the copy, publishing progress and pausing beyond the window.
struct Streamer<'a> {
    p: &'a Arc<Partial>,
    /// Bytes received so far (written or in `buf`), and written and published.
    pos: u64,
    published: u64,
    buf: Vec<u8>,
    /// Why writing the copy failed (the cache disk is full ...): the driver only sees
    /// that the transfer broke.
    local: Option<std::io::Error>,
    /// Whether it stopped because no reader came for a while (not a failure).
    idle: bool,
    /// The low-speed limit, which does not count the waits for a reader.
    pace: Pace,
}

impl Streamer<'_> {
    /// Writes what was gathered into the copy and tells readers it is there.
    fn write_out(&mut self) -> std::io::Result<()> {
        if let Err(e) = self.p.file.write_all_at(&self.buf, self.published) {
            let err = std::io::Error::new(e.kind(), e.to_string());
            self.local.get_or_insert(e);
            return Err(err);
        }
        self.p
            .fetched
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        self.buf.clear();
        let mut st = self.p.state.lock().unwrap();
        st.have.insert(self.published, self.pos);
        self.published = self.pos;
        self.p.cond.notify_all();
        Ok(())
    }

    /// Beyond the window: waits for a reader to move it on, or gives up when none comes.
    fn keep_within_window(&mut self) -> std::io::Result<()> {
        let mut st = self.p.state.lock().unwrap();
        loop {
            let limit = st.stream.map_or(0, |(_, l)| l);
            st.stream = Some((self.pos, limit));
            if self.pos < limit {
                return Ok(());
            }
            let (next, timeout) = self.p.cond.wait_timeout(st, IDLE_STREAM).unwrap();
            st = next;
            self.pace.restart();
            if timeout.timed_out() {
                self.idle = true;
                return Err(std::io::Error::other("stream idle"));
            }
        }
    }
}

impl Write for Streamer<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.pace.count(data.len())?;
        self.buf.extend_from_slice(data);
        self.pos += data.len() as u64;
        self.p.state.lock().unwrap().progress = Instant::now();
        if self.buf.len() as u64 >= PUBLISH {
            self.write_out()?;
            self.keep_within_window()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.write_out()
    }
}

/// A writer at a moving offset of a partial copy.
struct At<'a> {
    p: &'a Partial,
    pos: u64,
    /// Why writing the copy failed, as for [`Streamer`].
    local: Option<std::io::Error>,
}

impl Write for At<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Err(e) = self.p.file.write_all_at(buf, self.pos) {
            let err = std::io::Error::new(e.kind(), e.to_string());
            self.local.get_or_insert(e);
            return Err(err);
        }
        self.pos += buf.len() as u64;
        self.p.state.lock().unwrap().progress = Instant::now();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Up to `len` bytes of the local file `path` from `off`.
fn read_at(path: &std::path::Path, off: u64, len: u64) -> Result<Vec<u8>> {
    let failed = |e: std::io::Error| {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        Error::posix(errno, format!("{}: {e}", path.display()))
    };
    let file = File::open(path).map_err(failed)?;
    let mut buf = vec![0; usize::try_from(len).unwrap_or(usize::MAX).min(1 << 24)];
    let mut got = 0;
    while got < buf.len() {
        match file
            .read_at(&mut buf[got..], off + got as u64)
            .map_err(failed)?
        {
            0 => break,
            n => got += n,
        }
    }
    buf.truncate(got);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn ranges_merge_and_cover() {
        let mut r = Ranges::default();
        r.insert(10, 20);
        r.insert(30, 40);
        assert!(r.covers(12, 18) && !r.covers(15, 35));
        r.insert(20, 30);
        assert!(r.covers(10, 40) && !r.covers(0, 11));
        assert_eq!(r.0, vec![(10, 40)]);
        assert!(r.covers(5, 5), "an empty range is always there");
    }
}
