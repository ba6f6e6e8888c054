//! The fast path's preloaded library (`preload/fastpath.c`, built by `build.rs` and
//! embedded): written once into a directory of this user's that every user may read
//! (a program that drops to another user still loads it; its bytes are no secret), else
//! into roam's private cache directory, and added to the
//! `LD_PRELOAD` of the first program, which its children inherit. Static programs never
//! load it; setuid programs ignore it; programs that clear their environment run without
//! it. All of them are served through roam's filter, as without the library.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::TrapError;

static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libroam_fastpath.so"));

/// Whether programs get the fast path: unless `ROAM_FASTPATH=0`, or roam was built without
/// the library (for musl: see `build.rs`).
pub fn enabled() -> bool {
    !LIBRARY.is_empty() && std::env::var_os("ROAM_FASTPATH").is_none_or(|v| v != "0")
}

/// The program's `LD_PRELOAD` with the library after the libraries it names already (`user`),
/// so that their hooks see a call first and reach the library through `RTLD_NEXT`. `None`
/// when the library cannot be written, or its path cannot be listed there.
pub fn env(cache_root: &Path, user: Option<OsString>) -> Option<CString> {
    let lib = install(cache_root)
        .map_err(|e| tracing::debug!("fast path library: {e}"))
        .ok()?;
    let lib = lib.into_os_string().into_vec();
    // ld.so splits the list at spaces and colons.
    if lib.iter().any(|b| matches!(b, b' ' | b':')) {
        return None;
    }
    let mut value = b"LD_PRELOAD=".to_vec();
    if let Some(user) = user.filter(|u| !u.is_empty()) {
        value.extend(user.into_vec());
        value.push(b':');
    }
    value.extend(lib);
    CString::new(value).ok()
}

/// Writes the library under `cache_root` (once per build of it: its name carries a hash of
/// its bytes) and returns its path.
fn install(cache_root: &Path) -> Result<PathBuf, TrapError> {
    let setup = |e: std::io::Error| TrapError::Setup(e.to_string());
    let dir = match readable_dir() {
        Some(dir) => dir,
        None => {
            let dir = cache_root.join("lib");
            std::fs::create_dir_all(&dir).map_err(setup)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(setup)?;
            dir
        }
    };
    let path = dir.join(format!("fastpath-{:016x}.so", fnv1a(LIBRARY)));
    if std::fs::read(&path).is_ok_and(|b| b == LIBRARY) {
        return Ok(path);
    }
    // Whole or not at all, even with several roams starting at once.
    let tmp = dir.join(format!(".fastpath-{}.so", std::process::id()));
    std::fs::write(&tmp, LIBRARY).map_err(setup)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).map_err(setup)?;
    std::fs::rename(&tmp, &path).map_err(setup)?;
    Ok(path)
}

/// `roam-UID-lib` in the system's temporary directory: made 0755, and used only if it is
/// this user's and no one else may write to it (else someone could put a library there).
fn readable_dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("roam-{uid}-lib"));
    let _ = std::fs::DirBuilder::new().mode(0o755).create(&dir);
    let md = std::fs::symlink_metadata(&dir).ok()?;
    (md.is_dir() && md.uid() == uid && md.mode() & 0o022 == 0).then_some(dir)
}

/// FNV-1a: a stable hash, so that every roam of one build names the library alike.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_goes_after_the_programs_own() {
        let root = std::env::temp_dir().join(format!("roam-preload-{}", std::process::id()));
        let ours = env(&root, None).unwrap().into_string().unwrap();
        let lib = ours.strip_prefix("LD_PRELOAD=").unwrap().to_owned();
        assert_eq!(std::fs::read(&lib).unwrap(), LIBRARY);
        // Readable by a program that dropped to another user.
        let mode = std::fs::metadata(&lib).unwrap().permissions().mode();
        assert_eq!(mode & 0o444, 0o444, "{lib}: {mode:o}");
        let both = env(&root, Some("/opt/mine.so".into())).unwrap();
        assert_eq!(
            both.to_str().unwrap(),
            format!("LD_PRELOAD=/opt/mine.so:{lib}")
        );
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn the_library_and_roam_agree_on_the_gadget() {
        let source = include_str!("../preload/fastpath.c");
        let gadget = format!("{:#x}", crate::platform::fastpath::GADGET);
        assert!(source.contains(&format!("#define ROAM_GADGET {gadget}UL")));
        assert!(source.contains(&format!("movabs ${gadget}, %r11")));
    }
}
