//! Errors of extensions: every one names the extension and its technology, and says what it did.

use crate::Technology;
use roam_ext_abi::DecodeError;
use std::time::Duration;
use thiserror::Error;

/// A failed invocation (or load) of an extension.
#[derive(Debug, Error)]
#[error("extension `{ext}` ({tech}): {fault}")]
pub struct ExtError {
    pub ext: String,
    pub tech: Technology,
    pub fault: Fault,
}

impl ExtError {
    pub(crate) fn new(ext: &str, tech: Technology, fault: Fault) -> Self {
        ExtError {
            ext: ext.to_string(),
            tech,
            fault,
        }
    }
}

/// What went wrong, from the host's point of view.
#[derive(Debug, Error)]
pub enum Fault {
    #[error("cannot be loaded: {0}")]
    Load(String),
    #[error("trapped: {0}")]
    Trap(String),
    #[error("crashed with signal {0}")]
    Crashed(i32),
    #[error("was killed for a system call outside its whitelist")]
    Forbidden,
    #[error("exited with status {0} without answering")]
    Exited(i32),
    #[error("ran past its deadline of {0:?}")]
    Timeout(Duration),
    #[error("ran out of fuel (instruction budget)")]
    OutOfFuel,
    #[error("returned {len} bytes, over the limit of {max}")]
    Oversized { len: u64, max: usize },
    #[error("returned a malformed reply: {0}")]
    Malformed(DecodeError),
    #[error("declined: {0}")]
    Refused(String),
    #[error("returned an invalid result: {0}")]
    Invalid(String),
    #[error("host error while running it: {0}")]
    Host(String),
}

impl Fault {
    /// The fault of a child process that ended with wait status `status` before answering.
    pub(crate) fn of_status(status: i32) -> Fault {
        if libc::WIFSIGNALED(status) {
            match libc::WTERMSIG(status) {
                libc::SIGSYS => Fault::Forbidden,
                sig => Fault::Crashed(sig),
            }
        } else {
            Fault::Exited(libc::WEXITSTATUS(status))
        }
    }

    pub(crate) fn host(e: impl std::fmt::Display) -> Fault {
        Fault::Host(e.to_string())
    }
}
