//! The query kind (Sprockets' transducer): does this file match? The extension asks for the
//! byte ranges it needs and roam fetches only those (see [`crate::converse`]).

use crate::converse::{converse, Fetch};
use crate::{ExtError, Extension};
use roam_ext_abi::{Reply, Request};

/// Whether the file `name` of `size` bytes matches `args` (e.g. `artist=Radiohead`), reading
/// it through `fetch` (file number is always 0).
pub fn matches(
    ext: &Extension,
    name: &str,
    args: &[(String, String)],
    size: u64,
    fetch: &mut Fetch,
) -> Result<bool, ExtError> {
    let request = |files: &_| Request::Query {
        name: name.to_string(),
        args: args.to_vec(),
        files: Clone::clone(files),
    };
    converse(ext, vec![size], fetch, request, |reply| match reply {
        Reply::Match(m) => Ok(m),
        other => Err(format!("answered {other:?} to a query")),
    })
}
