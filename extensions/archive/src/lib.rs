//! The `archive` extension (device-specific processing): lists the members of a zip or tar
//! file and says where each member's data is, reading only the byte ranges it asks roam for.
//!
//! - zip: the end-of-central-directory record in the tail, then the central directory; a
//!   member's local header when it is opened (its extra field may differ from the central
//!   one, so the data offset is known only there). Stored members are answered as an extent
//!   of the archive (roam reads those bytes itself); deflated ones are inflated here.
//! - tar (ustar, GNU long names, pax `path`/`linkpath`/`size`): the headers, in windows that
//!   follow the chain of headers through the file.
//!
//! Names are passed on as the archive spells them (less a leading `./` and a directory's
//! trailing `/`): roam validates them, so a hostile `../../etc/passwd` is refused there.

#[cfg(test)]
mod fuzz;
mod tar;
mod zip;

use roam_ext_abi::{Files, Range, Reply, Request};

roam_ext_abi::export!(handle);

fn handle(req: Request) -> Reply {
    let result = match req {
        Request::ArchiveList { name, state, files } => match format(&name) {
            Some(Format::Zip) => zip::list(&state, &files),
            Some(Format::Tar) => tar::list(&files),
            None => Err(format!("{name}: not a .zip or .tar name")),
        },
        Request::ArchiveExtract {
            name,
            at,
            method,
            size,
            files,
        } => match format(&name) {
            Some(Format::Zip) => zip::extract(at, method, size, &files),
            Some(Format::Tar) => Ok(Reply::Extent { off: at, len: size }),
            None => Err(format!("{name}: not a .zip or .tar name")),
        },
        _ => Err("archive only lists and extracts archives".into()),
    };
    result.unwrap_or_else(Reply::Fail)
}

enum Format {
    Zip,
    Tar,
}

fn format(name: &str) -> Option<Format> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".zip") {
        Some(Format::Zip)
    } else if lower.ends_with(".tar") {
        Some(Format::Tar)
    } else {
        None
    }
}

/// A range of the archive (file 0), clipped to its end.
fn range(files: &Files, off: u64, len: u64) -> Range {
    let size = files.sizes.first().copied().unwrap_or(0);
    let len = len.min(size.saturating_sub(off)).min(u64::from(u32::MAX));
    Range {
        file: 0,
        off,
        len: len as u32,
    }
}

/// The member name as roam should see it: without a leading `./` or a trailing `/`.
fn tidy(name: &str) -> String {
    let mut n = name;
    while let Some(rest) = n.strip_prefix("./") {
        n = rest;
    }
    n.trim_end_matches('/').to_string()
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
