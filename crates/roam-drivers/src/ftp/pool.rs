//! The driver's idle control connections. Logging in costs several round trips, so a
//! finished operation leaves its connection here for the next one (Ufo keeps connections
//! alive; Parrot's per-file connections were its FTP bottleneck). A connection idle for
//! longer than `keep` is closed by a reaper thread, which exists only while there are idle
//! connections to watch.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::control::Conn;

/// Most idle connections kept; more concurrent operations than this open (and later
/// close) connections of their own.
const MAX_IDLE: usize = 4;

/// Idle connections, most recently used last.
pub(super) struct Pool {
    shared: Arc<Shared>,
    keep: Duration,
}

struct Shared {
    idle: Mutex<Idle>,
    /// Tells the reaper that the pool is closing.
    wake: Condvar,
}

#[derive(Default)]
struct Idle {
    conns: Vec<(Conn, Instant)>,
    reaper: bool,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Idle> {
        // A panic elsewhere leaves the list intact; keep using it.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Pool {
    pub fn new(keep: Duration) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                idle: Mutex::new(Idle::default()),
                wake: Condvar::new(),
            }),
            keep,
        }
    }

    /// The most recently used idle connection that is still open, if any.
    pub fn take(&self) -> Option<Conn> {
        let mut idle = self.shared.lock();
        while let Some((conn, since)) = idle.conns.pop() {
            if since.elapsed() < self.keep && conn.is_alive() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps a connection for the next operation; a broken one is dropped, and one beyond
    /// [`MAX_IDLE`] is closed.
    pub fn give(&self, conn: Conn) {
        if conn.is_broken() {
            return;
        }
        let mut idle = self.shared.lock();
        if idle.conns.len() >= MAX_IDLE {
            drop(idle);
            conn.quit();
            return;
        }
        idle.conns.push((conn, Instant::now()));
        if !idle.reaper {
            idle.reaper = self.start_reaper();
        }
    }

    /// Starts the reaper; `false` if no thread could be made (idle connections then
    /// expire when next taken).
    fn start_reaper(&self) -> bool {
        let shared = Arc::clone(&self.shared);
        let keep = self.keep;
        let spawned = thread::Builder::new()
            .name("roam-ftp-idle".into())
            .spawn(move || reap(&shared, keep));
        if let Err(e) = &spawned {
            tracing::warn!("ftp: cannot start the idle-connection reaper: {e}");
        }
        spawned.is_ok()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let conns = {
            let mut idle = self.shared.lock();
            idle.closed = true;
            std::mem::take(&mut idle.conns)
        };
        self.shared.wake.notify_all();
        for (conn, _) in conns {
            conn.quit();
        }
    }
}

/// Closes connections as they pass `keep`; returns when none are left or the pool closes.
fn reap(shared: &Shared, keep: Duration) {
    let mut idle = shared.lock();
    while !idle.closed {
        let now = Instant::now();
        let (expired, kept) = std::mem::take(&mut idle.conns)
            .into_iter()
            .partition(|(_, since)| now.duration_since(*since) >= keep);
        idle.conns = kept;
        if !expired.is_empty() {
            // Say goodbye without holding the lock other threads wait for.
            drop(idle);
            expired
                .into_iter()
                .for_each(|(conn, _): (Conn, Instant)| conn.quit());
            idle = shared.lock();
            continue;
        }
        let Some(oldest) = idle.conns.iter().map(|(_, since)| *since).min() else {
            idle.reaper = false;
            return;
        };
        let wait = (oldest + keep).saturating_duration_since(now);
        idle = shared
            .wake
            .wait_timeout(idle, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}
