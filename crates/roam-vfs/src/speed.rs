//! The low-speed limit of every transfer roam makes for a reader (a whole file, a chunk, a
//! stream), whatever the driver: a server that sends fewer than [`MIN_BYTES`] bytes in a
//! window of `read_timeout` seconds fails the transfer with ETIMEDOUT (curl's
//! `--speed-limit`/`--speed-time`). The drivers' timeouts are per socket read, so a server
//! that drips a byte just before each would otherwise hold a reader for ever.
//!
//! The limit sits in the `Write` sink the driver streams into: refusing a write aborts the
//! driver's transfer, and the caller takes the reason from [`LowSpeed::stalled`] rather than
//! from the driver, which only sees that its destination failed.

use std::io::Write;
use std::time::{Duration, Instant};

use roam_drivers::ErrorKind;

use crate::Error;

/// The fewest bytes a transfer must bring per window (1 KiB: a server slower than
/// 1 KiB per `read_timeout` seconds, 34 B/s with the default 30 s, is as good as stalled).
pub const MIN_BYTES: u64 = 1024;

/// The low-speed limit of one transfer: told of the bytes as they arrive.
pub(crate) struct Pace {
    window: Duration,
    /// The current window's start (at the first byte: the wait for the first answer is
    /// the drivers' timeouts' business) and the bytes it brought.
    since: Option<Instant>,
    bytes: u64,
    /// What the transfer was, for the message (`http://h/f`).
    what: String,
    /// Set once the limit refused the transfer.
    stalled: Option<Error>,
}

impl Pace {
    pub(crate) fn new(window: Duration, what: String) -> Pace {
        Pace {
            window,
            since: None,
            bytes: 0,
            what,
            stalled: None,
        }
    }

    /// Forgets the current window: for a pause that was roam's, not the server's (a stream
    /// waiting for its reader).
    pub(crate) fn restart(&mut self) {
        self.since = None;
        self.bytes = 0;
    }

    /// The failure the limit caused, if it did.
    pub(crate) fn stalled(&mut self) -> Option<Error> {
        self.stalled.take()
    }

    /// Counts `n` bytes arriving now; refuses when a whole window brought too few.
    pub(crate) fn count(&mut self, n: usize) -> std::io::Result<()> {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        self.bytes += n as u64;
        if now.duration_since(since) < self.window {
            return Ok(());
        }
        if self.bytes >= MIN_BYTES {
            self.since = Some(now);
            self.bytes = 0;
            return Ok(());
        }
        let message = format!(
            "{}: the server sent {} bytes in {} s, less than the {MIN_BYTES} a transfer must bring per read timeout",
            self.what,
            self.bytes,
            now.duration_since(since).as_secs()
        );
        self.stalled = Some(Error::Remote(roam_drivers::Error {
            kind: ErrorKind::TimedOut,
            message: message.clone(),
        }));
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, message))
    }
}

/// A sink that enforces the low-speed limit on what passes through it.
pub(crate) struct LowSpeed<W> {
    inner: W,
    pub(crate) pace: Pace,
}

impl<W> LowSpeed<W> {
    pub(crate) fn new(inner: W, window: Duration, what: String) -> LowSpeed<W> {
        LowSpeed {
            inner,
            pace: Pace::new(window, what),
        }
    }

    pub(crate) fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }
}

impl<W: Write> Write for LowSpeed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pace.count(buf.len())?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drip_is_refused_after_a_window_and_a_steady_flow_is_not() {
        let window = Duration::from_millis(100);
        let mut steady = LowSpeed::new(Vec::new(), window, "x".into());
        for _ in 0..6 {
            steady.write_all(&[0; 600]).unwrap();
            std::thread::sleep(Duration::from_millis(40));
        }
        assert!(steady.pace.stalled().is_none());
        let mut drip = LowSpeed::new(Vec::new(), window, "http://h/f".into());
        let mut refused = None;
        for i in 0..10 {
            if drip.write_all(b"x").is_err() {
                refused = Some(i);
                break;
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        // The first byte after a whole window (the fourth, or earlier if sleeps overran).
        assert!(refused.is_some_and(|i| (2..=3).contains(&i)), "{refused:?}");
        let e = drip.pace.stalled().unwrap();
        assert_eq!(e.errno(), libc::ETIMEDOUT);
        assert!(
            e.to_string().starts_with("http://h/f: the server sent "),
            "{e}"
        );
    }

    #[test]
    fn the_clock_starts_at_the_first_byte_and_restarts_after_a_pause() {
        let window = Duration::from_millis(50);
        let mut w = LowSpeed::new(Vec::new(), window, "x".into());
        std::thread::sleep(window * 2);
        w.write_all(b"tiny file").unwrap();
        std::thread::sleep(window * 2);
        w.pace.restart();
        w.write_all(b"more").unwrap();
        assert!(w.pace.stalled().is_none());
        assert_eq!(w.get_mut().len(), 13);
    }
}
