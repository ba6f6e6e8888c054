//! Builds the fast path's preloaded library (`preload/fastpath.c`) into a shared object in
//! `OUT_DIR`, which the crate embeds (`src/preload.rs`). Only where roam itself is built
//! against glibc: the library goes into the programs roam runs, and a roam built for musl
//! (the static executable) cannot know their libc; it embeds nothing and runs without it.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=preload/fastpath.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu") {
        std::fs::write(out.join("libroam_fastpath.so"), b"").expect("writing to OUT_DIR");
        return;
    }
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
