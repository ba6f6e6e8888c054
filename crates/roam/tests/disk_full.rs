//! A full cache disk (the cache on a small tmpfs), through both frontends: reads of every
//! size class make room by evicting older copies, a file that cannot fit fails with ENOSPC
//! (or, under FUSE, may be read whole in turns) — never wrong bytes, never a hang — and
//! gives its space back, so smaller files and the head of the big one are still read; a write that meets the full disk fails with
//! ENOSPC, the server keeps its version, and the change is kept and named by `roam status`;
//! a mount lives on through all of it.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{stderr, stdout, Backend, Frontend, Roam};
use roam_testkit::{noise, write_file, Scratch, Tmpfs};

/// sha256 of each file, as `sha256sum` prints it.
fn sums(dir: &Path, names: &[&str]) -> String {
    let o = Command::new("sha256sum")
        .args(names)
        .current_dir(dir)
        .output()
        .unwrap();
    stdout(&o)
}

fn status(roam_cache: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", roam_cache)
        .env("ROAM_CONFIG", roam_cache.with_file_name("none.toml"))
        .arg("status")
        .output()
        .unwrap();
    stdout(&o)
}

/// Runs `script` on `b` with a cache on a tmpfs of `size`; the output, the time it took and
/// what `roam status` said after.
fn on_small_cache(b: &Backend, size: &str, script: &str) -> (Output, Duration, String) {
    // A cache of its own, alive after `roam` (whose scratch goes with it) is used.
    let scratch = Scratch::new("full");
    let cache = scratch.join("c");
    let roam = Roam::new();
    let _full = Tmpfs::mount(&cache, size);
    let started = Instant::now();
    let o = b.sh_with(roam.env("ROAM_CACHE_DIR", &cache), script);
    let took = started.elapsed();
    (o, took, status(&cache))
}

fn reads(kind: &str, frontend: Frontend) {
    let b = Backend::serving(kind, |srv| {
        write_file(&srv.join("small"), &noise(10 << 10, 1), 0o644);
        write_file(&srv.join("mid"), &noise(3 << 20, 2), 0o644);
        write_file(&srv.join("mid2"), &noise(3 << 20, 3), 0o644);
        write_file(&srv.join("big"), &noise(12 << 20, 4), 0o644);
    })
    .through(frontend);
    let srv = b.backend("");
    // Each 3 MB file fits a 4 MB cache only once the other is evicted; the 12 MB one never.
    let script = "cd /w && sha256sum mid mid2 mid; sha256sum big; echo big: $?; \
                  head -c 1000000 big | sha256sum; sha256sum small";
    let (o, took, status) = on_small_cache(&b, "4m", script);
    let head = Command::new("sh")
        .arg("-c")
        .arg("head -c 1000000 big | sha256sum")
        .current_dir(&srv)
        .output()
        .unwrap();
    // The head of a file too big for the cache reads (its ranges arrive on demand).
    let head = stdout(&head);
    // `sha256sum big` fails with ENOSPC; or, where every read is a request (FUSE), it may
    // get through with the file's exact bytes, its ranges fetched and given back in turn.
    let big = match stdout(&o).contains("big: 0") {
        true => format!("{}big: 0\n", sums(&srv, &["big"])),
        false => {
            assert!(
                stderr(&o).contains("big: No space left on device"),
                "{frontend:?}: {}",
                stderr(&o)
            );
            "big: 1\n".to_owned()
        }
    };
    let expected = format!(
        "{}{big}{head}{}",
        sums(&srv, &["mid", "mid2", "mid"]),
        sums(&srv, &["small"])
    );
    assert_eq!(stdout(&o), expected, "{frontend:?}: {}", stderr(&o));
    assert!(
        took < Duration::from_secs(60),
        "{frontend:?}: took {took:?}"
    );
    assert!(status.contains("pending:  0 change(s)"), "{status}");
}

#[test]
fn reads_evict_older_copies_and_what_cannot_fit_is_enospc_under_run() {
    reads("http", Frontend::Trap);
}

#[test]
fn reads_evict_older_copies_and_what_cannot_fit_is_enospc_on_a_mount() {
    reads("http", Frontend::Fuse);
}

/// SFTP streams its large files too (ranges of a handle): the same outcomes.
#[test]
fn sftp_reads_evict_older_copies_and_what_cannot_fit_is_enospc_under_run() {
    reads("sftp", Frontend::Trap);
}

fn writes(kind: &str, frontend: Frontend) {
    let b = Backend::serving(kind, |srv| {
        write_file(&srv.join("f.bin"), &noise(1 << 20, 5), 0o644);
    })
    .through(frontend);
    let before = sums(&b.backend(""), &["f.bin"]);
    let new = b.backend("").with_file_name("new.bin");
    write_file(&new, &noise(5 << 20, 6), 0o644);
    let script = format!("cp {} /w/f.bin; echo cp: $?", new.display());
    let (o, took, status) = on_small_cache(&b, "2m", &script);
    let what = format!("{kind} {frontend:?}");
    assert_eq!(stdout(&o), "cp: 1\n", "{what}: {}", stderr(&o));
    // The write and the close both say why.
    for call in ["error writing", "failed to close"] {
        assert!(
            stderr(&o).contains(&format!("{call} '/w/f.bin': No space left on device")),
            "{what}: {}",
            stderr(&o)
        );
    }
    assert_eq!(sums(&b.backend(""), &["f.bin"]), before, "{what}: replaced");
    assert!(took < Duration::from_secs(60), "{what}: took {took:?}");
    // `roam run` does not see the program's writes, only the full disk at its close.
    let why = match frontend {
        Frontend::Trap => "/w/f.bin  KEPT, not uploaded: the cache disk was full when it was closed",
        Frontend::Fuse => "/.roam-mount/f.bin  KEPT, not uploaded: a write to roam's copy failed (No space left on device",
        Frontend::RunFuse => unreachable!("no case runs under roam run --fuse"),
    };
    assert!(status.contains(why), "{what}: {status}");
}

macro_rules! write_cases {
    ($($name:ident => $kind:literal, $frontend:ident;)*) => {
        $(#[test] fn $name() { writes($kind, Frontend::$frontend) })*
    };
}

write_cases! {
    a_write_into_a_full_cache_keeps_the_server_s_version_dav_run => "dav", Trap;
    a_write_into_a_full_cache_keeps_the_server_s_version_dav_mount => "dav", Fuse;
    a_write_into_a_full_cache_keeps_the_server_s_version_sftp_run => "sftp", Trap;
    a_write_into_a_full_cache_keeps_the_server_s_version_sftp_mount => "sftp", Fuse;
}
