//! The S3 driver against a real S3-compatible server: `moto_server` (PyPI `moto[server]`),
//! started by `roam-testkit`, one per test. Each test plants its objects while moto is
//! still open (including keys the driver must refuse to pass on), then has moto check
//! every request's Signature V4 against an IAM user's secret, as AWS does: every test
//! below therefore also proves the driver's signing.
//!
//! What every driver does alike (the errnos of put, mkdir, rmdir, unlink and rename,
//! EXDEV for a directory's rename, ENOTSUP for modes, times and links, preconditions) is
//! tests/behaviour.rs's, against moto checking signatures too; here is what is S3's own:
//! keys as directories, markers, listings, multipart uploads, credentials.
//!
//! moto is required: a machine without it fails these tests (CI runs
//! `pip install 'moto[server]'`) rather than skipping them silently.

mod common;

use std::time::Duration;

use common::calls::{named, names};
use roam_drivers::http::HttpClient;
use roam_drivers::s3::{S3Config, S3Driver};
use roam_drivers::{Attrs, Driver, Error, ErrorKind, Fetched, Kind, Known, Meta, Validator};
use roam_testkit::s3::{create_bucket, enforce_auth, moto, put_object, Credentials};
use roam_testkit::{noise, Scratch, Server};

const BUCKET: &str = "roam-test";
const MIB: usize = 1 << 20;

/// The objects most tests start with.
const TREE: &[(&str, &[u8])] = &[
    ("top.txt", b"top"),
    ("dir/a b.txt", b"hello world\n"),
    ("dir/\u{fc}n\u{ef}.txt", b"unicode"),
    ("dir/sub/inner.txt", b"inner"),
    ("dir/deeper/x/y.txt", b"deep"),
    // A directory that exists by its marker alone.
    ("empty/", b""),
    // A directory with a marker and a file.
    ("marked/", b""),
    ("marked/one.txt", b"1"),
];

/// Keys whose names would climb out of a directory, or are empty.
const HOSTILE: &[&str] = &["dir/..", "dir/../escape.txt", "dir//double.txt"];

/// One moto server with a bucket holding `objects`, checking signatures from now on.
struct World {
    // Declared first so that it is dropped first: the server stops before its files go.
    server: Server,
    credentials: Credentials,
    _scratch: Scratch,
}

impl World {
    fn new(objects: &[(&str, &[u8])]) -> World {
        let scratch = Scratch::new("s3-driver");
        let server = moto(&scratch.join("run"));
        create_bucket(&server, BUCKET);
        for (key, data) in objects {
            put_object(&server, BUCKET, key, data);
        }
        let credentials = enforce_auth(&server);
        World {
            server,
            credentials,
            _scratch: scratch,
        }
    }

    fn config(&self) -> S3Config {
        S3Config {
            endpoint: Some(self.server.url()),
            region: Some("us-east-1".into()),
            access_key: Some(self.credentials.access_key.clone()),
            secret_key: Some(self.credentials.secret_key.clone()),
            session_token: None,
            path_style: true,
            profile: None,
            ca_bundle: None,
            credential_source: None,
            keys_from: None,
            problem: None,
        }
    }

    fn driver(&self) -> S3Driver {
        self.driver_at(BUCKET)
    }

    fn driver_at(&self, bucket_and_prefix: &str) -> S3Driver {
        S3Driver::new(client(), &self.config(), bucket_and_prefix).unwrap()
    }
}

fn client() -> HttpClient {
    common::http_client(Duration::from_secs(30))
}

fn fetch(driver: &S3Driver, path: &str) -> (Vec<u8>, Meta) {
    let mut body = Vec::new();
    match driver.fetch(path, &mut body, None).unwrap() {
        Fetched::Body(meta) => (body, meta),
        Fetched::NotModified => panic!("{path}: not modified without a validator"),
    }
}

fn read_range(driver: &S3Driver, path: &str, offset: u64, len: u64) -> Vec<u8> {
    let mut body = Vec::new();
    let n = driver
        .read_range(path, offset, len, None, &mut body)
        .unwrap();
    assert_eq!(n, body.len() as u64, "{path} {offset}+{len}");
    body
}

fn put(driver: &S3Driver, path: &str, data: &[u8]) -> Meta {
    driver.put(path, &mut &data[..], data.len() as u64).unwrap()
}

fn kind<T: std::fmt::Debug>(result: Result<T, Error>) -> ErrorKind {
    result.unwrap_err().kind
}

#[test]
fn stat_tells_files_directories_and_markers_apart() {
    let world = World::new(TREE);
    let d = world.driver();
    let meta = d.stat("/dir/a b.txt").unwrap();
    assert_eq!(meta.kind, Kind::File);
    assert_eq!(meta.size, Some(12));
    assert!(meta.mtime.is_some() && meta.etag.is_some(), "{meta:?}");
    assert_eq!(d.stat("/dir/\u{fc}n\u{ef}.txt").unwrap().size, Some(7));
    for dir in [
        "/",
        "/dir",
        "/dir/deeper",
        "/dir/deeper/x",
        "/empty",
        "/marked",
    ] {
        assert_eq!(d.stat(dir).unwrap().kind, Kind::Dir, "{dir}");
    }
    for missing in ["/nothing", "/dir/nothing", "/dir/a", "/emp"] {
        let err = d.stat(missing).unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound, "{missing}");
        assert_eq!(err.errno(), libc::ENOENT);
    }
}

#[test]
fn listings_show_nested_prefixes_and_skip_markers_and_hostile_keys() {
    let mut objects = TREE.to_vec();
    objects.extend(HOSTILE.iter().map(|key| (*key, &b"evil"[..])));
    let world = World::new(&objects);
    let d = world.driver();
    use Kind::*;
    assert_eq!(
        names(&d, "/"),
        named(&[
            ("dir", Dir),
            ("empty", Dir),
            ("marked", Dir),
            ("top.txt", File)
        ])
    );
    assert_eq!(
        names(&d, "/dir"),
        named(&[
            ("a b.txt", File),
            ("deeper", Dir),
            ("sub", Dir),
            ("\u{fc}n\u{ef}.txt", File),
        ])
    );
    assert_eq!(names(&d, "/empty"), []);
    assert_eq!(names(&d, "/marked"), named(&[("one.txt", File)]));
    let listing = d.list("/dir").unwrap();
    let file = listing
        .entries
        .iter()
        .find(|e| e.name == "a b.txt")
        .unwrap();
    assert_eq!(file.meta.size, Some(12));
    assert_eq!(file.meta.etag, d.stat("/dir/a b.txt").unwrap().etag);
    assert_eq!(file.meta.mtime, d.stat("/dir/a b.txt").unwrap().mtime);
    assert_eq!(kind(d.list("/nothing")), ErrorKind::NotFound);
    assert_eq!(kind(d.list("/top.txt")), ErrorKind::NotADirectory);
}

/// S3 keys may be 1024 bytes long, with components of any length; a component over
/// NAME_MAX (255 bytes) would fail every lookup in its directory (ENAMETOOLONG) if listed.
#[test]
fn names_longer_than_name_max_are_left_out_of_listings() {
    let long_file = format!("dir/{}", "f".repeat(300));
    let long_dir = format!("dir/{}/inner.txt", "d".repeat(300));
    let longest = format!("dir/{}", "m".repeat(255));
    let mut objects = TREE.to_vec();
    objects.push((&long_file, b"long"));
    objects.push((&long_dir, b"deep"));
    objects.push((&longest, b"fits"));
    let world = World::new(&objects);
    let d = world.driver();
    let listing = d.list("/dir").unwrap();
    assert!(listing.complete);
    let mut got: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    got.sort();
    let mut want = vec![
        "a b.txt",
        "deeper",
        "sub",
        "\u{fc}n\u{ef}.txt",
        &longest[4..],
    ];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(fetch(&d, &format!("/{longest}")).0, b"fits");
}

#[test]
fn listings_follow_continuation_tokens() {
    // More than one page: S3 (and moto) return at most 1000 keys per page.
    let keys: Vec<String> = (0..1100).map(|i| format!("many/f{i:04}")).collect();
    let objects: Vec<(&str, &[u8])> = keys.iter().map(|k| (k.as_str(), &b"x"[..])).collect();
    let world = World::new(&objects);
    let listing = world.driver().list("/many").unwrap();
    assert_eq!(listing.entries.len(), 1100);
    let mut seen: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 1100);
    assert_eq!(seen[1099], "f1099");
}

#[test]
fn a_prefix_mount_sees_only_its_subtree() {
    let world = World::new(TREE);
    let d = world.driver_at(&format!("{BUCKET}/dir"));
    assert_eq!(d.stat("/").unwrap().kind, Kind::Dir);
    assert_eq!(fetch(&d, "/sub/inner.txt").0, b"inner");
    assert!(names(&d, "/").contains(&("a b.txt".to_owned(), Kind::File)));
    assert_eq!(d.describe("/sub"), format!("s3://{BUCKET}/dir/sub"));
    put(&d, "/new.txt", b"new");
    assert_eq!(fetch(&world.driver(), "/dir/new.txt").0, b"new");
}

#[test]
fn fetch_is_byte_exact_and_conditional() {
    let big = noise(MIB, 1);
    let world = World::new(&[("big.bin", &big), ("dir/f", b"f")]);
    let d = world.driver();
    let (body, meta) = fetch(&d, "/big.bin");
    assert!(body == big, "1 MiB came back different");
    assert_eq!(meta.size, Some(MIB as u64));
    let etag = meta.etag.clone().expect("an ETag");
    let same = Validator {
        etag: Some(etag),
        mtime: None,
    };
    let mut sink = Vec::new();
    assert_eq!(
        d.fetch("/big.bin", &mut sink, Some(&same)).unwrap(),
        Fetched::NotModified
    );
    assert!(sink.is_empty());
    let by_time = Validator {
        etag: None,
        mtime: meta.mtime,
    };
    assert_eq!(
        d.fetch("/big.bin", &mut sink, Some(&by_time)).unwrap(),
        Fetched::NotModified
    );
    let stale = Validator {
        etag: Some("\"0123456789abcdef0123456789abcdef\"".into()),
        mtime: None,
    };
    match d.fetch("/big.bin", &mut sink, Some(&stale)).unwrap() {
        Fetched::Body(_) => assert!(sink == big),
        Fetched::NotModified => panic!("a stale ETag must fetch"),
    }
    assert_eq!(
        kind(d.fetch("/dir", &mut Vec::new(), None)),
        ErrorKind::IsADirectory
    );
    assert_eq!(
        kind(d.fetch("/", &mut Vec::new(), None)),
        ErrorKind::IsADirectory
    );
    assert_eq!(
        kind(d.fetch("/missing", &mut Vec::new(), None)),
        ErrorKind::NotFound
    );
}

#[test]
fn ranges_read_what_was_asked() {
    let big = noise(MIB, 2);
    let world = World::new(&[("big.bin", &big), ("dir/f", b"f")]);
    let d = world.driver();
    assert!(d.capabilities().read_ranges);
    assert_eq!(read_range(&d, "/big.bin", 0, 10), &big[..10]);
    assert_eq!(
        read_range(&d, "/big.bin", 4096, 65536),
        &big[4096..4096 + 65536]
    );
    // Across the end: only what there is.
    assert_eq!(
        read_range(&d, "/big.bin", MIB as u64 - 5, 100),
        &big[MIB - 5..]
    );
    assert!(read_range(&d, "/big.bin", MIB as u64, 10).is_empty());
    assert!(read_range(&d, "/big.bin", 10, 0).is_empty());
    assert_eq!(
        kind(d.read_range("/missing", 0, 1, None, &mut Vec::new())),
        ErrorKind::NotFound
    );
    assert_eq!(
        kind(d.read_range("/dir", 0, 1, None, &mut Vec::new())),
        ErrorKind::IsADirectory
    );
}

#[test]
fn put_stores_small_files_exactly() {
    let world = World::new(TREE);
    let d = world.driver();
    assert!(d.capabilities().write);
    let meta = put(&d, "/dir/empty.txt", b"");
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(0)));
    assert_eq!(fetch(&d, "/dir/empty.txt").0, b"");
    let big = noise(MIB, 3);
    let meta = put(&d, "/dir/big.bin", &big);
    assert_eq!(meta.size, Some(MIB as u64));
    assert_eq!(meta.etag, d.stat("/dir/big.bin").unwrap().etag);
    assert!(fetch(&d, "/dir/big.bin").0 == big);
    put(&d, "/dir/a b.txt", b"replaced");
    assert_eq!(fetch(&d, "/dir/a b.txt").0, b"replaced");
    put(&d, "/empty/in marker dir \u{2603}", b"snow");
    assert_eq!(fetch(&d, "/empty/in marker dir \u{2603}").0, b"snow");
}

/// With roam's listing vouching for the place, the same stored bytes and metadata; the
/// root is still refused (the one check that needs no request).
#[test]
fn put_in_a_known_directory_stores_the_same() {
    let world = World::new(TREE);
    let d = world.driver();
    let data = noise(70_000, 5);
    let meta = d
        .put_in_known_dir(
            "/dir/sub/new.bin",
            &mut &data[..],
            data.len() as u64,
            Attrs::default(),
        )
        .unwrap();
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(70_000)));
    // moto tells the ETag and time with the PUT: the upload answers what a HEAD would.
    assert_eq!(meta, d.stat("/dir/sub/new.bin").unwrap());
    assert!(fetch(&d, "/dir/sub/new.bin").0 == data);
    d.put_in_known_dir("/top.txt", &mut &b"new top"[..], 7, Attrs::default())
        .unwrap();
    assert_eq!(fetch(&d, "/top.txt").0, b"new top");
    assert_eq!(
        kind(d.put_in_known_dir("/", &mut &b"x"[..], 1, Attrs::default())),
        ErrorKind::IsADirectory
    );
}

#[test]
fn a_short_source_stores_nothing() {
    let world = World::new(TREE);
    let d = world.driver();
    assert_eq!(
        kind(d.put("/dir/short", &mut &b"abc"[..], 10)),
        ErrorKind::Io
    );
    assert_eq!(kind(d.stat("/dir/short")), ErrorKind::NotFound);
}

#[test]
fn large_files_go_up_in_parts() {
    let world = World::new(&[]);
    let d = world.driver();
    let data = noise(70 * MIB, 4);
    let meta = put(&d, "/large.bin", &data);
    assert_eq!(meta.size, Some(70 * MIB as u64));
    // A multipart ETag ends with the number of parts: 4 of 16 MiB and one of 6.
    let etag = meta.etag.unwrap();
    assert!(etag.trim_matches('"').ends_with("-5"), "{etag}");
    assert!(
        fetch(&d, "/large.bin").0 == data,
        "70 MiB came back different"
    );
    assert_eq!(
        read_range(&d, "/large.bin", 16 * MIB as u64 - 3, 6),
        &data[16 * MIB - 3..16 * MIB + 3]
    );
}

#[test]
fn a_failed_multipart_upload_stores_nothing() {
    let world = World::new(TREE);
    let d = world.driver();
    // 70 MiB announced, 20 given: the second part cannot be read.
    let data = noise(20 * MIB, 5);
    let err = d
        .put("/dir/cut.bin", &mut &data[..], 70 * MIB as u64)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io);
    assert!(err.message.contains("bytes short"), "{}", err.message);
    assert_eq!(kind(d.stat("/dir/cut.bin")), ErrorKind::NotFound);
}

#[test]
fn mkdir_creates_markers() {
    let world = World::new(TREE);
    let d = world.driver();
    d.mkdir("/new", 0o755).unwrap();
    assert_eq!(d.stat("/new").unwrap().kind, Kind::Dir);
    assert_eq!(names(&d, "/new"), []);
    assert!(names(&d, "/").contains(&("new".to_owned(), Kind::Dir)));
    d.mkdir("/new/nested dir", 0o755).unwrap();
    assert_eq!(names(&d, "/new"), named(&[("nested dir", Kind::Dir)]));
    // Directories of keys alone exist too.
    for existing in ["/dir", "/dir/sub", "/"] {
        assert_eq!(
            kind(d.mkdir(existing, 0o755)),
            ErrorKind::AlreadyExists,
            "{existing}"
        );
    }
}

#[test]
fn remove_file_and_remove_dir() {
    let world = World::new(TREE);
    let d = world.driver();
    // A directory of keys alone is not empty either (its marker-made peers:
    // tests/behaviour.rs).
    assert_eq!(kind(d.remove_dir("/dir")), ErrorKind::NotEmpty);
    assert_eq!(kind(d.remove_dir("/marked")), ErrorKind::NotEmpty);
    assert_eq!(kind(d.remove_dir("/")), ErrorKind::PermissionDenied);
    d.remove_dir("/empty").unwrap();
    assert_eq!(kind(d.stat("/empty")), ErrorKind::NotFound);
    d.remove_file("/marked/one.txt").unwrap();
    assert_eq!(
        d.stat("/marked").unwrap().kind,
        Kind::Dir,
        "its marker keeps it"
    );
    d.remove_dir("/marked").unwrap();
    assert_eq!(kind(d.stat("/marked")), ErrorKind::NotFound);
}

#[test]
fn directories_outlive_their_last_entry() {
    // No markers: the directories exist only through the keys under them.
    let world = World::new(&[("a/b/only.txt", b"1"), ("a/c/only.txt", b"2")]);
    let d = world.driver();
    d.remove_file("/a/b/only.txt").unwrap();
    assert_eq!(d.stat("/a/b").unwrap().kind, Kind::Dir);
    assert_eq!(names(&d, "/a/b"), []);
    d.remove_dir("/a/b").unwrap();
    assert_eq!(kind(d.stat("/a/b")), ErrorKind::NotFound);
    d.rename("/a/c/only.txt", "/moved.txt").unwrap();
    assert_eq!(d.stat("/a/c").unwrap().kind, Kind::Dir);
    d.remove_dir("/a/c").unwrap();
    assert_eq!(
        d.stat("/a").unwrap().kind,
        Kind::Dir,
        "removing /a/c keeps /a"
    );
    d.remove_dir("/a").unwrap();
    assert_eq!(names(&d, "/"), named(&[("moved.txt", Kind::File)]));
}

#[test]
fn known_files_are_removed_with_the_errnos_of_unknown_ones() {
    let world = World::new(&[
        ("a/one.txt", b"1"),
        ("a/two.txt", b"2"),
        ("b/only.txt", b"3"),
    ]);
    let d = world.driver();
    let known = |path: &str, siblings: bool| {
        let meta = d.stat(path).unwrap();
        move |d: &S3Driver, path: &str| {
            d.remove_known_file(
                path,
                Known {
                    meta: &meta,
                    siblings,
                    empty: false,
                },
            )
        }
    };
    let one = known("/a/one.txt", true);
    one(&d, "/a/one.txt").unwrap();
    assert_eq!(kind(d.stat("/a/one.txt")), ErrorKind::NotFound);
    // Gone meanwhile: the conditional DELETE says so, where a plain one would succeed.
    assert_eq!(kind(one(&d, "/a/one.txt")), ErrorKind::NotFound);
    // Changed since roam saw it (another ETag): still a file, still removed.
    let two = known("/a/two.txt", false);
    put(&d, "/a/two.txt", b"changed");
    two(&d, "/a/two.txt").unwrap();
    assert_eq!(kind(d.stat("/a/two.txt")), ErrorKind::NotFound);
    assert_eq!(d.stat("/a").unwrap().kind, Kind::Dir, "its last entry went");
    // A prefix where roam saw a file: EISDIR, as for an unknown one.
    let only = known("/b/only.txt", false);
    assert_eq!(kind(only(&d, "/b")), ErrorKind::IsADirectory);
    only(&d, "/b/only.txt").unwrap();
    assert_eq!(
        d.stat("/b").unwrap().kind,
        Kind::Dir,
        "no siblings: a marker keeps it"
    );
    d.remove_dir("/b").unwrap();
}

/// With roam's listing vouching for the place, `mkdir` is one `PUT` of the marker, and
/// says what a stat of the new directory would; the root still exists.
#[test]
fn mkdir_in_a_known_directory_puts_only_the_marker() {
    let world = World::new(TREE);
    let d = world.driver();
    let made = d.mkdir_in_known_dir("/dir/fresh", 0o755).unwrap();
    assert_eq!(made, Some(d.stat("/dir/fresh").unwrap()));
    assert_eq!(names(&d, "/dir/fresh"), []);
    assert!(names(&d, "/dir").contains(&("fresh".to_owned(), Kind::Dir)));
    put(&d, "/dir/fresh/f", b"in it");
    assert_eq!(kind(d.remove_dir("/dir/fresh")), ErrorKind::NotEmpty);
    d.remove_file("/dir/fresh/f").unwrap();
    d.remove_dir("/dir/fresh").unwrap();
    assert_eq!(kind(d.stat("/dir/fresh")), ErrorKind::NotFound);
    assert_eq!(
        kind(d.mkdir_in_known_dir("/", 0o755)),
        ErrorKind::AlreadyExists
    );
    // rmdir of a directory roam knows: the same checks; its parent, left without entries
    // and without a marker of its own, is kept by one.
    // Keys only, no markers: `/keys/only` exists through its one key.
    d.put_in_known_dir("/keys/only/inner/f", &mut &b"x"[..], 1, Attrs::default())
        .unwrap();
    d.remove_file("/keys/only/inner/f").unwrap();
    let meta = d.stat("/keys/only/inner").unwrap();
    let known = |siblings| Known {
        meta: &meta,
        siblings,
        empty: false,
    };
    put(&d, "/keys/only/inner/g", b"y");
    assert_eq!(
        kind(d.remove_known_dir("/keys/only/inner", known(false))),
        ErrorKind::NotEmpty
    );
    d.remove_file("/keys/only/inner/g").unwrap();
    d.remove_known_dir("/keys/only/inner", known(false))
        .unwrap();
    assert_eq!(d.stat("/keys/only").unwrap().kind, Kind::Dir);
    assert_eq!(
        kind(d.remove_known_dir("/keys/only/inner", known(true))),
        ErrorKind::NotFound
    );
}

#[test]
fn a_directory_of_hostile_keys_is_not_empty() {
    let world = World::new(&[("d/", b""), ("d/..", b"evil")]);
    let d = world.driver();
    assert_eq!(names(&d, "/d"), []);
    assert_eq!(kind(d.remove_dir("/d")), ErrorKind::NotEmpty);
}

#[test]
fn rename_copies_files_and_refuses_directories() {
    let world = World::new(TREE);
    let d = world.driver();
    d.rename("/dir/a b.txt", "/dir/sub/moved \u{e9}.txt")
        .unwrap();
    assert_eq!(kind(d.stat("/dir/a b.txt")), ErrorKind::NotFound);
    assert_eq!(fetch(&d, "/dir/sub/moved \u{e9}.txt").0, b"hello world\n");
    // A directory of keys alone is refused too.
    let err = d.rename("/dir", "/elsewhere").unwrap_err();
    assert_eq!(
        (err.kind, err.errno()),
        (ErrorKind::CrossDevice, libc::EXDEV)
    );
}

#[test]
fn bad_credentials_are_refused() {
    let world = World::new(TREE);
    let mut config = world.config();
    config.secret_key = Some("not-the-secret".into());
    let wrong_secret = S3Driver::new(client(), &config, BUCKET).unwrap();
    let err = wrong_secret.stat("/top.txt").unwrap_err();
    assert_eq!(
        (err.kind, err.errno()),
        (ErrorKind::PermissionDenied, libc::EACCES)
    );
    let err = wrong_secret.list("/dir").unwrap_err();
    assert_eq!(err.kind, ErrorKind::PermissionDenied);
    assert!(
        err.message.contains("SignatureDoesNotMatch"),
        "{}",
        err.message
    );
    assert!(!err.message.contains("not-the-secret"), "{}", err.message);
    config.access_key = Some("AKIANOSUCHKEY0000000".into());
    let unknown = S3Driver::new(client(), &config, BUCKET).unwrap();
    let err = unknown
        .fetch("/top.txt", &mut Vec::new(), None)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PermissionDenied);
    assert!(
        err.message.contains("InvalidAccessKeyId"),
        "{}",
        err.message
    );
    assert_eq!(
        kind(unknown.put("/x", &mut &b"x"[..], 1)),
        ErrorKind::PermissionDenied
    );
}

#[test]
fn a_missing_bucket_is_enoent() {
    let world = World::new(&[]);
    let d = world.driver_at("no-such-bucket");
    let err = d.stat("/").unwrap_err();
    assert_eq!((err.kind, err.errno()), (ErrorKind::NotFound, libc::ENOENT));
    assert!(err.message.contains("NoSuchBucket"), "{}", err.message);
    assert_eq!(kind(d.stat("/f")), ErrorKind::NotFound);
    assert_eq!(kind(d.list("/")), ErrorKind::NotFound);
    assert_eq!(
        kind(d.fetch("/f", &mut Vec::new(), None)),
        ErrorKind::NotFound
    );
}

#[test]
fn a_stopped_server_is_unreachable() {
    let mut world = World::new(TREE);
    let d = world.driver();
    assert_eq!(d.stat("/top.txt").unwrap().kind, Kind::File);
    world.server.stop();
    let err = d.stat("/top.txt").unwrap_err();
    assert_eq!(
        (err.kind, err.errno()),
        (ErrorKind::Unreachable, libc::EHOSTUNREACH)
    );
    assert_eq!(kind(d.list("/")), ErrorKind::Unreachable);
}

#[test]
fn a_silent_server_times_out() {
    let silent = roam_testkit::Silent::start();
    let client = common::http_client(Duration::from_millis(300));
    let config = S3Config {
        endpoint: Some(silent.url()),
        region: Some("us-east-1".into()),
        access_key: Some("AKIDEXAMPLE".into()),
        secret_key: Some("secret".into()),
        path_style: true,
        ..S3Config::default()
    };
    let d = S3Driver::new(client, &config, BUCKET).unwrap();
    let started = std::time::Instant::now();
    let err = d.stat("/x").unwrap_err();
    assert_eq!(
        (err.kind, err.errno()),
        (ErrorKind::TimedOut, libc::ETIMEDOUT),
        "{}",
        err.message
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Requests moto has logged so far (werkzeug writes one line per request to its stderr).
fn requests_seen(world: &World) -> Vec<String> {
    world
        .server
        .error_log()
        .lines()
        .filter(|l| l.contains("\" ") && l.contains(" HTTP/1.1\""))
        .map(|l| l.split('"').nth(1).unwrap_or_default().to_owned())
        .collect()
}

/// A listing says whether the directory stands alone (has a marker) or exists only
/// through its keys, so roam knows whether removing its last entry needs a marker.
#[test]
fn a_listing_tells_whether_the_directory_stands_alone() {
    let world = World::new(&[("marked/", b""), ("marked/f", b"1"), ("keys/f", b"2")]);
    let d = world.driver();
    assert!(d.list("/marked").unwrap().stands_alone);
    assert!(!d.list("/keys").unwrap().stands_alone);
    assert!(d.list("/").unwrap().stands_alone, "the root always exists");
}

/// `rmdir` of a directory roam's fresh listing shows empty is one `DELETE` of its marker.
/// Were the listing stale (another client put a key there since), the directory still
/// exists through that key: nothing is lost, and a later `rmdir` says ENOTEMPTY.
#[test]
fn a_directory_known_empty_is_removed_with_one_request() {
    let world = World::new(&[("empty/", b""), ("stale/", b""), ("stale/k", b"kept")]);
    let d = world.driver();
    let dir = Meta::of_kind(Kind::Dir);
    let known = Known {
        meta: &dir,
        siblings: true,
        empty: true,
    };
    let before = requests_seen(&world).len();
    d.remove_known_dir("/empty", known).unwrap();
    let sent = requests_seen(&world)[before..].to_vec();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].starts_with("DELETE /"), "{sent:?}");
    assert_eq!(kind(d.stat("/empty")), ErrorKind::NotFound);

    d.remove_known_dir("/stale", known).unwrap();
    assert_eq!(d.stat("/stale").unwrap().kind, Kind::Dir);
    assert_eq!(kind(d.remove_dir("/stale")), ErrorKind::NotEmpty);
    assert_eq!(fetch(&d, "/stale/k").0, b"kept", "the key is untouched");
}
