//! roam's safe extensions (Sprockets; Small & Seltzer's grafts).
//!
//! An [`Extension`] is third-party code that can never hurt roam or its data: every invocation
//! is a pure function from request bytes to a bounded reply (a transaction that is always
//! rolled back), and the reply is validated before roam acts on it. The same extension source
//! runs under several technologies behind one [`Runner`](runner) interface:
//!
//! - [`Technology::Wasm`] / [`Technology::Pulley`]: WebAssembly in wasmtime, compiled or
//!   interpreted; a fresh instance per call, fuel deadline, memory limit, no WASI capability.
//! - [`Technology::Fork`]: a fork per call under a seccomp whitelist, result in shared memory.
//! - [`Technology::Worker`]: a persistent sandboxed helper process answering over pipes.
//! - [`Technology::Native`]: an in-process call of a shared library; no isolation at all
//!   (benchmarks and the fault table only).
//!
//! The per-kind front ends ([`query`], [`policy`], [`layer`], [`codec`], [`resolve`],
//! [`archive`], [`digest`], [`source`], [`readahead`])
//! converse with an extension and validate what it answers. This crate is a leaf: it knows
//! nothing of roam's namespace.

mod converse;
mod error;
mod fork;
#[cfg(feature = "wasm")]
mod gate;
mod native;
mod runner;
mod sandbox;
#[cfg(feature = "wasm")]
mod wasm;
mod worker;

pub mod archive;
pub mod codec;
pub mod digest;
pub mod layer;
pub mod policy;
pub mod query;
pub mod readahead;
pub mod resolve;
pub mod source;

pub use converse::{Fetch, MAX_BYTES, MAX_MERGE_BYTES, MAX_RANGES, MAX_ROUNDS};
pub use error::{ExtError, Fault};
pub use roam_ext_abi as abi;

use abi::{Reply, Request};
use runner::Runner;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// How an extension is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Technology {
    /// WebAssembly compiled by Cranelift.
    Wasm,
    /// The same WebAssembly module run by wasmtime's Pulley interpreter.
    Pulley,
    Fork,
    Worker,
    Native,
}

impl Technology {
    /// Every technology this build has, safest first.
    pub fn all() -> Vec<Technology> {
        let wasm = [Technology::Wasm, Technology::Pulley]
            .into_iter()
            .filter(|_| cfg!(feature = "wasm"));
        wasm.chain([Technology::Fork, Technology::Worker, Technology::Native])
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Technology::Wasm => "wasm",
            Technology::Pulley => "pulley",
            Technology::Fork => "fork",
            Technology::Worker => "worker",
            Technology::Native => "native",
        }
    }

    /// Where the artifact of extension `name` is in `dir`: `NAME.wasm` or `libNAME.so`.
    pub fn artifact(self, dir: &Path, name: &str) -> PathBuf {
        match self {
            Technology::Wasm | Technology::Pulley => dir.join(format!("{name}.wasm")),
            _ => dir.join(format!("lib{name}.so")),
        }
    }
}

impl fmt::Display for Technology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Technology {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Technology::all()
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown extension technology `{s}`"))
    }
}

/// What one invocation may use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock deadline (fork, worker) of one call.
    pub timeout: Duration,
    /// Instructions (wasm fuel) of one call.
    pub fuel: u64,
    /// Memory the extension may allocate.
    pub memory: usize,
    /// Largest reply accepted.
    pub max_reply: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(2),
            fuel: 2_000_000_000,
            memory: 256 << 20,
            max_reply: 16 << 20,
        }
    }
}

fn runner_for(path: &Path, tech: Technology, limits: &Limits) -> Result<Box<dyn Runner>, Fault> {
    Ok(match tech {
        #[cfg(feature = "wasm")]
        Technology::Wasm | Technology::Pulley => {
            Box::new(wasm::Wasm::load(path, tech == Technology::Pulley, limits)?)
        }
        #[cfg(not(feature = "wasm"))]
        Technology::Wasm | Technology::Pulley => {
            return Err(Fault::Load(
                "roam was built without the wasm feature".into(),
            ))
        }
        Technology::Fork => Box::new(fork::Fork::load(path)?),
        Technology::Worker => Box::new(worker::Worker::load(path, limits)?),
        Technology::Native => Box::new(native::Native::load(path)?),
    })
}

/// A loaded extension: its name, technology, limits and runner.
pub struct Extension {
    name: String,
    tech: Technology,
    limits: Limits,
    runner: Box<dyn Runner>,
}

impl fmt::Debug for Extension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Extension({} on {})", self.name, self.tech)
    }
}

impl Extension {
    /// Loads extension `name` from `dir` (see [`Technology::artifact`]).
    pub fn load(
        dir: &Path,
        name: &str,
        tech: Technology,
        limits: Limits,
    ) -> Result<Self, ExtError> {
        let path = tech.artifact(dir, name);
        let fail = |fault| ExtError::new(name, tech, fault);
        if !path.is_file() {
            return Err(fail(Fault::Load(format!(
                "{} does not exist",
                path.display()
            ))));
        }
        let runner = runner_for(&path, tech, &limits).map_err(fail)?;
        Ok(Extension {
            name: name.to_string(),
            tech,
            limits,
            runner,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn technology(&self) -> Technology {
        self.tech
    }

    /// One invocation: encode, run under the technology's isolation, bound and decode the
    /// reply. An extension's [`Reply::Fail`] becomes [`Fault::Refused`].
    pub fn call(&self, req: &Request) -> Result<Reply, ExtError> {
        let bytes = self
            .runner
            .call(&req.encode(), &self.limits)
            .map_err(|f| self.error(f))?;
        match Reply::decode(&bytes).map_err(|e| self.error(Fault::Malformed(e)))? {
            Reply::Fail(why) => Err(self.error(Fault::Refused(why))),
            reply => Ok(reply),
        }
    }

    /// A `Compute` call that must answer bytes.
    pub fn compute(&self, op: &str, data: &[u8]) -> Result<Vec<u8>, ExtError> {
        match self.call(&Request::Compute {
            op: op.to_string(),
            data: data.to_vec(),
        })? {
            Reply::Bytes(b) => Ok(b),
            other => Err(self.invalid(format!("answered {other:?} to a computation"))),
        }
    }

    pub(crate) fn error(&self, fault: Fault) -> ExtError {
        ExtError::new(&self.name, self.tech, fault)
    }

    pub(crate) fn invalid(&self, why: impl Into<String>) -> ExtError {
        self.error(Fault::Invalid(why.into()))
    }
}
