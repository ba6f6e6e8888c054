//! An extension compiled at its first use, not when roam starts: compiling a module costs
//! more than starting roam (0.15–0.3 s for the examples in a release build, ~0.5 s in a
//! debug one), and most runs never touch an archive or a layered mount.

use std::sync::{Arc, OnceLock};

use roam_ext::{ExtError, Extension};

/// Loads an extension (the binary knows where extensions are and how to run them).
pub type LoadExtension = Box<dyn Fn() -> Result<Extension, ExtError> + Send + Sync>;

/// An extension loaded at the first [`LazyExtension::get`]; a failure to load is kept.
pub(crate) struct LazyExtension {
    load: LoadExtension,
    ext: OnceLock<Result<Arc<Extension>, String>>,
}

impl std::fmt::Debug for LazyExtension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LazyExtension")
    }
}

impl LazyExtension {
    pub(crate) fn new(load: LoadExtension) -> LazyExtension {
        LazyExtension {
            load,
            ext: OnceLock::new(),
        }
    }

    pub(crate) fn get(&self) -> Result<Arc<Extension>, String> {
        self.ext
            .get_or_init(|| (self.load)().map(Arc::new).map_err(|e| e.to_string()))
            .clone()
    }
}
