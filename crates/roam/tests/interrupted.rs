//! Signals during calls roam serves, under `roam run`: a program whose timer interrupts
//! it every 200 µs (a handler with `SA_RESTART`, as `signal(3)` installs) makes and
//! removes directories and files on a real server, and sees what a local disk gives:
//! no call fails, none is made twice (a remote `mkdir` cut off with `EINTR` after it took
//! effect, then made again by the restart, failed with `EEXIST`), nothing is left behind.
//! And Python, whose handlers have no `SA_RESTART`, under a 1 ms timer: every open of a
//! remote file gets through with the file's bytes, every close of one it wrote uploads.

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

/// Python under a 1 ms `signal.setitimer` opens and reads 10 remote files 200 times
/// (fetched on their first open, then cached; roam makes each open itself), then opens,
/// writes and closes 10 others 200 times (each close uploads): no call fails, none reads
/// other bytes, the server has each file's last round. Taken over by the tracer, about
/// one close in four failed with `EINTR`.
fn python_under_a_timer(kind: &str) {
    let b = Backend::serving(kind, |srv| {
        for k in 0..10 {
            let body = format!("file {k}\n").repeat(1000);
            roam_testkit::write_file(&srv.join(format!("f{k}")), body.as_bytes(), 0o644);
        }
    });
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/interrupted_io.py");
    for what in ["read", "write"] {
        let o = b.sh(&format!("python3 {} /w 200 {what}", program.display()));
        assert_eq!(stdout(&o), "bad 0 fired\n", "{what}: {}", stderr(&o));
    }
    for k in 0..10 {
        let got = std::fs::read_to_string(b.backend(&format!("w{k}"))).unwrap();
        assert_eq!(got, format!("round {}\n", 190 + k));
    }
}

#[test]
fn python_under_a_timer_on_webdav() {
    python_under_a_timer("dav");
}

#[test]
fn python_under_a_timer_on_sftp() {
    python_under_a_timer("sftp");
}
