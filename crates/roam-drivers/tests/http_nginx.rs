//! The HTTP driver against real servers: nginx with `autoindex on` (the reference), and
//! Python's `http.server` for a second index format. Each test serves a freshly generated
//! tree from its own server process on a free loopback port, both from `roam-testkit`.
//!
//! What every driver does alike (a file, a directory, a missing name, ranges, and the
//! refusal of every change with EROFS) is tests/behaviour.rs's; here are nginx's and
//! Python's index formats, validators, messages and failures.
//!
//! nginx and python3 are required: a machine without them fails these tests (CI installs
//! them) rather than skipping them silently.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use roam_drivers::http::{HttpClient, HttpDriver};
use roam_drivers::{Driver, Fetched, Kind, Listing, Meta, Validator};
use roam_testkit::{mtime_of, noise, within_a_minute, write_file, Scratch, Server};

/// The readable files of the generated tree: their paths under `www/` and their contents.
const FILES: &[(&str, &[u8])] = &[
    ("dir/a b.txt", b"hello world\n"),
    ("dir/q?#%.txt", b"escaped"),
    ("dir/a:b&c.txt", b"colon"),
    ("dir/\u{fc}n\u{ef}.txt", b"unicode"),
    (
        "dir/very-long-name-that-nginx-truncates-in-its-link-text-xxxxxxxx.txt",
        b"long",
    ),
    ("dir/sub/inner.txt", b"inner"),
];
/// Mode 000: nginx's workers (`nobody` under root) may not read it.
const SECRET: &str = "dir/secret.txt";
const BIG: &str = "dir/big.bin";
const BIG_LEN: usize = 1 << 20;

/// The generated tree in a scratch directory (`www/`), served by one server process whose
/// files are in `run/`.
struct Served {
    // Declared first so that it is dropped first: the server stops before its tree goes.
    server: Server,
    scratch: Scratch,
}

impl Served {
    fn nginx() -> Served {
        Served::by(Server::nginx)
    }

    fn python() -> Served {
        Served::by(Server::python)
    }

    fn by(start: fn(&Path, &Path) -> Server) -> Served {
        let scratch = Scratch::new("http-driver");
        let www = scratch.join("www");
        for (name, data) in FILES {
            write_file(&www.join(name), data, 0o644);
        }
        write_file(&www.join(SECRET), b"nobody may read this", 0o000);
        write_file(&www.join(BIG), &big_contents(), 0o644);
        let server = start(&www, &scratch.join("run"));
        Served { server, scratch }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn driver(&self, client: &HttpClient) -> HttpDriver {
        HttpDriver::new(client.clone(), &self.url()).unwrap()
    }

    /// The served file behind the remote `path`.
    fn real(&self, path: &str) -> PathBuf {
        self.scratch.join("www").join(path.trim_start_matches('/'))
    }
}

/// The contents of `BIG`: noise, so that a shifted or repeated block shows.
fn big_contents() -> Vec<u8> {
    noise(BIG_LEN, 0)
}

fn client() -> HttpClient {
    common::http_client(Duration::from_secs(10))
}

fn fetch(driver: &HttpDriver, path: &str) -> (Vec<u8>, Meta) {
    let mut body = Vec::new();
    match driver.fetch(path, &mut body, None).unwrap() {
        Fetched::Body(meta) => (body, meta),
        Fetched::NotModified => panic!("{path}: not modified without a validator"),
    }
}

/// The names in `www/dir`, sorted.
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

fn sorted_names(listing: &Listing) -> Vec<&str> {
    let mut names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    names.sort_unstable();
    names
}

#[test]
fn nginx_stat_of_a_file() {
    let server = Served::nginx();
    let meta = server.driver(&client()).stat("/dir/a b.txt").unwrap();
    assert_eq!(meta.kind, Kind::File);
    assert_eq!(meta.size, Some(12));
    assert!(
        within_a_minute(meta.mtime.unwrap(), mtime_of(&server.real("/dir/a b.txt"))),
        "{meta:?}"
    );
    assert!(
        meta.etag.as_deref().is_some_and(|e| e.starts_with('"')),
        "{meta:?}"
    );
}

#[test]
fn nginx_stat_of_directories() {
    let server = Served::nginx();
    let client = client();
    let driver = server.driver(&client);
    // nginx redirects `/dir` to `/dir/`; the root is asked for as `/`.
    for path in ["/", "/dir", "/dir/sub"] {
        assert_eq!(driver.stat(path).unwrap().kind, Kind::Dir, "{path}");
    }
    // A mount URL with a trailing slash addresses the same tree.
    let below = HttpDriver::new(client.clone(), &format!("{}/dir/", server.url())).unwrap();
    assert_eq!(below.stat("/").unwrap().kind, Kind::Dir);
    assert_eq!(below.stat("/sub").unwrap().kind, Kind::Dir);
    assert_eq!(below.stat("/a b.txt").unwrap().kind, Kind::File);
}

#[test]
fn nginx_listing() {
    let server = Served::nginx();
    let driver = server.driver(&client());
    let listing = driver.list("/dir").unwrap();
    assert!(listing.complete);
    assert_eq!(sorted_names(&listing), dir_names());
    for entry in &listing.entries {
        let real = server.real(&format!("/dir/{}", entry.name));
        let md = fs::metadata(&real).unwrap();
        assert!(
            within_a_minute(entry.meta.mtime.unwrap(), md.modified().unwrap()),
            "{entry:?}"
        );
        if md.is_dir() {
            assert_eq!(
                (entry.meta.kind, entry.meta.size),
                (Kind::Dir, None),
                "{entry:?}"
            );
        } else {
            assert_eq!(
                (entry.meta.kind, entry.meta.size),
                (Kind::File, Some(md.len())),
                "{entry:?}"
            );
        }
    }
    let root = driver.list("/").unwrap();
    assert!(root.complete);
    assert_eq!(root.entries.len(), 1);
    assert_eq!(
        (root.entries[0].name.as_str(), root.entries[0].meta.kind),
        ("dir", Kind::Dir)
    );
}

#[test]
fn nginx_fetch_is_byte_exact() {
    let server = Served::nginx();
    let driver = server.driver(&client());
    let (body, meta) = fetch(&driver, "/dir/big.bin");
    assert!(
        body == big_contents(),
        "the 1 MiB body differs from the file"
    );
    assert_eq!(meta.size, Some(BIG_LEN as u64));
    assert!(meta.etag.is_some() && meta.mtime.is_some(), "{meta:?}");
    // Names that need escaping reach the right file.
    for (path, data) in FILES {
        assert_eq!(fetch(&driver, &format!("/{path}")).0, *data, "{path}");
    }
}

#[test]
fn nginx_conditional_fetch() {
    let server = Served::nginx();
    let driver = server.driver(&client());
    let (_, meta) = fetch(&driver, "/dir/a b.txt");
    let both = Validator {
        etag: meta.etag.clone(),
        mtime: meta.mtime,
    };
    let etag_only = Validator {
        etag: meta.etag.clone(),
        mtime: None,
    };
    let mtime_only = Validator {
        etag: None,
        mtime: meta.mtime,
    };
    for validator in [&both, &etag_only, &mtime_only] {
        let mut body = Vec::new();
        assert_eq!(
            driver
                .fetch("/dir/a b.txt", &mut body, Some(validator))
                .unwrap(),
            Fetched::NotModified
        );
        assert!(body.is_empty());
    }
    // A changed file (new size, new mtime) no longer matches.
    let real = server.real("/dir/a b.txt");
    fs::OpenOptions::new()
        .append(true)
        .open(&real)
        .unwrap()
        .write_all(b"more\n")
        .unwrap();
    let later = meta.mtime.unwrap() + Duration::from_secs(10);
    fs::File::options()
        .write(true)
        .open(&real)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let mut body = Vec::new();
    match driver
        .fetch("/dir/a b.txt", &mut body, Some(&both))
        .unwrap()
    {
        Fetched::Body(fresh) => {
            assert_eq!(body, b"hello world\nmore\n");
            assert_eq!(fresh.size, Some(17));
            assert_ne!(fresh.etag, meta.etag);
            assert_eq!(fresh.mtime, Some(later));
        }
        Fetched::NotModified => panic!("a changed file was reported as not modified"),
    }
}

#[test]
fn nginx_errors_have_their_errno() {
    let server = Served::nginx();
    let driver = server.driver(&client());
    let missing = driver.stat("/dir/missing").unwrap_err();
    assert_eq!(missing.errno(), libc::ENOENT);
    assert_eq!(
        missing.message,
        format!("HEAD {}/dir/missing: 404 Not Found", server.url())
    );
    assert_eq!(
        driver.stat("/dir/secret.txt").unwrap_err().errno(),
        libc::EACCES
    );
    let denied = driver
        .fetch("/dir/secret.txt", &mut Vec::new(), None)
        .unwrap_err();
    assert_eq!(denied.errno(), libc::EACCES);
    assert_eq!(
        denied.message,
        format!("GET {}/dir/secret.txt: 403 Forbidden", server.url())
    );
    assert_eq!(
        driver
            .fetch("/", &mut Vec::new(), None)
            .unwrap_err()
            .errno(),
        libc::EISDIR
    );
}

#[test]
fn a_stopped_server_is_unreachable() {
    let client = client();
    let server = Served::nginx();
    let driver = server.driver(&client);
    // A pooled connection to the server exists when it goes away.
    assert_eq!(driver.stat("/dir").unwrap().kind, Kind::Dir);
    let url = server.url();
    drop(server);
    let err = driver.stat("/dir").unwrap_err();
    assert_eq!(err.errno(), libc::EHOSTUNREACH, "{}", err.message);
    assert!(
        err.message.starts_with(&format!("HEAD {url}/dir: ")),
        "{}",
        err.message
    );
    assert_eq!(
        driver
            .fetch("/dir/a b.txt", &mut Vec::new(), None)
            .unwrap_err()
            .errno(),
        libc::EHOSTUNREACH
    );
}

#[test]
fn python_http_server() {
    let server = Served::python();
    let driver = server.driver(&client());
    let listing = driver.list("/dir").unwrap();
    assert!(listing.complete);
    assert_eq!(sorted_names(&listing), dir_names());
    // Python's index gives kinds only.
    let sub = listing.entries.iter().find(|e| e.name == "sub").unwrap();
    assert_eq!(sub.meta, Meta::of_kind(Kind::Dir));
    let file = listing
        .entries
        .iter()
        .find(|e| e.name == "a b.txt")
        .unwrap();
    assert_eq!(file.meta, Meta::of_kind(Kind::File));
    // Python redirects `/dir` to `/dir/` too, and gives sizes and dates on HEAD.
    assert_eq!(driver.stat("/dir").unwrap().kind, Kind::Dir);
    let meta = driver.stat("/dir/a b.txt").unwrap();
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(12)));
    assert!(within_a_minute(
        meta.mtime.unwrap(),
        mtime_of(&server.real("/dir/a b.txt"))
    ));
    assert!(
        fetch(&driver, "/dir/big.bin").0 == big_contents(),
        "the 1 MiB body differs from the file"
    );
    assert_eq!(
        driver.stat("/dir/missing").unwrap_err().errno(),
        libc::ENOENT
    );
}

#[test]
fn a_silent_server_times_out() {
    let silent = roam_testkit::Silent::start();
    let client = common::http_client(Duration::from_millis(300));
    let d = HttpDriver::new(client, &silent.url()).unwrap();
    let started = std::time::Instant::now();
    let err = d.stat("/x").unwrap_err();
    assert_eq!(err.errno(), libc::ETIMEDOUT, "{}", err.message);
    assert!(started.elapsed() < Duration::from_secs(5));
}
