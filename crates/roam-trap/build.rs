//! Builds the fast path's preloaded library (`preload/fastpath.c`) into a shared object in
//! `OUT_DIR`, which the crate embeds (`src/preload.rs`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=preload/fastpath.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut build = cc::Build::new();
    build
        .file("preload/fastpath.c")
        .pic(true)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    let objects = build.compile_intermediates();
    let status = build
        .get_compiler()
        .to_command()
        .args(["-shared", "-Wl,-z,now", "-o"])
        .arg(out.join("libroam_fastpath.so"))
        .args(&objects)
        .arg("-ldl")
        .status()
        .expect("running the C compiler");
    assert!(status.success(), "linking the fast path's library failed");
}
