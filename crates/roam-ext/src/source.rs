//! The device-source kind (Sprockets' device-specific sources): an extension that *is* a
//! backend. roam lists the files under the source's URL; the extension reads the spans of
//! them it asks for and answers a tree of regular files, each a span of one source file, so
//! a format nobody ships a driver for (a camera's store, a tape index) becomes a mountable,
//! read-only tree whose bytes roam then reads by ranges itself.
//!
//! Listing is a continued conversation (as an archive listing): each call gets the `state`
//! the previous reply gave and only the spans that reply asked for. The core bounds it
//! (rounds, spans and bytes per step and in all, state, entries) and validates the tree
//! strictly: one bad entry (a name that is not one component, a directory that escapes, a
//! span past its file, a path listed twice or as both file and directory) fails the whole
//! listing, so a lying extension shows nothing rather than part of a tree.

use std::collections::HashSet;

use crate::archive::{valid_path, Index};
use crate::layer::valid_name;
use crate::{ExtError, Extension, Fault};
use roam_ext_abi::{Member, MemberKind, Reply, Request, SourceEntry, SourceFile, Span, SpanData};

/// Source files one listing may show the extension.
pub const MAX_FILES: usize = 100_000;
/// Calls one listing may take.
pub const MAX_ROUNDS: usize = 100_000;
/// Spans one step may ask for.
pub const MAX_SPANS: usize = 64;
/// Bytes one step may ask for.
pub const MAX_STEP_BYTES: u64 = 16 << 20;
/// Bytes a listing may fetch beyond the source files' total size.
pub const SLACK_BYTES: u64 = 16 << 20;
/// Bytes of state carried from one step to the next.
pub const MAX_STATE: usize = 64 << 10;
/// Entries one tree may have.
pub const MAX_ENTRIES: usize = 200_000;

/// Where a file of the tree is: `len` bytes at `off` of source file `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub file: u32,
    pub off: u64,
    pub len: u64,
}

/// A source's tree: its directories and files (an [`Index`] whose file entries' `at` is
/// the number of their [`Extent`]).
#[derive(Debug)]
pub struct Tree {
    pub index: Index,
    pub extents: Vec<Extent>,
}

/// Lists the tree the extension makes of `files`, reading them through `fetch` (the
/// source file's number, offset, length).
pub fn list(ext: &Extension, files: &[SourceFile], fetch: &mut Fetch32) -> Result<Tree, ExtError> {
    if files.len() > MAX_FILES {
        let why = format!(
            "{} files under the source (at most {MAX_FILES})",
            files.len()
        );
        return Err(ext.error(Fault::Host(why)));
    }
    let total: u64 = files.iter().map(|f| f.size).sum();
    let (mut entries, mut state, mut spans) = (Vec::new(), Vec::new(), Vec::new());
    let mut fetched = 0u64;
    for _ in 0..MAX_ROUNDS {
        let req = Request::SourceList {
            files: files.to_vec(),
            state: std::mem::take(&mut state),
            spans: std::mem::take(&mut spans),
        };
        let Reply::Entries {
            entries: found,
            state: next,
            need,
        } = ext.call(&req)?
        else {
            return Err(ext.invalid("answered something else than entries to a listing"));
        };
        entries.extend(found);
        if entries.len() > MAX_ENTRIES {
            return Err(ext.invalid(format!("listed more than {MAX_ENTRIES} entries")));
        }
        if need.is_empty() {
            return tree(entries, files).map_err(|why| ext.invalid(why));
        }
        if next.len() > MAX_STATE {
            return Err(ext.invalid(format!("kept {} bytes of state", next.len())));
        }
        fetched += check_step(&need, &req, files).map_err(|why| ext.invalid(why))?;
        if fetched > total + SLACK_BYTES {
            let why = format!("asked for {fetched} bytes of {total} under the source");
            return Err(ext.invalid(why));
        }
        for s in need {
            let data = fetch(s.file, s.off, s.len).map_err(|e| ext.error(Fault::host(e)))?;
            spans.push(SpanData {
                file: s.file,
                off: s.off,
                data,
            });
        }
        state = next;
    }
    Err(ext.invalid(format!("still listing after {MAX_ROUNDS} rounds")))
}

/// Fetches `len` bytes at `off` of source file number `file`.
pub type Fetch32<'a> = dyn FnMut(u32, u64, u32) -> std::io::Result<Vec<u8>> + 'a;

/// Validates one step's spans against the source files and the step before (`prev`);
/// returns the bytes they ask for.
fn check_step(need: &[Span], prev: &Request, files: &[SourceFile]) -> Result<u64, String> {
    if need.len() > MAX_SPANS {
        return Err(format!("asked for {} spans at once", need.len()));
    }
    let supplied = match prev {
        Request::SourceList { spans, .. } => &spans[..],
        _ => &[],
    };
    let mut total = 0u64;
    for s in need {
        let size = files.get(s.file as usize).map(|f| f.size);
        let end = s.off.checked_add(u64::from(s.len));
        if s.len == 0 || size.is_none() || end.is_none_or(|e| Some(e) > size) {
            return Err(format!("asked for {}+{} of file {}", s.off, s.len, s.file));
        }
        // Progress: the very span just supplied may not be asked for again.
        let again =
            |d: &SpanData| d.file == s.file && d.off == s.off && d.data.len() == s.len as usize;
        if supplied.iter().any(again) {
            return Err(format!(
                "asked again for {}+{} of file {}",
                s.off, s.len, s.file
            ));
        }
        total += u64::from(s.len);
    }
    if total > MAX_STEP_BYTES {
        return Err(format!("asked for {total} bytes in one step"));
    }
    Ok(total)
}

/// Builds the tree, refusing it whole at the first bad entry.
fn tree(entries: Vec<SourceEntry>, files: &[SourceFile]) -> Result<Tree, String> {
    let mut paths = HashSet::new();
    let mut dirs = HashSet::new();
    let mut members = Vec::with_capacity(entries.len());
    let mut extents = Vec::with_capacity(entries.len());
    for e in entries {
        let path = check_entry(&e, files)?;
        for (i, _) in path.match_indices('/') {
            dirs.insert(path[..i].to_owned());
        }
        if !paths.insert(path.clone()) {
            return Err(format!("listed {path:?} twice"));
        }
        let mtime = if e.mtime == 0 {
            files[e.file as usize].mtime
        } else {
            e.mtime
        };
        members.push(Member {
            name: path,
            kind: MemberKind::File,
            size: e.len,
            mode: 0o444,
            mtime,
            target: String::new(),
            at: extents.len() as u64,
            method: 0,
        });
        extents.push(Extent {
            file: e.file,
            off: e.off,
            len: e.len,
        });
    }
    if let Some(clash) = dirs.iter().find(|d| paths.contains(*d)) {
        return Err(format!("listed {clash:?} as a file and a directory"));
    }
    Ok(Tree {
        index: Index::build(members),
        extents,
    })
}

/// An entry's path if it is one roam may show: a valid name in a valid (or empty)
/// directory, over a span inside its source file.
fn check_entry(e: &SourceEntry, files: &[SourceFile]) -> Result<String, String> {
    if !valid_name(e.name.as_bytes()) {
        return Err(format!("named a file {:?}", e.name));
    }
    if !e.dir.is_empty() && !valid_path(&e.dir) {
        return Err(format!("put {:?} in the directory {:?}", e.name, e.dir));
    }
    let path = if e.dir.is_empty() {
        e.name.clone()
    } else {
        format!("{}/{}", e.dir, e.name)
    };
    let Some(file) = files.get(e.file as usize) else {
        return Err(format!(
            "placed {path:?} in file {} of {}",
            e.file,
            files.len()
        ));
    };
    if e.off.checked_add(e.len).is_none_or(|end| end > file.size) {
        return Err(format!(
            "placed {path:?} at {}+{} of {:?} ({} bytes)",
            e.off, e.len, file.path, file.size
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<SourceFile> {
        vec![SourceFile {
            path: "a.jpg".into(),
            size: 100,
            mtime: 7,
        }]
    }

    fn entry(dir: &str, name: &str, off: u64, len: u64) -> SourceEntry {
        SourceEntry {
            dir: dir.into(),
            name: name.into(),
            file: 0,
            off,
            len,
            mtime: 0,
        }
    }

    #[test]
    fn a_valid_tree_implies_its_directories() {
        let t = tree(vec![entry("2024/06", "a.jpg", 0, 100)], &files()).unwrap();
        let e = t.index.get("2024/06/a.jpg").unwrap();
        assert_eq!((e.size, e.mtime, e.mode), (100, 7, 0o444));
        assert_eq!(
            t.extents[e.at as usize],
            Extent {
                file: 0,
                off: 0,
                len: 100
            }
        );
        assert_eq!(t.index.get("2024").unwrap().kind, MemberKind::Dir);
    }

    #[test]
    fn any_bad_entry_refuses_the_whole_tree() {
        let ok = entry("d", "ok.jpg", 0, 10);
        let bad = [
            entry("d", "a/b", 0, 1),
            entry("d", "..", 0, 1),
            entry("..", "x", 0, 1),
            entry("/etc", "x", 0, 1),
            entry("d", "x\0", 0, 1),
            entry("d", "big", 50, 51),
            entry("d", "wrap", u64::MAX, 2),
            entry("d/ok.jpg", "x", 0, 1),
            entry("d", "ok.jpg", 1, 1),
            SourceEntry {
                file: 1,
                ..entry("d", "y", 0, 1)
            },
        ];
        for b in bad {
            assert!(
                tree(vec![ok.clone(), b.clone()], &files()).is_err(),
                "{b:?}"
            );
        }
    }
}
