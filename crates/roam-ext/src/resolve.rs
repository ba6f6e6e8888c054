//! The resolver kind: merges a write-back conflict. The extension studies three versions of
//! one file, file [`BASE`] (what the change started from), [`LOCAL`] (the change) and
//! [`REMOTE`] (what the server holds now), reading only the ranges it asks for (see
//! [`crate::converse`]; a merge may read up to [`MAX_MERGE_BYTES`] in all, since a text merge
//! reads whole files), and answers a [`Patch`] of the remote version: edits that each delete
//! bytes at an offset and insert others. It may also decline (`Fail`), and the core then
//! keeps both versions. The core trusts none of the patch: [`Patch::check`] refuses edits out
//! of order, overlapping, outside the remote file, empty, or too many or too large, and
//! [`Patch::apply`] refuses a remote file whose length is not the one checked against.

use crate::converse::{converse_within, Fetch, MAX_MERGE_BYTES};
use crate::{ExtError, Extension};
use roam_ext_abi::{Edit, Reply, Request};
use std::io::{self, Read, Write};

/// File number of the version the local change started from.
pub const BASE: u8 = 0;
/// File number of the local version (the change being written back).
pub const LOCAL: u8 = 1;
/// File number of the version on the server now.
pub const REMOTE: u8 = 2;

/// Most edits one patch may hold.
pub const MAX_EDITS: usize = 1 << 16;
/// Most bytes one patch may insert in all.
pub const MAX_INSERTED: u64 = 16 << 20;

/// The sizes of the three versions, by file number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub base: u64,
    pub local: u64,
    pub remote: u64,
}

/// Asks `ext` to merge the versions of the file `name`, reading them through `fetch` (file
/// numbers [`BASE`], [`LOCAL`], [`REMOTE`]); returns the checked patch of the remote version.
pub fn resolve(
    ext: &Extension,
    name: &str,
    sizes: Versions,
    fetch: &mut Fetch,
) -> Result<Patch, ExtError> {
    let request = |files: &_| Request::Resolve {
        name: name.to_string(),
        files: Clone::clone(files),
    };
    let sizes_by_file = vec![sizes.base, sizes.local, sizes.remote];
    converse_within(
        MAX_MERGE_BYTES,
        ext,
        sizes_by_file,
        fetch,
        request,
        |reply| match reply {
            Reply::Patch(edits) => Patch::check(sizes.remote, edits),
            other => Err(format!("answered {other:?} to a merge")),
        },
    )
}

/// A patch of a file of known length whose edits were checked: sorted by offset, each
/// starting after the previous one ends (never two at one offset), inside the file, each
/// changing something, and bounded in number and inserted bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    len: u64,
    edits: Vec<Edit>,
}

impl Patch {
    /// Checks `edits` against a file of `len` bytes.
    pub fn check(len: u64, edits: Vec<Edit>) -> Result<Patch, String> {
        if edits.len() > MAX_EDITS {
            return Err(format!(
                "patch has {} edits (at most {MAX_EDITS})",
                edits.len()
            ));
        }
        let inserted: u64 = edits.iter().map(|e| e.ins.len() as u64).sum();
        if inserted > MAX_INSERTED {
            return Err(format!(
                "patch inserts {inserted} bytes (at most {MAX_INSERTED})"
            ));
        }
        let mut free_from = 0u64;
        for (i, e) in edits.iter().enumerate() {
            let end = e
                .off
                .checked_add(e.del)
                .filter(|end| *end <= len)
                .ok_or(format!(
                    "edit {i} deletes {}+{} of a {len}-byte file",
                    e.off, e.del
                ))?;
            if e.off < free_from || (i > 0 && e.off == edits[i - 1].off) {
                return Err(format!(
                    "edit {i} at {} is out of order or overlaps the one before",
                    e.off
                ));
            }
            if e.del == 0 && e.ins.is_empty() {
                return Err(format!("edit {i} at {} changes nothing", e.off));
            }
            free_from = end;
        }
        Ok(Patch { len, edits })
    }

    /// The length of the file the patch was checked against.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the patch leaves the file as it is.
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty()
    }

    pub fn edits(&self) -> &[Edit] {
        &self.edits
    }

    /// The length of the file once patched.
    pub fn patched_len(&self) -> u64 {
        self.edits
            .iter()
            .fold(self.len, |n, e| n - e.del + e.ins.len() as u64)
    }

    /// Streams `src` (the file the patch was checked against) into `dest` with the edits
    /// applied. Fails, having written part of the result, if `src` is not `len()` bytes long.
    pub fn apply(&self, src: &mut dyn Read, dest: &mut dyn Write) -> io::Result<u64> {
        let mut at = 0u64;
        for e in &self.edits {
            copy_exactly(src, dest, e.off - at)?;
            copy_exactly(src, &mut io::sink(), e.del)?;
            dest.write_all(&e.ins)?;
            at = e.off + e.del;
        }
        copy_exactly(src, dest, self.len - at)?;
        if src.read(&mut [0u8; 1])? != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the file is longer than the {} bytes merged", self.len),
            ));
        }
        Ok(self.patched_len())
    }
}

/// Copies exactly `n` bytes, or fails with `UnexpectedEof`.
fn copy_exactly(src: &mut dyn Read, dest: &mut dyn Write, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut src.take(n), dest)?;
    if copied < n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the file ended {} bytes early", n - copied),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(off: u64, del: u64, ins: &[u8]) -> Edit {
        Edit {
            off,
            del,
            ins: ins.to_vec(),
        }
    }

    fn patched(p: &Patch, src: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        p.apply(&mut &src[..], &mut out)?;
        Ok(out)
    }

    #[test]
    fn a_checked_patch_applies_in_order() {
        let p = Patch::check(
            10,
            vec![edit(0, 0, b">"), edit(2, 3, b"XY"), edit(10, 0, b"!")],
        )
        .unwrap();
        assert_eq!(patched(&p, b"0123456789").unwrap(), b">01XY56789!");
        assert_eq!(p.patched_len(), 11);
        let empty = Patch::check(3, vec![]).unwrap();
        assert_eq!(patched(&empty, b"abc").unwrap(), b"abc");
    }

    #[test]
    fn bad_patches_are_refused() {
        let bad = [
            vec![edit(8, 3, b"")],                    // past the end
            vec![edit(u64::MAX, 2, b"")],             // overflow
            vec![edit(11, 0, b"x")],                  // insert past the end
            vec![edit(4, 2, b""), edit(2, 1, b"")],   // out of order
            vec![edit(2, 3, b""), edit(4, 1, b"")],   // overlapping
            vec![edit(2, 0, b"a"), edit(2, 1, b"b")], // two at one offset
            vec![edit(5, 0, b"")],                    // changes nothing
            vec![edit(0, 0, b"x"); MAX_EDITS + 1],    // too many
        ];
        for edits in bad {
            assert!(Patch::check(10, edits.clone()).is_err(), "{edits:?}");
        }
        let huge = vec![edit(0, 0, &vec![0; MAX_INSERTED as usize + 1])];
        assert!(Patch::check(10, huge).is_err());
    }

    #[test]
    fn a_file_of_another_length_is_refused() {
        let p = Patch::check(4, vec![edit(1, 1, b"x")]).unwrap();
        assert!(patched(&p, b"abc").is_err(), "shorter");
        assert!(patched(&p, b"abcde").is_err(), "longer");
        assert_eq!(patched(&p, b"abcd").unwrap(), b"axcd");
    }
}
