//! The FTP driver against real servers, each test on its own server process and scratch
//! tree (from `roam-testkit`):
//!
//! - pyftpdlib: MLSD/MLST, MFMT and SITE CHMOD, a named user with a password;
//! - vsftpd: no MLSD, so every listing and stat goes through LIST parsing; anonymous.
//!
//! The same checks run against both (the `suite!` at the end); where the servers
//! legitimately differ, the test says how. What every driver does alike (mkdir, rmdir,
//! unlink, rename, chmod, MFMT, their errnos, ranges, preconditions) is
//! tests/behaviour.rs's, over both daemons too; here is what is FTP's own: listing formats,
//! validators, the interview's errnos and messages, sessions, logins. Both are required: a machine without them
//! fails here with a message naming the package, rather than skipping.

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use roam_drivers::ftp::{FtpConfig, FtpDriver};
use roam_drivers::{Attrs, Driver, ErrorKind, Fetched, Kind, Meta, Validator};
use roam_testkit::{free_port, ftp, mtime_of, noise, write_file, Scratch, Server};

const USER: &str = "roamtest";
/// With `:` and `@`, which the URL must carry percent-encoded.
const PASSWORD: &str = "pa:ss@word";
const PASSWORD_IN_URL: &str = "pa%3Ass%40word";

/// Regular files of the served tree (under `pub/`), all mode 0644.
const FILES: &[(&str, &[u8])] = &[
    ("a b.txt", b"hello world\n"),
    ("\u{fc}n\u{ef}.txt", b"unicode"),
    (".hidden", b"dot"),
    ("dir/inner.txt", b"inner"),
    ("dir/sub/deep.txt", b"deep"),
];
/// Mode 000: the server (never root) may not read it.
const SECRET: &str = "secret.txt";
const BIG: &str = "big.bin";
const BIG_LEN: usize = 1 << 20;
const LINK: &str = "link";
const EMPTY: &str = "empty";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Daemon {
    Pyftpdlib,
    Vsftpd,
}

/// The tree served by one server process; the driver's URL points at its `pub/`.
struct Served {
    // Declared first so that it is dropped first: the server stops before its tree goes.
    server: Server,
    scratch: Scratch,
    daemon: Daemon,
}

impl Served {
    fn start(daemon: Daemon) -> Served {
        let scratch = Scratch::new("ftp-driver");
        let root = scratch.join("root");
        let public = root.join("pub");
        for (name, data) in FILES {
            write_file(&public.join(name), data, 0o644);
        }
        write_file(&public.join(BIG), &noise(BIG_LEN, 7), 0o644);
        write_file(&public.join(SECRET), b"nobody may read this", 0o000);
        fs::create_dir(public.join(EMPTY)).unwrap();
        std::os::unix::fs::symlink("a b.txt", public.join(LINK)).unwrap();
        let run = scratch.join("run");
        let server = match daemon {
            Daemon::Pyftpdlib => ftp::pyftpdlib(&root, &run, USER, PASSWORD),
            Daemon::Vsftpd => ftp::vsftpd(&root, &run),
        };
        Served {
            server,
            scratch,
            daemon,
        }
    }

    fn authority(&self) -> String {
        self.server.authority()
    }

    fn url(&self) -> String {
        match self.daemon {
            Daemon::Pyftpdlib => {
                format!("ftp://{USER}:{PASSWORD_IN_URL}@{}/pub", self.authority())
            }
            Daemon::Vsftpd => format!("ftp://{}/pub", self.authority()),
        }
    }

    fn driver(&self) -> FtpDriver {
        self.driver_with(config())
    }

    fn driver_with(&self, cfg: FtpConfig) -> FtpDriver {
        FtpDriver::new(cfg, &self.url()).unwrap()
    }

    /// The served file behind the driver path `path`.
    fn real(&self, path: &str) -> PathBuf {
        self.scratch
            .join("root/pub")
            .join(path.trim_start_matches('/'))
    }

    /// How many sessions logged in, from the server's log (connections alone would count
    /// the fixture's readiness probe too).
    fn sessions(&self) -> usize {
        let marker = match self.daemon {
            Daemon::Pyftpdlib => "logged in.",
            Daemon::Vsftpd => "OK LOGIN",
        };
        self.server.error_log().matches(marker).count()
    }

    /// How many sessions ended, from the log: pyftpdlib logs each end, vsftpd each QUIT.
    fn sessions_ended(&self) -> usize {
        let marker = match self.daemon {
            Daemon::Pyftpdlib => "FTP session closed",
            Daemon::Vsftpd => "\"QUIT\"",
        };
        self.server.error_log().matches(marker).count()
    }
}

/// Short timeouts, no netrc (the user's own must not leak into tests).
fn config() -> FtpConfig {
    FtpConfig {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(10),
        idle_keep: Duration::from_secs(60),
        netrc: None,
        tls: Default::default(),
    }
}

fn fetch(driver: &FtpDriver, path: &str) -> (Vec<u8>, Meta) {
    let mut out = Vec::new();
    match driver.fetch(path, &mut out, None) {
        Ok(Fetched::Body(meta)) => (out, meta),
        other => panic!("fetch {path}: {other:?}"),
    }
}

fn kind_of<T: std::fmt::Debug>(result: roam_drivers::Result<T>) -> ErrorKind {
    result.unwrap_err().kind
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// No upload left its temporary file anywhere in the tree.
fn assert_no_temporaries(dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".roam-put"),
            "left behind: {}",
            entry.path().display()
        );
        if entry.file_type().unwrap().is_dir() {
            assert_no_temporaries(&entry.path());
        }
    }
}

// ---- The suite, run against both daemons.

fn lists_the_tree(s: Served) {
    let driver = s.driver();
    let listing = driver.list("/").unwrap();
    assert!(listing.complete);
    let mut names: Vec<_> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".hidden",
            "a b.txt",
            BIG,
            "dir",
            EMPTY,
            LINK,
            SECRET,
            "\u{fc}n\u{ef}.txt"
        ]
    );
    let entry = |name: &str| {
        &listing
            .entries
            .iter()
            .find(|e| e.name == name)
            .unwrap()
            .meta
    };
    for (name, data) in FILES.iter().filter(|(n, _)| !n.contains('/')) {
        let meta = entry(name);
        assert_eq!(
            (meta.kind, meta.size, meta.mode),
            (Kind::File, Some(data.len() as u64), Some(0o644)),
            "{name}"
        );
        // LIST gives minutes, MLSD seconds.
        let real = unix_secs(mtime_of(&s.real(name)));
        let listed = unix_secs(meta.mtime.unwrap());
        assert!(real.abs_diff(listed) < 60, "{name}: {listed} vs {real}");
    }
    assert_eq!(
        (entry("dir").kind, entry("dir").mode),
        (Kind::Dir, Some(0o755))
    );
    assert_eq!(entry(SECRET).mode, Some(0));
    let link = entry(LINK);
    match s.daemon {
        // pyftpdlib's MLSD follows links (for its `unique` fact).
        Daemon::Pyftpdlib => assert_eq!((link.kind, link.size), (Kind::File, Some(12))),
        Daemon::Vsftpd => {
            assert_eq!(link.kind, Kind::Symlink);
            assert_eq!(link.symlink_target.as_deref(), Some("a b.txt"));
        }
    }
    let mut sub: Vec<_> = driver
        .list("/dir")
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.name)
        .collect();
    sub.sort();
    assert_eq!(sub, ["inner.txt", "sub"]);
    let empty = driver.list("/empty").unwrap();
    assert!(empty.complete && empty.entries.is_empty());
}

fn stats_paths(s: Served) {
    let driver = s.driver();
    assert_eq!(driver.stat("/").unwrap().kind, Kind::Dir);
    assert_eq!(driver.stat("/dir/sub").unwrap().kind, Kind::Dir);
    for (name, data) in FILES {
        let meta = driver.stat(&format!("/{name}")).unwrap();
        assert_eq!(
            (meta.kind, meta.size),
            (Kind::File, Some(data.len() as u64)),
            "{name}"
        );
        // Exact to the second (MLST, or MDTM after LIST), and so a validator.
        let real = mtime_of(&s.real(name));
        assert_eq!(meta.mtime.map(unix_secs), Some(unix_secs(real)), "{name}");
        assert_eq!(
            meta.etag,
            Some(format!("{}-{}", data.len(), unix_secs(real)))
        );
    }
    assert_eq!(driver.stat("/a b.txt").unwrap().mode, Some(0o644));
    assert_eq!(driver.stat(&format!("/{SECRET}")).unwrap().mode, Some(0));
    let link = driver.stat(&format!("/{LINK}")).unwrap();
    let expected = match s.daemon {
        Daemon::Pyftpdlib => Kind::File,
        Daemon::Vsftpd => Kind::Symlink,
    };
    assert_eq!(link.kind, expected);
}

fn fetches_byte_exact(s: Served) {
    let driver = s.driver();
    let (data, meta) = fetch(&driver, &format!("/{BIG}"));
    assert!(data == noise(BIG_LEN, 7), "1 MiB differs");
    assert_eq!(meta.size, Some(BIG_LEN as u64));
    assert_eq!(
        meta.mtime.map(unix_secs),
        Some(unix_secs(mtime_of(&s.real(BIG))))
    );
    assert_eq!(fetch(&driver, "/\u{fc}n\u{ef}.txt").0, b"unicode");
    assert_eq!(fetch(&driver, "/dir/sub/deep.txt").0, b"deep");
}

fn fetches_conditionally(s: Served) {
    let driver = s.driver();
    let (_, meta) = fetch(&driver, "/a b.txt");
    let both = Validator {
        etag: meta.etag.clone(),
        mtime: meta.mtime,
    };
    let time_only = Validator {
        etag: None,
        mtime: meta.mtime,
    };
    for validator in [&both, &time_only] {
        let mut out = Vec::new();
        let fetched = driver.fetch("/a b.txt", &mut out, Some(validator)).unwrap();
        assert_eq!(fetched, Fetched::NotModified);
        assert!(out.is_empty());
    }
    // A change of contents and time: the validator no longer holds.
    let real = s.real("a b.txt");
    fs::write(&real, b"changed!").unwrap();
    let later = meta.mtime.unwrap() + Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&real)
        .unwrap()
        .set_modified(later)
        .unwrap();
    let mut out = Vec::new();
    match driver.fetch("/a b.txt", &mut out, Some(&both)).unwrap() {
        Fetched::Body(fresh) => assert_eq!(fresh.size, Some(8)),
        other => panic!("expected a body, got {other:?}"),
    }
    assert_eq!(out, b"changed!");
}

fn reads_ranges(s: Served) {
    let driver = s.driver();
    let big = noise(BIG_LEN, 7);
    let path = format!("/{BIG}");
    let range = |offset: usize, len: usize| {
        let mut out = Vec::new();
        let n = driver
            .read_range(&path, offset as u64, len as u64, None, &mut out)
            .unwrap();
        assert_eq!(n as usize, out.len());
        out
    };
    assert!(range(0, 10) == big[..10]);
    assert!(range(1000, 5000) == big[1000..6000], "middle");
    assert!(range(BIG_LEN - 100, 1000) == big[BIG_LEN - 100..], "tail");
    assert!(range(BIG_LEN, 10).is_empty(), "at the end");
    assert!(range(BIG_LEN + 10, 10).is_empty(), "past the end");
    assert!(range(500_000, 300_000) == big[500_000..800_000]);
    // Abandoned transfers left the connection in step: it still answers, and it was the
    // only one.
    assert_eq!(driver.stat("/a b.txt").unwrap().size, Some(12));
    assert_eq!(s.sessions(), 1);
}

fn puts_atomically(s: Served) {
    let driver = s.driver();
    let three = noise(3 << 20, 3);
    let cases: [(&str, &[u8]); 4] = [
        ("/new.txt", b"fresh file"),
        ("/a b.txt", b"replaced contents"),
        ("/zero", b""),
        ("/dir/three.bin", &three),
    ];
    for (path, data) in cases {
        let meta = driver.put(path, &mut &data[..], data.len() as u64).unwrap();
        assert_eq!(
            (meta.kind, meta.size),
            (Kind::File, Some(data.len() as u64)),
            "{path}"
        );
        assert!(fs::read(s.real(path)).unwrap() == data, "{path} on disk");
        assert_eq!(driver.stat(path).unwrap().size, Some(data.len() as u64));
    }
    assert_no_temporaries(&s.real("/"));
}

fn put_of_a_short_source_fails_cleanly(s: Served) {
    let driver = s.driver();
    let err = driver
        .put("/short.txt", &mut &b"only this"[..], 100)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io);
    assert!(err.message.contains("9 of 100 bytes"), "{}", err.message);
    assert!(!s.real("short.txt").exists());
    assert_no_temporaries(&s.real("/"));
    // A source that fails outright: the old file stays.
    struct Failing;
    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("disk on fire"))
        }
    }
    assert!(driver.put("/a b.txt", &mut Failing, 10).is_err());
    assert_eq!(fs::read(s.real("a b.txt")).unwrap(), b"hello world\n");
    assert_no_temporaries(&s.real("/"));
}

fn reports_read_errors_precisely(s: Served) {
    let driver = s.driver();
    let mut sink = Vec::new();
    let mut fetch_kind = |path: &str| kind_of(driver.fetch(path, &mut sink, None));
    assert_eq!(
        fetch_kind(&format!("/{SECRET}")),
        ErrorKind::PermissionDenied
    );
    assert_eq!(fetch_kind("/a b.txt/x"), ErrorKind::NotADirectory);
    assert_eq!(fetch_kind("/dir/inner.txt/x/y"), ErrorKind::NotADirectory);
    assert!(sink.is_empty());
    assert_eq!(kind_of(driver.stat("/a b.txt/x")), ErrorKind::NotADirectory);
    let err = driver.fetch("/dir", &mut Vec::new(), None).unwrap_err();
    let expected = format!(
        "RETR {}/dir: is a directory (550 ",
        s.url().replace(&format!(":{PASSWORD_IN_URL}"), "")
    );
    assert!(err.message.starts_with(&expected), "{}", err.message);
    assert!(!err.message.contains(PASSWORD) && !err.message.contains(PASSWORD_IN_URL));
}

/// Failed uploads leave no temporary (their errnos, and the rest of what POSIX refuses,
/// are tests/behaviour.rs's).
fn failed_puts_leave_no_temporaries(s: Served) {
    let driver = s.driver();
    for path in ["/nope/x", "/dir", "/", "/a b.txt/x"] {
        assert!(driver.put(path, &mut &b"data"[..], 4).is_err(), "{path}");
    }
    assert_no_temporaries(&s.real("/"));
    assert_eq!(fs::read(s.real("a b.txt")).unwrap(), b"hello world\n");
}

/// An upload with a time and a mode sets both on the temporary before the rename, and
/// answers what a stat of the name says without asking (no SIZE or MDTM after it). What
/// each daemon keeps (pyftpdlib both, anonymous vsftpd neither) is tests/behaviour.rs's.
fn an_upload_with_attrs_knows_its_result(s: Served) {
    let driver = s.driver();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    let attrs = Attrs {
        mtime: Some(when),
        mode: Some(0o640),
        atime: None,
    };
    let meta = driver
        .put_with("/moded.txt", &mut &b"moded"[..], 5, attrs)
        .unwrap();
    assert_eq!(fs::read(s.real("moded.txt")).unwrap(), b"moded");
    if s.daemon == Daemon::Pyftpdlib {
        assert_eq!(meta, driver.stat("/moded.txt").unwrap());
        assert_eq!((meta.mode, meta.mtime), (Some(0o640), Some(when)));
        let on_disk = fs::metadata(s.real("moded.txt")).unwrap();
        assert_eq!(on_disk.permissions().mode() & 0o7777, 0o640);
        assert_eq!(mtime_of(&s.real("moded.txt")), when);
    }
}

/// A directory's time cannot be set: pyftpdlib refuses MFMT on one (550), the interview
/// finds a directory, and that is `ENOTSUP`, not a refused permission; vsftpd has no MFMT.
/// A file's time is set where MFMT exists.
fn sets_times_of_files_only(s: Served) {
    let driver = s.driver();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let dir = driver.set_mtime("/dir", when).unwrap_err();
    assert_eq!(dir.kind, ErrorKind::Unsupported, "{}", dir.message);
    let file = driver.set_mtime("/a b.txt", when);
    match s.daemon {
        Daemon::Pyftpdlib => {
            file.unwrap();
            assert_eq!(mtime_of(&s.real("a b.txt")), when);
        }
        Daemon::Vsftpd => assert_eq!(kind_of(file), ErrorKind::Unsupported),
    }
}

fn refuses_a_bad_login(s: Served) {
    let url = match s.daemon {
        Daemon::Pyftpdlib => format!("ftp://{USER}:wrong@{}/pub", s.authority()),
        // An anonymous-only server refuses every named user.
        Daemon::Vsftpd => format!("ftp://bob:x@{}/pub", s.authority()),
    };
    let driver = FtpDriver::new(config(), &url).unwrap();
    let err = driver.stat("/").unwrap_err();
    assert_eq!(err.kind, ErrorKind::PermissionDenied);
    assert!(err.message.starts_with("connect ftp://"), "{}", err.message);
    assert!(err.message.contains("(530 "), "{}", err.message);
    assert!(
        !err.message.contains("wrong") && !err.message.contains(":x@"),
        "{}",
        err.message
    );
}

fn reports_a_stopped_server_unreachable(mut s: Served) {
    let driver = s.driver();
    assert_eq!(driver.stat("/dir").unwrap().kind, Kind::Dir);
    s.server.stop();
    match s.daemon {
        // The pooled connection is found dead; a new one is refused.
        Daemon::Pyftpdlib => {
            let err = driver.stat("/dir").unwrap_err();
            assert_eq!(err.kind, ErrorKind::Unreachable, "{}", err.message);
        }
        // Each vsftpd session is a process of its own that outlives the listener: the
        // pooled session still answers, and only a new connection is refused.
        Daemon::Vsftpd => {
            assert_eq!(driver.stat("/dir").unwrap().kind, Kind::Dir);
            let err = s.driver().stat("/dir").unwrap_err();
            assert_eq!(err.kind, ErrorKind::Unreachable, "{}", err.message);
            assert_eq!(err.errno(), libc::EHOSTUNREACH);
        }
    }
}

fn reuses_its_connection(s: Served) {
    let driver = s.driver();
    for _ in 0..3 {
        driver.stat("/a b.txt").unwrap();
        driver.list("/dir").unwrap();
        fetch(&driver, "/a b.txt");
        driver
            .read_range(&format!("/{BIG}"), 10, 10, None, &mut Vec::new())
            .unwrap();
        driver.put("/up.txt", &mut &b"x"[..], 1).unwrap();
        assert_eq!(kind_of(driver.stat("/nope")), ErrorKind::NotFound);
    }
    assert_eq!(s.sessions(), 1);
}

fn closes_idle_connections(s: Served) {
    let driver = s.driver_with(FtpConfig {
        idle_keep: Duration::from_millis(300),
        ..config()
    });
    driver.stat("/a b.txt").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.sessions_ended() == 0 {
        assert!(
            Instant::now() < deadline,
            "the idle connection was not closed"
        );
        thread::sleep(Duration::from_millis(50));
    }
    driver.stat("/a b.txt").unwrap();
    assert_eq!(s.sessions(), 2);
}

fn serves_threads_at_once(s: Served) {
    let driver = Arc::new(s.driver());
    let big = Arc::new(noise(BIG_LEN, 7));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (driver, big) = (Arc::clone(&driver), Arc::clone(&big));
            thread::spawn(move || {
                for _ in 0..3 {
                    assert!(fetch(&driver, &format!("/{BIG}")).0 == *big);
                    assert_eq!(driver.stat("/dir").unwrap().kind, Kind::Dir);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    // One connection per thread at most, kept and reused.
    assert!((1..=4).contains(&s.sessions()), "{} sessions", s.sessions());
}

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod pyftpdlib {
            $(#[test]
            fn $test() {
                super::$test(super::Served::start(super::Daemon::Pyftpdlib));
            })*
        }
        mod vsftpd {
            $(#[test]
            fn $test() {
                super::$test(super::Served::start(super::Daemon::Vsftpd));
            })*
        }
    };
}

suite!(
    lists_the_tree,
    stats_paths,
    fetches_byte_exact,
    fetches_conditionally,
    reads_ranges,
    puts_atomically,
    put_of_a_short_source_fails_cleanly,
    reports_read_errors_precisely,
    failed_puts_leave_no_temporaries,
    an_upload_with_attrs_knows_its_result,
    sets_times_of_files_only,
    refuses_a_bad_login,
    reports_a_stopped_server_unreachable,
    reuses_its_connection,
    closes_idle_connections,
    serves_threads_at_once,
);

// ---- Outside any one daemon.

#[test]
fn logs_in_from_netrc() {
    let s = Served::start(Daemon::Pyftpdlib);
    let netrc = s.scratch.join("netrc");
    let cfg = |text: &str, mode: u32| {
        fs::write(&netrc, text).unwrap();
        fs::set_permissions(&netrc, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        FtpConfig {
            netrc: Some(netrc.clone()),
            ..config()
        }
    };
    let url = format!("ftp://{}/pub", s.authority());
    let entry = format!("machine 127.0.0.1 login {USER} password \"{PASSWORD}\"\n");
    let driver = FtpDriver::new(cfg(&entry, 0o600), &url).unwrap();
    assert_eq!(driver.stat("/a b.txt").unwrap().size, Some(12));
    let bad = cfg(&format!("default login {USER} password nope\n"), 0o600);
    let driver = FtpDriver::new(bad, &url).unwrap();
    assert_eq!(kind_of(driver.stat("/")), ErrorKind::PermissionDenied);
    // A password in a file others may read is refused, as ftp(1) refuses it.
    let driver = FtpDriver::new(cfg(&entry, 0o644), &url).unwrap();
    assert_eq!(kind_of(driver.stat("/")), ErrorKind::PermissionDenied);
}

#[test]
fn times_out_on_a_silent_server() {
    // Accepts connections and never greets.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = FtpConfig {
        read_timeout: Duration::from_millis(300),
        ..config()
    };
    let driver = FtpDriver::new(cfg, &format!("ftp://127.0.0.1:{port}/")).unwrap();
    let started = Instant::now();
    let err = driver.stat("/x").unwrap_err();
    assert_eq!(err.kind, ErrorKind::TimedOut, "{}", err.message);
    assert_eq!(err.errno(), libc::ETIMEDOUT);
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(listener);
}

#[test]
fn unreachable_hosts() {
    let refused = FtpDriver::new(config(), &format!("ftp://127.0.0.1:{}/", free_port())).unwrap();
    assert_eq!(kind_of(refused.list("/")), ErrorKind::Unreachable);
    // `.invalid` never resolves (RFC 6761).
    let unknown = FtpDriver::new(config(), "ftp://roam-test.invalid/").unwrap();
    let err = unknown.stat("/").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unreachable, "{}", err.message);
}

/// A scripted server for what no real daemon does on cue: its first session answers the
/// first command after login with `421` and hangs up (as a server timing out an idle
/// session does); later sessions answer CWD and MKD. Returns its port and a count of
/// sessions.
fn flaky_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sessions = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&sessions);
    thread::spawn(move || {
        for stream in listener.incoming() {
            let first = count.fetch_add(1, Ordering::SeqCst) == 0;
            thread::spawn(move || scripted_session(stream.unwrap(), first));
        }
    });
    (port, sessions)
}

fn scripted_session(stream: TcpStream, hang_up: bool) {
    let mut out = stream.try_clone().unwrap();
    let mut say = |reply: &str| out.write_all(format!("{reply}\r\n").as_bytes());
    say("220 scripted").unwrap();
    for line in BufReader::new(stream).lines() {
        let line = line.unwrap_or_default();
        let reply = match line.split(' ').next().unwrap_or("") {
            "USER" => "230 in",
            "FEAT" => "211 no features",
            "TYPE" => "200 binary",
            "QUIT" | "" => return,
            _ if hang_up => {
                let _ = say("421 idle too long, closing");
                return;
            }
            "CWD" => "250 entered",
            "MKD" => "257 created",
            _ => "502 not scripted",
        };
        if say(reply).is_err() {
            return;
        }
    }
}

#[test]
fn retries_reads_once_and_writes_never() {
    let (port, sessions) = flaky_server();
    let url = format!("ftp://127.0.0.1:{port}/");
    let driver = FtpDriver::new(config(), &url).unwrap();
    assert_eq!(driver.stat("/").unwrap().kind, Kind::Dir);
    assert_eq!(
        sessions.load(Ordering::SeqCst),
        2,
        "one retry on a fresh session"
    );

    let (port, sessions) = flaky_server();
    let url = format!("ftp://127.0.0.1:{port}/");
    let driver = FtpDriver::new(config(), &url).unwrap();
    let err = driver.mkdir("/new", 0o755).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io);
    assert!(
        err.message.contains("(421 idle too long"),
        "{}",
        err.message
    );
    assert_eq!(
        sessions.load(Ordering::SeqCst),
        1,
        "a write is never retried"
    );
    // The broken session was not pooled: the next operation opens a good one.
    driver.mkdir("/new", 0o755).unwrap();
    assert_eq!(sessions.load(Ordering::SeqCst), 2);
}

#[test]
fn a_full_disk_on_vsftpd_is_eio_and_keeps_the_old_file() {
    // vsftpd answers a STOR that fills its disk with 451 ("Failure writing to local
    // file"), not RFC 959's 452: so EIO, with the old contents intact.
    let scratch = Scratch::new("ftp-full");
    let root = scratch.join("root");
    let public = root.join("pub");
    let _full = roam_testkit::Tmpfs::mount(&public, "1m");
    write_file(&public.join("kept.txt"), b"kept", 0o644);
    let server = ftp::vsftpd(&root, &scratch.join("run"));
    let d = FtpDriver::new(config(), &format!("ftp://{}/pub", server.authority())).unwrap();
    let two_mib = noise(2 << 20, 9);
    let err = d
        .put("/kept.txt", &mut &two_mib[..], two_mib.len() as u64)
        .unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "{}", err.message);
    assert_eq!(fs::read(public.join("kept.txt")).unwrap(), b"kept");
    assert_no_temporaries(&public);
}
