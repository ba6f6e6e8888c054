//! The policy kind (a prioritization graft): the cache offers eviction candidates and the
//! extension picks one, which must be one of them.

use crate::{ExtError, Extension};
use roam_ext_abi::{Candidate, Reply, Request};

/// The index in `candidates` of the victim the extension picks.
pub fn choose_victim(
    ext: &Extension,
    args: &[String],
    candidates: &[Candidate],
) -> Result<usize, ExtError> {
    let req = Request::Policy {
        args: args.to_vec(),
        candidates: candidates.to_vec(),
    };
    match ext.call(&req)? {
        Reply::Victim(i) if (i as usize) < candidates.len() => Ok(i as usize),
        Reply::Victim(i) => {
            Err(ext.invalid(format!("picked candidate {i} of {}", candidates.len())))
        }
        other => Err(ext.invalid(format!("answered {other:?} to an eviction"))),
    }
}
