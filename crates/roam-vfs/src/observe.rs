//! What passes between roam and its servers, counted once where every request goes: each
//! mount's driver is wrapped ([`Observed`]) so that requests, bytes, failures and retries
//! are counted per remote, and the transfers of file contents in flight (whole fetches,
//! ranges, uploads) are known with their progress. It only records: what to show, and
//! when, is the frontends' and the binary's choice ([`Vfs::transfers`],
//! [`Vfs::remote_stats`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use roam_drivers::{
    Capabilities, Driver, ErrorKind, Fetched, Kind, Known, Leftover, Listing, Meta, NewFile,
    Pinned, Result, Upload, Validator,
};
use serde::{Deserialize, Serialize};

use crate::Vfs;

/// Which way a transfer's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the server: a whole file, or a range of one.
    Fetch,
    /// To the server.
    Upload,
}

/// A transfer of file contents in flight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    /// The remote file (`http://host/path`).
    pub name: String,
    pub direction: Direction,
    /// Bytes moved so far.
    pub bytes: u64,
    /// Bytes it moves in all, when known beforehand.
    pub total: Option<u64>,
    /// Seconds since it started.
    pub seconds: f64,
}

/// The counters of one remote (a mount's URL, or an implicit host's), this process's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteStats {
    pub remote: String,
    /// Requests asked of its driver (one may take several protocol messages).
    pub requests: u64,
    pub bytes_fetched: u64,
    pub bytes_uploaded: u64,
    /// Requests that failed, a missing name apart (that is an answer).
    pub errors: u64,
    /// Transfers asked again after the same one failed.
    pub retries: u64,
}

/// Every remote's counters and the transfers in flight, shared by the wrapped drivers.
#[derive(Default)]
pub(crate) struct Observer {
    remotes: Mutex<BTreeMap<String, Arc<Counters>>>,
    transfers: Mutex<HashMap<u64, Arc<Moving>>>,
    next: AtomicU64,
    /// The size a caller expects the next fetch of a name to bring (for a progress's ETA).
    sizes: Mutex<HashMap<String, u64>>,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    bytes_fetched: AtomicU64,
    bytes_uploaded: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    /// The transfers whose last attempt failed: (direction, name).
    failed: Mutex<HashSet<(Direction, String)>>,
}

/// A transfer in flight; it leaves the observer when dropped.
struct Moving {
    name: String,
    direction: Direction,
    total: Option<u64>,
    bytes: AtomicU64,
    started: Instant,
}

impl Observer {
    /// `driver`, counted under `remote` (a mount URL, shown as it is: no password).
    pub fn wrap(self: &Arc<Self>, remote: &str, driver: Arc<dyn Driver>) -> Arc<dyn Driver> {
        let counters = self
            .remotes
            .lock()
            .unwrap()
            .entry(roam_drivers::secrets::scrub(remote).into_owned())
            .or_default()
            .clone();
        Arc::new(Observed {
            inner: driver,
            counters,
            observer: self.clone(),
        })
    }

    /// Says that the next fetch of `name` (a driver's `describe`) should bring `size` bytes.
    pub fn expect_size(&self, name: String, size: Option<u64>) {
        if let Some(size) = size {
            self.sizes.lock().unwrap().insert(name, size);
        }
    }

    fn start(&self, name: String, direction: Direction, total: Option<u64>) -> Flight<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let moving = Arc::new(Moving {
            name,
            direction,
            total,
            bytes: AtomicU64::new(0),
            started: Instant::now(),
        });
        self.transfers.lock().unwrap().insert(id, moving.clone());
        Flight {
            observer: self,
            id,
            moving,
        }
    }

    fn transfers(&self) -> Vec<Transfer> {
        let mut v: Vec<Transfer> = self
            .transfers
            .lock()
            .unwrap()
            .values()
            .map(|m| Transfer {
                name: m.name.clone(),
                direction: m.direction,
                bytes: m.bytes.load(Ordering::Relaxed),
                total: m.total,
                seconds: m.started.elapsed().as_secs_f64(),
            })
            .collect();
        v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        v
    }

    fn remote_stats(&self) -> Vec<RemoteStats> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.remotes
            .lock()
            .unwrap()
            .iter()
            .map(|(remote, c)| RemoteStats {
                remote: remote.clone(),
                requests: get(&c.requests),
                bytes_fetched: get(&c.bytes_fetched),
                bytes_uploaded: get(&c.bytes_uploaded),
                errors: get(&c.errors),
                retries: get(&c.retries),
            })
            .collect()
    }
}

/// A registered transfer; dropping it ends it.
struct Flight<'a> {
    observer: &'a Observer,
    id: u64,
    moving: Arc<Moving>,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.observer.transfers.lock().unwrap().remove(&self.id);
    }
}

/// A writer (a fetch's destination) or reader (an upload's source) that counts what
/// passes into its transfer and its remote's counter.
struct Tally<'a, T> {
    inner: T,
    moving: &'a Moving,
    counter: &'a AtomicU64,
}

impl<T> Tally<'_, T> {
    fn add(&self, n: usize) {
        self.moving.bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl<T: Write> Write for Tally<'_, T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.add(n);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<T: Read> Read for Tally<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.add(n);
        Ok(n)
    }
}

/// A mount's driver, counted.
struct Observed {
    inner: Arc<dyn Driver>,
    counters: Arc<Counters>,
    observer: Arc<Observer>,
}

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl Observed {
    /// Counts one request and its outcome.
    fn count<T>(&self, done: Result<T>) -> Result<T> {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        if done.as_ref().is_err_and(|e| e.kind != ErrorKind::NotFound) {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        done
    }

    /// Runs one transfer of `path` as a registered flight, counting a retry when the same
    /// transfer failed last time.
    fn transfer<T>(
        &self,
        path: &str,
        direction: Direction,
        total: Option<u64>,
        run: impl FnOnce(&Moving, &AtomicU64) -> Result<T>,
    ) -> Result<T> {
        let name = self.inner.describe(path);
        let key = (direction, name.clone());
        if self.counters.failed.lock().unwrap().contains(&key) {
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        let flight = self.observer.start(name, direction, total);
        let counter = match direction {
            Direction::Fetch => &self.counters.bytes_fetched,
            Direction::Upload => &self.counters.bytes_uploaded,
        };
        let done = self.count(run(&flight.moving, counter));
        let mut failed = self.counters.failed.lock().unwrap();
        match done.is_err() {
            true => failed.insert(key),
            false => failed.remove(&key),
        };
        done
    }
}

impl Driver for Observed {
    fn describe(&self, path: &str) -> String {
        self.inner.describe(path)
    }

    fn sources(&self) -> Vec<(String, String)> {
        self.inner.sources()
    }

    fn stat(&self, path: &str) -> Result<Meta> {
        self.count(self.inner.stat(path))
    }

    fn list(&self, path: &str) -> Result<Listing> {
        self.count(self.inner.list(path))
    }

    fn fetch(
        &self,
        path: &str,
        dest: &mut dyn Write,
        validator: Option<&Validator>,
    ) -> Result<Fetched> {
        let expected = self
            .observer
            .sizes
            .lock()
            .unwrap()
            .remove(&self.inner.describe(path));
        self.transfer(path, Direction::Fetch, expected, |moving, counter| {
            let mut tally = Tally {
                inner: dest,
                moving,
                counter,
            };
            self.inner.fetch(path, &mut tally, validator)
        })
    }

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        self.inner.local_path(path)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn open_in_place(
        &self,
        path: &str,
        create: Option<NewFile>,
    ) -> Result<Arc<roam_drivers::mem::Contents>> {
        self.inner.open_in_place(path, create)
    }

    fn read_range(
        &self,
        path: &str,
        offset: u64,
        len: u64,
        of: Option<&Pinned>,
        dest: &mut dyn Write,
    ) -> Result<u64> {
        self.transfer(path, Direction::Fetch, Some(len), |moving, counter| {
            let mut tally = Tally {
                inner: dest,
                moving,
                counter,
            };
            self.inner.read_range(path, offset, len, of, &mut tally)
        })
    }

    fn upload(&self, path: &str, src: &mut dyn Read, len: u64, how: &Upload) -> Result<Meta> {
        self.transfer(path, Direction::Upload, Some(len), |moving, counter| {
            let mut tally = Tally {
                inner: src,
                moving,
                counter,
            };
            self.inner.upload(path, &mut tally, len, how)
        })
    }

    fn remove_leftover(&self, leftover: &Leftover) -> Result<()> {
        self.count(self.inner.remove_leftover(leftover))
    }

    fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.count(self.inner.mkdir(path, mode))
    }

    fn mkdir_in_known_dir(&self, path: &str, mode: u32) -> Result<Option<Meta>> {
        self.count(self.inner.mkdir_in_known_dir(path, mode))
    }

    fn remove_file(&self, path: &str) -> Result<()> {
        self.count(self.inner.remove_file(path))
    }

    fn remove_known_file(&self, path: &str, known: Known) -> Result<()> {
        self.count(self.inner.remove_known_file(path, known))
    }

    fn remove_dir(&self, path: &str) -> Result<()> {
        self.count(self.inner.remove_dir(path))
    }

    fn remove_known_dir(&self, path: &str, known: Known) -> Result<()> {
        self.count(self.inner.remove_known_dir(path, known))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.count(self.inner.rename(from, to))
    }

    fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.count(self.inner.copy(from, to))
    }

    fn set_mode(&self, path: &str, mode: u32) -> Result<()> {
        self.count(self.inner.set_mode(path, mode))
    }

    fn set_mtime(&self, path: &str, mtime: SystemTime) -> Result<()> {
        self.count(self.inner.set_mtime(path, mtime))
    }

    fn set_times(&self, path: &str, atime: SystemTime, mtime: Option<SystemTime>) -> Result<()> {
        self.count(self.inner.set_times(path, atime, mtime))
    }

    fn symlink(&self, target: &str, path: &str) -> Result<()> {
        self.count(self.inner.symlink(target, path))
    }

    fn make_special(&self, path: &str, kind: Kind, mode: u32) -> Result<()> {
        self.count(self.inner.make_special(path, kind, mode))
    }

    fn hard_link(&self, from: &str, to: &str) -> Result<()> {
        self.count(self.inner.hard_link(from, to))
    }
}

impl Vfs {
    /// The transfers of file contents in flight in this process, oldest first.
    pub fn transfers(&self) -> Vec<Transfer> {
        self.mounts.observer().transfers()
    }

    /// This process's counters of each remote it used.
    pub fn remote_stats(&self) -> Vec<RemoteStats> {
        self.mounts.observer().remote_stats()
    }
}
