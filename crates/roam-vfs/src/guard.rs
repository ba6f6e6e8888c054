//! An access-control policy (a black-box graft): an extension of the query kind asked, for
//! each remote object a program looks up, whether it may be used at all; one it refuses is
//! `EACCES` under both frontends. The extension reads nothing of the file: it is asked
//! with the object's URL (as messages show it, without a password: the same whatever
//! name or frontend reaches it) and the policy's `FIELD=VALUE` arguments, and its answer
//! is kept per URL. A failing extension refuses (the policy fails closed), with one line
//! naming it.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::lazy_ext::{LazyExtension, LoadExtension};
use crate::{Error, Remote, Result, Vfs};

pub(crate) struct Guard {
    ext: LazyExtension,
    args: Vec<(String, String)>,
    known: Mutex<HashMap<String, bool>>,
}

impl Vfs {
    /// Asks the extension `load` loads (at the first lookup) about every roam name; `args`
    /// are its `FIELD=VALUE` arguments.
    pub fn set_access_policy(&mut self, load: LoadExtension, args: Vec<(String, String)>) {
        self.guard = Some(Guard {
            ext: LazyExtension::new(load),
            args,
            known: Mutex::new(HashMap::new()),
        });
    }

    /// `Ok` if the policy (if any) lets programs use the remote object `r`, else `EACCES`.
    pub(crate) fn guard(&self, r: &Remote) -> Result<()> {
        let Some(g) = &self.guard else {
            return Ok(());
        };
        let url = crate::secrets::scrub(&r.describe()).into_owned();
        let virt = url.as_str();
        let known = g.known.lock().unwrap().get(virt).copied();
        let allowed = match known {
            Some(allowed) => allowed,
            None => {
                let asked = g.ext.get().and_then(|ext| {
                    let mut nothing = |_, _, _| Err(std::io::Error::other("reads no file"));
                    roam_ext::query::matches(&ext, virt, &g.args, 0, &mut nothing)
                        .map_err(|e| e.to_string())
                });
                let allowed = asked.unwrap_or_else(|e| {
                    tracing::warn!("{virt}: refused: the access policy failed: {e}");
                    false
                });
                g.known.lock().unwrap().insert(virt.to_owned(), allowed);
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(Error::posix(
                libc::EACCES,
                format!("{virt}: refused by the access policy"),
            ))
        }
    }
}
