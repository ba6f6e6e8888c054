//! One change of a name at a time, where a late `release` would otherwise interleave with
//! the requests that came after it.
//!
//! The kernel sends `RELEASE` in the background once the last reference to an open file
//! is gone, and does not wait for its answer: a program's next request (a `utimensat`, a
//! `rename` over the name, an `unlink`) may be served first or at the same time, on
//! another worker or another io_uring queue. A release that delivers a change (uploads the
//! journaled copy, then publishes it as the cached version) must not run in the middle of
//! such a request: a `touch` that set the copy's mtime during the upload left the change
//! journaled for a close that never came, and a `rename` over the name removed the copy
//! the release was publishing (`ENOENT`). Either order, whole, is right; these locks make
//! it one or the other.

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

/// Names share a lock by hash: few enough to keep, enough that unrelated names rarely wait.
const STRIPES: usize = 64;

/// Striped locks over virtual names.
pub struct NameLocks {
    stripes: Vec<Mutex<()>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for NameLocks {
    fn default() -> NameLocks {
        NameLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: Default::default(),
        }
    }
}

/// The locks of some names, held until dropped.
pub struct Held<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl NameLocks {
    /// Locks `names` (two for a rename), always in the same order, so that two requests
    /// locking the same pair cannot wait for each other.
    pub fn lock<'a>(&'a self, names: &[&str]) -> Held<'a> {
        let mut stripes: Vec<usize> = names.iter().map(|n| self.stripe(n)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        Held {
            _guards: stripes
                .into_iter()
                .map(|i| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
                .collect(),
        }
    }

    fn stripe(&self, name: &str) -> usize {
        (self.hasher.hash_one(name) % STRIPES as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_locked_waits_for_its_holder_and_pairs_lock_in_either_order() {
        let locks = std::sync::Arc::new(NameLocks::default());
        let held = locks.lock(&["/w/a", "/w/b"]);
        let (tx, rx) = std::sync::mpsc::channel();
        let other = locks.clone();
        let t = std::thread::spawn(move || {
            let _both = other.lock(&["/w/b", "/w/a"]);
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
        // The same name twice (a rename onto itself) locks once.
        drop(locks.lock(&["/w/a", "/w/a"]));
    }
}
