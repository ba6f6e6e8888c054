//! The `merge3` resolver extension: a line-based three-way merge of text files, as `diff3 -m`
//! and bzr's merge3 do it. Lines that base, local and remote all share (found by Myers' diff of
//! base against each side) split the files into regions; in each region a change made on one
//! side only is taken, the same change made on both sides is taken once, and different
//! changes to the same region are a conflict, which the extension declines (roam then keeps
//! both versions). The answer is a patch of the remote version: every region taken from the
//! local side replaces the remote lines of that region.
//!
//! It reads the three files whole (one range each), and declines binary files (a NUL byte),
//! files too large for roam's merge budget, and versions too different to diff cheaply.

use roam_ext_abi::{Edit, Files, Range, Reply, Request};

roam_ext_abi::export!(handle);

/// Bytes of the three versions together it is willing to read (roam's merge budget).
const MAX_TOTAL: u64 = 64 << 20;
/// Most lines inserted plus deleted between base and one side that the diff looks for.
const MAX_D: i64 = 2000;

fn handle(req: Request) -> Reply {
    match req {
        Request::Resolve { files, .. } => match whole(&files) {
            Ok([base, local, remote]) => merge(base, local, remote),
            Err(reply) => reply,
        },
        _ => Reply::Fail("merge3 only merges conflicts".into()),
    }
}

/// The three versions whole, or the reply that asks for them (or declines).
fn whole(files: &Files) -> Result<[&[u8]; 3], Reply> {
    let [base, local, remote] = files.sizes[..] else {
        return Err(Reply::Fail(
            "expected base, local and remote versions".into(),
        ));
    };
    if base + local + remote > MAX_TOTAL {
        return Err(Reply::Fail("files too large to merge".into()));
    }
    let ranges: Vec<Range> = [base, local, remote]
        .iter()
        .zip(0u8..)
        .map(|(size, file)| Range {
            file,
            off: 0,
            len: *size as u32,
        })
        .filter(|r| r.len > 0 && !files.has(r))
        .collect();
    if !ranges.is_empty() {
        return Err(Reply::Need(ranges));
    }
    let get = |file: u8, size: u64| files.get(file, 0, size).unwrap_or(&[]);
    Ok([get(0, base), get(1, local), get(2, remote)])
}

fn merge(base: &[u8], local: &[u8], remote: &[u8]) -> Reply {
    if [base, local, remote].iter().any(|f| f.contains(&0)) {
        return Reply::Fail("binary file: merge3 merges text only".into());
    }
    let (base, local, remote) = (lines(base), lines(local), lines(remote));
    let (Some(with_local), Some(with_remote)) = (common(&base, &local), common(&base, &remote))
    else {
        return Reply::Fail("the versions differ too much to merge".into());
    };
    let sync = sync_regions(
        &blocks(&with_local),
        &blocks(&with_remote),
        &base,
        &local,
        &remote,
    );
    match edits(&sync, &base, &local, &remote) {
        Ok(edits) => Reply::Patch(edits),
        Err(line) => Reply::Fail(format!(
            "both sides changed the lines near base line {}",
            line + 1
        )),
    }
}

/// Lines with their terminators (the last may have none).
fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|b| *b == b'\n').collect()
}

/// Pairs (i, j) of equal lines of `a` and `b` in a shortest edit script (Myers' O((N+M)D)
/// diff), or `None` if it needs more than `MAX_D` insertions and deletions.
fn common(a: &[&[u8]], b: &[&[u8]]) -> Option<Vec<(usize, usize)>> {
    let (n, m) = (a.len() as i64, b.len() as i64);
    // v[k]: the furthest x reached on diagonal k (stored at k + MAX_D + 1).
    let mut v = vec![0i32; 2 * MAX_D as usize + 3];
    let at = |k: i64| (k + MAX_D + 1) as usize;
    let mut trace: Vec<Vec<i32>> = Vec::new();
    for d in 0..=MAX_D {
        trace.push(v[at(-d - 1)..=at(d + 1)].to_vec());
        for k in (-d..=d).step_by(2) {
            let down = k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]);
            let mut x = if down {
                i64::from(v[at(k + 1)])
            } else {
                i64::from(v[at(k - 1)]) + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[at(k)] = x as i32;
            if x >= n && y >= m {
                return Some(backtrack(&trace, n, m));
            }
        }
    }
    None
}

/// Walks the trace of [`common`] back from the end, collecting the diagonal (equal) moves.
fn backtrack(trace: &[Vec<i32>], n: i64, m: i64) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    let (mut x, mut y) = (n, m);
    for (d, v) in trace.iter().enumerate().rev() {
        let d = d as i64;
        let get = |k: i64| i64::from(v[(k + d + 1) as usize]);
        let k = x - y;
        let down = k == -d || (k != d && get(k - 1) < get(k + 1));
        let prev_k = if down { k + 1 } else { k - 1 };
        let (prev_x, prev_y) = (get(prev_k), get(prev_k) - prev_k);
        while x > prev_x && y > prev_y {
            x -= 1;
            y -= 1;
            pairs.push((x as usize, y as usize));
        }
        (x, y) = (prev_x, prev_y);
    }
    pairs.reverse();
    pairs
}

/// Runs of consecutive equal pairs: (start in base, start in the other, length).
fn blocks(pairs: &[(usize, usize)]) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for &(i, j) in pairs {
        match out.last_mut() {
            Some((bi, bj, len)) if *bi + *len == i && *bj + *len == j => *len += 1,
            _ => out.push((i, j, 1)),
        }
    }
    out
}

/// A region all three versions share: its line ranges in base, local and remote.
#[derive(Clone, Copy)]
struct Sync {
    base: (usize, usize),
    local: (usize, usize),
    remote: (usize, usize),
}

/// The regions where base's lines are matched on both sides, ending with an empty region at
/// the ends of all three files.
fn sync_regions(
    local_blocks: &[(usize, usize, usize)],
    remote_blocks: &[(usize, usize, usize)],
    base: &[&[u8]],
    local: &[&[u8]],
    remote: &[&[u8]],
) -> Vec<Sync> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while let (Some(&(lb, lo, ll)), Some(&(rb, ro, rl))) =
        (local_blocks.get(i), remote_blocks.get(j))
    {
        let (start, end) = (lb.max(rb), (lb + ll).min(rb + rl));
        if start < end {
            let (l, r) = (lo + start - lb, ro + start - rb);
            out.push(Sync {
                base: (start, end),
                local: (l, l + end - start),
                remote: (r, r + end - start),
            });
        }
        if lb + ll < rb + rl {
            i += 1;
        } else {
            j += 1;
        }
    }
    out.push(Sync {
        base: (base.len(), base.len()),
        local: (local.len(), local.len()),
        remote: (remote.len(), remote.len()),
    });
    out
}

/// The edits of the remote version that bring in the local side's changes; `Err(base line)`
/// at the first region both sides changed differently.
fn edits(
    sync: &[Sync],
    base: &[&[u8]],
    local: &[&[u8]],
    remote: &[&[u8]],
) -> Result<Vec<Edit>, usize> {
    let offsets: Vec<u64> = std::iter::once(0)
        .chain(remote.iter().scan(0u64, |off, l| {
            *off += l.len() as u64;
            Some(*off)
        }))
        .collect();
    let (mut z, mut a, mut b) = (0, 0, 0);
    let mut out = Vec::new();
    for s in sync {
        let (zs, as_, bs) = (
            &base[z..s.base.0],
            &local[a..s.local.0],
            &remote[b..s.remote.0],
        );
        let local_changed = as_ != zs;
        let remote_changed = bs != zs;
        if local_changed && as_ != bs {
            if remote_changed {
                return Err(z);
            }
            out.push(Edit {
                off: offsets[b],
                del: offsets[s.remote.0] - offsets[b],
                ins: as_.concat(),
            });
        }
        (z, a, b) = (s.base.1, s.local.1, s.remote.1);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(base: &str, local: &str, remote: &str) -> Result<String, String> {
        let r = merge(base.as_bytes(), local.as_bytes(), remote.as_bytes());
        let edits = match r {
            Reply::Patch(edits) => edits,
            Reply::Fail(why) => return Err(why),
            other => panic!("{other:?}"),
        };
        let mut out = remote.as_bytes().to_vec();
        for e in edits.iter().rev() {
            let (off, del) = (e.off as usize, e.del as usize);
            out.splice(off..off + del, e.ins.iter().copied());
        }
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn changes_to_different_lines_merge() {
        let base = "a\nb\nc\nd\ne\n";
        assert_eq!(
            merged(base, "a\nB\nc\nd\ne\n", "a\nb\nc\nD\ne\nf\n").unwrap(),
            "a\nB\nc\nD\ne\nf\n"
        );
        assert_eq!(
            merged(base, "0\na\nb\nc\nd\ne\n", "a\nc\nd\ne\n").unwrap(),
            "0\na\nc\nd\ne\n"
        );
        assert_eq!(
            merged(base, base, "x\n").unwrap(),
            "x\n",
            "only remote changed"
        );
        assert_eq!(
            merged(base, "x\n", base).unwrap(),
            "x\n",
            "only local changed"
        );
        assert_eq!(
            merged("", "a\n", "").unwrap(),
            "a\n",
            "new lines in an empty base"
        );
    }

    #[test]
    fn the_same_change_on_both_sides_is_taken_once() {
        let base = "a\nb\nc\n";
        assert_eq!(merged(base, "a\nX\nc\n", "a\nX\nc\n").unwrap(), "a\nX\nc\n");
    }

    #[test]
    fn overlapping_changes_are_declined() {
        let why = merged("a\nb\nc\n", "a\nL\nc\n", "a\nR\nc\n").unwrap_err();
        assert!(why.contains("line 2"), "{why}");
        assert!(merged("a\n", "a\n\0", "b\n").is_err(), "binary");
    }

    #[test]
    fn the_diff_is_a_longest_common_subsequence() {
        let a = lines(b"a\nb\nc\na\nb\nb\na\n");
        let b = lines(b"c\nb\na\nb\na\nc\n");
        let pairs = common(&a, &b).unwrap();
        assert_eq!(pairs.len(), 4);
        assert!(pairs.iter().all(|&(i, j)| a[i] == b[j]));
        assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }
}
