//! Large remote files without waiting for them: a *partial copy* is a sparse local file of
//! the remote size whose byte ranges arrive on demand. The frontend opens it at once and
//! asks [`Vfs::ensure_range`] before each read that touches a range not yet here:
//! - a read far from the others (`tail`, a database page) fetches just its chunk;
//! - reads that follow each other start one streaming request that stays a bounded window
//!   ahead of the reader (so `cat` runs at the speed of a plain download, while `head -c`
//!   transfers one chunk).
//!
//! When every byte is here the copy becomes an ordinary cached copy.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use roam_drivers::{Kind, Meta};

use crate::cache::unix_secs;
use crate::{Error, Info, Node, Remote, Result, Vfs};

/// Files at least this big are opened as partial copies.
pub const STREAM_THRESHOLD: u64 = 8 << 20;
/// Granularity of on-demand fetches.
const CHUNK: u64 = 1 << 20;
/// How far a stream may run ahead of the furthest byte a reader asked for.
const WINDOW: u64 = 32 << 20;
/// A stream with no reader to serve for this long stops (a reader that comes back restarts it).
const IDLE_STREAM: Duration = Duration::from_secs(20);

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

#[derive(Default)]
struct State {
    have: Ranges,
    /// The next byte an active stream will write, and how far it may go.
    stream: Option<(u64, u64)>,
    failed: Option<String>,
}

pub(crate) struct Partial {
    remote: Remote,
    meta: Meta,
    size: u64,
    copy: PathBuf,
    file: File,
    state: Mutex<State>,
    cond: Condvar,
    /// Bytes downloaded into the copy so far (for the cache counters).
    fetched: AtomicU64,
}

pub(crate) type Partials = Mutex<HashMap<String, Arc<Partial>>>;

impl Vfs {
    /// Opens `node` as a partial copy when it is a large remote file not cached yet; returns
    /// the copy to open, or `None` when a whole-file open is the right thing.
    pub fn open_streaming(&self, node: &Node) -> Result<Option<PathBuf>> {
        let Node::Remote(r) = node else {
            return Ok(None);
        };
        if let Some(p) = self.partials.lock().unwrap().get(&r.virt) {
            return Ok(Some(p.copy.clone()));
        }
        if r.driver.local_path(&r.path).is_some()
            || !r.driver.reads_ranges()
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
        let copy = self.cache.sparse_copy(&r.virt, size)?;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&copy)
            .map_err(|e| Error::cache(&copy, e))?;
        let p = Partial {
            remote: r.clone(),
            meta,
            size,
            copy: copy.clone(),
            file,
            state: Mutex::default(),
            cond: Condvar::new(),
            fetched: AtomicU64::new(0),
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
        let missing = !st.have.covers(off.min(end), end);
        // A reader moving through bytes already here pulls the stream's window along, so the
        // stream never stops and restarts (which would halve its speed).
        if let Some((pos, limit)) = st.stream {
            if end + WINDOW > limit {
                st.stream = Some((pos, end + WINDOW));
                p.cond.notify_all();
            }
        }
        missing
    }

    /// Blocks until `[off, off + len)` of the partial copy of `virt` is on disk.
    pub fn ensure_range(&self, virt: &str, off: u64, len: u64) -> Result<()> {
        let Some(p) = self.partials.lock().unwrap().get(virt).cloned() else {
            return Ok(());
        };
        let end = off.saturating_add(len).min(p.size);
        let off = off.min(end);
        let mut st = p.state.lock().unwrap();
        loop {
            if st.have.covers(off, end) {
                drop(st);
                self.complete_if_whole(&p);
                return Ok(());
            }
            if let Some(why) = &st.failed {
                return Err(Error::posix(libc::EIO, why.clone()));
            }
            match st.stream {
                // The stream will get there: let it run far enough, and wait.
                Some((pos, limit)) if off >= pos.saturating_sub(CHUNK) && off <= pos + WINDOW => {
                    st.stream = Some((pos, limit.max(end + WINDOW)));
                    p.cond.notify_all();
                    st = p.cond.wait_timeout(st, Duration::from_secs(1)).unwrap().0;
                }
                // Reading on from bytes already here: stream the rest.
                None if off > 0 && st.have.covers(off - 1, off) => {
                    let start = off - off % CHUNK;
                    st.stream = Some((start, end + WINDOW));
                    let streamed = p.clone();
                    std::thread::spawn(move || stream(&streamed, start));
                }
                // Anywhere else (first read, tail, random access): fetch its chunks.
                _ => {
                    drop(st);
                    let (a, b) = (
                        off - off % CHUNK,
                        end.div_ceil(CHUNK).saturating_mul(CHUNK).min(p.size),
                    );
                    let got = fetch_chunk(&p, a, b);
                    st = p.state.lock().unwrap();
                    match got {
                        Ok(n) => st.have.insert(a, a + n),
                        Err(e) => return Err(e),
                    }
                    p.cond.notify_all();
                }
            }
        }
    }

    /// Waits for every byte (for `mmap`, or when the fd could not be watched).
    pub fn ensure_whole(&self, virt: &str) -> Result<()> {
        self.ensure_range(virt, 0, u64::MAX)
    }

    /// Turns a finished partial copy into an ordinary cached copy.
    fn complete_if_whole(&self, p: &Arc<Partial>) {
        if !p.state.lock().unwrap().have.covers(0, p.size) {
            return;
        }
        if self
            .partials
            .lock()
            .unwrap()
            .remove(&p.remote.virt)
            .is_none()
        {
            return; // another thread finished it
        }
        let info = Info {
            source: p.remote.describe(),
            etag: p.meta.etag.clone(),
            mtime: p.meta.mtime.map(unix_secs),
            size: p.size,
            fetched_at: unix_secs(SystemTime::now()),
            copy_mtime_ns: None,
        };
        if let Err(e) = self
            .cache
            .seal_copy(&p.remote.virt, &p.copy, &p.meta, &info)
        {
            tracing::warn!("{}: could not keep the downloaded copy: {e}", p.remote.virt);
        }
        crate::usage::Usage::add(&self.usage.misses, 1);
        crate::usage::Usage::add(&self.usage.bytes_fetched, p.fetched.load(Ordering::Relaxed));
        crate::usage::Usage::add(&self.usage.bytes_cached, p.size);
    }
}

/// Fetches `[a, b)` into the copy; returns how many bytes came.
fn fetch_chunk(p: &Partial, a: u64, b: u64) -> Result<u64> {
    let mut at = At {
        file: &p.file,
        pos: a,
    };
    let n = p
        .remote
        .driver
        .read_range(&p.remote.path, a, b - a, &mut at)?;
    p.fetched.fetch_add(n, Ordering::Relaxed);
    if n < b - a {
        return Err(Error::posix(
            libc::EIO,
            format!(
                "{}: the file shrank on the server while being read",
                p.remote.virt
            ),
        ));
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
    };
    let result = remote
        .driver
        .read_range(&remote.path, start, p.size - start, &mut w);
    let _ = w.flush();
    let mut st = p.state.lock().unwrap();
    st.stream = None;
    if let Err(e) = result {
        if w.pos < p.size && !e.message.contains("stream idle") {
            tracing::debug!("{}: stream stopped: {e}", remote.virt);
        }
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
}

impl Write for Streamer<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        self.pos += data.len() as u64;
        if self.buf.len() as u64 >= PUBLISH {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.p.file.write_all_at(&self.buf, self.published)?;
        self.p
            .fetched
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        self.buf.clear();
        let mut st = self.p.state.lock().unwrap();
        st.have.insert(self.published, self.pos);
        self.published = self.pos;
        self.p.cond.notify_all();
        // Beyond the window: wait for a reader to move it on, or give up when none comes.
        loop {
            let limit = st.stream.map_or(0, |(_, l)| l);
            st.stream = Some((self.pos, limit));
            if self.pos < limit {
                return Ok(());
            }
            let (next, timeout) = self.p.cond.wait_timeout(st, IDLE_STREAM).unwrap();
            st = next;
            if timeout.timed_out() {
                return Err(std::io::Error::other("stream idle"));
            }
        }
    }
}

/// A writer at a moving offset of a file.
struct At<'a> {
    file: &'a File,
    pos: u64,
}

impl Write for At<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write_all_at(buf, self.pos)?;
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
