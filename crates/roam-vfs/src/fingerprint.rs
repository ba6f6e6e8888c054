//! Fingerprints on demand: a file's MD5 and SHA-256, computed by the digest extension
//! (`roam_ext::digest`) from the bytes roam reads for it (its copy when current, else
//! ranges from the server), kept per version (ETag, size, mtime) so asking again costs
//! nothing until the file changes. Served as the extended attributes `user.roam.md5` and
//! `user.roam.sha256` (hex, as `md5sum` prints) to both frontends, and to `roam find`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use roam_drivers::{Pinned, Validator};
use roam_ext::digest::{digest, hex, Sums};

use crate::lazy_ext::{LazyExtension, LoadExtension};
use crate::{Error, Kind, Node, Result, Vfs};

/// The attributes served, in the order `listxattr` gives them.
pub const XATTRS: [&str; 2] = ["user.roam.md5", "user.roam.sha256"];

/// What identifies a version of a file.
type Version = (Option<String>, Option<u64>, Option<SystemTime>);

pub(crate) struct Fingerprints {
    ext: LazyExtension,
    known: Mutex<HashMap<String, (Version, Sums)>>,
}

impl Vfs {
    /// Fingerprints files with the extension (of the digest kind) that `load` loads when
    /// the first fingerprint is asked for.
    pub fn set_digest_extension(&mut self, load: LoadExtension) {
        self.fingerprints = Some(Fingerprints {
            ext: LazyExtension::new(load),
            known: Mutex::new(HashMap::new()),
        });
    }

    /// The fingerprints of the file `node`: remembered for its current version, else
    /// computed. A file being written is hashed as it is now, and not remembered.
    pub fn fingerprint(&self, node: &Node) -> Result<Sums> {
        let Some(fp) = &self.fingerprints else {
            return Err(Error::posix(
                libc::ENODATA,
                "no digest extension is installed",
            ));
        };
        let Node::Remote(r) = node else {
            return Err(Error::posix(
                libc::ENODATA,
                format!("{}: not a file", node.virt()),
            ));
        };
        let meta = self.stat(node)?;
        if meta.kind != Kind::File {
            return Err(Error::posix(
                libc::ENODATA,
                format!("{}: not a file", r.virt),
            ));
        }
        let dirty = self.is_dirty(&r.virt);
        let version = (meta.etag.clone(), meta.size, meta.mtime);
        if let Some((v, sums)) = fp.known.lock().unwrap().get(&r.virt) {
            if *v == version && !dirty {
                return Ok(sums.clone());
            }
        }
        let ext = fp.ext.get().map_err(|e| Error::posix(libc::EIO, e))?;
        let size = meta.size.unwrap_or(0);
        // The sums are kept as this version's: every range must be its bytes.
        let pinned = Pinned::new(Validator::of(&meta));
        let mut read = |off, len| {
            self.read_range(node, off, len, &pinned)
                .map_err(std::io::Error::other)
        };
        let sums = digest(&ext, size, &mut read)
            .map_err(|e| Error::posix(libc::EIO, format!("{}: {e}", r.virt)))?;
        if !dirty {
            fp.known
                .lock()
                .unwrap()
                .insert(r.virt.clone(), (version, sums.clone()));
        }
        Ok(sums)
    }

    /// The value of the extended attribute `name` of `node` if it is one of [`XATTRS`]
    /// (`None`: not one of roam's, the caller answers as for any other).
    pub fn roam_xattr(&self, node: &Node, name: &str) -> Option<Result<Vec<u8>>> {
        let pick: fn(&Sums) -> &[u8] = match name {
            "user.roam.md5" => |s| &s.md5,
            "user.roam.sha256" => |s| &s.sha256,
            _ => return None,
        };
        Some(self.fingerprint(node).map(|s| hex(pick(&s)).into_bytes()))
    }
}
