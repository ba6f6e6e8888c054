//! Archives as directories end to end: zip and tar files on a real nginx, browsed by real
//! programs (`ls -R`, `cat`, `find`, `grep -r`, `cp -r`) under `roam run` and through
//! `roam mount`, with the `archive` extension (wasm). Copies are compared with the trees the
//! archives were made from; writes are EROFS; a corrupt archive is EIO with one line naming
//! it and the extension; hostile member names produce no names and write nothing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::Frontend::{self, Fuse, Trap};
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::archive::{write, Item};
use roam_testkit::{noise, write_file, Scratch};

/// The trees the archives are made of, as `(name, contents)` (`None`: a directory).
fn photos() -> Vec<(String, Option<Vec<u8>>)> {
    vec![
        ("a.txt".into(), Some(b"alpha needle\n".to_vec())),
        ("sub/b.txt".into(), Some(b"beta\n".repeat(1000))),
        ("sub/deep/c.bin".into(), Some(noise(300 << 10, 3))),
        ("big.bin".into(), Some(noise(3 << 20, 4))),
        ("empty".into(), None),
    ]
}

fn sources() -> Vec<(String, Option<Vec<u8>>)> {
    vec![
        (
            "main.c".into(),
            Some(b"int main(void) { return 0; } /* needle */\n".to_vec()),
        ),
        ("lib/util.c".into(), Some(b"int util;\n".to_vec())),
        (
            format!("{}/long.txt", "a-rather-long-directory".repeat(6)),
            Some(b"a long name\n".to_vec()),
        ),
        ("data/blob.bin".into(), Some(noise(2 << 20, 5))),
    ]
}

/// The members of an archive of `tree`; `.txt` files deflated (in a zip).
fn items(tree: &[(String, Option<Vec<u8>>)]) -> Vec<Item<'_>> {
    tree.iter()
        .map(|(n, d)| match d {
            Some(d) if n.ends_with(".txt") => Item::Deflated(n, d),
            Some(d) => Item::File(n, d),
            None => Item::Dir(n),
        })
        .collect()
}

/// Writes the archives and, beside the served tree, the trees they were made of.
fn populate(srv: &Path, expected: &Path) {
    for (name, tree) in [("photos", photos()), ("src", sources())] {
        for (n, d) in &tree {
            match d {
                Some(d) => write_file(&expected.join(name).join(n), d, 0o644),
                None => roam_testkit::mkdir(&expected.join(name).join(n)),
            }
        }
        let (archive, kind) = match name {
            "photos" => ("photos.zip", "zip"),
            _ => ("src.tar", "tar"),
        };
        write(&srv.join(archive), kind, &items(&tree));
    }
    roam_testkit::archive::write_hostile(srv);
    std::fs::write(srv.join("corrupt.zip"), noise(5000, 9)).unwrap();
}

/// A backend serving the archives through `frontend`; the expected trees are in `expected`.
fn archives(frontend: Frontend, expected: &Path) -> Backend {
    Backend::serving("http", |srv| populate(srv, expected)).through(frontend)
}

fn roam() -> Roam {
    Roam::new().env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed: {}", stderr(o));
    stdout(o)
}

fn browse_with_real_programs(frontend: Frontend) {
    let scratch = Scratch::new("archives");
    let expected = scratch.join("expected");
    let b = archives(frontend, &expected);
    let out = scratch.join("out");
    roam_testkit::mkdir(&out);
    let script = format!(
        "set -e; cd /w; ls photos.zip#; ls -R photos.zip# > /dev/null; cat photos.zip#/a.txt; \
         find src.tar# -type f | sort; grep -r needle photos.zip# src.tar# | sort; \
         cp -r photos.zip# {o}/photos; cp -r src.tar# {o}/src; ls -ld /w/photos.zip",
        o = out.display()
    );
    let listed = ok(&b.sh_with(roam(), &script));
    let long = format!("src.tar#/{}/long.txt", "a-rather-long-directory".repeat(6));
    let mut lines = listed.lines();
    let first: Vec<&str> = lines.by_ref().take(5).collect();
    assert_eq!(first, ["a.txt", "big.bin", "empty", "sub", "alpha needle"]);
    let mut found: Vec<&str> = lines.by_ref().take(4).collect();
    found.sort();
    let mut want = vec![
        "src.tar#/data/blob.bin",
        &long,
        "src.tar#/lib/util.c",
        "src.tar#/main.c",
    ];
    want.sort();
    assert_eq!(found, want);
    let grep: Vec<&str> = lines.by_ref().take(2).collect();
    assert_eq!(
        grep,
        [
            "photos.zip#/a.txt:alpha needle",
            "src.tar#/main.c:int main(void) { return 0; } /* needle */"
        ]
    );
    assert!(
        lines.next().unwrap().starts_with("-r"),
        "the archive stays a file"
    );
    for tree in ["photos", "src"] {
        let diff = Command::new("diff")
            .arg("-r")
            .arg(expected.join(tree))
            .arg(out.join(tree))
            .output()
            .unwrap();
        assert!(diff.status.success(), "{tree}: {}", stdout(&diff));
    }
}

#[test]
fn browse_under_roam_run() {
    browse_with_real_programs(Trap);
}

#[test]
fn browse_through_roam_mount() {
    browse_with_real_programs(Fuse);
}

/// In a mount of the whole namespace the canonical names can be walked too (the kernel
/// looks up one component at a time: `/.archive/arch` is a directory on the way).
#[test]
fn canonical_names_in_a_whole_namespace_mount() {
    let scratch = Scratch::new("archives");
    let b = archives(Trap, &scratch.join("expected"));
    let m = common::fuse::FuseMount::start(roam(), None, &["-m", &format!("/arch={}", b.url)]);
    let o = m.sh(
        "set -e; ls /w/arch/photos.zip#/sub; ls /w/.archive/arch/photos.zip; \
         cat /w/.archive/arch/photos.zip/a.txt; ls /w/.archive/arch",
        &[],
    );
    assert_eq!(
        ok(&o),
        "b.txt\ndeep\na.txt\nbig.bin\nempty\nsub\nalpha needle\nphotos.zip\n"
    );
}

/// `roam run` hands whole names to the vfs, so a path may go through the file itself.
#[test]
fn through_the_file_under_roam_run() {
    let scratch = Scratch::new("archives");
    let b = archives(Trap, &scratch.join("expected"));
    let o = b.sh_with(
        roam(),
        "set -e; wc -c < /w/photos.zip/sub/b.txt; ls /w/src.tar/lib; \
         cd /w/photos.zip/sub && pwd -P && ls && cat deep/../b.txt | head -1; \
         ls /w/photos.zip/ | head -1; find /w/src.tar/ -name util.c; ls -d /w/photos.zip",
    );
    assert_eq!(
        ok(&o),
        "5000\nutil.c\n/.archive/w/photos.zip/sub\nb.txt\ndeep\nbeta\n\
         a.txt\n/w/src.tar/lib/util.c\n/w/photos.zip\n"
    );
}

fn members_are_read_only(frontend: Frontend) {
    let scratch = Scratch::new("archives");
    let b = archives(frontend, &scratch.join("expected"));
    let o = b.sh_with(
        roam(),
        "cd /w/photos.zip#; echo x > new.txt; echo x >> a.txt; rm a.txt; mkdir d; \
         mv a.txt z.txt; cat a.txt",
    );
    let err = stderr(&o);
    assert_eq!(stdout(&o), "alpha needle\n");
    assert_eq!(err.matches("Read-only file system").count(), 5, "{err}");
}

#[test]
fn members_are_read_only_under_roam_run() {
    members_are_read_only(Trap);
}

#[test]
fn members_are_read_only_through_roam_mount() {
    members_are_read_only(Fuse);
}

#[test]
fn a_corrupt_archive_is_eio_with_one_line() {
    let scratch = Scratch::new("archives");
    let b = archives(Trap, &scratch.join("expected"));
    let o = b.sh_with(roam(), "ls /w/corrupt.zip#/");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("Input/output error"), "{err}");
    let told: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("corrupt.zip") && l.contains("extension `archive` (wasm)"))
        .collect();
    assert_eq!(told.len(), 1, "{err}");
}

/// A deflated member bigger than the extension inflates (a zip bomb: 20 MiB of zeros in a
/// few KiB) is EIO with one line naming the limit; the archive's other members stay
/// readable, and nothing of the extension's memory is spent on it.
#[test]
fn a_zip_bomb_is_eio_naming_the_inflate_limit() {
    let zeros = vec![0u8; 20 << 20];
    let b = Backend::serving("http", |srv| {
        write(
            &srv.join("bomb.zip"),
            "zip",
            &[
                Item::Deflated("zeros", &zeros),
                Item::File("small.txt", b"hello\n"),
            ],
        )
    });
    let o = b.sh_with(
        roam(),
        "cat /w/bomb.zip#/small.txt; cat /w/bomb.zip#/zeros > /dev/null; echo $?",
    );
    assert_eq!(stdout(&o), "hello\n1\n", "{}", stderr(&o));
    let err = stderr(&o);
    let told: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("roam: ") && l.contains("bomb.zip"))
        .collect();
    assert_eq!(told.len(), 1, "{err}");
    assert!(
        told[0].contains("inflates at most 15728640 bytes") && told[0].contains("(EIO)"),
        "{err}"
    );
    assert!(err.contains("Input/output error"), "{err}");
}

fn hostile_names(frontend: Frontend) {
    let scratch = Scratch::new("archives");
    let b = archives(frontend, &scratch.join("expected"));
    let cache = scratch.join("cache");
    let out = scratch.join("out");
    roam_testkit::mkdir(&out);
    let o = b.sh_with(
        roam().env("ROAM_CACHE_DIR", &cache),
        &format!(
            "set -e; cd /w; find evil.zip# evil.tar# | sort; cat evil.zip#/dup.txt evil.tar#/dup.txt; \
             cp -r evil.zip# {o}/z; cp -r evil.tar# {o}/t",
            o = out.display()
        ),
    );
    assert_eq!(
        ok(&o),
        "evil.tar#\nevil.tar#/dup.txt\nevil.tar#/ok.txt\nevil.zip#\nevil.zip#/dup.txt\n\
         evil.zip#/ok.txt\nsecondsecond"
    );
    let escaped = Command::new("find")
        .arg(&scratch.path)
        .arg("/tmp")
        .args(["-maxdepth", "12", "-name", "*escaped*"])
        .output()
        .unwrap();
    assert_eq!(stdout(&escaped), "", "written outside the archive");
    assert!(!Path::new("/abs-escaped.txt").exists());
}

#[test]
fn hostile_names_under_roam_run() {
    hostile_names(Trap);
}

#[test]
fn hostile_names_through_roam_mount() {
    hostile_names(Fuse);
}

/// Every backend with range reads serves archives; `file` is a local directory in place
/// (a local archive in the namespace).
#[test]
fn archives_on_other_backends() {
    let scratch = Scratch::new("archives");
    for kind in ["dav", "ftp", "sftp", "file"] {
        let expected = scratch.join(&format!("expected-{kind}"));
        let b = Backend::serving(kind, |srv| populate(srv, &expected));
        let script = "set -e; cat /w/photos.zip#/a.txt; ls /w/src.tar#/lib; \
             cmp /w/src.tar#/data/blob.bin $E/src/data/blob.bin; \
             cmp /w/photos.zip#/sub/b.txt $E/photos/sub/b.txt && echo same"
            .replace("$E", &expected.display().to_string());
        let o = b.sh_with(roam(), &script);
        assert_eq!(ok(&o), "alpha needle\nutil.c\nsame\n", "{kind}");
    }
}

/// A name through an archive may need the server (the archive's listing and range reads):
/// that lookup happens on a worker, not on the tracer, so a slow server blocks only the
/// thread that asked. 20,000 local stats, timed inside the program, next to `ls` of an
/// archive on a server that takes 2 s per answer, take less than twice as long as next to
/// an `ls` of a local directory.
#[test]
fn a_slow_server_blocks_only_the_thread_looking_through_its_archive() {
    let www = Scratch::new("slow-archive");
    populate(&www.path, &www.join("expected"));
    let server = common::SlowServer::start(&www.path, 2);
    let mount = format!("/w=http://127.0.0.1:{}/", server.port);
    let timed = |ls: &str| {
        format!(
            "import os, subprocess, time\n\
             t = time.time()\n\
             p = subprocess.Popen(['ls', '{ls}'], stdout=subprocess.DEVNULL)\n\
             [os.stat('/tmp') for _ in range(20000)]\n\
             print(time.time() - t)\n\
             p.wait()\n"
        )
    };
    let secs = |ls: &str| {
        (0..3)
            .map(|_| {
                let o = roam().cli(&["run", "-m", &mount, "--", "python3", "-c", &timed(ls)]);
                let s = stdout(&o);
                s.trim()
                    .parse::<f64>()
                    .unwrap_or_else(|_| panic!("{s}{}", stderr(&o)))
            })
            .fold(f64::MAX, f64::min)
    };
    let alone = secs("/tmp");
    let together = secs("/w/photos.zip/");
    assert!(
        together < 2.0 * alone,
        "20,000 stats took {together:.3}s next to an archive on a slow server, {alone:.3}s alone"
    );
}

/// An archive replaced on the server (another layout, the same member names) after a
/// program listed it: reading a member then is the listed version's bytes or `ESTALE`,
/// never bytes at the old index's offsets in the new archive.
#[test]
fn a_member_of_an_archive_replaced_on_the_server_is_never_other_bytes() {
    let v1 = vec![
        ("pad.bin".to_string(), Some(noise(100 << 10, 11))),
        ("m.bin".to_string(), Some(noise(200 << 10, 12))),
    ];
    let v2 = vec![
        ("m.bin".to_string(), Some(noise(200 << 10, 13))),
        ("pad.bin".to_string(), Some(noise(50 << 10, 14))),
    ];
    let scratch = Scratch::new("archive-replaced");
    let (read, go) = (scratch.join("read"), scratch.join("go"));
    let b = Backend::serving("http", |srv| {
        write(&srv.join("x.zip"), "zip", &items(&v1));
        write(&srv.join("next.zip"), "zip", &items(&v2));
        // Another time than the first: nginx's ETag is the time (in seconds) and size.
        let f = std::fs::File::options()
            .write(true)
            .open(srv.join("x.zip"))
            .unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(100))
            .unwrap();
    });
    let script = format!(
        "import os, sys, time\n\
         print(sorted(os.listdir('/w/x.zip#')))\n\
         open('{read}', 'w').close()\n\
         while not os.path.exists('{go}'): time.sleep(0.05)\n\
         try:\n    data = open('/w/x.zip#/m.bin', 'rb').read()\n\
         except OSError as e:\n    print('error', e.errno); sys.exit(0)\n\
         print(data[:16].hex(), len(data))",
        read = read.display(),
        go = go.display(),
    );
    std::thread::scope(|s| {
        let reader = s.spawn(|| b.sh_with(roam(), &format!("python3 -c \"{script}\"")));
        let began = std::time::Instant::now();
        while !read.exists() && began.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::fs::rename(b.backend("next.zip"), b.backend("x.zip")).unwrap();
        write_file(&go, b"", 0o644);
        let out = ok(&reader.join().unwrap());
        let last = out.lines().last().unwrap_or("");
        let old = noise(200 << 10, 12);
        let hex: String = old[..16].iter().map(|b| format!("{b:02x}")).collect();
        eprintln!("{out}");
        assert!(
            last == format!("error {}", libc::ESTALE) || last == format!("{hex} {}", old.len()),
            "neither the listed version's bytes nor ESTALE: {out}"
        );
    });
}
