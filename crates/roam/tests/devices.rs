//! Device sources (`src:NAME:URL`): the `camera` extension shows a real WebDAV server's
//! directory of JPEGs (made by Pillow, with EXIF DateTimeOriginal) as folders by the day
//! each was taken, under `roam run` and through `roam mount`: the listing, the exact bytes
//! (and Pillow decodes them), a range read that fetches only its range (nginx's log),
//! read-only, and a photo added on the server shown at the next listing. The `faults` extension's lying trees (a name with `/`, a directory `..`, a
//! size past the file's end, 200,001 entries) are EIO with one line naming it, and roam
//! goes on serving. A photo replaced on the server after the listing is its old bytes or
//! `ESTALE`, never a span of the new photo.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::fuse::FuseMount;
use common::{gets_in, stderr, stdout, Backend, Roam};

fn roam() -> Roam {
    Roam::new().env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\nstdout: {}",
        stderr(o),
        stdout(o)
    );
    stdout(o)
}

/// The photos: name, EXIF date, bytes after the image (the big one is read by ranges).
const PHOTOS: [(&str, &str, usize); 4] = [
    ("IMG_0001.jpg", "2024:06:01 09:00:00", 0),
    ("IMG_0002.JPG", "2024:06:01 18:30:00", 3000),
    ("DCIM/IMG_0003.jpg", "2024:07:14 12:00:00", 12 << 20),
    ("scan.jpeg", "", 0),
];

/// What `find` shows of the camera's tree, sorted.
const TREE: &str = ".
./2024-06-01
./2024-06-01/IMG_0001.jpg
./2024-06-01/IMG_0002.JPG
./2024-07-14
./2024-07-14/DCIM_IMG_0003.jpg
./undated
./undated/scan.jpeg
";

/// Where each photo of the tree came from.
const SOURCES: [(&str, &str); 4] = [
    ("2024-06-01/IMG_0001.jpg", "IMG_0001.jpg"),
    ("2024-06-01/IMG_0002.JPG", "IMG_0002.JPG"),
    ("2024-07-14/DCIM_IMG_0003.jpg", "DCIM/IMG_0003.jpg"),
    ("undated/scan.jpeg", "scan.jpeg"),
];

/// `md5sum`'s hex digest of `data`.
fn md5(data: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("md5sum");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    stdout(&out).split_whitespace().next().unwrap().to_owned()
}

fn photo(path: &Path, date: &str, pad: usize, seed: usize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exif_jpeg.py");
    let o = Command::new("python3")
        .arg(script)
        .arg(path)
        .args([date, &pad.to_string(), &seed.to_string()])
        .output()
        .expect("python3");
    assert!(
        o.status.success(),
        "exif_jpeg.py (needs Pillow): {}",
        stderr(&o)
    );
}

/// WebDAV (nginx) serving the photos and a file that is not one.
fn camera() -> Backend {
    Backend::serving("dav", |srv| {
        for (i, (name, date, pad)) in PHOTOS.iter().enumerate() {
            photo(&srv.join(name), date, *pad, i);
        }
        std::fs::write(srv.join("notes.txt"), "not a photo\n").unwrap();
    })
}

/// The tree, the md5 of each photo, and whether Pillow decodes them, at `$R`.
const LOOK: &str = "set -e; cd $R; find . | LC_ALL=C sort; \
    for f in 2024-06-01/IMG_0001.jpg 2024-06-01/IMG_0002.JPG 2024-07-14/DCIM_IMG_0003.jpg undated/scan.jpeg; do md5sum $f; done; \
    python3 -c 'import sys; from PIL import Image; [Image.open(f).load() for f in sys.argv[1:]]; print(\"decoded\")' */*; \
    if touch 2024-06-01/new.jpg 2>/dev/null; then echo wrote; fi";

fn check_look(out: &str, b: &Backend) {
    assert!(out.starts_with(TREE), "{out}");
    let sums: Vec<&str> = out[TREE.len()..].lines().collect();
    for (line, (shown, source)) in sums.iter().zip(SOURCES) {
        let want = md5(&std::fs::read(b.backend(source)).unwrap());
        assert_eq!(*line, format!("{want}  {shown}"), "{out}");
    }
    assert_eq!(
        sums[4..],
        ["decoded"],
        "decoded, and nothing written: {out}"
    );
}

#[test]
fn photos_by_date_under_roam_run() {
    let b = camera();
    let url = format!("/cam=src:camera:{}", b.url);
    let o = roam().sh(&["-m", &url], &LOOK.replace("$R", "/cam"));
    check_look(&ok(&o), &b);
}

#[test]
fn photos_by_date_through_roam_mount() {
    let b = camera();
    let m = FuseMount::start(roam(), Some(&format!("src:camera:{}", b.url)), &[]);
    let o = m.sh(&LOOK.replace("$R", "/w"), &[]);
    check_look(&ok(&o), &b);
    let o = m.sh("touch /w/2024-06-01/new.jpg", &[]);
    assert!(
        stderr(&o).contains("Read-only file system"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_photo_taken_later_shows_up_at_the_next_listing() {
    let b = camera();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exif_jpeg.py");
    let script = format!(
        "set -e; ls /cam; python3 {} $B/IMG_0100.jpg '2025:01:02 03:04:05' 0 9; \
         ls /cam; ls /cam/2025-01-02",
        fixture.display()
    );
    let mount = format!("/cam=src:camera:{}", b.url);
    let o = roam().env("B", b.backend("")).cli(&[
        "--t-read", "0", "run", "-m", &mount, "--", "sh", "-c", &script,
    ]);
    assert_eq!(
        ok(&o),
        "2024-06-01\n2024-07-14\nundated\n2024-06-01\n2024-07-14\n2025-01-02\nundated\nIMG_0100.jpg\n"
    );
}

#[test]
fn listing_reads_heads_and_a_range_read_only_its_range() {
    let b = camera();
    let big = "DCIM/IMG_0003.jpg";
    let at = 10 << 20;
    let script = "set -e; ls /cam/2024-07-14 >/dev/null; echo listed >&2; \
        python3 -c 'import os, sys; fd = os.open(\"/cam/2024-07-14/DCIM_IMG_0003.jpg\", os.O_RDONLY); \
        sys.stdout.buffer.write(os.pread(fd, 8192, 10485760))' | md5sum";
    let o = roam().sh(&["-m", &format!("/cam=src:camera:{}", b.url)], script);
    let out = ok(&o);
    let data = std::fs::read(b.backend(big)).unwrap();
    let want = md5(&data[at..at + 8192]);
    assert_eq!(out.trim(), format!("{want}  -"));
    let (gets, bytes) = gets_in(&b.access_log(), big);
    eprintln!(
        "{gets} GETs, {bytes} bytes of {} for the head and 8 KiB",
        data.len()
    );
    // The head (4 KiB: its EXIF segment is inside) for the listing, then one of roam-vfs's
    // 1 MiB chunks of a large file for the read.
    assert_eq!(gets, 2, "{}", b.access_log());
    assert!(
        bytes <= 4096 + (1 << 20),
        "{bytes} bytes for 8 KiB of 12 MiB"
    );
}

/// `ls` of a source whose first file is `CASE.jpg` under the `faults` extension, then a
/// command that shows roam still serves.
fn hostile(case: &str) -> (Output, Backend) {
    let b = Backend::serving("dav", |srv| {
        std::fs::write(srv.join(format!("{case}.jpg")), "x".repeat(100)).unwrap();
    });
    let script = "ls /f; ls /f/..; echo still serving";
    let o = roam().sh(&["-m", &format!("/f=src:faults:{}", b.url)], script);
    (o, b)
}

#[test]
fn hostile_trees_are_eio_with_one_line() {
    for (case, why) in [
        ("slash", "named a file \"a/b\""),
        ("dotdot", "put \"escaped\" in the directory \"..\""),
        (
            "liar",
            "placed \"liar\" at 0+101 of \"liar.jpg\" (100 bytes)",
        ),
        ("huge", "listed more than 200000 entries"),
        ("past", "asked for 100+1 of file 0"),
    ] {
        let (o, _b) = hostile(case);
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(out.ends_with("still serving\n"), "{case}: {out}");
        assert!(
            !out.contains("escaped") && !out.contains("liar\n"),
            "{case}: {out}"
        );
        assert!(err.contains("'/f': Input/output error"), "{case}: {err}");
        // One line: the failing call's (`roam: openat /f: ... (EIO)`).
        let line =
            format!("tree refused: extension `faults` (wasm): returned an invalid result: {why}");
        let told = err.lines().filter(|l| l.contains(&line));
        assert_eq!(told.count(), 1, "{case}: told once: {err}");
        assert!(err.contains("roam: openat /f: src:faults:"), "{err}");
    }
}

#[test]
fn a_hostile_tree_through_roam_mount_is_eio_and_the_mount_lives() {
    let b = Backend::serving("dav", |srv| {
        std::fs::write(srv.join("dotdot.jpg"), "x").unwrap();
    });
    let mount = format!("/f=src:faults:{}", b.url);
    let m = FuseMount::start(roam(), None, &["-m", &mount]);
    let o = m.sh("ls /w/f; ls /w/f/escaped; ls /w/escaped; ls -d /w/f", &[]);
    let err = stderr(&o);
    assert!(err.contains("'/w/f': Input/output error"), "{err}");
    assert!(
        err.contains("'/w/escaped': No such file or directory"),
        "{err}"
    );
    assert_eq!(stdout(&o), "/w/f\n", "{err}");
    let log = m.log_text();
    let line = "WARN src:faults:";
    let why = "tree refused: extension `faults` (wasm): returned an invalid result: put \"escaped\" in the directory \"..\"";
    // Three calls failed on it (`ls` of `/w/f`, of a name in it, `ls -d`): one line.
    let warnings = log.lines().filter(|l| l.contains(line) && l.contains(why));
    assert_eq!(warnings.count(), 1, "one warning: {log}");
}

/// The server dies after the listing: a photo's read fails (never a short file given as
/// the photo, at the first read or the next), and within the timeouts.
#[test]
fn a_photo_read_after_its_server_died_fails_and_is_not_kept_in_part() {
    let b = camera();
    let pid_file = b.backend("").parent().unwrap().join("run/nginx.pid");
    let script = format!(
        "ls /cam/2024-07-14 >/dev/null && kill -TERM $(cat {}) && sleep 1; \
         for i in 1 2; do cat /cam/2024-07-14/DCIM_IMG_0003.jpg > /dev/null 2>&1; echo \"read $?\"; done",
        pid_file.display()
    );
    let start = std::time::Instant::now();
    let o = roam().sh(&["-m", &format!("/cam=src:camera:{}", b.url)], &script);
    let took = start.elapsed();
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 2, "{out}{}", stderr(&o));
    assert!(
        out.lines().all(|l| l != "read 0"),
        "a read of a dead server's photo succeeded: {out}{}",
        stderr(&o)
    );
    assert!(took.as_secs() < 60, "took {took:?}: {}", stderr(&o));
}

/// A photo replaced on the server (another size) after the tree was made: reading its
/// file then is the photo the tree was made of or `ESTALE`, never a span of the new one.
#[test]
fn a_photo_replaced_after_the_listing_is_its_old_bytes_or_estale() {
    let b = camera();
    let old = md5(&std::fs::read(b.backend("IMG_0001.jpg")).unwrap());
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exif_jpeg.py");
    let script = format!(
        "set -e; ls /cam/2024-06-01 > /dev/null; \
         python3 {} $B/IMG_0001.jpg '2024:06:01 09:00:00' 5000 7; \
         md5sum < /cam/2024-06-01/IMG_0001.jpg || true",
        fixture.display()
    );
    let mount = format!("/cam=src:camera:{}", b.url);
    let o = roam().env("B", b.backend("")).sh(&["-m", &mount], &script);
    let out = ok(&o);
    assert!(
        out.starts_with(&old) || stderr(&o).contains("Stale file handle"),
        "neither the old photo nor ESTALE: {out} {}",
        stderr(&o)
    );
}
