//! The archive kind (device-specific processing): an extension lists the members of a zip or
//! tar file and says where each member's data is, reading only the byte ranges it asks for.
//!
//! Listing is a conversation with its own budget, because tar headers are spread over the
//! whole file (one step per header in the worst case): each call gets only the ranges the
//! previous reply asked for plus an opaque `state` (so no call re-sends earlier data), and the
//! core bounds the rounds, the ranges per round, the bytes per round and in all, the state,
//! and the members. The extension's members are then validated here, never trusted: every
//! name must be a relative path of valid components, and the tree is built by the core
//! (parents implied, duplicates resolved deterministically).

use std::collections::BTreeMap;

use crate::converse::{converse, Fetch};
use crate::layer::valid_name;
use crate::{ExtError, Extension, Fault};
use roam_ext_abi::{Chunk, Files, Member, MemberKind, Range, Reply, Request};

/// Calls one listing may take.
pub const LIST_MAX_ROUNDS: usize = 100_000;
/// Ranges one step may ask for.
pub const LIST_MAX_RANGES: usize = 16;
/// Bytes one step may ask for (a zip's whole central directory fits).
pub const LIST_MAX_ROUND_BYTES: u64 = 16 << 20;
/// Bytes a listing may fetch beyond the archive's own size (overlapping windows).
pub const LIST_SLACK_BYTES: u64 = 16 << 20;
/// Bytes of state an extension may carry from one step to the next.
pub const LIST_MAX_STATE: usize = 64 << 10;
/// Members one archive may list.
pub const LIST_MAX_MEMBERS: usize = 200_000;
/// Bytes of a member's path or a symlink's target.
pub const MAX_PATH: usize = 4096;

/// A validated member (or a directory its descendants imply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: MemberKind,
    pub size: u64,
    /// Permission bits; a default when the archive had none.
    pub mode: u32,
    pub mtime: u64,
    pub target: String,
    /// Handed back to the extension to find the data (see [`extract`]).
    pub at: u64,
    pub method: u16,
}

/// The tree of an archive's members, by relative path (`""` is the root).
#[derive(Debug, Default)]
pub struct Index {
    entries: BTreeMap<String, Entry>,
    /// Members left out: invalid names or targets, or a non-directory where a directory is.
    pub skipped: usize,
}

impl Index {
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    /// The entries directly inside the directory `dir` (`""` for the root).
    pub fn children<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a str, &'a Entry)> + 'a {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let skip = prefix.len();
        self.entries
            .range(prefix.clone()..)
            .take_while(move |(k, _)| k.starts_with(&prefix))
            .filter_map(move |(k, e)| {
                let rest = &k[skip..];
                (!rest.is_empty() && !rest.contains('/')).then_some((rest, e))
            })
    }

    /// Builds the tree: members with invalid names are skipped; parents are implied; a
    /// directory wins over a file or symlink of the same path; otherwise the last member of
    /// a path wins (as extracting the archive would leave it).
    pub(crate) fn build(members: Vec<Member>) -> Index {
        let mut index = Index::default();
        index.entries.insert(String::new(), implied_dir(0));
        for m in members {
            if !valid_path(&m.name) || !valid_target(&m) {
                index.skipped += 1;
                continue;
            }
            index.imply_parents(&m.name, m.mtime);
            let is_dir = |e: &Entry| e.kind == MemberKind::Dir;
            match index.entries.get(&m.name) {
                Some(old) if is_dir(old) && m.kind != MemberKind::Dir => index.skipped += 1,
                _ => {
                    let entry = entry_of(&m);
                    index.entries.insert(m.name, entry);
                }
            }
        }
        index
    }

    fn imply_parents(&mut self, name: &str, mtime: u64) {
        for (i, _) in name.match_indices('/') {
            let parent = &name[..i];
            match self.entries.get(parent) {
                Some(e) if e.kind == MemberKind::Dir => {}
                Some(_) => {
                    self.skipped += 1;
                    self.entries.insert(parent.to_string(), implied_dir(mtime));
                }
                None => {
                    self.entries.insert(parent.to_string(), implied_dir(mtime));
                }
            }
        }
    }
}

fn implied_dir(mtime: u64) -> Entry {
    Entry {
        kind: MemberKind::Dir,
        size: 0,
        mode: 0o755,
        mtime,
        target: String::new(),
        at: 0,
        method: 0,
    }
}

fn entry_of(m: &Member) -> Entry {
    let default = match m.kind {
        MemberKind::Dir => 0o755,
        MemberKind::File => 0o644,
        MemberKind::Symlink => 0o777,
    };
    Entry {
        kind: m.kind,
        size: m.size,
        mode: if m.mode == 0 {
            default
        } else {
            m.mode & 0o7777
        },
        mtime: m.mtime,
        target: m.target.clone(),
        at: m.at,
        method: m.method,
    }
}

/// A member path roam may show: relative, at most [`MAX_PATH`] bytes, every component a
/// valid name (not empty, not `.` or `..`, no NUL, at most 255 bytes).
pub fn valid_path(name: &str) -> bool {
    name.len() <= MAX_PATH && name.split('/').all(|c| valid_name(c.as_bytes()))
}

fn valid_target(m: &Member) -> bool {
    m.kind != MemberKind::Symlink
        || (!m.target.is_empty() && m.target.len() <= MAX_PATH && !m.target.contains('\0'))
}

/// Lists the archive `name` of `size` bytes, reading it through `fetch` (file 0).
pub fn list(ext: &Extension, name: &str, size: u64, fetch: &mut Fetch) -> Result<Index, ExtError> {
    let mut members: Vec<Member> = Vec::new();
    let mut state = Vec::new();
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut fetched = 0u64;
    for _ in 0..LIST_MAX_ROUNDS {
        let req = Request::ArchiveList {
            name: name.to_string(),
            state: std::mem::take(&mut state),
            files: Files {
                sizes: vec![size],
                chunks: std::mem::take(&mut chunks),
            },
        };
        let (found, next, need) = match ext.call(&req)? {
            Reply::Members {
                members,
                state,
                need,
            } => (members, state, need),
            other => return Err(ext.invalid(format!("answered {other:?} to a listing"))),
        };
        members.extend(found);
        if members.len() > LIST_MAX_MEMBERS {
            return Err(ext.invalid(format!("listed more than {LIST_MAX_MEMBERS} members")));
        }
        if need.is_empty() {
            return Ok(Index::build(members));
        }
        if next.len() > LIST_MAX_STATE {
            return Err(ext.invalid(format!("kept {} bytes of state", next.len())));
        }
        let asked = check_step(&need, &req, size).map_err(|why| ext.invalid(why))?;
        fetched += asked;
        if fetched > size + LIST_SLACK_BYTES {
            return Err(ext.invalid(format!(
                "asked for {fetched} bytes of a {size}-byte archive"
            )));
        }
        for r in need {
            let data = fetch(r.file, r.off, r.len).map_err(|e| ext.error(Fault::host(e)))?;
            chunks.push(Chunk {
                file: 0,
                off: r.off,
                data,
            });
        }
        state = next;
    }
    Err(ext.invalid(format!("still listing after {LIST_MAX_ROUNDS} rounds")))
}

/// Validates one step's ranges against the archive and the step before (`prev`); returns
/// the bytes they ask for.
fn check_step(need: &[Range], prev: &Request, size: u64) -> Result<u64, String> {
    if need.len() > LIST_MAX_RANGES {
        return Err(format!("asked for {} ranges at once", need.len()));
    }
    let supplied = match prev {
        Request::ArchiveList { files, .. } => &files.chunks[..],
        _ => &[],
    };
    let mut total = 0u64;
    for r in need {
        let end = r.off.checked_add(u64::from(r.len));
        if r.file != 0 || r.len == 0 || end.is_none_or(|e| e > size) {
            return Err(format!(
                "asked for {}+{} of file {} ({size} bytes)",
                r.off, r.len, r.file
            ));
        }
        // Progress: the very range just supplied may not be asked for again.
        if supplied
            .iter()
            .any(|c| c.off == r.off && c.data.len() == r.len as usize)
        {
            return Err(format!("asked again for {}+{}", r.off, r.len));
        }
        total += u64::from(r.len);
    }
    if total > LIST_MAX_ROUND_BYTES {
        return Err(format!("asked for {total} bytes in one step"));
    }
    Ok(total)
}

/// A member's data: an extent of the archive to read as it is, or the bytes themselves.
#[derive(Debug, PartialEq, Eq)]
pub enum Data {
    Extent { off: u64, len: u64 },
    Bytes(Vec<u8>),
}

/// Where the data of `entry` is in the archive `name` of `size` bytes (or the data itself,
/// for a compressed member), asking the extension.
pub fn extract(
    ext: &Extension,
    name: &str,
    size: u64,
    entry: &Entry,
    fetch: &mut Fetch,
) -> Result<Data, ExtError> {
    let request = |files: &Files| Request::ArchiveExtract {
        name: name.to_string(),
        at: entry.at,
        method: entry.method,
        size: entry.size,
        files: files.clone(),
    };
    converse(ext, vec![size], fetch, request, |reply| match reply {
        Reply::Extent { off, len }
            if len == entry.size && off.checked_add(len).is_some_and(|e| e <= size) =>
        {
            Ok(Data::Extent { off, len })
        }
        Reply::Extent { off, len } => Err(format!(
            "placed a {}-byte member at {off}+{len} of a {size}-byte archive",
            entry.size
        )),
        Reply::Bytes(b) if b.len() as u64 == entry.size => Ok(Data::Bytes(b)),
        Reply::Bytes(b) => Err(format!(
            "gave {} bytes of a {}-byte member",
            b.len(),
            entry.size
        )),
        other => Err(format!("answered {other:?} to an extraction")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, kind: MemberKind) -> Member {
        Member {
            name: name.into(),
            kind,
            size: 1,
            mode: 0,
            mtime: 5,
            target: "t".into(),
            at: 0,
            method: 0,
        }
    }

    #[test]
    fn hostile_names_are_skipped_and_parents_implied() {
        let names = [
            "../../etc/passwd",
            "/etc/passwd",
            "a/../../x",
            "a//b",
            "./c",
            "d/.",
            "e\0f",
            "",
        ];
        let mut members: Vec<Member> = names.iter().map(|n| m(n, MemberKind::File)).collect();
        members.push(m("ok/deep/file", MemberKind::File));
        members.push(m(&"x".repeat(256), MemberKind::File));
        let index = Index::build(members);
        assert_eq!(index.skipped, names.len() + 1);
        let all: Vec<&str> = index.entries.keys().map(String::as_str).collect();
        assert_eq!(all, ["", "ok", "ok/deep", "ok/deep/file"]);
        assert_eq!(index.get("ok").unwrap().kind, MemberKind::Dir);
        let root: Vec<&str> = index.children("").map(|(n, _)| n).collect();
        assert_eq!(root, ["ok"]);
    }

    #[test]
    fn duplicates_resolve_deterministically() {
        let mut late = m("f", MemberKind::File);
        late.size = 9;
        let members = vec![
            m("f", MemberKind::File),
            late,
            m("d", MemberKind::File),
            m("d/x", MemberKind::File),
            m("d", MemberKind::Symlink),
        ];
        let index = Index::build(members);
        assert_eq!(index.get("f").unwrap().size, 9, "the last wins");
        assert_eq!(index.get("d").unwrap().kind, MemberKind::Dir, "dirs win");
        assert_eq!(index.skipped, 2);
        let d: Vec<&str> = index.children("d").map(|(n, _)| n).collect();
        assert_eq!(d, ["x"]);
    }
}
