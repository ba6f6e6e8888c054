//! tar (ustar, GNU long names, pax extended headers): each step parses the headers in the
//! window roam supplied and asks for the window at the next header, so a listing reads the
//! headers and skips the members' data. Hard links, devices and FIFOs are left out.

use crate::{range, tidy};
use roam_ext_abi::{Files, Member, MemberKind, Reply};

const BLOCK: u64 = 512;
/// Bytes asked per step: many headers of small members at once.
const WINDOW: u64 = 64 << 10;
/// Bytes asked when the last member was large: its successor's header alone (far away).
const SMALL_WINDOW: u64 = 512;

/// Names and sizes an extended header (GNU `L`/`K`, pax `x`) gives the member after it.
#[derive(Default)]
struct Pending {
    path: Option<String>,
    link: Option<String>,
    size: Option<u64>,
}

/// One step: the members whose headers lie in the supplied window, and the next window.
pub fn list(files: &Files) -> Result<Reply, String> {
    let Some(chunk) = files.chunks.first() else {
        return Ok(next(Vec::new(), range(files, 0, WINDOW)));
    };
    let size = files.sizes.first().copied().unwrap_or(0);
    let mut members = Vec::new();
    let mut pending = Pending::default();
    // Where the current member's headers began: a window that ends inside them restarts there.
    let mut start = chunk.off;
    let mut off = chunk.off;
    let mut window = WINDOW;
    loop {
        let Some(h) = files.get(0, off, BLOCK) else {
            // Saturating: a hostile member size may have carried `off` to the top of u64.
            return Ok(match off.saturating_add(BLOCK) > size {
                true => done(members),
                false => next(
                    members,
                    range(files, start, window.max(off - start + BLOCK)),
                ),
            });
        };
        if h.iter().all(|b| *b == 0) {
            return Ok(done(members));
        }
        check_sum(h, off)?;
        let len = pending.size.take().unwrap_or(number(&h[124..136])?);
        let data = off + BLOCK;
        // Saturating: a hostile size must not wrap around to an earlier header.
        let after = data.saturating_add(len.div_ceil(BLOCK).saturating_mul(BLOCK));
        match h[156] {
            b'L' | b'K' | b'x' => match files.get(0, data, len) {
                Some(body) => extended(h[156], body, &mut pending)?,
                // Asking for a body past the end would ask for the same window forever.
                None if data.saturating_add(len) > size => {
                    return Err(format!(
                        "truncated tar: the header at {off} announces {len} bytes past the end"
                    ))
                }
                None => {
                    return Ok(next(
                        members,
                        range(files, start, window.max(after - start + BLOCK)),
                    ))
                }
            },
            b'g' => {}
            kind => {
                if let Some(m) = member(h, kind, len, data, std::mem::take(&mut pending))? {
                    members.push(m);
                }
                window = if len >= WINDOW { SMALL_WINDOW } else { WINDOW };
                start = after;
            }
        }
        off = after;
    }
}

fn next(members: Vec<Member>, r: roam_ext_abi::Range) -> Reply {
    Reply::Members {
        members,
        state: Vec::new(),
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

/// The member a header describes, `None` for kinds roam does not show.
fn member(h: &[u8], kind: u8, size: u64, data: u64, p: Pending) -> Result<Option<Member>, String> {
    let kind = match kind {
        b'0' | 0 | b'7' => MemberKind::File,
        b'5' => MemberKind::Dir,
        b'2' => MemberKind::Symlink,
        _ => return Ok(None),
    };
    let name = p.path.unwrap_or_else(|| ustar_name(h));
    let name = tidy(&name);
    if name.is_empty() {
        return Ok(None); // `./` itself: the archive's root.
    }
    Ok(Some(Member {
        name,
        kind,
        size: if kind == MemberKind::File { size } else { 0 },
        mode: number(&h[100..108])? as u32 & 0o7777,
        mtime: number(&h[136..148])?,
        target: p.link.unwrap_or_else(|| text(&h[157..257])),
        at: data,
        method: 0,
    }))
}

/// `prefix/name` of a ustar header, or `name` of an old one.
fn ustar_name(h: &[u8]) -> String {
    let name = text(&h[..100]);
    let prefix = text(&h[345..500]);
    if &h[257..262] == b"ustar" && !prefix.is_empty() {
        format!("{prefix}/{name}")
    } else {
        name
    }
}

/// Applies a GNU long name/link (`L`/`K`) or a pax header (`x`) to the next member.
fn extended(kind: u8, body: &[u8], p: &mut Pending) -> Result<(), String> {
    match kind {
        b'L' => p.path = Some(text(body)),
        b'K' => p.link = Some(text(body)),
        _ => {
            for (key, value) in pax_records(body)? {
                match key {
                    "path" => p.path = Some(value.to_string()),
                    "linkpath" => p.link = Some(value.to_string()),
                    "size" => p.size = Some(value.parse().map_err(|_| "bad pax size")?),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// The `LEN key=value\n` records of a pax header.
fn pax_records(mut body: &[u8]) -> Result<Vec<(&str, &str)>, String> {
    let mut out = Vec::new();
    while !body.is_empty() && body[0] != 0 {
        let sp = body
            .iter()
            .position(|b| *b == b' ')
            .ok_or("bad pax record")?;
        let len: usize = std::str::from_utf8(&body[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|&n| n > sp + 1 && n <= body.len())
            .ok_or("bad pax record length")?;
        let record =
            std::str::from_utf8(&body[sp + 1..len - 1]).map_err(|_| "pax record not UTF-8")?;
        if let Some(kv) = record.split_once('=') {
            out.push(kv);
        }
        body = &body[len..];
    }
    Ok(out)
}

/// The header's checksum: its bytes summed with the checksum field read as spaces.
fn check_sum(h: &[u8], off: u64) -> Result<(), String> {
    let sum: u64 = h
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(*b)
            }
        })
        .sum();
    match number(&h[148..156]) {
        Ok(s) if s == sum => Ok(()),
        _ => Err(format!(
            "bad header checksum at offset {off}: not a tar, or corrupt"
        )),
    }
}

/// An octal field (NUL/space terminated), or GNU's base-256 form for large values.
fn number(f: &[u8]) -> Result<u64, String> {
    if f[0] & 0x80 != 0 {
        return Ok(f[1..].iter().fold(0u64, |n, b| n << 8 | u64::from(*b)));
    }
    let digits = text(f);
    let digits = digits.trim_matches(|c| c == ' ' || c == '\0');
    if digits.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(digits, 8).map_err(|_| format!("bad octal field {digits:?}: corrupt tar"))
}

/// A NUL-terminated field as text.
fn text(f: &[u8]) -> String {
    let end = f.iter().position(|b| *b == 0).unwrap_or(f.len());
    String::from_utf8_lossy(&f[..end]).into_owned()
}
