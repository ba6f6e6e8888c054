//! The range conversation of kinds that study files (query, resolve): the extension answers
//! [`Reply::Need`] until it has what it needs, and roam fetches exactly those ranges. The core
//! bounds the conversation: few rounds, few ranges per round, a byte budget, every range inside
//! its file, and progress (a range already supplied may not be asked for again).

use crate::{ExtError, Extension, Fault};
use roam_ext_abi::{Chunk, Files, Range, Reply, Request};

/// Rounds of `Need` before the final answer.
pub const MAX_ROUNDS: usize = 4;
/// Ranges one `Need` may name.
pub const MAX_RANGES: usize = 16;
/// Bytes one conversation may make roam fetch.
pub const MAX_BYTES: u64 = 4 << 20;
/// Bytes a merge may make roam fetch: a text merge reads all three versions whole.
pub const MAX_MERGE_BYTES: u64 = 64 << 20;

/// Fetches `len` bytes at `off` of file number `file`.
pub type Fetch<'a> = dyn FnMut(u8, u64, u32) -> std::io::Result<Vec<u8>> + 'a;

/// Converses with `ext` about files of `sizes` until it gives a final reply, which `accept`
/// turns into a result (or rejects with a reason).
pub(crate) fn converse<T>(
    ext: &Extension,
    sizes: Vec<u64>,
    fetch: &mut Fetch,
    request: impl Fn(&Files) -> Request,
    accept: impl Fn(Reply) -> Result<T, String>,
) -> Result<T, ExtError> {
    converse_within(MAX_BYTES, ext, sizes, fetch, request, accept)
}

/// [`converse`] with a byte budget of its own.
pub(crate) fn converse_within<T>(
    budget: u64,
    ext: &Extension,
    sizes: Vec<u64>,
    fetch: &mut Fetch,
    request: impl Fn(&Files) -> Request,
    accept: impl Fn(Reply) -> Result<T, String>,
) -> Result<T, ExtError> {
    let mut files = Files {
        sizes,
        chunks: Vec::new(),
    };
    let mut fetched = 0u64;
    for _ in 0..=MAX_ROUNDS {
        match ext.call(&request(&files))? {
            Reply::Need(ranges) => {
                fetched +=
                    check_need(&files, &ranges, fetched, budget).map_err(|why| ext.invalid(why))?;
                for r in ranges {
                    let data =
                        fetch(r.file, r.off, r.len).map_err(|e| ext.error(Fault::host(e)))?;
                    files.chunks.push(Chunk {
                        file: r.file,
                        off: r.off,
                        data,
                    });
                }
            }
            reply => return accept(reply).map_err(|why| ext.invalid(why)),
        }
    }
    Err(ext.invalid(format!("still asking for ranges after {MAX_ROUNDS} rounds")))
}

/// Validates one `Need`; returns the bytes it asks for.
fn check_need(files: &Files, ranges: &[Range], fetched: u64, budget: u64) -> Result<u64, String> {
    if ranges.is_empty() || ranges.len() > MAX_RANGES {
        return Err(format!(
            "asked for {} ranges (1 to {MAX_RANGES} allowed)",
            ranges.len()
        ));
    }
    let mut total = 0u64;
    for r in ranges {
        let size = *files.sizes.get(usize::from(r.file)).ok_or(format!(
            "asked for file {} of {}",
            r.file,
            files.sizes.len()
        ))?;
        if r.off
            .checked_add(u64::from(r.len))
            .is_none_or(|end| end > size)
        {
            return Err(format!(
                "asked for {}+{} of a {size}-byte file",
                r.off, r.len
            ));
        }
        if files.has(r) {
            return Err(format!(
                "asked again for {}+{}, already supplied",
                r.off, r.len
            ));
        }
        total += u64::from(r.len);
    }
    if fetched + total > budget {
        return Err(format!("asked for more than {budget} bytes in all"));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_are_bounded_inside_files_and_make_progress() {
        let mut files = Files {
            sizes: vec![100, 50],
            chunks: Vec::new(),
        };
        let r = |file, off, len| Range { file, off, len };
        assert_eq!(
            check_need(&files, &[r(0, 0, 10), r(1, 40, 10)], 0, MAX_BYTES),
            Ok(20)
        );
        assert!(check_need(&files, &[], 0, MAX_BYTES).is_err());
        assert!(
            check_need(&files, &[r(0, 95, 10)], 0, MAX_BYTES).is_err(),
            "past the end"
        );
        assert!(
            check_need(&files, &[r(0, u64::MAX, 10)], 0, MAX_BYTES).is_err(),
            "overflow"
        );
        assert!(
            check_need(&files, &[r(2, 0, 1)], 0, MAX_BYTES).is_err(),
            "no such file"
        );
        assert!(check_need(&files, &vec![r(0, 0, 1); MAX_RANGES + 1], 0, MAX_BYTES).is_err());
        assert!(
            check_need(&files, &[r(0, 0, 10)], MAX_BYTES - 5, MAX_BYTES).is_err(),
            "budget"
        );
        files.chunks.push(Chunk {
            file: 0,
            off: 0,
            data: vec![0; 10],
        });
        assert!(
            check_need(&files, &[r(0, 2, 3)], 0, MAX_BYTES).is_err(),
            "no progress"
        );
    }
}
