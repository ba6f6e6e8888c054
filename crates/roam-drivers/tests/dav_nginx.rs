//! The WebDAV driver against a real server: nginx with its `dav` and `dav-ext` modules,
//! started by `roam-testkit`. Each test serves a freshly generated tree from its own nginx
//! on a free loopback port, and checks what the driver wrote on the served files themselves.
//!
//! What every driver does alike (the errnos of put, mkdir, rmdir, unlink and rename,
//! ranges, preconditions) is tests/behaviour.rs's; here is what is WebDAV's and nginx's:
//! escaped names, messages, PROPFIND replies, what nginx alone would get wrong.
//!
//! nginx and libnginx-mod-http-dav-ext are required: a machine without them fails these
//! tests (CI installs them) rather than skipping them silently.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use roam_drivers::dav::DavDriver;
use roam_drivers::http::HttpClient;
use roam_drivers::{Driver, Error, Fetched, Kind, Listing, Meta, Validator};
use roam_testkit::dav::nginx_dav;
use roam_testkit::{mkdir, noise, within_a_minute, write_file, Scratch, Server};

/// The readable files of the generated tree: their paths under `www/` and their contents.
const FILES: &[(&str, &[u8])] = &[
    ("dir/a b.txt", b"hello world\n"),
    ("dir/q?#%.txt", b"escaped"),
    ("dir/a:b&c;+=.txt", b"reserved"),
    ("dir/\u{fc}n\u{ef}.txt", b"unicode"),
    ("dir/it's <x>.txt", b"xml"),
    ("dir/sub/inner.txt", b"inner"),
    ("full/one.txt", b"1"),
];
/// nginx leaves dot files out of PROPFIND replies (and of autoindex pages).
const HIDDEN: &str = "dir/.hidden";
/// Mode 000: nginx's workers may not read it.
const SECRET: &str = "dir/secret.txt";
const BIG: &str = "dir/big.bin";
const BIG_LEN: usize = 1 << 20;
/// Directories: one empty, one its workers may not write in (mode 0555).
const EMPTY: &str = "empty";
const READ_ONLY: &str = "readonly";

/// The generated tree in a scratch directory (`www/`), served by one nginx whose files are
/// in `run/`.
struct Served {
    // Declared first so that it is dropped first: the server stops before its tree goes.
    server: Server,
    scratch: Scratch,
}

impl Served {
    fn new() -> Served {
        let scratch = Scratch::new("dav-driver");
        let www = scratch.join("www");
        for (name, data) in FILES {
            write_file(&www.join(name), data, 0o644);
        }
        write_file(&www.join(HIDDEN), b"dot", 0o644);
        write_file(&www.join(SECRET), b"nobody may read this", 0o000);
        write_file(&www.join(BIG), &big_contents(), 0o644);
        mkdir(&www.join(EMPTY));
        mkdir(&www.join(READ_ONLY));
        fs::set_permissions(www.join(READ_ONLY), fs::Permissions::from_mode(0o555)).unwrap();
        let server = nginx_dav(&www, &scratch.join("run"));
        Served { server, scratch }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn driver(&self) -> DavDriver {
        DavDriver::new(client(), &self.url()).unwrap()
    }

    /// The served file behind the remote `path`.
    fn real(&self, path: &str) -> PathBuf {
        self.scratch.join("www").join(path.trim_start_matches('/'))
    }

    /// Upload temporaries left in the served directory of the remote `path`.
    fn temporaries(&self, path: &str) -> Vec<String> {
        fs::read_dir(self.real(path))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".roam-put-"))
            .collect()
    }
}

fn big_contents() -> Vec<u8> {
    noise(BIG_LEN, 0)
}

fn client() -> HttpClient {
    common::http_client(Duration::from_secs(10))
}

fn fetch(driver: &DavDriver, path: &str) -> (Vec<u8>, Meta) {
    let mut body = Vec::new();
    match driver.fetch(path, &mut body, None).unwrap() {
        Fetched::Body(meta) => (body, meta),
        Fetched::NotModified => panic!("{path}: not modified without a validator"),
    }
}

fn read_range(driver: &DavDriver, path: &str, offset: u64, len: u64) -> Vec<u8> {
    let mut body = Vec::new();
    let n = driver
        .read_range(path, offset, len, None, &mut body)
        .unwrap();
    assert_eq!(n, body.len() as u64, "{path} {offset}+{len}");
    body
}

fn put(driver: &DavDriver, path: &str, data: &[u8]) -> Meta {
    driver.put(path, &mut &data[..], data.len() as u64).unwrap()
}

fn errno<T: std::fmt::Debug>(result: Result<T, Error>) -> i32 {
    result.unwrap_err().errno()
}

fn sorted_names(listing: &Listing) -> Vec<&str> {
    let mut names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    names.sort_unstable();
    names
}

/// The names in `www/dir` that nginx lists: all but the dot file, sorted.
fn dir_names() -> Vec<&'static str> {
    let files = FILES
        .iter()
        .map(|(path, _)| *path)
        .chain([SECRET, BIG])
        .filter_map(|path| path.strip_prefix("dir/"))
        .filter(|name| !name.contains('/'));
    let mut names: Vec<&str> = files.chain(["sub"]).collect();
    names.sort_unstable();
    names
}

#[test]
fn stat_of_files_directories_and_missing_names() {
    let served = Served::new();
    let driver = served.driver();
    let meta = driver.stat("/dir/a b.txt").unwrap();
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(12)));
    let on_disk = fs::metadata(served.real("/dir/a b.txt")).unwrap();
    assert!(
        within_a_minute(meta.mtime.unwrap(), on_disk.modified().unwrap()),
        "{meta:?}"
    );
    for path in ["/", "/dir", "/dir/sub", "/empty"] {
        let meta = driver.stat(path).unwrap();
        assert_eq!((meta.kind, meta.size), (Kind::Dir, None), "{path}");
    }
    // Names that need escaping, and a file nobody may read: PROPFIND needs only its stat.
    for path in ["/dir/q?#%.txt", "/dir/\u{fc}n\u{ef}.txt", "/dir/secret.txt"] {
        assert_eq!(driver.stat(path).unwrap().kind, Kind::File, "{path}");
    }
    let missing = driver.stat("/dir/missing").unwrap_err();
    assert_eq!(missing.errno(), libc::ENOENT);
    assert_eq!(
        missing.message,
        format!("PROPFIND {}/dir/missing: 404 Not Found", served.url())
    );
    assert_eq!(errno(driver.stat("/dir/a b.txt/x")), libc::ENOENT);
    assert_eq!(errno(driver.stat("/dir/../etc")), libc::EINVAL);
}

#[test]
fn listing_names_kinds_and_sizes() {
    let served = Served::new();
    let driver = served.driver();
    let listing = driver.list("/dir").unwrap();
    assert!(listing.complete);
    assert_eq!(sorted_names(&listing), dir_names());
    for entry in &listing.entries {
        let md = fs::metadata(served.real(&format!("/dir/{}", entry.name))).unwrap();
        let expected = if md.is_dir() {
            (Kind::Dir, None)
        } else {
            (Kind::File, Some(md.len()))
        };
        assert_eq!((entry.meta.kind, entry.meta.size), expected, "{entry:?}");
        assert!(
            within_a_minute(entry.meta.mtime.unwrap(), md.modified().unwrap()),
            "{entry:?}"
        );
    }
    let root = driver.list("/").unwrap();
    assert_eq!(sorted_names(&root), ["dir", "empty", "full", "readonly"]);
    assert!(driver.list("/empty").unwrap().entries.is_empty());
    let not_dir = driver.list("/dir/a b.txt").unwrap_err();
    assert_eq!(not_dir.errno(), libc::ENOTDIR);
    assert_eq!(
        not_dir.message,
        format!("PROPFIND {}/dir/a%20b.txt/: not a directory", served.url())
    );
    assert_eq!(errno(driver.list("/missing")), libc::ENOENT);
}

#[test]
fn fetch_is_byte_exact() {
    let served = Served::new();
    let driver = served.driver();
    let (body, meta) = fetch(&driver, "/dir/big.bin");
    assert!(
        body == big_contents(),
        "the 1 MiB body differs from the file"
    );
    assert_eq!(meta.size, Some(BIG_LEN as u64));
    assert!(meta.etag.is_some() && meta.mtime.is_some(), "{meta:?}");
    for (path, data) in FILES {
        assert_eq!(fetch(&driver, &format!("/{path}")).0, *data, "{path}");
    }
    assert_eq!(
        errno(driver.fetch("/dir/sub", &mut Vec::new(), None)),
        libc::EISDIR
    );
    assert_eq!(
        errno(driver.fetch("/missing", &mut Vec::new(), None)),
        libc::ENOENT
    );
}

#[test]
fn conditional_fetch() {
    let served = Served::new();
    let driver = served.driver();
    let (_, meta) = fetch(&driver, "/dir/a b.txt");
    let validators = [
        Validator {
            etag: meta.etag.clone(),
            mtime: meta.mtime,
        },
        Validator {
            etag: meta.etag.clone(),
            mtime: None,
        },
        Validator {
            etag: None,
            mtime: meta.mtime,
        },
    ];
    for validator in &validators {
        let mut body = Vec::new();
        let fetched = driver.fetch("/dir/a b.txt", &mut body, Some(validator));
        assert_eq!(fetched.unwrap(), Fetched::NotModified, "{validator:?}");
        assert!(body.is_empty());
    }
    // A changed file (new size, new mtime) no longer matches.
    let real = served.real("/dir/a b.txt");
    let mut file = fs::OpenOptions::new().append(true).open(&real).unwrap();
    file.write_all(b"more\n").unwrap();
    let later = meta.mtime.unwrap() + Duration::from_secs(10);
    file.set_modified(later).unwrap();
    let mut body = Vec::new();
    match driver.fetch("/dir/a b.txt", &mut body, Some(&validators[0])) {
        Ok(Fetched::Body(fresh)) => {
            assert_eq!(body, b"hello world\nmore\n");
            assert_eq!(fresh.mtime, Some(later));
            assert_ne!(fresh.etag, meta.etag);
        }
        other => panic!("a changed file was not fetched again: {other:?}"),
    }
}

#[test]
fn ranges() {
    let served = Served::new();
    let driver = served.driver();
    let big = big_contents();
    assert!(read_range(&driver, "/dir/big.bin", 0, 1) == big[..1]);
    assert_eq!(read_range(&driver, "/dir/q?#%.txt", 2, 3), b"cap");
    let mut sink = Vec::new();
    assert_eq!(
        errno(driver.read_range("/dir/secret.txt", 0, 10, None, &mut sink)),
        libc::EACCES
    );
    assert!(sink.is_empty());
}

#[test]
fn put_creates_and_replaces_whole_files() {
    let served = Served::new();
    let driver = served.driver();
    let large = noise(3 << 20, 7);
    let meta = put(&driver, "/dir/new.bin", &large);
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(3 << 20)));
    assert!(meta.mtime.is_some(), "{meta:?}");
    assert!(fs::read(served.real("/dir/new.bin")).unwrap() == large);

    let meta = put(&driver, "/dir/a b.txt", b"replaced");
    assert_eq!(meta.size, Some(8));
    assert_eq!(fs::read(served.real("/dir/a b.txt")).unwrap(), b"replaced");

    assert_eq!(put(&driver, "/dir/zero", b"").size, Some(0));
    assert_eq!(fs::read(served.real("/dir/zero")).unwrap(), b"");

    // Names that need escaping, at the root, and over a file nobody may read.
    put(&driver, "/n?#%&+ \u{fc}.txt", b"odd name");
    assert_eq!(
        fs::read(served.real("/n?#%&+ \u{fc}.txt")).unwrap(),
        b"odd name"
    );
    put(&driver, "/dir/secret.txt", b"now readable");
    assert_eq!(fetch(&driver, "/dir/secret.txt").0, b"now readable");

    assert_eq!(served.temporaries("/"), Vec::<String>::new());
    assert_eq!(served.temporaries("/dir"), Vec::<String>::new());
    // Locks are never taken.
    assert!(!served.server.access_log().contains("\"LOCK "));
}

#[test]
fn failed_puts_leave_nothing_behind() {
    let served = Served::new();
    let driver = served.driver();
    // A source shorter than announced: the server never commits the upload.
    let short = driver
        .put("/dir/a b.txt", &mut &b"12345"[..], 10)
        .unwrap_err();
    assert_eq!(short.errno(), libc::EIO, "{}", short.message);
    assert!(
        short.message.contains("ended 5 bytes short"),
        "{}",
        short.message
    );
    assert_eq!(
        fs::read(served.real("/dir/a b.txt")).unwrap(),
        b"hello world\n"
    );

    let missing = driver.put("/nope/f", &mut &b"x"[..], 1).unwrap_err();
    assert_eq!(missing.errno(), libc::ENOENT, "{}", missing.message);
    assert_eq!(
        missing.message,
        format!(
            "PUT {}/nope/f: the parent directory does not exist",
            served.url()
        )
    );
    assert!(!served.real("/nope").exists());

    let onto_dir = driver.put("/dir/sub", &mut &b"x"[..], 1);
    assert!(onto_dir.is_err());
    assert!(served.real("/dir/sub/inner.txt").is_file());

    // nginx answers 500 when it may not write in the directory (its log says EACCES).
    let denied = driver.put("/readonly/f", &mut &b"x"[..], 1);
    assert_eq!(errno(denied), libc::EIO);

    for dir in ["/", "/dir", "/readonly"] {
        assert_eq!(served.temporaries(dir), Vec::<String>::new(), "{dir}");
    }
}

#[test]
fn mkdir_creates_one_directory() {
    let served = Served::new();
    let driver = served.driver();
    driver.mkdir("/dir/new dir#1", 0o755).unwrap();
    assert!(served.real("/dir/new dir#1").is_dir());
    let exists = driver.mkdir("/dir/new dir#1", 0o755).unwrap_err();
    assert_eq!(exists.errno(), libc::EEXIST);
    assert_eq!(
        exists.message,
        format!(
            "MKCOL {}/dir/new%20dir%231/: 405 Method Not Allowed",
            served.url()
        )
    );
    assert_eq!(errno(driver.mkdir("/", 0o755)), libc::EEXIST);
    let missing = driver.mkdir("/nope/x", 0o755).unwrap_err();
    assert_eq!(missing.errno(), libc::ENOENT);
    assert_eq!(
        missing.message,
        format!(
            "MKCOL {}/nope/x/: the parent directory does not exist",
            served.url()
        )
    );
    assert_eq!(errno(driver.mkdir("/readonly/x", 0o755)), libc::EACCES);
    assert!(!served.real("/nope").exists() && !served.real("/readonly/x").exists());
}

#[test]
fn remove_file() {
    let served = Served::new();
    let driver = served.driver();
    driver.remove_file("/dir/q?#%.txt").unwrap();
    assert!(!served.real("/dir/q?#%.txt").exists());
    let dir = driver.remove_file("/dir/sub").unwrap_err();
    assert_eq!(dir.errno(), libc::EISDIR);
    assert_eq!(
        dir.message,
        format!("DELETE {}/dir/sub: is a directory", served.url())
    );
    assert!(served.real("/dir/sub/inner.txt").is_file());
    assert_eq!(errno(driver.remove_file("/")), libc::EISDIR);
}

#[test]
fn remove_dir() {
    let served = Served::new();
    let driver = served.driver();
    driver.remove_dir("/empty").unwrap();
    assert!(!served.real("/empty").exists());
    let full = driver.remove_dir("/full").unwrap_err();
    assert_eq!(full.errno(), libc::ENOTEMPTY);
    assert_eq!(
        full.message,
        format!("DELETE {}/full/: directory not empty", served.url())
    );
    assert!(served.real("/full/one.txt").is_file());
    assert_eq!(errno(driver.remove_dir("/")), libc::EACCES);
}

#[test]
fn rename_files() {
    let served = Served::new();
    let driver = served.driver();
    driver
        .rename("/dir/a b.txt", "/dir/renamed #1.txt")
        .unwrap();
    assert!(!served.real("/dir/a b.txt").exists());
    assert_eq!(
        fs::read(served.real("/dir/renamed #1.txt")).unwrap(),
        b"hello world\n"
    );
    // Over an existing file, and into another directory.
    driver.rename("/full/one.txt", "/dir/q?#%.txt").unwrap();
    assert_eq!(fs::read(served.real("/dir/q?#%.txt")).unwrap(), b"1");
    assert!(!served.real("/full/one.txt").exists());
    driver.rename("/dir/q?#%.txt", "/empty/moved").unwrap();
    assert_eq!(fs::read(served.real("/empty/moved")).unwrap(), b"1");
    let no_parent = driver.rename("/empty/moved", "/nope/moved").unwrap_err();
    assert_eq!(no_parent.errno(), libc::ENOENT, "{}", no_parent.message);
    assert!(!served.real("/nope").exists(), "nginx created the parent");
    assert_eq!(
        errno(driver.rename("/empty/moved", "/dir/a:b&c;+=.txt/x")),
        libc::ENOTDIR
    );
    let onto_dir = driver.rename("/empty/moved", "/dir/sub").unwrap_err();
    assert_eq!(onto_dir.errno(), libc::EISDIR);
    assert_eq!(
        onto_dir.message,
        format!("MOVE {}/dir/sub: is a directory", served.url())
    );
    assert!(served.real("/dir/sub/inner.txt").is_file());
    assert!(served.real("/empty/moved").is_file());
}

#[test]
fn rename_directories() {
    let served = Served::new();
    let driver = served.driver();
    driver.rename("/dir/sub", "/moved sub").unwrap();
    assert!(!served.real("/dir/sub").exists());
    assert_eq!(
        fs::read(served.real("/moved sub/inner.txt")).unwrap(),
        b"inner"
    );
    // Over an empty directory, as rename(2) allows.
    driver.rename("/moved sub", "/empty").unwrap();
    assert!(served.real("/empty/inner.txt").is_file());
    assert!(!served.real("/moved sub").exists());

    // Over a directory with entries: refused, and both stay whole (nginx alone would
    // delete the target's entries).
    let full = driver.rename("/empty", "/full").unwrap_err();
    assert_eq!(full.errno(), libc::ENOTEMPTY);
    assert!(served.real("/full/one.txt").is_file() && served.real("/empty/inner.txt").is_file());
    let inside = driver.rename("/dir", "/dir/x").unwrap_err();
    assert_eq!(inside.errno(), libc::EINVAL);
    assert_eq!(
        inside.message,
        format!(
            "MOVE {}/dir: cannot move a directory into itself",
            served.url()
        )
    );
    assert_eq!(errno(driver.rename("/", "/x")), libc::EINVAL);
    assert!(served.real("/dir/a b.txt").is_file());
}

#[test]
fn permission_denied_is_eacces() {
    let served = Served::new();
    let driver = served.driver();
    let denied = driver
        .fetch("/dir/secret.txt", &mut Vec::new(), None)
        .unwrap_err();
    assert_eq!(denied.errno(), libc::EACCES);
    assert_eq!(
        denied.message,
        format!("GET {}/dir/secret.txt: 403 Forbidden", served.url())
    );
    let mkcol = driver.mkdir("/readonly/d", 0o755).unwrap_err();
    assert_eq!(mkcol.errno(), libc::EACCES);
    assert_eq!(
        mkcol.message,
        format!("MKCOL {}/readonly/d/: 403 Forbidden", served.url())
    );
}

#[test]
fn credentials_are_sent_and_never_shown() {
    let served = Served::new();
    let base = format!("http://roam-user:s3cret@{}", served.server.authority());
    let driver = DavDriver::new(client(), &base).unwrap();
    let missing = driver.stat("/missing").unwrap_err();
    assert_eq!(missing.errno(), libc::ENOENT);
    put(&driver, "/dir/by-user", b"x");
    let shown = [
        missing.message,
        format!("{driver:?}"),
        driver.describe("/dir/by-user"),
    ];
    for text in shown {
        assert!(
            !text.contains("s3cret") && !text.contains("roam-user"),
            "{text}"
        );
    }
    // nginx logs the Basic user of each request: PROPFIND, PUT and MOVE carried it.
    let log = served.server.access_log();
    for method in ["PROPFIND", "PUT", "MOVE"] {
        assert!(
            log.lines()
                .any(|l| l.contains("roam-user") && l.contains(&format!("\"{method} "))),
            "{method} without credentials:\n{log}"
        );
    }
}

#[test]
fn a_stopped_server_is_unreachable() {
    let mut served = Served::new();
    let driver = served.driver();
    // A pooled connection to the server exists when it goes away.
    assert_eq!(driver.stat("/dir").unwrap().kind, Kind::Dir);
    served.server.stop();
    let err = driver.stat("/dir").unwrap_err();
    assert_eq!(err.errno(), libc::EHOSTUNREACH, "{}", err.message);
    assert!(
        err.message
            .starts_with(&format!("PROPFIND {}/dir: ", served.url())),
        "{}",
        err.message
    );
    assert_eq!(errno(driver.list("/dir")), libc::EHOSTUNREACH);
    assert_eq!(
        errno(driver.put("/dir/f", &mut &b"x"[..], 1)),
        libc::EHOSTUNREACH
    );
    assert_eq!(errno(driver.mkdir("/d", 0o755)), libc::EHOSTUNREACH);
    assert_eq!(
        errno(driver.remove_file("/dir/a b.txt")),
        libc::EHOSTUNREACH
    );
    assert_eq!(errno(driver.rename("/dir", "/x")), libc::EHOSTUNREACH);
    let mut sink = Vec::new();
    assert_eq!(
        errno(driver.read_range("/dir/big.bin", 0, 1, None, &mut sink)),
        libc::EHOSTUNREACH
    );
}

#[test]
fn a_silent_server_times_out() {
    let silent = roam_testkit::Silent::start();
    let client = common::http_client(Duration::from_millis(300));
    let d = DavDriver::new(client, &silent.url()).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(errno(d.stat("/x")), libc::ETIMEDOUT);
    assert_eq!(errno(d.put("/x", &mut &b"data"[..], 4)), libc::ETIMEDOUT);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_full_disk_is_eio_and_keeps_the_old_file() {
    // nginx answers a PUT that fills its disk with 500 (it has no 507 Insufficient
    // Storage): the driver can only say EIO, but must leave the old file and no temporary.
    let scratch = Scratch::new("dav-full");
    let www = scratch.join("www");
    let _full = roam_testkit::Tmpfs::mount(&www, "1m");
    write_file(&www.join("kept.txt"), b"kept", 0o644);
    let server = nginx_dav(&www, &scratch.join("run"));
    let d = DavDriver::new(client(), &server.url()).unwrap();
    let two_mib = noise(2 << 20, 9);
    assert_eq!(
        errno(d.put("/kept.txt", &mut &two_mib[..], two_mib.len() as u64)),
        libc::EIO
    );
    // nginx itself leaves the body it was receiving (`NAME.0000000002`, hidden from
    // listings as a dotfile); no name roam chose survives.
    let mut names: Vec<String> = fs::read_dir(&www)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.rsplit_once('.').is_none_or(|(_, seq)| seq.len() != 10))
        .collect();
    names.sort();
    assert_eq!(names, ["kept.txt"]);
    assert_eq!(fs::read(www.join("kept.txt")).unwrap(), b"kept");
}
