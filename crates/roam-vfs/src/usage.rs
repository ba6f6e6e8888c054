//! How much of the disk roam's copies take, which copies go first when the cache is over its
//! size limit (least recently used, or what a policy extension picks among the oldest), and
//! the counters `roam cache stat` shows.
//!
//! Eviction never touches a file with a journaled change. A copy that a program still has
//! open can go: on Linux its inode lives on until closed, so the reader is not disturbed;
//! the skeleton entry becomes a stub again and the next open fetches anew.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use roam_drivers::{Kind, Meta};
use serde::{Deserialize, Serialize};

use crate::{Result, Vfs};
use roam_ext::abi::Candidate;

/// Candidates offered to a policy extension per eviction: the oldest 64 (Small & Seltzer's
/// Table 2 size).
pub const POLICY_CHOICES: usize = 64;

/// A prioritization graft for the cache: an extension of the policy kind and its arguments
/// (for the `hotlist` example, the names to keep).
#[derive(Debug)]
pub struct EvictionPolicy {
    pub ext: roam_ext::Extension,
    pub args: Vec<String>,
}

/// Counters of cache activity, kept across runs in `CACHE/stats.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    /// Opens served by a copy young enough or confirmed unchanged (304).
    pub hits: u64,
    /// Opens that had to download the file.
    pub misses: u64,
    pub bytes_fetched: u64,
    pub uploads: u64,
    pub bytes_uploaded: u64,
    pub evictions: u64,
}

/// The live counters and what the cache holds.
#[derive(Default)]
pub(crate) struct Usage {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    /// Shared with archive views, which read archives for their listings.
    pub bytes_fetched: std::sync::Arc<AtomicU64>,
    pub uploads: AtomicU64,
    pub bytes_uploaded: AtomicU64,
    pub evictions: AtomicU64,
    /// Bytes of the copies in `data/`.
    pub bytes_cached: AtomicU64,
    /// When each copy was last opened in this run (older runs: the sidecar's mtime).
    pub used: Mutex<HashMap<String, Instant>>,
}

impl Stats {
    fn plus(&self, o: &Stats) -> Stats {
        Stats {
            hits: self.hits + o.hits,
            misses: self.misses + o.misses,
            bytes_fetched: self.bytes_fetched + o.bytes_fetched,
            uploads: self.uploads + o.uploads,
            bytes_uploaded: self.bytes_uploaded + o.bytes_uploaded,
            evictions: self.evictions + o.evictions,
        }
    }
}

impl Usage {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            bytes_fetched: get(&self.bytes_fetched),
            uploads: get(&self.uploads),
            bytes_uploaded: get(&self.bytes_uploaded),
            evictions: get(&self.evictions),
        }
    }
}

/// What `roam cache stat` and `roam status` report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheReport {
    pub root: std::path::PathBuf,
    pub bytes: u64,
    pub files: u64,
    pub limit: u64,
    /// Every change not yet uploaded, of every roam process on this cache.
    pub pending: Vec<crate::PendingChange>,
    /// Lifetime counters, this run included.
    pub stats: Stats,
}

impl Vfs {
    /// Notes that the copy of `virt` was just used (for LRU).
    pub(crate) fn touch_copy(&self, virt: &str) {
        self.usage
            .used
            .lock()
            .unwrap()
            .insert(virt.to_owned(), Instant::now());
    }

    /// Brings the copies under the size limit, least recently used first; `keep` is the
    /// copy being handed to a program right now.
    pub(crate) fn enforce_limit(&self, keep: &str) -> Result<()> {
        if self.usage.bytes_cached.load(Ordering::Relaxed) <= self.max_cache_bytes {
            return Ok(());
        }
        let target = self.max_cache_bytes / 10 * 9;
        let mut candidates = self.eviction_candidates(keep);
        while !candidates.is_empty() && self.usage.bytes_cached.load(Ordering::Relaxed) > target {
            let victim = candidates.remove(self.pick_victim(&candidates));
            self.evict(&victim.name, victim.size)?;
        }
        Ok(())
    }

    /// Makes room on the cache disk for a copy of `need` bytes about to arrive, least
    /// recently used copies first, as under the size limit: a disk smaller than the limit
    /// (or shared with other data) fills before it. What cannot be made room for is the
    /// ENOSPC of the transfer that runs out.
    pub(crate) fn ensure_space(&self, need: u64, keep: &str) -> Result<()> {
        let wanted = need.saturating_add(SPACE_SLACK);
        let Some(free) = free_bytes(self.cache.root()) else {
            return Ok(());
        };
        if free >= wanted {
            return Ok(());
        }
        let mut candidates = self.eviction_candidates(keep);
        let mut freed = 0;
        while !candidates.is_empty() && free + freed < wanted {
            let victim = candidates.remove(self.pick_victim(&candidates));
            self.evict(&victim.name, victim.size)?;
            freed += victim.size;
        }
        Ok(())
    }

    /// The copies that may be evicted (none holding a change, nor `keep`), most recently
    /// used first; the running count of cached bytes is set from the walk.
    fn eviction_candidates(&self, keep: &str) -> Vec<Candidate> {
        let mut copies = self.cache.copies();
        // The walk is the truth; the running count only says when to look.
        let total: u64 = copies.iter().map(|c| c.1).sum();
        self.usage.bytes_cached.store(total, Ordering::Relaxed);
        let used = self.usage.used.lock().unwrap().clone();
        let now = (Instant::now(), SystemTime::now());
        // Time of last use: this run's record if any, else the sidecar's time.
        let last_use = |virt: &str, at: SystemTime| {
            used.get(virt)
                .map_or(at, |t| now.1 - now.0.duration_since(*t))
        };
        copies.retain(|(virt, _, _)| virt != keep && !self.is_dirty(virt));
        // Most recent first, the oldest popped last.
        copies.sort_by_key(|(virt, _, at)| std::cmp::Reverse(last_use(virt, *at)));
        copies
            .into_iter()
            .map(|(name, size, at)| {
                let since_epoch = last_use(&name, at).duration_since(SystemTime::UNIX_EPOCH);
                let last_use = since_epoch.map_or(0, |d| d.as_millis() as u64);
                Candidate {
                    name,
                    size,
                    last_use,
                }
            })
            .collect()
    }

    /// The index of the next victim among `candidates` (most recent first): the oldest, or
    /// what the policy extension picks among the oldest [`POLICY_CHOICES`]. An extension that
    /// fails costs only its advice: roam falls back to the oldest.
    fn pick_victim(&self, candidates: &[Candidate]) -> usize {
        let oldest = candidates.len() - 1;
        let Some(policy) = &self.policy else {
            return oldest;
        };
        let offered = &candidates[candidates.len().saturating_sub(POLICY_CHOICES)..];
        match roam_ext::policy::choose_victim(&policy.ext, &policy.args, offered) {
            Ok(i) => candidates.len() - offered.len() + i,
            Err(e) => {
                tracing::warn!("{e}; evicting the least recently used copy instead");
                oldest
            }
        }
    }

    /// Installs an eviction policy extension (default: plain LRU).
    pub fn set_eviction_policy(&mut self, policy: EvictionPolicy) {
        self.policy = Some(policy);
    }

    /// Drops the copy of `virt`; its skeleton entry becomes a stub with the same metadata.
    fn evict(&self, virt: &str, size: u64) -> Result<()> {
        let info = self.cache.info(virt);
        self.cache.drop_copy(virt)?;
        if let Some(info) = info {
            let meta = Meta {
                size: Some(info.size),
                mtime: info
                    .mtime
                    .map(|s| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s)),
                ..Meta::of_kind(Kind::File)
            };
            // The hard link would keep the bytes alive: replace it by a sparse stub.
            self.cache.replace_with_stub(virt, &meta)?;
        }
        self.usage.bytes_cached.fetch_sub(
            size.min(self.usage.bytes_cached.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        Usage::add(&self.usage.evictions, 1);
        self.usage.used.lock().unwrap().remove(virt);
        Ok(())
    }

    /// Drops every copy that holds no pending change (`roam cache clean`); returns how many.
    pub fn clean(&self) -> Result<usize> {
        let mut n = 0;
        for (virt, size, _) in self.cache.copies() {
            if !self.is_dirty(&virt) {
                self.evict(&virt, size)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Adds this run's counters to the ones on disk (call once, at the end of a run).
    pub fn save_stats(&self) -> Result<()> {
        let total = self.lifetime_stats().plus(&self.usage.snapshot());
        let p = self.cache.root().join("stats.json");
        let tmp = self.work.tmp_name();
        std::fs::write(&tmp, serde_json::to_vec(&total).expect("Stats serialise"))
            .map_err(|e| crate::Error::cache(&tmp, e))?;
        std::fs::rename(&tmp, &p).map_err(|e| crate::Error::cache(&p, e))
    }

    fn lifetime_stats(&self) -> Stats {
        let p = self.cache.root().join("stats.json");
        std::fs::read(p)
            .ok()
            .and_then(|d| serde_json::from_slice(&d).ok())
            .unwrap_or_default()
    }

    /// What the cache holds and has done.
    pub fn report(&self) -> CacheReport {
        let copies = self.cache.copies();
        let stats = self.lifetime_stats().plus(&self.usage.snapshot());
        CacheReport {
            root: self.cache.root().to_path_buf(),
            bytes: copies.iter().map(|c| c.1).sum(),
            files: copies.len() as u64,
            limit: self.max_cache_bytes,
            pending: crate::pending_changes(self.cache.root()),
            stats,
        }
    }
}

/// Room kept free on the cache disk beyond a copy's bytes: its records, listings and
/// skeleton entries.
const SPACE_SLACK: u64 = 256 << 10;

/// Whether the cache's file system has no room left for an unprivileged writer.
pub(crate) fn cache_disk_full(root: &std::path::Path) -> bool {
    free_bytes(root) == Some(0)
}

/// Bytes the cache's file system can still give an unprivileged writer.
fn free_bytes(root: &std::path::Path) -> Option<u64> {
    let path = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs buffer of our own.
    (unsafe { libc::statvfs(path.as_ptr(), &mut st) } == 0)
        .then(|| st.f_bavail as u64 * st.f_frsize as u64)
}
