//! Suspension (puffs' suspend): a gate every change passes, so that a consistent
//! point-in-time copy can be taken. While the namespace is suspended, new changes (an open
//! for writing, a write, a truncation, a name operation) wait at the gate — they block,
//! they never fail — and reads go on. Suspending first waits for the changes already past
//! the gate, then drains: every whole version (a change its last writer closed) is handed
//! to the background delivery at once and awaited. Both waits are bounded: a change or an
//! upload that does not finish in time (a server down) fails the suspension, which is then
//! undone, so nothing hangs.
//!
//! A frontend whose programs change files without asking roam (under `roam run`, a
//! `write` through a descriptor already open on a copy goes straight to the cache) holds
//! them itself while suspended: a [`Holder`], asked once the gate is closed.
//!
//! A snapshot into a directory of the same remote is made by its server where the protocol
//! copies (S3 `CopyObject`, WebDAV `COPY`): [`Vfs::copy_on_server`].

use std::cell::Cell;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use roam_drivers::Driver;

use crate::path::join;
use crate::{ChangeState, Error, Kind, Node, Result, Vfs};

/// How often the drain looks again at what is left to deliver.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// The gate: whether the namespace is suspended, and how many changes are past it.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    suspended: bool,
    active: usize,
}

thread_local! {
    /// Changes this thread is inside: one that calls another passes again without
    /// waiting (waiting there would hold up the suspension it waits for).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// What a frontend does to hold the changes the gate cannot see (writes to copies already
/// open), for as long as the namespace is suspended.
pub trait Holder: Send + Sync {
    /// Holds every program that could change a file, within `limit`; `Err` says why not
    /// (nothing is then held).
    fn hold(&self, limit: Duration) -> std::result::Result<(), String>;
    /// Lets them go on.
    fn release(&self);
}

/// A change past the gate; dropping it lets a waiting suspension go on.
pub struct Change<'a> {
    gate: &'a Gate,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        let mut st = self.gate.state.lock().unwrap();
        st.active -= 1;
        if st.active == 0 {
            self.gate.changed.notify_all();
        }
    }
}

impl Gate {
    /// Waits while suspended (unless this thread is inside a change already), then counts
    /// the caller in.
    fn enter(&self) -> Change<'_> {
        let mut st = self.state.lock().unwrap();
        if DEPTH.with(Cell::get) == 0 {
            while st.suspended {
                st = self.changed.wait(st).unwrap();
            }
        }
        self.count_in(st)
    }

    /// Counts the caller in unless it would have to wait.
    fn try_enter(&self) -> Option<Change<'_>> {
        let st = self.state.lock().unwrap();
        if st.suspended && DEPTH.with(Cell::get) == 0 {
            return None;
        }
        Some(self.count_in(st))
    }

    fn count_in(&self, mut st: std::sync::MutexGuard<'_, GateState>) -> Change<'_> {
        st.active += 1;
        DEPTH.with(|d| d.set(d.get() + 1));
        Change { gate: self }
    }

    /// Closes the gate and waits until no change is past it; `false` (and the gate open
    /// again) when that takes longer than `limit`, or when it was closed already.
    fn close(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut st = self.state.lock().unwrap();
        if st.suspended {
            return false;
        }
        st.suspended = true;
        while st.active > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.suspended = false;
                self.changed.notify_all();
                return false;
            }
            st = self.changed.wait_timeout(st, left).unwrap().0;
        }
        true
    }

    /// Opens the gate: the changes waiting go on. `false` if it was not closed.
    fn open(&self) -> bool {
        let mut st = self.state.lock().unwrap();
        let was = std::mem::replace(&mut st.suspended, false);
        self.changed.notify_all();
        was
    }

    fn is_closed(&self) -> bool {
        self.state.lock().unwrap().suspended
    }
}

impl Vfs {
    /// Passes the gate before a change of the namespace (waits while it is suspended);
    /// the change is over when the returned value is dropped. Frontends call it around the
    /// changes the core does not see itself (a write to an open copy).
    pub fn change(&self) -> Change<'_> {
        self.gate.enter()
    }

    /// [`Vfs::change`] if it need not wait: a frontend thread that must not block (one
    /// reading the kernel's requests) hands the change to a worker on `None`.
    pub fn try_change(&self) -> Option<Change<'_>> {
        self.gate.try_enter()
    }

    /// Suspends changes and delivers every whole version pending, each step within
    /// `limit`. On success the namespace stays suspended until [`Vfs::resume`]; on failure
    /// (a change that does not end, an upload that cannot be made in time) it is resumed
    /// and the error says what was left.
    pub fn suspend(&self, limit: Duration) -> Result<()> {
        if self.gate.is_closed() {
            return Err(Error::Posix {
                errno: libc::EBUSY,
                message: "suspended already (roam resume)".into(),
            });
        }
        if !self.gate.close(limit) {
            return Err(timed_out(format!(
                "changes under way did not end within {limit:?}"
            )));
        }
        let holder = self.holder.lock().unwrap().clone();
        if let Some(holder) = &holder {
            if let Err(why) = holder.hold(limit) {
                self.gate.open();
                return Err(timed_out(format!("programs could not be held: {why}")));
            }
        }
        let drained = self.drain(limit);
        if drained.is_err() {
            self.release_held();
            self.gate.open();
        }
        drained
    }

    /// Lets the changes waiting at the gate go on; `false` if nothing was suspended.
    pub fn resume(&self) -> bool {
        if self.gate.is_closed() {
            self.release_held();
        }
        self.gate.open()
    }

    /// Names the frontend's [`Holder`], asked at every suspension.
    pub fn set_holder(&self, holder: std::sync::Arc<dyn Holder>) {
        *self.holder.lock().unwrap() = Some(holder);
    }

    fn release_held(&self) {
        if let Some(holder) = self.holder.lock().unwrap().clone() {
            holder.release();
        }
    }

    /// Whether changes wait at the gate.
    pub fn suspended(&self) -> bool {
        self.gate.is_closed()
    }

    /// Hands every sealed change to the background delivery now and waits until none is
    /// left, at most `limit`. Changes still open are not whole versions and stay, and so
    /// do sealed ones a program still holds open for writing (a shell's `>>` closes a dup
    /// of the fd before it writes: that writer now waits at the gate); kept ones wait for
    /// the user's word (`roam sync`).
    fn drain(&self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut hurried = false;
        let mut seen = std::collections::HashSet::<String>::new();
        loop {
            let mut sealed = self.sealed_changes();
            if hurried {
                sealed.retain(|v| !self.later.is_held(v));
            }
            if sealed.is_empty() {
                // A delivery leaves the journal before it is done publishing the new
                // version: its lock says when it is.
                for virt in seen {
                    drop(self.fetch_lock(&virt).lock().unwrap());
                }
                return Ok(());
            }
            seen.extend(sealed.iter().cloned());
            if Instant::now() >= deadline {
                return Err(timed_out(format!(
                    "not uploaded within {limit:?} (is the server reachable?): {}",
                    sealed.join(", ")
                )));
            }
            for virt in &sealed {
                // Once with no wait for every change (retries too), later again for
                // those the delivery has forgotten.
                if !hurried || !self.delivery_waits(virt) {
                    self.later.hurry(virt);
                }
            }
            hurried = true;
            std::thread::sleep(DRAIN_POLL);
        }
    }

    /// The journaled changes whose last writer closed them: due for upload.
    fn sealed_changes(&self) -> Vec<String> {
        self.dirty()
            .into_iter()
            .filter(|v| {
                self.work
                    .journal(v)
                    .is_some_and(|j| j.state == ChangeState::Sealed)
            })
            .collect()
    }
}

/// What a copy made on the server holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: u64,
    pub bytes: u64,
}

impl Vfs {
    /// Copies the tree `from` into `to` (a new directory) on their server, whose files
    /// never cross the network: both must be names of one remote whose backend copies
    /// ([`roam_drivers::Capabilities::server_copy`]), else `EXDEV` or `ENOTSUP`.
    /// Directories and files are copied, symlinks and special files passed over. What is
    /// copied is what the server holds: made while suspended, after the drain, every whole
    /// version (a file still open for writing as of its last close).
    pub fn copy_on_server(&self, from: &str, to: &str) -> Result<Copied> {
        let (a, b) = match (self.lookup(from)?, self.lookup(to)?) {
            (Some(Node::Remote(a)), Some(Node::Remote(b)))
                if std::sync::Arc::ptr_eq(&a.driver, &b.driver) =>
            {
                (a, b)
            }
            _ => {
                let why =
                    format!("{to}: not on the remote of {from} (copies on a server stay on it)");
                return Err(Error::posix(libc::EXDEV, why));
            }
        };
        if !a.driver.capabilities().server_copy {
            let why = format!(
                "{}: its server cannot copy files (a local destination can be had)",
                a.describe()
            );
            return Err(Error::posix(libc::ENOTSUP, why));
        }
        if b.path == a.path
            || b.path
                .starts_with(&format!("{}/", a.path.trim_end_matches('/')))
        {
            return Err(Error::posix(
                libc::EINVAL,
                format!("{to}: inside the tree copied"),
            ));
        }
        let mut n = Copied::default();
        let done = copy_tree(&*a.driver, &a.path, &b.path, &mut n);
        // Made behind roam's back: what it believed of the name is asked again.
        self.invalidate(&b.virt);
        done.map(|()| n)
    }
}

/// Copies the directory `from` into the new directory `to`, on `d`'s server.
fn copy_tree(d: &dyn Driver, from: &str, to: &str, n: &mut Copied) -> Result<()> {
    let mode = d.stat(from)?.mode.unwrap_or(0o755);
    d.mkdir(to, mode)?;
    let listing = d.list(from)?;
    if !listing.complete {
        let why = format!("{}: the server listed it only in part", d.describe(from));
        return Err(Error::posix(libc::EIO, why));
    }
    for entry in listing.entries {
        let (f, t) = (join(from, &entry.name), join(to, &entry.name));
        match entry.meta.kind {
            Kind::Dir => copy_tree(d, &f, &t, n)?,
            Kind::File => {
                d.copy(&f, &t)?;
                n.files += 1;
                n.bytes += entry.meta.size.unwrap_or(0);
            }
            _ => {}
        }
    }
    Ok(())
}

fn timed_out(why: String) -> Error {
    Error::Posix {
        errno: libc::ETIMEDOUT,
        message: format!("cannot suspend: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_change_waits_while_closed_and_goes_on_when_opened() {
        let gate = Arc::new(Gate::default());
        assert!(gate.close(Duration::from_secs(1)));
        let g = gate.clone();
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            drop(g.enter());
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !waiter.is_finished(),
            "the change went through a closed gate"
        );
        assert!(gate.open());
        assert!(waiter.join().unwrap() >= Duration::from_millis(150));
    }

    #[test]
    fn closing_waits_for_changes_under_way_and_gives_up_in_time() {
        let gate = Arc::new(Gate::default());
        let inside = gate.enter();
        let started = Instant::now();
        assert!(
            !gate.close(Duration::from_millis(200)),
            "closed over a change"
        );
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert!(!gate.is_closed(), "a failed close leaves the gate open");
        drop(inside);
        assert!(gate.close(Duration::from_millis(200)));
        assert!(!gate.close(Duration::from_millis(10)), "closed twice");
    }

    #[test]
    fn a_change_inside_a_change_passes_a_closing_gate() {
        let gate = Arc::new(Gate::default());
        let outer = gate.enter();
        let g = gate.clone();
        let closer = std::thread::spawn(move || g.close(Duration::from_secs(5)));
        while !gate.is_closed() {
            std::thread::yield_now();
        }
        drop(gate.enter()); // would wait for ever without the depth count
        drop(outer);
        assert!(closer.join().unwrap());
    }
}
