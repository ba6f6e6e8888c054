//! The `stride` read-ahead policy (a black-box graft, `[cache] readahead = "stride"`): when a
//! program's last reads of a file were evenly spaced (a constant stride, e.g. 64 KiB every
//! 4 MiB: a column of records, a sampled scan), it asks roam to fetch the next `ahead=K`
//! reads of that pattern (default 4) before the program gets there; otherwise nothing.

use roam_ext_abi::{Range, Reply, Request};

roam_ext_abi::export!(handle);

/// Reads that must share one stride before it is trusted.
const SEEN: usize = 3;
const DEFAULT_AHEAD: u64 = 4;
/// Most reads asked for ahead (roam's own bound is 16 ranges).
const MAX_AHEAD: u64 = 16;

fn handle(req: Request) -> Reply {
    match req {
        Request::Readahead {
            args,
            size,
            history,
            ..
        } => Reply::Need(next(&history, size, ahead(&args))),
        _ => Reply::Fail("stride only advises read-ahead".into()),
    }
}

/// `ahead=K` among `args`, else the default.
fn ahead(args: &[String]) -> u64 {
    args.iter()
        .find_map(|a| a.strip_prefix("ahead=")?.parse().ok())
        .unwrap_or(DEFAULT_AHEAD)
        .min(MAX_AHEAD)
}

/// The next `k` reads of a constant, forward stride longer than the reads, inside the file.
fn next(history: &[Range], size: u64, k: u64) -> Vec<Range> {
    let Some(last) = history.len().checked_sub(SEEN).map(|i| &history[i..]) else {
        return Vec::new();
    };
    let stride = last[1].off.wrapping_sub(last[0].off);
    let regular = last
        .windows(2)
        .all(|w| w[1].off > w[0].off && w[1].off - w[0].off == stride && w[1].len == w[0].len);
    let end = &last[SEEN - 1];
    if !regular || stride <= u64::from(end.len) {
        return Vec::new(); // irregular, backwards, or sequential (roam streams those)
    }
    (1..=k)
        .map(|j| end.off + j * stride)
        .take_while(|&off| off < size)
        .map(|off| Range {
            file: 0,
            off,
            len: end.len,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(offs: &[u64], len: u32) -> Vec<Range> {
        offs.iter()
            .map(|&off| Range { file: 0, off, len })
            .collect()
    }

    #[test]
    fn a_constant_stride_is_followed_to_the_end_of_the_file() {
        const M: u64 = 1 << 20;
        let got = next(&reads(&[0, 4 * M, 8 * M], 65536), 22 * M, 4);
        let offs: Vec<u64> = got.iter().map(|r| r.off).collect();
        assert_eq!(offs, [12 * M, 16 * M, 20 * M]);
        assert!(got.iter().all(|r| r.len == 65536));
    }

    #[test]
    fn irregular_short_or_sequential_reads_ask_nothing() {
        assert!(next(&reads(&[0, 4096], 100), 1 << 30, 4).is_empty());
        assert!(next(&reads(&[0, 4096, 9000], 100), 1 << 30, 4).is_empty());
        assert!(next(&reads(&[0, 4096, 8192], 4096), 1 << 30, 4).is_empty());
        assert!(next(&reads(&[8192, 4096, 0], 100), 1 << 30, 4).is_empty());
    }

    #[test]
    fn ahead_is_read_from_args_and_bounded() {
        assert_eq!(ahead(&["ahead=8".into()]), 8);
        assert_eq!(ahead(&["ahead=1000".into()]), MAX_AHEAD);
        assert_eq!(ahead(&[]), DEFAULT_AHEAD);
    }
}
