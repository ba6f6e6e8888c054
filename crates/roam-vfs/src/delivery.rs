//! Deliveries: when a change whose last writer closed it goes to the server, for every
//! frontend. With Ufo's T_write at 0, at that close (its error is the close's); with a
//! positive T_write, later, so that saves within T_write of each other coalesce into one
//! upload. A failed
//! upload is retried with exponential backoff while roam runs (it stays journaled
//! meanwhile); what is still pending when roam ends is tried once more, then left for
//! `roam sync`. Frontends say when a last writer closes and whether a program still writes
//! a name; the timing and the retries are here, once. So is how long the end of a run waits
//! for the closes and uploads its program left under way ([`Vfs::settle_closes`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::{Flushed, Result, Vfs, Watched};

/// Longest wait between two attempts of a failing upload.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long the end of a run waits for the kernel to release the files of its program:
/// it sends the releases of an exited program at once; a file open longer is held by a
/// process the program left running.
const CLOSES_OWED: Duration = Duration::from_secs(5);

/// Uploads due at some time: virtual name → (when, failed attempts so far).
#[derive(Default)]
pub(crate) struct Later {
    due: Mutex<HashMap<String, (Instant, u32)>>,
    wake: Condvar,
    /// Due deliveries passed over because a program holds the file open for writing
    /// (its next close schedules it again): a drain does not wait for them.
    held: Mutex<HashSet<String>>,
    /// Deliveries taken by [`Vfs::deliver_due`] and not finished yet.
    running: Watched<usize>,
}

/// A delivery taken from the schedule; dropping it ends it.
struct Running<'a>(&'a Later);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.update(|n| *n -= 1);
    }
}

impl Later {
    /// Delivers `virt` in `after` (a later request for the same file replaces the earlier).
    fn schedule(&self, virt: &str, after: Duration, failures: u32) {
        self.held.lock().unwrap().remove(virt);
        self.due
            .lock()
            .unwrap()
            .insert(virt.to_owned(), (Instant::now() + after, failures));
        self.wake.notify_all();
    }

    /// Makes `virt` due now, keeping its count of failed attempts (a drain for a
    /// suspension cannot wait for a backoff).
    pub(crate) fn hurry(&self, virt: &str) {
        let failures = self.due.lock().unwrap().get(virt).map_or(0, |d| d.1);
        self.schedule(virt, Duration::ZERO, failures);
    }

    /// Whether the delivery of `virt` was passed over for a program writing it.
    pub(crate) fn is_held(&self, virt: &str) -> bool {
        self.held.lock().unwrap().contains(virt)
    }

    /// Waits for the next due delivery and takes it: it runs until the third value is
    /// dropped (never out of the schedule and not running in between).
    fn next_due(&self) -> (String, u32, Running<'_>) {
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
                    self.running.update(|n| *n += 1);
                    return (virt, n, Running(self));
                }
                Some((_, at, _)) => due = self.wake.wait_timeout(due, at - now).unwrap().0,
                None => due = self.wake.wait(due).unwrap(),
            }
        }
    }

    /// Waits until no delivery runs, or `deadline`; whether none does.
    fn wait_finished(&self, deadline: Instant) -> bool {
        self.running.wait_until(deadline, |n| *n == 0)
    }
}

/// What a frontend still owes of a program that ended: the closes the kernel has yet to
/// pass on (FUSE sends `RELEASE` in the background), and the uploads those closes make.
pub trait Closing {
    /// Waits until the program's files are all closed, or `deadline`; how many are open.
    fn wait_closed(&self, deadline: Instant) -> usize;
    /// Waits until the closes under way (and their uploads) are done, or `deadline`;
    /// whether they are.
    fn wait_closes_done(&self, deadline: Instant) -> bool;
}

/// What [`Vfs::settle_closes`] found still under way when it stopped waiting.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Files still open (by processes the program left running).
    pub open: usize,
    /// Closes, or uploads, still under way after the limit.
    pub busy: bool,
}

/// Wait before attempt `failures + 1`: 1 s, 2 s, 4 s ... at most a minute.
fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(6)).min(MAX_BACKOFF)
}

impl Vfs {
    /// Ufo's T_write: how long after the last close a change is uploaded (0: in the close).
    pub fn t_write(&self) -> Duration {
        self.t_write
    }

    /// The last writer of `virt` (sealed by the frontend) closed it: uploads it now, its
    /// error the close's (a failure is retried in the background), or with T_write > 0
    /// leaves it for [`Vfs::deliver_due`] ([`Flushed::Later`]).
    pub fn last_close(&self, virt: &str, still_written: &dyn Fn() -> bool) -> Result<Flushed> {
        if !self.t_write.is_zero() {
            self.later.schedule(virt, self.t_write, 0);
            return Ok(Flushed::Later);
        }
        self.deliver_now(virt, still_written)
    }

    /// Uploads `virt` now (a close, an fsync, the end of a run); a failure is retried in
    /// the background while roam runs.
    pub fn deliver_now(&self, virt: &str, still_written: &dyn Fn() -> bool) -> Result<Flushed> {
        self.cancel_delivery(virt);
        let done = self.flush(virt, still_written);
        if let Err(e) = &done {
            if !e.is_kept() {
                self.later.schedule(virt, backoff(0), 1);
            }
        }
        done
    }

    /// Forgets a delivery waiting for `virt` (delivered by other means).
    pub fn cancel_delivery(&self, virt: &str) {
        self.later.due.lock().unwrap().remove(virt);
    }

    /// Whether a delivery of `virt` waits for its time.
    pub fn delivery_waits(&self, virt: &str) -> bool {
        self.later.due.lock().unwrap().contains_key(virt)
    }

    /// The end of a run: waits until `frontend` has passed on every close of the program
    /// (at most [`CLOSES_OWED`]: a file open longer is a process's the program left
    /// running) and the closes, and the deliveries running in the background, have
    /// uploaded what they deliver (until `limit` from now). Then [`Vfs::deliver_pending`]
    /// and the changes still dirty say what stays for `roam sync`.
    pub fn settle_closes(&self, frontend: &dyn Closing, limit: Duration) -> Settled {
        let start = Instant::now();
        let open = frontend.wait_closed(start + CLOSES_OWED.min(limit));
        let done = frontend.wait_closes_done(start + limit);
        Settled {
            open,
            busy: !(done && self.later.wait_finished(start + limit)),
        }
    }

    /// roam is ending: every change still waiting (for T_write, or a retry) is tried once
    /// more now; `tell` reports what stays pending (for `roam sync`).
    pub fn deliver_pending(&self, tell: &dyn Fn(String, String)) {
        let waiting: Vec<String> = self.later.due.lock().unwrap().keys().cloned().collect();
        for virt in waiting {
            self.cancel_delivery(&virt);
            match self.flush(&virt, &|| false) {
                Ok(Flushed::Conflict(beside)) => tell(format!("conflict {virt}"), conflict(&virt, &beside)),
                Ok(_) => {}
                Err(e) => tell(format!("pending {virt}"), format!("upload of {virt} failed: {e}; the change is kept in roam's journal (run `roam sync`)")),
            }
        }
    }

    /// Runs for ever on a thread of its own: delivers what is due. `writing(virt)` says
    /// whether a program still holds it open for writing (its last close schedules it
    /// again); `tell(key, message)` reports an outcome the user must hear of, once per key.
    pub fn deliver_due(&self, writing: &dyn Fn(&str) -> bool, tell: &dyn Fn(String, String)) {
        loop {
            let (virt, failures, _running) = self.later.next_due();
            if writing(&virt) {
                self.later.held.lock().unwrap().insert(virt);
                continue;
            }
            if failures > 0 {
                tracing::debug!("{virt}: upload attempt {} after a failure", failures + 1);
            }
            match self.flush(&virt, &|| writing(&virt)) {
                Ok(Flushed::Conflict(beside)) => {
                    tell(format!("conflict {virt}"), conflict(&virt, &beside))
                }
                Ok(_) => {}
                Err(e) if e.is_kept() => tell(format!("kept {virt}"), e.to_string()),
                Err(e) => {
                    tell(
                        format!("retry {virt}"),
                        format!("upload of {virt} failed: {e}; roam keeps it journaled and tries again (then `roam sync`)"),
                    );
                    self.later.schedule(&virt, backoff(failures), failures + 1);
                }
            }
        }
    }
}

/// What the user is told of a conflict: which version went where.
pub fn conflict(virt: &str, beside: &str) -> String {
    format!("{virt} changed on the server while it was being written here: the server's version is kept, and this version was saved as {beside}")
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
        let taken = |(virt, n, _): (String, u32, Running)| (virt, n);
        assert_eq!(taken(l.next_due()), ("/a".to_owned(), 2));
        assert_eq!(taken(l.next_due()), ("/b".to_owned(), 0));
    }

    #[test]
    fn a_delivery_taken_from_the_schedule_runs_until_it_is_dropped() {
        let l = Later::default();
        let soon = || Instant::now() + Duration::from_millis(50);
        assert!(l.wait_finished(soon()), "nothing runs");
        l.schedule("/a", Duration::ZERO, 0);
        let (_, _, running) = l.next_due();
        assert!(!l.wait_finished(soon()), "taken, not finished");
        drop(running);
        assert!(l.wait_finished(soon()));
    }
}
