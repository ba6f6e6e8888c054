//! The read-ahead kind (a black-box graft): when roam fetches a range of a large remote
//! file, it asks the policy which further ranges to fetch ahead, from the program's last
//! reads of that file. The answer is advice, validated whole: at most [`MAX_RANGES`]
//! ranges of [`MAX_BYTES`] in all, each starting inside the file (one running past the end
//! is cut to it); anything else is the extension's fault, and roam then fetches nothing
//! ahead.

use crate::{ExtError, Extension};
use roam_ext_abi::{Range, Reply, Request};

/// Most ranges one answer may ask for.
pub const MAX_RANGES: usize = 16;
/// Most bytes one answer may ask for, after cutting ranges to the file.
pub const MAX_BYTES: u64 = 32 << 20;

/// A read of the file (or a range to fetch): offset and length.
pub type Span = (u64, u64);

/// What the policy asks to fetch ahead of the reads `history` (oldest first) of a file of
/// `size` bytes that roam fetches `chunk` bytes at a time: `(offset, length)` pairs inside
/// the file, none empty.
pub fn advise(
    ext: &Extension,
    args: &[String],
    size: u64,
    chunk: u32,
    history: &[Span],
) -> Result<Vec<Span>, ExtError> {
    let req = Request::Readahead {
        args: args.to_vec(),
        size,
        chunk,
        history: history
            .iter()
            .map(|&(off, len)| Range {
                file: 0,
                off,
                len: u32::try_from(len).unwrap_or(u32::MAX),
            })
            .collect(),
    };
    let ranges = match ext.call(&req)? {
        Reply::Need(ranges) => ranges,
        other => return Err(ext.invalid(format!("answered {other:?} to a read-ahead"))),
    };
    validate(&ranges, size).map_err(|why| ext.invalid(why))
}

/// The ranges cut to the file, or why the answer is refused.
fn validate(ranges: &[Range], size: u64) -> Result<Vec<Span>, String> {
    if ranges.len() > MAX_RANGES {
        return Err(format!(
            "asked for {} ranges ahead (at most {MAX_RANGES})",
            ranges.len()
        ));
    }
    let mut out = Vec::with_capacity(ranges.len());
    let mut total = 0u64;
    for r in ranges {
        if r.file != 0 || r.off >= size {
            return Err(format!(
                "asked for {} bytes at {} of a file of {size}",
                r.len, r.off
            ));
        }
        let len = u64::from(r.len).min(size - r.off);
        total += len;
        if len > 0 {
            out.push((r.off, len));
        }
    }
    if total > MAX_BYTES {
        return Err(format!(
            "asked for {total} bytes ahead (at most {MAX_BYTES})"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(off: u64, len: u32) -> Range {
        Range { file: 0, off, len }
    }

    #[test]
    fn ranges_are_cut_to_the_file_and_bounded() {
        assert_eq!(
            validate(&[r(10, 5), r(95, 10), r(50, 0)], 100),
            Ok(vec![(10, 5), (95, 5)])
        );
        assert!(validate(&[r(100, 1)], 100).is_err(), "past the end");
        assert!(validate(
            &[Range {
                file: 1,
                off: 0,
                len: 1
            }],
            100
        )
        .is_err());
        assert!(validate(&vec![r(0, 1); MAX_RANGES + 1], 100).is_err());
        let huge = [r(0, u32::MAX), r(1 << 32, u32::MAX)];
        assert!(validate(&huge, 1 << 40).is_err(), "over the byte budget");
        assert!(validate(&[r(0, u32::MAX)], 1 << 20).is_ok(), "cut to 1 MiB");
    }
}
