//! The example extensions of `extensions/`, built on demand for the tests and benchmarks:
//! once for wasm32-wasip1 and once natively, into `target/ext-build`, then gathered into
//! `target/extensions/` as `NAME.wasm` and `libNAME.so` (the layout roam-ext loads).
//! Nothing built here is committed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root (this crate lives in crates/roam-testkit).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the extensions (once per process; cargo's own lock orders concurrent test binaries)
/// and returns the directory holding their artifacts.
pub fn extensions() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let root = root();
    let target = root.join("target/ext-build");
    let out = root.join("target/extensions");
    fs::create_dir_all(&out).expect("create target/extensions");
    for triple in [None, Some("wasm32-wasip1")] {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "--release", "-j2", "--manifest-path"])
            .arg(root.join("extensions/Cargo.toml"));
        cmd.arg("--target-dir").arg(&target);
        if let Some(t) = triple {
            cmd.args(["--target", t]);
        }
        let status = cmd.status().expect("run cargo for extensions/");
        assert!(
            status.success(),
            "building extensions/ failed (is `rustup target add wasm32-wasip1` done?)"
        );
    }
    gather(&target.join("release"), "so", &out);
    gather(&target.join("wasm32-wasip1/release"), "wasm", &out);
    out
}

/// Copies every `*.EXT` of `from` into `to` (write and rename: other test binaries may be
/// loading the previous copy).
fn gather(from: &Path, ext: &str, to: &Path) {
    for entry in fs::read_dir(from).expect("read extension build dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == ext) {
            let name = path.file_name().expect("file name");
            let tmp = to.join(format!(
                ".{}.{}",
                name.to_string_lossy(),
                std::process::id()
            ));
            fs::copy(&path, &tmp).expect("copy extension");
            fs::rename(&tmp, to.join(name)).expect("install extension");
        }
    }
}
