//! Locks on virtual names, honoured by every thread of every roam process that shares a
//! cache (`roam run`s, `roam mount`s, `roam sync`): whoever fills or publishes the cached
//! copy of a name holds its lock, so no process ever trusts a copy another is still
//! filling, and a copy and its record are published together.
//!
//! One lock file, `CACHE/locks`, holds every lock as one byte at an offset hashed from the
//! name: open-file-description locks (`F_OFD_SETLK`) on it are released by the kernel when
//! a process dies, however it dies. All of a process's locks share one open file
//! description, and OFD locks of one description never conflict with each other, so the
//! threads of one process are kept apart by a table of the slots they hold. Waiting is
//! bounded: a lock not given up in time is reported as such, never waited for for ever.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// The locks of one cache, for one process.
#[derive(Clone)]
pub(crate) struct NameLocks {
    inner: Arc<Inner>,
}

struct Inner {
    file: File,
    /// Slots this process holds (its threads must not share one).
    held: Mutex<HashSet<i64>>,
    freed: Condvar,
}

/// A held lock; dropping it gives the lock up.
pub(crate) struct NameGuard {
    inner: Arc<Inner>,
    slot: i64,
}

impl NameLocks {
    pub fn open(path: &Path) -> Result<NameLocks> {
        let file = open_lock_file(path)?;
        Ok(NameLocks {
            inner: Arc::new(Inner {
                file,
                held: Mutex::default(),
                freed: Condvar::new(),
            }),
        })
    }

    /// Takes the lock of `virt`, waiting at most `patience` for the thread or process that
    /// holds it; `None` when it was not given up in time.
    pub fn lock(&self, virt: &str, patience: Duration) -> Result<Option<NameGuard>> {
        let deadline = Instant::now() + patience;
        let slot = slot_of(virt);
        if !self.claim_slot(slot, deadline) {
            return Ok(None);
        }
        let mut pause = Duration::from_millis(1);
        loop {
            match self.inner.set(slot, libc::F_WRLCK) {
                Ok(true) => return Ok(Some(self.guard(slot))),
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(pause.min(deadline - Instant::now()));
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => {
                    self.inner.release_slot(slot);
                    return other.map(|_| None);
                }
            }
        }
    }

    /// Takes the lock of `virt` only if nobody holds it.
    pub fn try_lock(&self, virt: &str) -> Result<Option<NameGuard>> {
        self.lock(virt, Duration::ZERO)
    }

    /// Reserves `slot` among this process's threads, waiting until `deadline`.
    fn claim_slot(&self, slot: i64, deadline: Instant) -> bool {
        let mut held = self.inner.held.lock().unwrap();
        while held.contains(&slot) {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            held = self
                .inner
                .freed
                .wait_timeout(held, deadline - now)
                .unwrap()
                .0;
        }
        held.insert(slot);
        true
    }

    fn guard(&self, slot: i64) -> NameGuard {
        NameGuard {
            inner: self.inner.clone(),
            slot,
        }
    }
}

impl Inner {
    /// Sets (`F_WRLCK`) or clears (`F_UNLCK`) the lock byte at `slot` without waiting;
    /// `false` when another process holds it.
    fn set(&self, slot: i64, kind: i32) -> Result<bool> {
        // SAFETY: an all-zero `flock` is valid; OFD locks require `l_pid` to be 0.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = kind as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        fl.l_start = slot;
        fl.l_len = 1;
        // SAFETY: F_OFD_SETLK reads the `flock` we pass; the fd is our open lock file.
        let r = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => Ok(false),
            _ => Err(Error::cache(Path::new("locks"), e)),
        }
    }

    fn release_slot(&self, slot: i64) {
        self.held.lock().unwrap().remove(&slot);
        self.freed.notify_all();
    }
}

impl Drop for NameGuard {
    fn drop(&mut self) {
        if let Err(e) = self.inner.set(self.slot, libc::F_UNLCK) {
            tracing::warn!("could not release a cache lock: {e}");
        }
        self.inner.release_slot(self.slot);
    }
}

/// The lock byte of a name: a hash stable across processes and roam versions (FNV-1a),
/// kept below 2^62 so that the byte after it is still a valid offset.
fn slot_of(virt: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in virt.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h >> 2) as i64
}

/// Opens (creating it if need be, private) a file whose only use is its locks.
pub(crate) fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::cache(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locks() -> (NameLocks, tempdir::Dir) {
        let dir = tempdir::Dir::new();
        (NameLocks::open(&dir.0.join("locks")).unwrap(), dir)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = std::env::temp_dir().join(format!("roam-locks-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn threads_of_one_process_exclude_each_other() {
        let (l, _d) = locks();
        let g = l.try_lock("/a").unwrap().expect("free");
        assert!(
            l.try_lock("/a").unwrap().is_none(),
            "held by another thread"
        );
        assert!(l.try_lock("/b").unwrap().is_some(), "other names are free");
        let l2 = l.clone();
        let waiter =
            std::thread::spawn(move || l2.lock("/a", Duration::from_secs(5)).unwrap().is_some());
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
        assert!(waiter.join().unwrap(), "given up, then taken by the waiter");
    }

    #[test]
    fn another_open_of_the_file_is_another_process() {
        // Two opens of the lock file conflict as two processes would.
        let (a, d) = locks();
        let b = NameLocks::open(&d.0.join("locks")).unwrap();
        let g = a.try_lock("/x").unwrap().expect("free");
        let t = Instant::now();
        assert!(b.lock("/x", Duration::from_millis(100)).unwrap().is_none());
        assert!(
            t.elapsed() >= Duration::from_millis(100),
            "waited its patience"
        );
        drop(g);
        assert!(b.try_lock("/x").unwrap().is_some());
    }

    #[test]
    fn a_killed_holder_gives_its_locks_up() {
        let (a, d) = locks();
        let path = std::ffi::CString::new(d.0.join("locks").to_str().unwrap()).unwrap();
        // SAFETY: an all-zero flock is valid; prepared before fork, so the child only
        // makes system calls (it must not allocate: other test threads may hold malloc's lock).
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as i16;
        fl.l_start = slot_of("/y");
        fl.l_len = 1;
        let mut ready = [0i32; 2];
        // SAFETY: a pipe into a two-int array.
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: the child makes only async-signal-safe calls, then waits to be killed.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDWR);
                let ok = libc::fcntl(fd, libc::F_OFD_SETLK, &fl) == 0;
                libc::write(ready[1], [u8::from(ok)].as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let mut byte = [0u8];
        // SAFETY: reading one byte from our pipe.
        assert_eq!(
            unsafe { libc::read(ready[0], byte.as_mut_ptr().cast(), 1) },
            1
        );
        assert_eq!(byte[0], 1, "the child took the lock");
        assert!(a.try_lock("/y").unwrap().is_none(), "held by the child");
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(ready[0]);
            libc::close(ready[1]);
        }
        assert!(a.try_lock("/y").unwrap().is_some(), "released at its death");
    }

    #[test]
    fn slots_are_stable() {
        assert_eq!(slot_of("/http/h/f"), slot_of("/http/h/f"));
        assert_ne!(slot_of("/http/h/f"), slot_of("/http/h/g"));
        assert!(slot_of("/any") >= 0 && slot_of("/any") < (1 << 62));
    }
}
