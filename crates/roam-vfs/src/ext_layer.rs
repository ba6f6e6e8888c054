//! Layer extensions as mounts: `ext:NAME:URL` stacks the layer extension `NAME` (a stream
//! graft, e.g. `rot13`) over the mount `URL`, through the drivers' own layer machinery
//! ([`Stacked`](roam_drivers::layer::Stacked)). The drivers stay leaves: this transform,
//! which calls the extension, lives in the vfs.
//!
//! Every answer is validated by `roam_ext::layer` (contents keep their length; a name is one
//! valid component); a failing or lying extension fails the call with EIO and a message
//! naming it, never with a wrong name or wrong bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use roam_drivers::layer::{Transform, Way};
use roam_drivers::{Error, ErrorKind, Result};
use roam_ext::abi::LayerOp;
use roam_ext::Extension;

use crate::lazy_ext::{LazyExtension, LoadExtension};

/// Names remembered per way, so a path looked up again costs no call (bounded: cleared when
/// full).
const MEMO: usize = 4096;

/// A layer whose transform is an extension's (loaded at the first name or byte it sees).
#[derive(Debug)]
pub(crate) struct ExtLayer {
    /// `ext:NAME`.
    scheme: String,
    ext: LazyExtension,
    names: Mutex<HashMap<(bool, String), String>>,
}

impl ExtLayer {
    pub(crate) fn new(name: &str, load: LoadExtension) -> ExtLayer {
        ExtLayer {
            scheme: format!("ext:{name}"),
            ext: LazyExtension::new(load),
            names: Mutex::new(HashMap::new()),
        }
    }

    fn fail(&self, why: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Io, format!("{} layer: {why}", self.scheme))
    }

    fn extension(&self) -> Result<Arc<Extension>> {
        self.ext.get().map_err(|e| self.fail(e))
    }

    /// One component through the extension (remembered).
    fn component(&self, c: &str, way: Way) -> Result<String> {
        let key = (way == Way::Encode, c.to_owned());
        if let Some(hit) = self.names.lock().unwrap().get(&key) {
            return Ok(hit.clone());
        }
        let op = match way {
            Way::Encode => LayerOp::EncodeName,
            Way::Decode => LayerOp::DecodeName,
        };
        let out = roam_ext::layer::transform(&*self.extension()?, op, 0, c.as_bytes())
            .map_err(|e| self.fail(e))?;
        let out = String::from_utf8(out).map_err(|_| self.fail("a name that is not UTF-8"))?;
        let mut names = self.names.lock().unwrap();
        if names.len() >= MEMO {
            names.clear();
        }
        names.insert(key, out.clone());
        Ok(out)
    }
}

impl Transform for ExtLayer {
    const TRANSPARENT: bool = false;

    fn scheme(&self) -> &str {
        &self.scheme
    }

    /// Component by component: the extension sees one name at a time, and `/`, `.` and `..`
    /// (in symlink targets) stay what they are.
    fn name(&self, s: &str, way: Way) -> Result<String> {
        let parts = s
            .split('/')
            .map(|c| match c {
                "" | "." | ".." => Ok(c.to_owned()),
                c => self.component(c, way),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(parts.join("/"))
    }

    fn bytes(&self, bytes: &mut [u8], offset: u64, way: Way) -> Result<()> {
        let op = match way {
            Way::Encode => LayerOp::Encode,
            Way::Decode => LayerOp::Decode,
        };
        let out = roam_ext::layer::transform(&*self.extension()?, op, offset, bytes)
            .map_err(|e| self.fail(e))?;
        bytes.copy_from_slice(&out);
        Ok(())
    }
}
