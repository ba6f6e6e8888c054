//! zip: the end-of-central-directory record (in the last 64 KiB + 22 bytes), the central
//! directory it points to, and at open time the member's local header. No zip64, no
//! encryption; stored and deflated members.

use crate::{le16, le32, range, tidy};
use roam_ext_abi::{Files, Member, MemberKind, Reply};

const EOCD: u32 = 0x0605_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;
/// The end record (22 bytes) plus the longest comment it may carry.
const TAIL: u64 = 22 + 0xffff;
/// The tail asked for first: an end record without a long comment, and often the whole
/// central directory of a small archive.
const FIRST_TAIL: u64 = 4096;
/// Bytes asked for a local header: its 30 fixed bytes and room for a name and extra field.
const LOCAL_GUESS: u64 = 30 + 512;

const STORED: u16 = 0;
const DEFLATED: u16 = 8;
/// The largest member inflated: its bytes travel back in one reply, and roam takes replies
/// of at most 16 MiB (a bigger one, or a zip bomb, is refused before any memory is spent).
const MAX_INFLATED: u64 = 15 << 20;

/// One step of listing; `state` is empty at first, then the phase the previous step reached.
pub fn list(state: &[u8], files: &Files) -> Result<Reply, String> {
    let size = files.sizes.first().copied().unwrap_or(0);
    let chunk = files.chunks.first();
    match (state, chunk) {
        ([], _) if size < 22 => Err(format!("{size} bytes is too short for a zip")),
        ([], _) => Ok(ask(
            1,
            range(files, size - FIRST_TAIL.min(size), FIRST_TAIL),
        )),
        ([1], Some(tail)) => {
            let Some(at) = find_end(&tail.data) else {
                // A long comment may hide the record further back: ask for the longest tail.
                let whole = range(files, size - TAIL.min(size), TAIL);
                return match whole.off < tail.off {
                    true => Ok(ask(1, whole)),
                    false => {
                        Err("no end of central directory record: not a zip, or truncated".into())
                    }
                };
            };
            let (cd_off, cd_size) = end_record(&tail.data, tail.off, at)?;
            if cd_size == 0 {
                return Ok(done(Vec::new()));
            }
            match cd_off.checked_sub(tail.off) {
                Some(at) => {
                    let at = at as usize;
                    central(&tail.data[at..at + cd_size as usize]).map(done)
                }
                None => Ok(ask(2, range(files, cd_off, cd_size))),
            }
        }
        ([2], Some(cd)) => central(&cd.data).map(done),
        _ => Err("listing state lost".into()),
    }
}

fn ask(phase: u8, r: roam_ext_abi::Range) -> Reply {
    Reply::Members {
        members: Vec::new(),
        state: vec![phase],
        need: vec![r],
    }
}

fn done(members: Vec<Member>) -> Reply {
    Reply::Members {
        members,
        state: Vec::new(),
        need: Vec::new(),
    }
}

/// Where the end-of-central-directory record is in `tail`, the last one that fits.
fn find_end(tail: &[u8]) -> Option<usize> {
    (0..=tail.len().checked_sub(22)?)
        .rev()
        .find(|&i| le32(tail, i) == EOCD && i + 22 + usize::from(le16(tail, i + 20)) <= tail.len())
}

/// The central directory's offset and size, from the end record at `at` of the tail that
/// starts at `base`.
fn end_record(tail: &[u8], base: u64, at: usize) -> Result<(u64, u64), String> {
    let (size, off) = (le32(tail, at + 12), le32(tail, at + 16));
    if size == u32::MAX || off == u32::MAX || le16(tail, at + 10) == u16::MAX {
        return Err("zip64 archives are not supported".into());
    }
    let (size, off) = (u64::from(size), u64::from(off));
    if off + size > base + at as u64 {
        return Err("central directory overlaps its end record: corrupt zip".into());
    }
    Ok((off, size))
}

/// The members the central directory `cd` names.
fn central(cd: &[u8]) -> Result<Vec<Member>, String> {
    let mut members = Vec::new();
    let mut p = 0;
    while p < cd.len() {
        let fixed = cd.get(p..p + 46).filter(|e| le32(e, 0) == CENTRAL);
        let e = fixed.ok_or(format!("bad central directory entry at +{p}: corrupt zip"))?;
        let (n, x, c) = (
            le16(e, 28) as usize,
            le16(e, 30) as usize,
            le16(e, 32) as usize,
        );
        let name = cd
            .get(p + 46..p + 46 + n)
            .ok_or("central directory entry cut short: corrupt zip")?;
        if le16(e, 8) & 1 == 0 {
            members.push(member(e, &String::from_utf8_lossy(name)));
        }
        p += 46 + n + x + c;
    }
    Ok(members)
}

/// The member a central directory entry `e` (its 46 fixed bytes) describes.
fn member(e: &[u8], raw: &str) -> Member {
    let unix = le16(e, 4) >> 8 == 3;
    let mode = if unix { le32(e, 38) >> 16 & 0o7777 } else { 0 };
    let dir = raw.ends_with('/');
    Member {
        name: tidy(raw),
        kind: if dir {
            MemberKind::Dir
        } else {
            MemberKind::File
        },
        size: if dir { 0 } else { u64::from(le32(e, 24)) },
        mode,
        mtime: dos_time(le16(e, 14), le16(e, 12)),
        target: String::new(),
        at: u64::from(le32(e, 42)),
        method: le16(e, 10),
    }
}

/// Seconds since the epoch of an MS-DOS date and time (taken as UTC).
fn dos_time(date: u16, time: u16) -> u64 {
    let (y, m, d) = (
        1980 + i64::from(date >> 9),
        i64::from(date >> 5 & 15).max(1),
        i64::from(date & 31).max(1),
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs =
        i64::from(time >> 11) * 3600 + i64::from(time >> 5 & 63) * 60 + i64::from(time & 31) * 2;
    (days * 86_400 + secs).max(0) as u64
}

/// Where the member whose local header is at `at` keeps its data, or the data inflated.
pub fn extract(at: u64, method: u16, size: u64, files: &Files) -> Result<Reply, String> {
    if method != STORED && method != DEFLATED {
        return Err(format!(
            "compression method {method} is not supported (stored and deflate are)"
        ));
    }
    let Some(head) = files.get(0, at, 30) else {
        return Ok(Reply::Need(vec![range(files, at, LOCAL_GUESS)]));
    };
    if le32(head, 0) != LOCAL {
        return Err(format!("no local header at {at}: corrupt zip"));
    }
    let data = at + 30 + u64::from(le16(head, 26)) + u64::from(le16(head, 28));
    if method == STORED {
        return Ok(Reply::Extent {
            off: data,
            len: size,
        });
    }
    // With a data descriptor (flag 3) the local header has no size: deflate ends itself, and
    // it never grows data by more than a few bytes per 16 KiB block.
    let csize = match le16(head, 6) & 8 {
        0 => u64::from(le32(head, 18)),
        _ => size + size / 1024 + 64,
    };
    if size > MAX_INFLATED {
        return Err(format!(
            "a deflated member of {size} bytes: the archive extension inflates at most {MAX_INFLATED} bytes"
        ));
    }
    let r = range(files, data, csize);
    match files.get(0, r.off, u64::from(r.len)) {
        Some(packed) => inflate(packed, size).map(Reply::Bytes),
        None => Ok(Reply::Need(vec![r])),
    }
}

fn inflate(packed: &[u8], size: u64) -> Result<Vec<u8>, String> {
    let out = miniz_oxide::inflate::decompress_to_vec_with_limit(packed, size as usize)
        .map_err(|e| format!("deflated data is corrupt ({:?})", e.status))?;
    if out.len() as u64 != size {
        return Err(format!(
            "inflated to {} bytes, the directory says {size}: corrupt zip",
            out.len()
        ));
    }
    Ok(out)
}
