//! Stream grafts that change length, `zlib:URL` and `seal:URL`, stacked over real servers
//! (nginx WebDAV, moto S3) under `roam run`: files written through them read back
//! byte-exact by a later run with an empty cache (so through the server and the layer's
//! decoding), `stat` and `ls` show plaintext sizes while the server holds the framed,
//! encoded bytes; a range read of a large file fetches only its frames (nginx's log); a
//! byte flipped or cut off on the server is `EIO`. The frame-level attacks (frames swapped,
//! a frame of another file, a forged header) are in the layer's unit tests. Through
//! `roam mount` the same files read and write alike. And a black-box graft: an access
//! policy (the `acl` extension, `[access]` in roam.toml) refusing objects with `EACCES`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::fuse::FuseMount;
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::{noise, write_file, Scratch};

const FRAME: usize = 64 << 10;
const SIZES: [usize; 6] = [0, 1, FRAME - 1, FRAME, FRAME + 1, 5 << 20];

/// A server, a local directory of files to copy in (`$L`) and a key file.
struct Setup {
    b: Backend,
    local: Scratch,
    key: PathBuf,
}

impl Setup {
    fn new(kind: &str) -> Setup {
        let local = Scratch::new("grafts");
        let key = local.join("key");
        write_file(&key, &noise(32, 99), 0o600);
        Setup {
            b: Backend::new(kind),
            local,
            key,
        }
    }

    fn file(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.local.join("l").join(name);
        write_file(&p, data, 0o644);
        p
    }

    /// `roam run` with a fresh cache: `/z` is `zlib:`, `/s` is `seal:`, `/r` the raw
    /// server, all over the same tree.
    fn sh(&self, script: &str) -> Output {
        let mut roam = Roam::new()
            .env("ROAM_SEAL_KEY_FILE", &self.key)
            .env("L", self.local.join("l"));
        for (k, v) in self.b.env() {
            roam = roam.env(k, v);
        }
        let url = &self.b.url;
        let o = roam.sh(
            &[
                "-m",
                &format!("/z=zlib:{url}"),
                "-m",
                &format!("/s=seal:{url}"),
                "-m",
                &format!("/r={url}"),
            ],
            script,
        );
        eprintln!("roam stderr: {}", stderr(&o));
        o
    }

    fn ok(&self, script: &str) -> String {
        let o = self.sh(script);
        assert!(o.status.success(), "{script}: {}", stderr(&o));
        stdout(&o)
    }
}

/// Bytes of plain text (compressible) with random bytes mixed in, `len` long.
fn contents(len: usize) -> Vec<u8> {
    let text = b"roam plaintext marker: the quick brown fox jumps over the lazy dog\n";
    let random = noise(len, len as u64);
    (0..len)
        .map(|i| {
            if i % 5 == 0 {
                random[i]
            } else {
                text[i % text.len()]
            }
        })
        .collect()
}

/// Stored size of a sealed file of `len` bytes: header, index, tag per frame.
fn sealed_len(len: usize) -> usize {
    let frames = len.div_ceil(FRAME).max(1);
    48 + frames * (4 + 16) + len
}

fn round_trips(kind: &str) {
    let s = Setup::new(kind);
    for len in SIZES {
        s.file(&format!("f{len}"), &contents(len));
    }
    s.ok("set -e; for f in $L/*; do n=$(basename $f); cp $f /z/z-$n; cp $f /s/s-$n; done");
    // A new run, a new cache: every byte comes from the server through the layers.
    let mut script = String::from("set -e; ls -l /z /s | awk 'NF > 5 {print $5, $9}' | sort -k2; ");
    for len in SIZES {
        script += &format!(
            "cmp $L/f{len} /z/z-f{len}; cmp $L/f{len} /s/s-f{len}; \
             echo {len} $(stat -c %s /z/z-f{len} /s/s-f{len} /r/s-f{len}); \
             ! grep -q 'plaintext marker' /r/s-f{len}; "
        );
    }
    let out = s.ok(&script);
    for len in SIZES {
        assert!(out.contains(&format!("{len} z-f{len}\n")), "ls: {out}");
        assert!(out.contains(&format!("{len} s-f{len}\n")), "ls: {out}");
        let stat = format!("{len} {len} {len} {}\n", sealed_len(len));
        assert!(out.contains(&stat), "want {stat} in {out}");
    }
    let raw = s.ok("stat -c %s /r/z-f5242880");
    let stored: usize = raw.trim().parse().unwrap();
    assert!(stored < (5 << 20) * 9 / 10, "compressed: {stored}");
}

#[test]
fn zlib_and_seal_round_trip_over_webdav() {
    round_trips("dav");
}

#[test]
fn zlib_and_seal_round_trip_over_s3() {
    round_trips("s3");
}

#[test]
fn a_range_read_fetches_only_its_frames() {
    let s = Setup::new("dav");
    let len = 16 << 20;
    let data = noise(len, 5);
    s.file("big", &data);
    s.ok("cp $L/big /s/s-big");
    let before = s.b.access_log().len();
    let out = s.local.join("part");
    // One read of 8 KiB across a frame boundary, inside one of roam-vfs's 1 MiB chunks of
    // a large file (a second read going on from it would start a stream to the end; `dd`
    // dup2s its input, which waits for the whole file).
    let at = (5 << 20) - FRAME - 4096;
    s.ok(&format!(
        "python3 -c 'import os; fd = os.open(\"/s/s-big\", os.O_RDONLY); \
         open(\"{}\", \"wb\").write(os.pread(fd, 8192, {at}))'",
        out.display()
    ));
    assert_eq!(std::fs::read(&out).unwrap(), data[at..at + 8192]);
    let (gets, bytes) = common::gets_in(&s.b.access_log()[before..], "s-big");
    eprintln!("{gets} GETs, {bytes} bytes of {}", sealed_len(len));
    assert!(gets >= 2, "the layout, then frames: {gets}");
    // Its chunk's 16 frames (1 MiB and their tags) and the header and index, twice.
    assert!(
        bytes < (1 << 20) + (32 << 10),
        "{bytes} bytes fetched for 8 KiB of 16 MiB"
    );
}

fn tampered(kind: &str) {
    let s = Setup::new(kind);
    s.file("t", &contents(200_000));
    s.ok("set -e; for n in a b; do cp $L/t /s/s-$n; cp $L/t /z/z-$n; done");
    // Behind the layer's back, through the raw mount: a byte flipped in a frame, a byte cut.
    s.ok("set -e; for f in /r/s-a /r/z-a; do printf '\\377' | dd of=$f bs=1 seek=150000 conv=notrunc 2>/dev/null; done; \
          truncate -s -1 /r/s-b /r/z-b");
    for name in ["s-a", "z-a", "s-b", "z-b"] {
        let dir = &name[..1];
        let o = s.sh(&format!("cat /{dir}/{name} > /dev/null"));
        let err = stderr(&o);
        assert!(!o.status.success(), "{name}: read tampered data");
        assert!(err.contains("Input/output error"), "{name}: {err}");
    }
}

#[test]
fn tampering_is_eio_over_webdav() {
    tampered("dav");
}

#[test]
fn tampering_is_eio_over_s3() {
    tampered("s3");
}

#[test]
fn seal_without_a_usable_key_is_refused_at_start() {
    let s = Setup::new("dav");
    std::fs::set_permissions(&s.key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let o = s.sh("true");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("others may read it"), "{err}");
    let o = Roam::new().sh(&["-m", "/s=seal:mem:"], "true");
    assert!(stderr(&o).contains("ROAM_SEAL_KEY_FILE"), "{}", stderr(&o));
    assert!(!Path::new("/s").exists());
}

#[test]
fn zlib_and_seal_through_roam_mount() {
    let s = Setup::new("dav");
    let data = contents(FRAME * 3 + 7);
    let local = s.file("f", &data);
    s.ok("set -e; cp $L/f /z/z-f; cp $L/f /s/s-f");
    for (layer, name) in [("zlib", "z-f"), ("seal", "s-f")] {
        let roam = Roam::new().env("ROAM_SEAL_KEY_FILE", &s.key);
        let m = FuseMount::start(roam, Some(&format!("{layer}:{}", s.b.url)), &[]);
        let l = local.display();
        let script = format!(
            "set -e; cmp {l} /w/{name}; stat -c %s /w/{name}; cp {l} /w/new-{name}; cmp {l} /w/new-{name}"
        );
        let o = m.sh(&script, &[]);
        assert!(
            o.status.success(),
            "{layer}: {}\n{}",
            stderr(&o),
            m.log_text()
        );
        assert_eq!(stdout(&o).trim(), data.len().to_string(), "{layer}");
    }
    // What the mounts wrote reads back through `roam run`'s layers.
    s.ok("set -e; cmp $L/f /z/new-z-f; cmp $L/f /s/new-s-f");
}

#[test]
fn an_access_policy_refuses_names_under_both_frontends() {
    let b = Backend::serving("dav", |srv| {
        for name in ["notes.txt", "id.key", "public.key", "private/plan.txt"] {
            write_file(&srv.join(name), name.as_bytes(), 0o644);
        }
    });
    let scratch = Scratch::new("acl");
    let config = scratch.join("roam.toml");
    // Objects as roam's messages name them: WebDAV's over http.
    let u = b.url.replace("dav://", "http://");
    let rules = format!(r#"["allow={u}/public.key", "deny=*.key", "deny={u}/private/*"]"#);
    write_file(
        &config,
        format!("[access]\npolicy = \"acl\"\nargs = {rules}\n").as_bytes(),
        0o644,
    );
    let roam = || {
        Roam::new()
            .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
            .env("ROAM_CONFIG", &config)
    };
    let script = "for f in notes.txt public.key id.key private/plan.txt; do cat /w/$f >/dev/null 2>&1 && echo $f ok || echo $f refused; done";
    let run = roam().sh(&["-m", &format!("/w={}", b.url)], script);
    let want = "notes.txt ok\npublic.key ok\nid.key refused\nprivate/plan.txt refused\n";
    assert_eq!(stdout(&run), want, "{}", stderr(&run));
    let o = roam().sh(&["-m", &format!("/w={}", b.url)], "cat /w/id.key");
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    // Through `roam mount`: the same objects, the same answers.
    let m = FuseMount::start(roam(), Some(&b.url), &[]);
    let o = m.sh(script, &[]);
    assert_eq!(stdout(&o), want, "{}\n{}", stderr(&o), m.log_text());
}
