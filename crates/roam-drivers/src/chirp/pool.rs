//! The connections of one Chirp mount. Chirp holds state per connection (authentication,
//! open files), so each operation takes one connection for itself; idle ones are kept for
//! the next operation, which spares a TCP handshake and an authentication exchange.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::conn::{is_timeout, Conn, Failure, Reply};
use super::url::Target;
use super::ChirpConfig;
use crate::Result;

/// Idle connections kept per mount (each is a process on the server).
const MAX_IDLE: usize = 4;

/// Whether an operation may be sent twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Reads, and writes of absolute values (chmod, utime): once more on a fresh connection
    /// when a reused one turns out to be closed.
    Idempotent,
    /// Everything that creates, removes or consumes: a lost reply may hide a done deed.
    Never,
}

#[derive(Debug)]
pub(crate) struct Pool {
    target: Target,
    cfg: ChirpConfig,
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    pub(crate) fn new(target: Target, cfg: ChirpConfig) -> Pool {
        Pool {
            target,
            cfg,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// Runs `op` on a connection; failures become errors that start with `context`
    /// (`OP URL`). A connection that broke is dropped; one that answered goes back.
    ///
    /// An idempotent operation is sent once more when it broke a reused connection before
    /// any reply: the server had closed it (idle clients are dropped after a minute), and
    /// nothing was done or delivered yet. A timeout is not retried: it would double the wait.
    pub(crate) fn run<T>(
        &self,
        context: &str,
        retry: Retry,
        mut op: impl FnMut(&mut Conn) -> Reply<T>,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            let (mut conn, reused) = self.checkout().map_err(|f| f.into_error(context))?;
            let replies = conn.replies();
            match op(&mut conn) {
                Ok(value) => {
                    self.checkin(conn);
                    return Ok(value);
                }
                Err(Failure::Broken(e)) => {
                    let stale = reused && conn.replies() == replies && !is_timeout(&e);
                    if retry == Retry::Idempotent && stale && !retried {
                        tracing::debug!("{context}: {e}; retrying on a fresh connection");
                        retried = true;
                        continue;
                    }
                    return Err(Failure::Broken(e).into_error(context));
                }
                Err(other) => {
                    self.checkin(conn);
                    return Err(other.into_error(context));
                }
            }
        }
    }

    /// An idle connection that still works, or a new one; and whether it was reused.
    fn checkout(&self) -> Reply<(Conn, bool)> {
        loop {
            // Taken out first, so that the lock is not held while the socket is probed.
            let Some(conn) = self.lock().pop() else {
                return Ok((Conn::open(&self.target, &self.cfg)?, false));
            };
            if conn.reusable() {
                return Ok((conn, true));
            }
        }
    }

    fn checkin(&self, mut conn: Conn) {
        conn.touch();
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// The idle list; a panic elsewhere cannot leave it inconsistent, so poison is ignored.
    fn lock(&self) -> MutexGuard<'_, Vec<Conn>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
