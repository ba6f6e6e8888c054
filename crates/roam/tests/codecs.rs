//! Codec extensions (`codec:NAME:URL`): length-changing stream grafts run as sandboxed
//! extensions inside roam's seekable framing, over real servers (nginx WebDAV, moto S3)
//! under `roam run`. The `zlib` and `seal` examples round-trip byte-exact through a later
//! run with an empty cache, and read and write the same files as the native `zlib:` and
//! `seal:` layers (they declare the native codec numbers); a range read fetches only its
//! frames (nginx's log); a byte flipped or cut on the server is `EIO`; the `faults`
//! extension as a codec (a frame decoded a byte short, a reply that does not decode) is
//! `EIO` naming it with one warning, never other bytes; through `roam mount` alike.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::fuse::FuseMount;
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::{noise, write_file, Scratch};

const FRAME: usize = 64 << 10;
const SIZES: [usize; 5] = [0, 1, FRAME - 1, FRAME + 1, 3 << 20];

/// A server, a local directory of files to copy in (`$L`) and a key file.
struct Setup {
    b: Backend,
    local: Scratch,
    key: PathBuf,
}

impl Setup {
    fn new(kind: &str) -> Setup {
        let local = Scratch::new("codecs");
        let key = local.join("key");
        write_file(&key, &noise(32, 7), 0o600);
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

    /// `roam run` with a fresh cache: `/cz` and `/cs` are the `zlib` and `seal`
    /// extensions, `/z` and `/s` the native layers, `/f` the `faults` extension as a
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

    fn ok(&self, script: &str) -> String {
        let o = self.sh_with(self.roam(), script);
        assert!(o.status.success(), "{script}: {}", stderr(&o));
        stdout(&o)
    }
}

/// Compressible text with random bytes mixed in, `len` long.
fn contents(len: usize) -> Vec<u8> {
    let text = b"roam plaintext marker: the quick brown fox jumps over the lazy dog\n";
    let random = noise(len, len as u64 + 1);
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

fn round_trips(kind: &str) {
    let s = Setup::new(kind);
    for len in SIZES {
        s.file(&format!("f{len}"), &contents(len));
    }
    // Written by the extensions and by the native layers.
    s.ok("set -e; for f in $L/*; do n=$(basename $f); \
          cp $f /cz/cz-$n; cp $f /cs/cs-$n; cp $f /z/z-$n; cp $f /s/s-$n; done");
    // A new run, a new cache: each form reads its own files and the other's.
    let mut script = String::from("set -e; ");
    for len in SIZES {
        let n = format!("f{len}");
        script += &format!(
            "for p in /cz/cz /z/cz /cz/z /cs/cs /s/cs /cs/s; do cmp $L/{n} $p-{n}; done; \
             echo {len} $(stat -c %s /cz/cz-{n} /cs/cs-{n}) $(cmp -s /r/cs-{n} /r/s-{n} && echo same || echo differ); \
             ! grep -q 'plaintext marker' /r/cs-{n}; "
        );
    }
    let out = s.ok(&script);
    for len in SIZES {
        // Each upload has its own random file id: the stored files differ.
        let want = format!("{len} {len} {len} differ\n");
        assert!(out.contains(&want), "want {want:?} in {out}");
    }
    let stored: usize = s.ok("stat -c %s /r/cz-f3145728").trim().parse().unwrap();
    assert!(stored < (3 << 20) * 9 / 10, "compressed: {stored}");
}

#[test]
fn codec_extensions_round_trip_and_share_files_with_the_native_layers_over_webdav() {
    round_trips("dav");
}

#[test]
fn codec_extensions_round_trip_and_share_files_with_the_native_layers_over_s3() {
    round_trips("s3");
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

/// `cat` of each name fails with `EIO`; returns stderr of each run.
fn unreadable(s: &Setup, roam: impl Fn() -> Roam, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let o = s.sh_with(roam(), &format!("cat {name} > /dev/null"));
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
    s.ok("set -e; for f in /r/cs-a /r/cz-a; do printf '\\377' | dd of=$f bs=1 seek=150000 conv=notrunc 2>/dev/null; done; \
          truncate -s -1 /r/cs-b /r/cz-b");
    unreadable(
        &s,
        || s.roam(),
        &["/cs/cs-a", "/cz/cz-a", "/cs/cs-b", "/cz/cz-b"],
    );
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
    let errs = unreadable(&s, || s.roam(), &["/f/short", "/f/junk"]);
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
