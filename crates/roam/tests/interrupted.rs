//! Signals during calls roam serves, under `roam run`: a program whose timer interrupts
//! it every 200 µs (a handler with `SA_RESTART`, as `signal(3)` installs) makes and
//! removes directories and files on a real server, and sees what a local disk gives:
//! no call fails, none is made twice (a remote `mkdir` cut off with `EINTR` after it took
//! effect, then made again by the restart, failed with `EEXIST`), nothing is left behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{stderr, stdout, Backend};
use roam_testkit::Scratch;

/// Builds `tests/fixtures/interrupted.c`.
fn build(dir: &Path) -> PathBuf {
    let out = dir.join("interrupted");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/interrupted.c");
    let status = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running cc");
    assert!(status.success(), "building interrupted.c failed");
    out
}

fn interrupted_calls_are_not_cut_off(kind: &str) {
    let scratch = Scratch::new("interrupted");
    let program = build(&scratch.join(""));
    let b = Backend::new(kind);
    let o = b.sh(&format!("{} /w 1 150", program.display()));
    assert_eq!(stdout(&o), "bad 0\n", "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(b.backend("")).unwrap().collect();
    assert!(left.is_empty(), "left on the server: {left:?}");
}

#[test]
fn interrupted_calls_are_not_cut_off_on_webdav() {
    interrupted_calls_are_not_cut_off("dav");
}

#[test]
fn interrupted_calls_are_not_cut_off_on_sftp() {
    interrupted_calls_are_not_cut_off("sftp");
}
