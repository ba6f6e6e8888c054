//! A read-ahead policy (a black-box graft, `[cache] readahead = "NAME"`): when a read of a
//! large remote file (a partial copy, `partial.rs`) has to fetch, the policy extension is
//! asked which further ranges to fetch ahead, from the program's last reads of that file;
//! roam fetches them in the background, and later reads inside them wait for those
//! transfers instead of starting their own.
//!
//! The answer is advice: validated by `roam_ext::readahead` (ranges inside the file, at most
//! 16 of 32 MiB in all). A policy that fails, lies or runs past its deadline
//! ([`DEADLINE`], much shorter than other kinds': it stands in a read's way) costs that one
//! read the deadline at most and is never asked again, with one warning naming it: reads go
//! on as without a policy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::Vfs;

/// The wall-clock deadline of one decision (a stride is found in microseconds).
pub const DEADLINE: Duration = Duration::from_millis(250);
/// Reads of a file the policy is shown, oldest first.
pub(crate) const HISTORY: usize = 8;

/// The extension and its arguments (load it with [`DEADLINE`] as its limits' timeout).
pub struct ReadAheadPolicy {
    pub ext: roam_ext::Extension,
    pub args: Vec<String>,
}

pub(crate) struct ReadAhead {
    policy: ReadAheadPolicy,
    /// Set at its first failure: from then on it is not asked.
    failed: AtomicBool,
}

impl Vfs {
    /// Asks `policy` what to fetch ahead whenever a read of a large file has to fetch.
    pub fn set_readahead_policy(&mut self, policy: ReadAheadPolicy) {
        self.readahead = Some(ReadAhead {
            policy,
            failed: AtomicBool::new(false),
        });
    }

    /// The ranges `(offset, length)` to fetch ahead of the reads `history` of `virt`, a
    /// file of `size` bytes fetched `chunk` bytes at a time: none without a policy, or
    /// when it failed (now or before).
    pub(crate) fn advise_readahead(
        &self,
        virt: &str,
        size: u64,
        chunk: u64,
        history: &[(u64, u64)],
    ) -> Vec<(u64, u64)> {
        let Some(ra) = &self.readahead else {
            return Vec::new();
        };
        if ra.failed.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let p = &ra.policy;
        let chunk = u32::try_from(chunk).unwrap_or(u32::MAX);
        roam_ext::readahead::advise(&p.ext, &p.args, size, chunk, history).unwrap_or_else(|e| {
            if !ra.failed.swap(true, Ordering::Relaxed) {
                tracing::warn!("{virt}: the read-ahead policy is ignored from now on: {e}");
            }
            Vec::new()
        })
    }
}
