//! What the kernel still owes roam of its open files, and the releases roam is serving.
//!
//! The kernel answers a program's last `close` before it sends that file's `RELEASE`, and
//! sends it in the background (on both transports): a program can exit while roam has
//! yet to hear of its closes, or is still uploading what a release delivers. Whoever ends
//! a run (`roam run --fuse`) waits here for both before it says what is still pending;
//! roam-vfs decides how long ([`roam_vfs::Closing`]).

use std::time::Instant;

use roam_vfs::Watched;

/// Open files (a handle the kernel has not released) and releases being served.
#[derive(Default)]
pub struct Releases {
    counts: Watched<Counts>,
}

#[derive(Default)]
struct Counts {
    open: usize,
    serving: usize,
}

/// A release being served; dropping it ends it (its upload is done or failed).
pub(crate) struct Serving<'a>(&'a Releases);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.counts.update(|c| c.serving -= 1);
    }
}

impl Releases {
    /// A file handle was given to the kernel.
    pub(crate) fn opened(&self) {
        self.counts.update(|c| c.open += 1);
    }

    /// The kernel released a file handle; it is served until the value is dropped.
    pub(crate) fn releasing(&self) -> Serving<'_> {
        self.counts.update(|c| {
            c.open -= 1;
            c.serving += 1;
        });
        Serving(self)
    }
}

impl roam_vfs::Closing for Releases {
    fn wait_closed(&self, deadline: Instant) -> usize {
        self.counts.wait_until(deadline, |c| c.open == 0);
        self.counts.get(|c| c.open)
    }

    fn wait_closes_done(&self, deadline: Instant) -> bool {
        self.counts.wait_until(deadline, |c| c.serving == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roam_vfs::Closing;
    use std::sync::Arc;
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(50)
    }

    #[test]
    fn an_open_file_is_owed_until_released_and_served_until_its_release_ends() {
        let r = Arc::new(Releases::default());
        r.opened();
        r.opened();
        assert_eq!(r.wait_closed(soon()), 2, "no release yet: times out");
        let first = r.releasing();
        assert_eq!(r.wait_closed(soon()), 1);
        assert!(!r.wait_closes_done(soon()), "a release is being served");
        drop(first);
        assert!(r.wait_closes_done(soon()));
        // A release on another thread wakes the waiter long before its deadline.
        let other = r.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(other.releasing());
        });
        let start = Instant::now();
        assert_eq!(r.wait_closed(Instant::now() + Duration::from_secs(60)), 0);
        assert!(start.elapsed() < Duration::from_secs(30));
        t.join().unwrap();
    }
}
