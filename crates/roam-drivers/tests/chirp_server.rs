//! The Chirp driver against the real `chirp_server` (Debian's coop-computing-tools): each
//! test serves a freshly generated tree from its own server process on a free loopback
//! port (`roam-testkit`), talks to it through the driver, and checks the outcome on disk.
//!
//! What every driver does alike (the errnos of changes, ranges, chmod, utime, symlinks,
//! preconditions) is tests/behaviour.rs's; here is what is Chirp's own: ACLs,
//! authentication, chunked transfers, connections.
//!
//! `chirp_server` is required: a machine without it fails these tests (CI installs
//! coop-computing-tools) rather than skipping them.

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use roam_drivers::chirp::{ChirpAuth, ChirpConfig, ChirpDriver};
use roam_drivers::{Driver, Fetched, Kind, Meta, Validator};
use roam_testkit::chirp::{grant, ACL_FILE};
use roam_testkit::{mkdir, noise, write_file, Scratch, Server};

const HELLO: &[u8] = b"hello chirp\n";
const BIG: &str = "/big.bin";
const BIG_LEN: usize = 1 << 20;
/// Read and list, nothing else, for every subject a test can be.
const READ_ONLY: &str = "unix:root rl\nhostname:localhost rl\naddress:127.0.0.1 rl\n";

/// The generated tree (`root/`) served by one `chirp_server` (files in `run/`).
struct Served {
    // Declared first so that it is dropped first: the server stops before its tree goes.
    server: Server,
    scratch: Scratch,
}

impl Served {
    fn start() -> Served {
        Served::start_with(&[])
    }

    fn start_with(server_args: &[&str]) -> Served {
        let scratch = Scratch::new("chirp-driver");
        let root = scratch.join("root");
        write_file(&root.join("hello.txt"), HELLO, 0o644);
        write_file(&root.join(&BIG[1..]), &noise(BIG_LEN, 1), 0o644);
        write_file(&root.join("dir/a b.txt"), b"spaced", 0o644);
        write_file(&root.join("dir/\u{fc}n\u{ef}%.txt"), b"unicode", 0o600);
        write_file(&root.join("dir/sub/inner.txt"), b"inner", 0o644);
        std::os::unix::fs::symlink("a b.txt", root.join("dir/link")).unwrap();
        write_file(&root.join("readonly/kept.txt"), b"kept", 0o644);
        grant(&root.join("readonly"), READ_ONLY);
        write_file(&root.join("listonly/unreadable.txt"), b"no", 0o644);
        grant(
            &root.join("listonly"),
            "unix:root l\nhostname:localhost l\naddress:127.0.0.1 l\n",
        );
        mkdir(&root.join("by-address"));
        grant(&root.join("by-address"), "address:127.0.0.1 rl\n");
        let server = Server::chirp_with(&root, &scratch.join("run"), server_args);
        Served { server, scratch }
    }

    fn driver(&self) -> ChirpDriver {
        ChirpDriver::new(ChirpConfig::default(), &self.server.chirp_url()).unwrap()
    }

    fn driver_with(&self, auth: &[ChirpAuth]) -> ChirpDriver {
        let cfg = ChirpConfig {
            auth: auth.to_vec(),
            ..ChirpConfig::default()
        };
        ChirpDriver::new(cfg, &self.server.chirp_url()).unwrap()
    }

    /// The file on disk behind the remote `path`.
    fn real(&self, path: &str) -> PathBuf {
        self.scratch.join("root").join(path.trim_start_matches('/'))
    }

    /// Names in a directory on disk, sorted, without the server's own `.__` files.
    fn names_on_disk(&self, path: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.real(path))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != ACL_FILE && n != ".__uuid")
            .collect();
        names.sort();
        names
    }
}

fn errno<T: std::fmt::Debug>(result: roam_drivers::Result<T>) -> i32 {
    result.unwrap_err().errno()
}

fn fetch_all(d: &ChirpDriver, path: &str) -> (Vec<u8>, Meta) {
    let mut buf = Vec::new();
    match d.fetch(path, &mut buf, None).unwrap() {
        Fetched::Body(meta) => (buf, meta),
        Fetched::NotModified => panic!("{path}: not modified without a validator"),
    }
}

fn list_names(d: &ChirpDriver, path: &str) -> Vec<String> {
    let mut names: Vec<String> = d
        .list(path)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    names
}

fn mtime_secs(path: &Path) -> i64 {
    fs::symlink_metadata(path).unwrap().mtime()
}

#[test]
fn stats_and_lists_the_served_tree() {
    let s = Served::start();
    let d = s.driver();
    let url = s.server.chirp_url();
    assert_eq!(d.describe("/dir/a b.txt"), format!("{url}/dir/a b.txt"));

    let m = d.stat("/hello.txt").unwrap();
    assert_eq!(
        (m.kind, m.size, m.mode),
        (Kind::File, Some(HELLO.len() as u64), Some(0o644))
    );
    let on_disk = mtime_secs(&s.real("/hello.txt"));
    assert_eq!(
        m.mtime,
        Some(UNIX_EPOCH + Duration::from_secs(on_disk as u64))
    );
    assert!(m.etag.is_some());
    assert_eq!(d.stat("/").unwrap().kind, Kind::Dir);
    assert_eq!(d.stat("/dir/\u{fc}n\u{ef}%.txt").unwrap().mode, Some(0o600));
    let link = d.stat("/dir/link").unwrap();
    assert_eq!(
        (link.kind, link.symlink_target.as_deref()),
        (Kind::Symlink, Some("a b.txt"))
    );

    assert_eq!(errno(d.stat("/missing")), libc::ENOENT);
    assert_eq!(errno(d.stat("/dir/../hello.txt")), libc::EINVAL);
    // A request line holds 1024 bytes: longer paths are refused before they are sent.
    let long = vec!["\u{fc}".repeat(100); 6].join("/");
    let err = d.stat(&format!("/{long}")).unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(err.message.contains("name too long"), "{}", err.message);
    assert!(
        d.stat("/hello.txt").is_ok(),
        "the refusal leaves the connection usable"
    );
    let err = d.stat("/missing").unwrap_err();
    assert!(
        err.message.starts_with(&format!("lstat {url}/missing: ")),
        "{}",
        err.message
    );

    // The server's ACL and identity files are never listed.
    assert_eq!(
        list_names(&d, "/"),
        [
            "big.bin",
            "by-address",
            "dir",
            "hello.txt",
            "listonly",
            "readonly"
        ]
    );
    let listing = d.list("/dir").unwrap();
    assert!(listing.complete);
    let entry = |name: &str| {
        listing
            .entries
            .iter()
            .find(|e| e.name == name)
            .unwrap()
            .meta
            .clone()
    };
    assert_eq!(entry("a b.txt").size, Some(6));
    assert_eq!(entry("\u{fc}n\u{ef}%.txt").kind, Kind::File);
    assert_eq!(entry("sub").kind, Kind::Dir);
    assert_eq!(entry("link").symlink_target.as_deref(), Some("a b.txt"));
    assert_eq!(listing.entries.len(), 4);

    assert_eq!(errno(d.list("/hello.txt")), libc::ENOTDIR);
    assert_eq!(errno(d.list("/dir/link")), libc::ENOTDIR);
    assert_eq!(errno(d.list("/missing")), libc::ENOENT);
}

#[test]
fn fetches_whole_files_byte_exact_and_conditionally() {
    let s = Served::start();
    let d = s.driver();

    let (body, meta) = fetch_all(&d, BIG);
    assert!(body == noise(BIG_LEN, 1), "the 1 MiB file differs");
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(BIG_LEN as u64)));
    assert_eq!(
        fetch_all(&d, "/dir/link").0,
        b"spaced",
        "a symlink reads as its target"
    );
    assert_eq!(fetch_all(&d, "/dir/\u{fc}n\u{ef}%.txt").0, b"unicode");

    // What the cache holds is still current: nothing is sent.
    let by_etag = Validator {
        etag: meta.etag.clone(),
        mtime: None,
    };
    let by_mtime = Validator {
        etag: None,
        mtime: meta.mtime,
    };
    for validator in [&by_etag, &by_mtime] {
        let mut out = Vec::new();
        assert_eq!(
            d.fetch(BIG, &mut out, Some(validator)).unwrap(),
            Fetched::NotModified
        );
        assert!(out.is_empty());
    }
    // Replaced within the same second with the same size: only the etag can tell.
    d.put(BIG, &mut &noise(BIG_LEN, 2)[..], BIG_LEN as u64)
        .unwrap();
    let mut out = Vec::new();
    let Fetched::Body(fresh) = d.fetch(BIG, &mut out, Some(&by_etag)).unwrap() else {
        panic!("a replaced file must be fetched again");
    };
    assert!(out == noise(BIG_LEN, 2));
    assert_ne!(fresh.etag, meta.etag);

    assert_eq!(errno(d.fetch("/dir", &mut Vec::new(), None)), libc::EISDIR);
    assert_eq!(
        errno(d.fetch("/missing", &mut Vec::new(), None)),
        libc::ENOENT
    );
}

#[test]
fn reads_ranges_across_chunks_and_past_the_end() {
    let s = Served::start();
    let d = s.driver();
    let mut part = Vec::new();
    assert_eq!(
        d.read_range(BIG, 1000, 5000, None, &mut part).unwrap(),
        5000
    );
    assert!(part == noise(BIG_LEN, 1)[1000..6000]);

    part.clear();
    assert_eq!(
        d.read_range(BIG, BIG_LEN as u64 - 10, 100, None, &mut part)
            .unwrap(),
        10
    );
    assert!(part == noise(BIG_LEN, 1)[BIG_LEN - 10..]);
    assert_eq!(
        d.read_range(BIG, BIG_LEN as u64 + 5, 100, None, &mut Vec::new())
            .unwrap(),
        0
    );

    // More than one request's worth (4 MiB), from an odd offset.
    let huge = noise(9 << 20, 3);
    d.put("/huge.bin", &mut &huge[..], huge.len() as u64)
        .unwrap();
    part.clear();
    assert_eq!(
        d.read_range("/huge.bin", 12345, 6 << 20, None, &mut part)
            .unwrap(),
        6 << 20
    );
    assert!(part == huge[12345..12345 + (6 << 20)]);
    assert!(fetch_all(&d, "/huge.bin").0 == huge);
}

#[test]
fn puts_atomically_and_reads_back_from_disk() {
    let s = Served::start();
    let d = s.driver();
    let three_mib = noise(3 << 20, 4);
    for (path, data) in [
        ("/new.txt", &b"brand new"[..]),
        ("/hello.txt", &b"replaced"[..]),
        ("/empty", &b""[..]),
        ("/dir/three.bin", &three_mib[..]),
    ] {
        let meta = d.put(path, &mut &data[..], data.len() as u64).unwrap();
        assert_eq!(
            (meta.kind, meta.size),
            (Kind::File, Some(data.len() as u64)),
            "{path}"
        );
        assert!(fs::read(s.real(path)).unwrap() == data, "{path} on disk");
    }
    // A replaced file keeps its permission bits (the server's umask would narrow them).
    d.set_mode("/hello.txt", 0o754).unwrap();
    d.put("/hello.txt", &mut &b"again"[..], 5).unwrap();
    let mode = fs::metadata(s.real("/hello.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o754);

    // A source that ends early never replaces the old contents.
    let err = d.put("/hello.txt", &mut &b"xy"[..], 5).unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{}", err.message);
    assert_eq!(fs::read(s.real("/hello.txt")).unwrap(), b"again");
    // The driver still works after the broken upload.
    assert_eq!(d.stat("/hello.txt").unwrap().size, Some(5));

    // No temporary is left anywhere, on disk or in listings.
    let expected = [
        "big.bin",
        "by-address",
        "dir",
        "empty",
        "hello.txt",
        "listonly",
        "new.txt",
        "readonly",
    ];
    assert_eq!(s.names_on_disk("/"), expected);
    assert_eq!(list_names(&d, "/"), expected);
    assert_eq!(
        s.names_on_disk("/dir"),
        ["a b.txt", "link", "sub", "three.bin", "\u{fc}n\u{ef}%.txt"]
    );
}

/// What is Chirp's own in making names (the errnos of mkdir, rmdir, unlink, rename,
/// chmod, utime and symlink are tests/behaviour.rs's): a directory made through Chirp
/// inherits its parent's ACL, utime sets whole seconds and keeps the access time, a
/// symlink's target is stored verbatim, and one with a space is refused (the protocol
/// separates words by spaces).
#[test]
fn made_names_as_chirp_makes_them() {
    let s = Served::start();
    let d = s.driver();
    d.mkdir("/made", 0o755).unwrap();
    d.put("/made/f", &mut &b"f"[..], 1).unwrap();
    assert_eq!(fs::read(s.real("/made/f")).unwrap(), b"f");
    assert_eq!(errno(d.rename("/made/f", "/big.bin/x")), libc::ENOTDIR);

    let atime = fs::metadata(s.real("/big.bin")).unwrap().atime();
    let when = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    d.set_mtime("/big.bin", when + Duration::from_millis(700))
        .unwrap();
    let md = fs::metadata(s.real("/big.bin")).unwrap();
    assert_eq!((md.mtime(), md.atime()), (1_000_000_000, atime));
    assert_eq!(d.stat("/big.bin").unwrap().mtime, Some(when));

    d.symlink("../hello.txt", "/dir/up").unwrap();
    assert_eq!(
        fs::read_link(s.real("/dir/up")).unwrap(),
        Path::new("../hello.txt")
    );
    d.symlink("100%", "/pct").unwrap();
    assert_eq!(fs::read_link(s.real("/pct")).unwrap(), Path::new("100%"));
    assert_eq!(errno(d.symlink("a b", "/spaced")), libc::EINVAL);
}

#[test]
fn a_restrictive_acl_is_eacces() {
    let s = Served::start();
    let d = s.driver();
    // `rl`: reading and listing work ...
    assert_eq!(list_names(&d, "/readonly"), ["kept.txt"]);
    assert_eq!(fetch_all(&d, "/readonly/kept.txt").0, b"kept");
    // ... nothing that writes does.
    assert_eq!(
        errno(d.put("/readonly/new", &mut &b"x"[..], 1)),
        libc::EACCES
    );
    assert_eq!(
        errno(d.put("/readonly/kept.txt", &mut &b"x"[..], 1)),
        libc::EACCES
    );
    assert_eq!(errno(d.mkdir("/readonly/sub", 0o755)), libc::EACCES);
    assert_eq!(
        errno(d.rename("/hello.txt", "/readonly/moved")),
        libc::EACCES
    );
    assert_eq!(errno(d.set_mode("/readonly/kept.txt", 0o600)), libc::EACCES);
    assert_eq!(
        errno(d.set_mtime("/readonly/kept.txt", UNIX_EPOCH)),
        libc::EACCES
    );
    assert_eq!(errno(d.symlink("kept.txt", "/readonly/l")), libc::EACCES);
    assert_eq!(fs::read(s.real("/readonly/kept.txt")).unwrap(), b"kept");
    assert_eq!(s.names_on_disk("/readonly"), ["kept.txt"]);
    // `l` alone: names, not contents.
    assert_eq!(list_names(&d, "/listonly"), ["unreadable.txt"]);
    assert_eq!(
        errno(d.fetch("/listonly/unreadable.txt", &mut Vec::new(), None)),
        libc::EACCES
    );
    let err = d
        .read_range("/listonly/unreadable.txt", 0, 1, None, &mut Vec::new())
        .unwrap_err();
    assert_eq!(err.errno(), libc::EACCES);
    assert!(err.message.contains("NOT_AUTHORIZED"), "{}", err.message);
}

#[test]
fn authenticates_with_the_methods_in_the_configured_order() {
    let s = Served::start();
    // `by-address` grants only to `address:127.0.0.1`.
    assert_eq!(
        errno(s.driver_with(&[ChirpAuth::Unix]).list("/by-address")),
        libc::EACCES
    );
    assert_eq!(
        errno(s.driver_with(&[ChirpAuth::Hostname]).list("/by-address")),
        libc::EACCES
    );
    assert!(s
        .driver_with(&[ChirpAuth::Address])
        .list("/by-address")
        .is_ok());
    // The first method the server accepts wins, even if a later one would see more.
    let unix_first = s.driver_with(&[ChirpAuth::Unix, ChirpAuth::Address]);
    assert_eq!(errno(unix_first.list("/by-address")), libc::EACCES);
    assert!(s
        .driver_with(&[ChirpAuth::Hostname])
        .stat("/hello.txt")
        .is_ok());

    // A server that offers only `address`: the others are declined, and the next tried.
    let only_address = Served::start_with(&["-a", "address"]);
    let err = only_address
        .driver_with(&[ChirpAuth::Unix, ChirpAuth::Hostname])
        .stat("/hello.txt")
        .unwrap_err();
    assert_eq!(err.errno(), libc::EACCES);
    assert!(
        err.message
            .ends_with("accepted none of the authentication methods unix, hostname"),
        "{}",
        err.message
    );
    assert!(only_address.driver().stat("/hello.txt").is_ok());
}

#[test]
fn a_stopped_server_is_unreachable() {
    let mut s = Served::start();
    let d = s.driver();
    d.stat("/hello.txt").unwrap();
    s.server.stop();
    // The process serving our pooled connection may outlive the listener for a moment and
    // still answer; once it is gone, the dead connection must read as an unreachable host
    // (a fresh connection is refused), never as an I/O error.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let err = loop {
        match d.stat("/hello.txt") {
            Err(err) => break err,
            Ok(_) => assert!(
                std::time::Instant::now() < deadline,
                "the server still answers"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(err.errno(), libc::EHOSTUNREACH, "{}", err.message);
    assert_eq!(errno(d.put("/x", &mut &b"x"[..], 1)), libc::EHOSTUNREACH);
    assert_eq!(errno(s.driver().list("/")), libc::EHOSTUNREACH);
}

#[test]
fn reconnects_after_the_server_drops_an_idle_connection() {
    // `-t 2`: the server drops clients idle for two seconds.
    let s = Served::start_with(&["-t", "2"]);
    let d = s.driver();
    d.stat("/hello.txt").unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    // Not idempotent, so never resent: it must go out on a live connection.
    d.mkdir("/after-idle", 0o755).unwrap();
    assert!(s.real("/after-idle").is_dir());
    assert_eq!(d.stat("/hello.txt").unwrap().size, Some(HELLO.len() as u64));
}

#[test]
fn serves_threads_concurrently() {
    let s = Served::start();
    let d = Arc::new(s.driver());
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let d = Arc::clone(&d);
            std::thread::spawn(move || {
                for round in 0..10 {
                    let name = format!("/t{i}-{round}");
                    d.put(&name, &mut name.as_bytes(), name.len() as u64)
                        .unwrap();
                    assert_eq!(fetch_all(&d, &name).0, name.as_bytes());
                    assert!(fetch_all(&d, BIG).0.len() == BIG_LEN);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        s.names_on_disk("/")
            .iter()
            .filter(|n| n.starts_with('t'))
            .count(),
        40
    );
}

#[test]
fn a_silent_server_times_out() {
    // Accepts and reads, never answers: the driver must give up after its read timeout.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut sink = Vec::new();
        let _ = conn.read_to_end(&mut sink);
    });
    let cfg = ChirpConfig {
        read_timeout: Duration::from_millis(300),
        ..ChirpConfig::default()
    };
    let d = ChirpDriver::new(cfg, &format!("chirp://127.0.0.1:{port}")).unwrap();
    let err = d.stat("/x").unwrap_err();
    assert_eq!(err.errno(), libc::ETIMEDOUT, "{}", err.message);
    assert!(
        err.message.ends_with("did not answer in time"),
        "{}",
        err.message
    );
    drop(d);
    silent.join().unwrap();
}

#[test]
fn a_full_disk_is_enospc_and_leaves_nothing_behind() {
    let scratch = Scratch::new("chirp-full");
    let root = scratch.join("root");
    let _full = roam_testkit::Tmpfs::mount(&root, "1m");
    write_file(&root.join("kept.txt"), b"kept", 0o644);
    let server = Server::chirp(&root, &scratch.join("run"));
    let d = ChirpDriver::new(ChirpConfig::default(), &server.chirp_url()).unwrap();
    let two_mib = noise(2 << 20, 9);
    let err = d
        .put("/big.bin", &mut &two_mib[..], two_mib.len() as u64)
        .unwrap_err();
    assert_eq!(err.errno(), libc::ENOSPC, "{}", err.message);
    assert!(!root.join("big.bin").exists());
    assert_eq!(errno(d.stat("/big.bin")), libc::ENOENT);
    assert_eq!(fs::read(root.join("kept.txt")).unwrap(), b"kept");
}
