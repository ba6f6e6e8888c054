//! Deliveries that wait (Ufo's T_write > 0, and retries). A close may leave its upload for
//! later: with T_write > 0 repeated saves of a file within T_write coalesce into one upload;
//! a failed upload is retried with exponential backoff while roam runs (it stays journaled
//! meanwhile, and whatever is still pending when the run ends is tried once more, then left
//! for `roam sync`).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{close, Kernel};

/// Longest wait between two attempts of a failing upload.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Uploads due at some time: virtual name → (when, failed attempts so far).
#[derive(Default)]
pub struct Later {
    due: Mutex<HashMap<String, (Instant, u32)>>,
    wake: Condvar,
}

impl Later {
    /// Delivers `virt` in `after` (a later request for the same file replaces the earlier).
    pub fn schedule(&self, virt: &str, after: Duration, failures: u32) {
        self.due
            .lock()
            .unwrap()
            .insert(virt.to_owned(), (Instant::now() + after, failures));
        self.wake.notify_all();
    }

    /// Forgets `virt` (delivered by other means).
    pub fn cancel(&self, virt: &str) {
        self.due.lock().unwrap().remove(virt);
    }

    /// Whether `virt` waits for a delivery here.
    pub fn is_scheduled(&self, virt: &str) -> bool {
        self.due.lock().unwrap().contains_key(virt)
    }

    /// Waits for the next due delivery and takes it.
    fn next_due(&self) -> (String, u32) {
        let mut due = self.due.lock().unwrap();
        loop {
            let now = Instant::now();
            let next = due
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(v, (at, n))| (v.clone(), *at, *n));
            match next {
                Some((virt, at, n)) if at <= now => {
                    due.remove(&virt);
                    return (virt, n);
                }
                Some((_, at, _)) => due = self.wake.wait_timeout(due, at - now).unwrap().0,
                None => due = self.wake.wait(due).unwrap(),
            }
        }
    }
}

/// Wait before attempt `failures + 1`: 1 s, 2 s, 4 s ... at most a minute.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(6)).min(MAX_BACKOFF)
}

impl Kernel {
    /// Runs forever on its own thread: delivers what is due.
    pub fn deliver_later(&self) {
        loop {
            let (virt, failures) = self.later.next_due();
            if !close::writers(self, &virt, None).is_empty() {
                // Still open for writing: its last close schedules it again.
                continue;
            }
            let still_written = || !close::writers(self, &virt, None).is_empty();
            match close::flush_and_tell(self, &virt, &still_written) {
                Ok(()) => {}
                Err(e) if e.is_kept() => self.report.once(format!("kept {virt}"), e.to_string()),
                Err(e) => {
                    self.report.once(
                    format!("retry {virt}"),
                        format!("upload of {virt} failed: {e}; roam keeps it journaled and tries again (then `roam sync`)"),
                    );
                    self.later.schedule(&virt, backoff(failures), failures + 1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        let waits: Vec<u64> = (0..9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn the_earliest_due_delivery_comes_first_and_later_requests_replace_earlier() {
        let l = Later::default();
        l.schedule("/b", Duration::from_millis(30), 0);
        l.schedule("/a", Duration::from_millis(10), 0);
        l.schedule("/a", Duration::from_millis(5), 2);
        assert_eq!(l.next_due(), ("/a".to_owned(), 2));
        assert_eq!(l.next_due(), ("/b".to_owned(), 0));
    }
}
