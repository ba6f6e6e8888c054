//! Fingerprints on demand: `user.roam.md5` and `user.roam.sha256` of remote files under
//! `roam run` (getxattr, as Python's `os.getxattr` makes it) and `roam find --hash`,
//! computed by the `digest` extension (wasm) from the bytes of a real nginx WebDAV server;
//! equal to `md5sum`/`sha256sum` of the same bytes, kept per version (asked twice, the file
//! is read once), new after the file changes, and through a `seal:` layer the plaintext's.
//! Through `roam mount --xattrs` too (without it, none: the kernel is told at once).

mod common;

use std::process::{Command, Output};

use common::fuse::FuseMount;
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::{noise, write_file, Scratch};

/// Files of the tree: empty, small, and over one 4 MiB read of the digest conversation
/// (and over roam's 8 MiB large-file size, read by ranges).
const FILES: [(&str, usize); 4] = [
    ("empty", 0),
    ("small.txt", 1000),
    ("five", 5 << 20),
    ("big", 9 << 20),
];

fn backend() -> Backend {
    Backend::serving("dav", |srv| {
        for (i, (name, len)) in FILES.iter().enumerate() {
            write_file(&srv.join(name), &noise(*len, i as u64), 0o644);
        }
    })
}

fn roam() -> Roam {
    Roam::new().env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
}

/// `md5sum` or `sha256sum` of a local file: the hex digest.
fn sum(tool: &str, path: &std::path::Path) -> String {
    let o = Command::new(tool).arg(path).output().unwrap();
    stdout(&o).split_whitespace().next().unwrap().to_owned()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// A Python program printing `user.roam.ATTR` of each name given.
fn getxattr(attr: &str) -> String {
    format!(
        "python3 -c 'import os, sys\nfor f in sys.argv[1:]: print(os.getxattr(f, \"user.roam.{attr}\").decode())'"
    )
}

#[test]
fn getxattr_under_roam_run_gives_md5sum_and_sha256sum() {
    let b = backend();
    let names: Vec<String> = FILES.iter().map(|(n, _)| format!("/w/{n}")).collect();
    let script = format!(
        "set -e; {m} {n}; {s} {n}; {s} /w/big",
        m = getxattr("md5"),
        s = getxattr("sha256"),
        n = names.join(" ")
    );
    let out = ok(b.sh_with(roam(), &script));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2 * FILES.len() + 1, "{out}");
    for (i, (name, _)) in FILES.iter().enumerate() {
        let local = b.backend(name);
        assert_eq!(lines[i], sum("md5sum", &local), "{name}");
        assert_eq!(lines[FILES.len() + i], sum("sha256sum", &local), "{name}");
    }
    assert_eq!(lines[2 * FILES.len()], lines[2 * FILES.len() - 1]);
    // Three questions about `big` (md5, sha256, sha256 again): its bytes read once.
    let (_, bytes) = common::gets_in(&b.access_log(), "big");
    assert!(
        (9 << 20..(9 << 20) + (2 << 20)).contains(&bytes),
        "{bytes} bytes read"
    );
}

#[test]
fn a_changed_file_has_a_new_fingerprint() {
    let b = backend();
    let scratch = Scratch::new("fp");
    let new = scratch.join("new");
    write_file(&new, b"other bytes\n", 0o644);
    let script = format!(
        "set -e; {s} /w/small.txt; cp {n} /w/small.txt; {s} /w/small.txt",
        s = getxattr("sha256"),
        n = new.display()
    );
    let out = ok(b.sh_with(roam(), &script));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_ne!(lines[0], lines[1]);
    assert_eq!(lines[1], sum("sha256sum", &new));
}

#[test]
fn roam_find_prints_fingerprints_as_sha256sum_does() {
    let b = backend();
    let root = format!("/{}", b.url.replace("://", "/"));
    let out = ok(roam().cli(&["find", &root, "--hash", "sha256"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), FILES.len(), "{out}");
    let mut names: Vec<&str> = FILES.iter().map(|(n, _)| *n).collect();
    names.sort();
    for (line, name) in lines.iter().zip(names) {
        let want = format!("{}  {root}/{name}", sum("sha256sum", &b.backend(name)));
        assert_eq!(*line, want);
    }
    // With a query: only the files it matches (none here: an MP3 query of no MP3s).
    let o = roam().cli(&[
        "find", &root, "--hash", "md5", "--ext", "id3", "--where", "artist=x",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn through_a_seal_layer_the_fingerprint_is_the_plaintexts() {
    let b = Backend::new("dav");
    let scratch = Scratch::new("fp");
    let (key, plain) = (scratch.join("key"), scratch.join("plain"));
    write_file(&key, &noise(32, 1), 0o600);
    write_file(&plain, &noise(300_000, 2), 0o644);
    let seal = |script: &str| {
        roam()
            .env("ROAM_SEAL_KEY_FILE", &key)
            .sh(&["-m", &format!("/s=seal:{}", b.url)], script)
    };
    ok(seal(&format!("cp {} /s/f", plain.display())));
    let out = ok(seal(&format!("{} /s/f", getxattr("sha256"))));
    assert_eq!(out.trim(), sum("sha256sum", &plain));
    assert_ne!(
        sum("sha256sum", &b.backend("f")),
        out.trim(),
        "the server holds ciphertext"
    );
}

#[test]
fn getxattr_through_roam_mount_with_xattrs() {
    let b = backend();
    let m = FuseMount::start(roam(), Some(&b.url), &["--xattrs"]);
    let script = format!(
        "set -e; {m} /w/small.txt /w/big; {s} /w/five; getfattr -d /w/five; echo listed",
        m = getxattr("md5"),
        s = getxattr("sha256"),
    );
    let out = ok(m.sh(&script, &[]));
    let want = format!(
        "{}\n{}\n{}\nlisted\n",
        sum("md5sum", &b.backend("small.txt")),
        sum("md5sum", &b.backend("big")),
        sum("sha256sum", &b.backend("five"))
    );
    assert_eq!(out, want);
    // Another attribute is not there; a write still works (the kernel asks first).
    let o = m.sh(
        "python3 -c 'import os; os.getxattr(\"/w/five\", \"user.other\")' 2>&1; \
         echo more >> /w/small.txt && tail -c 5 /w/small.txt",
        &[],
    );
    let out = stdout(&o);
    assert!(
        out.contains("No data available") && out.ends_with("more\n"),
        "{out}"
    );
}

#[test]
fn roam_mount_without_xattrs_has_none() {
    let b = backend();
    let m = FuseMount::start(roam(), Some(&b.url), &[]);
    let o = m.sh(&format!("{} /w/five 2>&1", getxattr("sha256")), &[]);
    assert!(
        stdout(&o).contains("Operation not supported"),
        "{}",
        stdout(&o)
    );
}
