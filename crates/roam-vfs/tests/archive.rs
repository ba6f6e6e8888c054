//! Archives as directories at the namespace level, over a real nginx and the real `archive`
//! extension (wasm): a listing reads the archive's directory or headers, not its members
//! (asserted on the cache's count of bytes fetched), members read back byte for byte, hostile
//! names never become names, a corrupt archive is EIO naming the archive and the extension,
//! and nothing in an archive can be written.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use roam_drivers::http::HttpConfig;
use roam_drivers::Kind;
use roam_ext::{Extension, Limits, Technology};
use roam_testkit::archive::{write, Item};
use roam_testkit::{noise, Scratch, Server};
use roam_vfs::{Consistency, TRead, Vfs, VfsConfig};

const MEMBER: usize = 512 << 10;

struct World {
    vfs: Vfs,
    _server: Server,
    scratch: Scratch,
}

/// nginx serving the archives `populate` writes into `srv/`, mounted at `/w`.
fn world(populate: impl FnOnce(&Path)) -> World {
    let scratch = Scratch::new("vfs-archive");
    let srv = scratch.join("srv");
    roam_testkit::mkdir(&srv);
    populate(&srv);
    let server = Server::nginx(&srv, &scratch.join("run"));
    let cfg = VfsConfig {
        cache_dir: scratch.join("cache"),
        consistency: Consistency::new(TRead::Fixed(Duration::from_secs(30)), vec![]),
        mounts: vec![("/w".into(), server.url())],
        max_cache_bytes: 1 << 30,
        http: HttpConfig::default(),
        tls: vec![],
        extensions: None,
        adopt_orphans: true,
        t_write: Duration::ZERO,
    };
    let mut vfs = Vfs::new(&cfg).unwrap();
    let dir = roam_testkit::ext::extensions();
    vfs.set_archive_extension(Box::new(move || {
        Extension::load(&dir, "archive", Technology::Wasm, Limits::default())
    }));
    World {
        vfs,
        _server: server,
        scratch,
    }
}

impl World {
    fn fetched(&self) -> u64 {
        self.vfs.report().stats.bytes_fetched
    }

    /// The names in the directory `virt` (through the skeleton, as programs see it).
    fn ls(&self, virt: &str) -> BTreeSet<String> {
        let node = self.vfs.lookup(virt).unwrap().expect("a roam name");
        let dir = self.vfs.open_path(&node).unwrap();
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn read(&self, virt: &str) -> Vec<u8> {
        let node = self.vfs.lookup(virt).unwrap().expect("a roam name");
        std::fs::read(self.vfs.open_path(&node).unwrap()).unwrap()
    }

    fn errno_of(&self, virt: &str) -> (i32, String) {
        let node = self.vfs.lookup(virt).unwrap().expect("a roam name");
        let e = self.vfs.open_path(&node).unwrap_err();
        (e.errno(), e.to_string())
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn listing_a_zip_reads_its_directory_not_its_members() {
    let members: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("img/p{i:02}.jpg"), noise(MEMBER, i)))
        .collect();
    let text = b"line of text\n".repeat(4000);
    let w = world(|srv| {
        let mut items: Vec<Item> = members.iter().map(|(n, d)| Item::File(n, d)).collect();
        items.push(Item::Deflated("notes.txt", &text));
        items.push(Item::Dir("empty"));
        write(&srv.join("photos.zip"), "zip", &items);
    });
    let size = std::fs::metadata(w.scratch.join("srv/photos.zip"))
        .unwrap()
        .len();

    assert_eq!(w.ls("/w/photos.zip#"), set(&["empty", "img", "notes.txt"]));
    assert_eq!(w.ls("/w/photos.zip#/img").len(), 20);
    let listed = w.fetched();
    eprintln!("zip listing: {listed} of {size} bytes fetched");
    assert!(
        listed * 100 < size,
        "listing fetched {listed} of {size} bytes (must be under 1%)"
    );

    assert_eq!(w.read("/w/photos.zip#/img/p07.jpg"), members[7].1);
    let one = w.fetched() - listed;
    assert!(
        one >= MEMBER as u64 && one < MEMBER as u64 + 4096,
        "reading one {MEMBER}-byte member fetched {one} bytes"
    );
    assert_eq!(w.read("/w/photos.zip#/notes.txt"), text, "deflated member");
    let node = w.vfs.lookup("/w/photos.zip#/empty").unwrap().unwrap();
    assert_eq!(w.vfs.stat(&node).unwrap().kind, Kind::Dir);
    // The file itself is still the file, and the through-the-file spelling names a member.
    let file = w.vfs.lookup("/w/photos.zip").unwrap().unwrap();
    assert_eq!(w.vfs.stat(&file).unwrap().size, Some(size));
    assert_eq!(w.read("/w/photos.zip/img/p00.jpg"), members[0].1);
}

/// A zip whose central directory does not fit the first tail read, and one whose end record
/// sits before a 10 KB comment: both take a second range, and list the same.
#[test]
fn large_directories_and_comments_take_another_range() {
    let names: Vec<String> = (0..300).map(|i| format!("dir/member-{i:04}.txt")).collect();
    let w = world(|srv| {
        let items: Vec<Item> = names.iter().map(|n| Item::File(n, b"m")).collect();
        write(&srv.join("many.zip"), "zip", &items);
        let mut bytes = std::fs::read(srv.join("many.zip")).unwrap();
        let n = bytes.len();
        bytes[n - 2..].copy_from_slice(&10_000u16.to_le_bytes());
        bytes.extend(std::iter::repeat_n(b'c', 10_000));
        std::fs::write(srv.join("commented.zip"), bytes).unwrap();
    });
    for zip in ["many.zip", "commented.zip"] {
        let before = w.fetched();
        assert_eq!(w.ls(&format!("/w/{zip}#/dir")).len(), 300, "{zip}");
        assert_eq!(w.read(&format!("/w/{zip}#/{}", names[299])), b"m");
        eprintln!("{zip}: {} bytes fetched", w.fetched() - before);
    }
}

#[test]
fn listing_a_tar_follows_its_headers() {
    let big: Vec<Vec<u8>> = (0..5).map(|i| noise(2 << 20, 100 + i)).collect();
    let long = format!("{}/end.txt", "deep-directory-name".repeat(8));
    let w = world(|srv| {
        let mut items: Vec<Item> = big
            .iter()
            .enumerate()
            .map(|(i, d)| Item::File(["b0", "b1", "b2", "b3", "b4"][i], d))
            .collect();
        let smalls: Vec<String> = (0..100).map(|i| format!("small/{i:03}.txt")).collect();
        items.extend(smalls.iter().map(|n| Item::File(n, b"small file\n")));
        items.push(Item::File(&long, b"long name\n"));
        items.push(Item::Symlink("link", "b0"));
        write(&srv.join("src.tar"), "tar", &items);
    });
    let size = std::fs::metadata(w.scratch.join("srv/src.tar"))
        .unwrap()
        .len();

    assert_eq!(
        w.ls("/w/src.tar#"),
        set(&[
            "b0",
            "b1",
            "b2",
            "b3",
            "b4",
            "small",
            "link",
            "deep-directory-name".repeat(8).as_str()
        ])
    );
    assert_eq!(w.ls("/w/src.tar#/small").len(), 100);
    let listed = w.fetched();
    eprintln!("tar listing: {listed} of {size} bytes fetched");
    assert!(
        listed * 100 < 3 * size,
        "listing fetched {listed} of {size} bytes (must be under 3%)"
    );
    assert_eq!(w.read(&format!("/w/src.tar#/{long}")), b"long name\n");
    assert_eq!(w.read("/w/src.tar#/b3"), big[3]);
    let link = w.vfs.lookup("/w/src.tar#/link").unwrap().unwrap();
    let meta = w.vfs.stat(&link).unwrap();
    assert_eq!(
        (meta.kind, meta.symlink_target.as_deref()),
        (Kind::Symlink, Some("b0"))
    );
}

#[test]
fn hostile_names_never_become_names() {
    let w = world(|srv| {
        roam_testkit::archive::write_hostile(srv);
    });
    for archive in ["evil.zip", "evil.tar"] {
        let root = format!("/w/{archive}#");
        // `a` is not even implied: `a/../../x-escaped.txt` is refused as a whole.
        assert_eq!(w.ls(&root), set(&["dup.txt", "ok.txt"]), "{archive}");
        assert_eq!(
            w.read(&format!("{root}/dup.txt")),
            b"second",
            "the last wins"
        );
    }
    let escaped: Vec<_> = walk(&w.scratch.path)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("escaped"))
        .collect();
    assert!(
        escaped.is_empty(),
        "written outside the archive: {escaped:?}"
    );
    assert!(!Path::new("/tmp/escaped.txt").exists() && !Path::new("/abs-escaped.txt").exists());
}

#[test]
fn corrupt_archives_are_eio_naming_archive_and_extension() {
    let w = world(|srv| {
        std::fs::write(srv.join("corrupt.zip"), noise(5000, 9)).unwrap();
        std::fs::write(srv.join("corrupt.tar"), noise(5000, 10)).unwrap();
    });
    for name in ["corrupt.zip", "corrupt.tar"] {
        let (errno, msg) = w.errno_of(&format!("/w/{name}#"));
        assert_eq!(errno, libc::EIO, "{msg}");
        assert!(
            msg.contains(name) && msg.contains("extension `archive` (wasm)") && !msg.contains('\n'),
            "{msg}"
        );
    }
}

/// A listing that failed because the server did not answer is tried again; what the
/// extension concluded about a corrupt archive is kept.
#[test]
fn a_failed_fetch_is_not_the_archive_s_verdict() {
    let w = world(|srv| write(&srv.join("a.zip"), "zip", &[Item::File("f.txt", b"x")]));
    let (srv, away) = (w.scratch.join("srv/a.zip"), w.scratch.join("a.zip"));
    let node = w.vfs.lookup("/w/a.zip#").unwrap().unwrap();
    std::fs::rename(&srv, &away).unwrap();
    let e = w.vfs.open_path(&node).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("host error"), "{e}");
    std::fs::rename(&away, &srv).unwrap();
    assert_eq!(w.ls("/w/a.zip#"), set(&["f.txt"]));
}

#[test]
fn members_cannot_be_written() {
    let w = world(|srv| write(&srv.join("a.zip"), "zip", &[Item::File("f.txt", b"x")]));
    let node = w.vfs.lookup("/w/a.zip#/f.txt").unwrap().unwrap();
    let e = w
        .vfs
        .open_for_write(&node, libc::O_WRONLY | libc::O_TRUNC, 0o644)
        .unwrap_err();
    assert_eq!(e.errno(), libc::EROFS, "{e}");
    let new = w.vfs.lookup("/w/a.zip#/new").unwrap().unwrap();
    assert_eq!(w.vfs.mkdir(&new, 0o755).unwrap_err().errno(), libc::EROFS);
    assert_eq!(w.vfs.remove_file(&node).unwrap_err().errno(), libc::EROFS);
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}
