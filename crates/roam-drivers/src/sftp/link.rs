//! One SSH connection and the SFTP session on it, shared by every thread of a driver: SFTP
//! tags each request with an id, so requests from many threads travel on one session at
//! once. The driver's code is synchronous; [`Link::call`] runs one request on the driver's
//! runtime and says what its failure means for the connection ([`Fault`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use russh_sftp::client::error::Error as SftpError;
use russh_sftp::client::RawSftpSession;
use russh_sftp::protocol::StatusCode;

use super::connect::{Client, Hop};
use crate::Error;

/// Why one SFTP request failed.
#[derive(Debug)]
pub(super) enum Fault {
    /// The server answered with a status (`SSH_FX_*`) and its message; the session is fine.
    Status { code: StatusCode, message: String },
    /// The connection broke (or the session made no sense any more).
    Lost(String),
    /// No answer within the read timeout.
    TimedOut,
    /// Something on our side, already a driver error (e.g. the destination failed).
    Local(Error),
}

impl Fault {
    pub fn is(&self, wanted: StatusCode) -> bool {
        matches!(self, Fault::Status { code, .. } if *code == wanted)
    }
}

pub(super) struct Link {
    pub sftp: Arc<RawSftpSession>,
    /// Whether the server has `posix-rename@openssh.com` (atomic replace).
    pub posix_rename: bool,
    ssh: russh::client::Handle<Client>,
    /// What the connection travels through (jump hosts, a proxy command), kept alive.
    _hops: Vec<Hop>,
    runtime: tokio::runtime::Handle,
    broken: AtomicBool,
}

impl Link {
    pub fn new(
        ssh: russh::client::Handle<Client>,
        sftp: RawSftpSession,
        posix_rename: bool,
        hops: Vec<Hop>,
        runtime: tokio::runtime::Handle,
    ) -> Link {
        Link {
            sftp: Arc::new(sftp),
            posix_rename,
            ssh,
            _hops: hops,
            runtime,
            broken: AtomicBool::new(false),
        }
    }

    /// Runs one request (or a few chained ones) to completion on the driver's runtime.
    pub fn call<T>(&self, request: impl Future<Output = Result<T, SftpError>>) -> Result<T, Fault> {
        let result = self.runtime.block_on(request);
        result.map_err(|e| self.fault(e))
    }

    /// Runs a future that does its own error handling (transfers) on the driver's runtime.
    pub fn block_on<F: Future>(&self, work: F) -> F::Output {
        self.runtime.block_on(work)
    }

    /// The meaning of a session error. Anything but a status from the server leaves the
    /// session unusable: a timeout too, since a server that stopped answering is most
    /// likely gone, and the next operation should not wait on it again.
    pub fn fault(&self, err: SftpError) -> Fault {
        match err {
            SftpError::Status(status) => Fault::Status {
                code: status.status_code,
                message: status.error_message,
            },
            SftpError::Timeout => {
                self.broken.store(true, Ordering::Relaxed);
                Fault::TimedOut
            }
            other => {
                self.broken.store(true, Ordering::Relaxed);
                Fault::Lost(other.to_string())
            }
        }
    }

    /// Whether a request failed in a way that ended this session.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    /// Whether the next operation may use this session: not broken, and the SSH
    /// connection still open (the server may have closed it while we were idle).
    pub fn usable(&self) -> bool {
        !self.is_broken() && !self.ssh.is_closed()
    }
}
