//! Stream grafts that change length, `zlib:URL` and `seal:URL`, stacked over real servers
//! (nginx WebDAV, moto S3) under `roam run`: files written through them read back
//! byte-exact by a later run with an empty cache (so through the server and the layer's
//! decoding), `stat` and `ls` show plaintext sizes while the server holds the framed,
//! encoded bytes; a range read of a large file fetches only its frames (nginx's log); a
//! byte flipped or cut off on the server is `EIO`; a write meeting a full cache disk or a
//! full spool disk keeps the server's version and the change. The frame-level attacks (frames swapped,
//! a frame of another file, a forged header) are in the layer's unit tests. Through
//! `roam mount` the same files read and write alike. And a black-box graft: an access
//! policy (the `acl` extension, `[access]` in roam.toml) refusing objects with `EACCES`.
//!
//! Codec extensions (`codec:NAME:URL`): the same grafts run as sandboxed extensions inside
//! roam's framing. The `zlib` and `seal` examples round-trip byte-exact and read and write
//! the same files as the native layers (they declare the native codec numbers); a range
//! read fetches only its frames; a flipped or cut byte is `EIO`; the `faults` extension as
//! a codec (a frame decoded a byte short, a reply that does not decode) is `EIO` naming it
//! with one warning, never other bytes; through `roam mount` alike.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::fuse::FuseMount;
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::{noise, write_file, Scratch, Tmpfs};

const FRAME: usize = 64 << 10;
const SIZES: [usize; 6] = [0, 1, FRAME - 1, FRAME, FRAME + 1, 5 << 20];
const CODEC_SIZES: [usize; 5] = [0, 1, FRAME - 1, FRAME + 1, 3 << 20];

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

    fn roam(&self) -> Roam {
        let mut roam = Roam::new()
            .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
            .env("ROAM_SEAL_KEY_FILE", &self.key)
            .env("L", self.local.join("l"));
        for (k, v) in self.b.env() {
            roam = roam.env(k, v);
        }
        roam
    }

    /// `roam run` with a fresh cache: `/z` and `/s` are the native `zlib:` and `seal:`
    /// layers, `/cz` and `/cs` the `zlib` and `seal` codec extensions, `/f` the `faults` extension as a
    /// codec, `/r` the raw server, all over the same tree.
    fn sh_with(&self, roam: Roam, script: &str) -> Output {
        let url = &self.b.url;
        let mounts = [
            format!("/cz=codec:zlib:{url}"),
            format!("/cs=codec:seal:{url}"),
            format!("/z=zlib:{url}"),
            format!("/s=seal:{url}"),
            format!("/f=codec:faults:{url}"),
            format!("/r={url}"),
        ];
        let args: Vec<&str> = mounts.iter().flat_map(|m| ["-m", m.as_str()]).collect();
        let o = roam.sh(&args, script);
        eprintln!("roam stderr: {}", stderr(&o));
        o
    }

    fn sh(&self, script: &str) -> Output {
        self.sh_with(self.roam(), script)
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
    s.ok(&format!(
        "set -e; {FLIP} /r/s-a /r/z-a; truncate -s -1 /r/s-b /r/z-b"
    ));
    unreadable(&s, &["/s/s-a", "/z/z-a", "/s/s-b", "/z/z-b"]);
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

fn codec_round_trips(kind: &str) {
    let s = Setup::new(kind);
    for len in CODEC_SIZES {
        s.file(&format!("f{len}"), &contents(len));
    }
    // Written by the extensions and by the native layers.
    s.ok("set -e; for f in $L/*; do n=$(basename $f); \
          cp $f /cz/cz-$n; cp $f /cs/cs-$n; cp $f /z/z-$n; cp $f /s/s-$n; done");
    // A new run, a new cache: each form reads its own files and the other's.
    let mut script = String::from("set -e; ");
    for len in CODEC_SIZES {
        let n = format!("f{len}");
        script += &format!(
            "for p in /cz/cz /z/cz /cz/z /cs/cs /s/cs /cs/s; do cmp $L/{n} $p-{n}; done; \
             echo {len} $(stat -c %s /cz/cz-{n} /cs/cs-{n}) $(cmp -s /r/cs-{n} /r/s-{n} && echo same || echo differ); \
             ! grep -q 'plaintext marker' /r/cs-{n}; "
        );
    }
    let out = s.ok(&script);
    for len in CODEC_SIZES {
        // Each upload has its own random file id: the stored files differ.
        let want = format!("{len} {len} {len} differ\n");
        assert!(out.contains(&want), "want {want:?} in {out}");
    }
    let stored: usize = s.ok("stat -c %s /r/cz-f3145728").trim().parse().unwrap();
    assert!(stored < (3 << 20) * 9 / 10, "compressed: {stored}");
}

#[test]
fn codec_extensions_round_trip_and_share_files_with_the_native_layers_over_webdav() {
    codec_round_trips("dav");
}

#[test]
fn codec_extensions_round_trip_and_share_files_with_the_native_layers_over_s3() {
    codec_round_trips("s3");
}

#[test]
fn a_range_read_through_a_codec_extension_fetches_only_its_frames() {
    let s = Setup::new("dav");
    let len = 16 << 20;
    let data = noise(len, 5);
    s.file("big", &data);
    s.ok("cp $L/big /cs/cs-big");
    let before = s.b.access_log().len();
    let out = s.local.join("part");
    let at = (5 << 20) - FRAME - 4096;
    s.ok(&format!(
        "python3 -c 'import os; fd = os.open(\"/cs/cs-big\", os.O_RDONLY); \
         open(\"{}\", \"wb\").write(os.pread(fd, 8192, {at}))'",
        out.display()
    ));
    assert_eq!(std::fs::read(&out).unwrap(), data[at..at + 8192]);
    let (gets, bytes) = common::gets_in(&s.b.access_log()[before..], "cs-big");
    eprintln!("{gets} GETs, {bytes} bytes of a 16 MiB file");
    assert!(gets >= 2, "the layout, then frames: {gets}");
    assert!(
        bytes < (1 << 20) + (32 << 10),
        "{bytes} bytes fetched for 8 KiB of 16 MiB"
    );
}

/// Behind a layer's back, through the raw mount: the byte three quarters into each named
/// file inverted (a sealed file's bytes are random there, so writing a fixed value would
/// leave one file in 256 as it was).
const FLIP: &str = "python3 -c 'import os, sys\n\
for f in sys.argv[1:]:\n    fd = os.open(f, os.O_RDWR)\n    at = os.fstat(fd).st_size * 3 // 4\n    \
os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0xff]), at)\n    os.close(fd)'";

/// `cat` of each name fails with `EIO`; returns stderr of each run.
fn unreadable(s: &Setup, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let o = s.sh(&format!("cat {name} > /dev/null"));
            let err = stderr(&o);
            assert!(!o.status.success(), "{name}: read damaged data");
            assert!(err.contains("Input/output error"), "{name}: {err}");
            err
        })
        .collect()
}

#[test]
fn tampering_is_eio_through_codec_extensions() {
    let s = Setup::new("dav");
    s.file("t", &contents(200_000));
    s.ok("set -e; for n in a b; do cp $L/t /cs/cs-$n; cp $L/t /cz/cz-$n; done");
    s.ok(&format!(
        "set -e; {FLIP} /r/cs-a /r/cz-a; truncate -s -1 /r/cs-b /r/cz-b"
    ));
    unreadable(&s, &["/cs/cs-a", "/cz/cz-a", "/cs/cs-b", "/cz/cz-b"]);
    // The untouched copy of the same bytes is still read whole.
    s.ok("set -e; cp $L/t /cs/cs-c; cmp $L/t /cs/cs-c");
}

#[test]
fn a_lying_codec_extension_is_eio_naming_it_once() {
    let s = Setup::new("dav");
    s.file("honest", &contents(3 * FRAME));
    s.file("short", &[b"short".as_slice(), &contents(FRAME)].concat());
    s.file("junk", &[b"junk".as_slice(), &contents(FRAME)].concat());
    s.ok("set -e; for n in honest short junk; do cp $L/$n /f/$n; done");
    s.ok("cmp $L/honest /f/honest");
    let errs = unreadable(&s, &["/f/short", "/f/junk"]);
    for (err, why) in errs.iter().zip(["not 65536", "malformed"]) {
        let named: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("extension `faults`"))
            .collect();
        assert_eq!(named.len(), 1, "one warning naming it: {err}");
        assert!(named[0].contains(why), "{err}");
    }
    // A codec that wants a key, without a key file: EIO saying which is missing.
    s.ok("cp $L/honest /cs/keyed");
    let o = Roam::new()
        .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
        .sh(
            &["-m", &format!("/cs=codec:seal:{}", s.b.url)],
            "cat /cs/keyed",
        );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("Input/output error"), "{err}");
    assert!(
        err.contains("needs a key file named by ROAM_SEAL_KEY_FILE"),
        "{err}"
    );
}

#[test]
fn a_codec_extension_through_roam_mount() {
    let s = Setup::new("dav");
    let data = contents(FRAME * 3 + 7);
    let local = s.file("f", &data);
    s.ok("cp $L/f /s/native");
    let m = FuseMount::start(s.roam(), Some(&format!("codec:seal:{}", s.b.url)), &[]);
    let l = local.display();
    let o = m.sh(
        &format!("set -e; cmp {l} /w/native; stat -c %s /w/native; cp {l} /w/new; cmp {l} /w/new"),
        &[],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), m.log_text());
    assert_eq!(stdout(&o).trim(), data.len().to_string());
    drop(m);
    // What the mount's extension wrote, the native layer reads.
    s.ok("cmp $L/f /s/new");
}

/// A write through the native and the extension's layers meets a full disk: the cache's
/// (the plaintext copy) or the one the encoded bytes are spooled on (`TMPDIR`). The copy
/// fails, the server keeps the version it had, byte for byte, and `roam status` names the
/// change it kept.
#[test]
fn a_layered_write_meeting_a_full_disk_keeps_the_server_s_version() {
    let s = Setup::new("dav");
    s.file("old", &contents(100_000));
    s.file("new", &contents(5 << 20));
    s.ok("set -e; for d in s cs z cz; do cp $L/old /$d/f-$d; done");
    let stored = |d: &str| std::fs::read(s.b.backend(&format!("f-{d}"))).unwrap();
    for full in ["cache", "spool"] {
        for d in ["s", "cs", "z", "cz"] {
            let before = stored(d);
            let scratch = Scratch::new("full");
            let (cache, spool) = (scratch.join("c"), scratch.join("t"));
            let small = Tmpfs::mount(if full == "cache" { &cache } else { &spool }, "2m");
            std::fs::create_dir_all(&spool).unwrap();
            let roam = s.roam().env("ROAM_CACHE_DIR", &cache).env("TMPDIR", &spool);
            let o = s.sh_with(roam, &format!("cp $L/new /{d}/f-{d}"));
            let what = format!("{full} full, /{d}");
            assert!(!o.status.success(), "{what}: the copy succeeded");
            assert!(
                stderr(&o).contains("No space left on device"),
                "{what}: {}",
                stderr(&o)
            );
            assert!(stored(d) == before, "{what}: the server's version changed");
            let status = roam_status(&cache);
            let named = format!("\n  /{d}/f-{d}  ");
            assert!(status.contains(&named), "{what}: {status}");
            drop(small);
        }
    }
    // What the server kept still reads whole through each layer.
    s.ok("set -e; for d in s cs z cz; do cmp $L/old /$d/f-$d; done");
}

/// What `roam status` says of the cache at `cache`.
fn roam_status(cache: &Path) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", cache)
        .arg("status")
        .output()
        .unwrap();
    stdout(&o)
}
