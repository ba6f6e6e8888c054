//! The SFTP driver against a real OpenSSH `sshd` (from `roam-testkit`), each test on its
//! own server process, keys and scratch tree. sshd is required: a machine without it
//! fails here with a message naming the package, rather than skipping.
//!
//! The tests log in as `root` (as they run), and as `nobody` where permission bits must
//! matter (root may read a mode-000 file).
//!
//! What every driver does alike (stat, list, fetch, ranges, put, mkdir, rmdir, unlink,
//! rename, chmod, utimes, symlinks, preconditions) is tests/behaviour.rs's; here is what is
//! SFTP's own: validators, modes and times sent with the contents, link times, host keys,
//! logins, and connections that break, stall or go.

use std::fs;
use std::io::{self, Read};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roam_drivers::sftp::{SftpConfig, SftpDriver};
use roam_drivers::{Attrs, Driver, ErrorKind, Fetched, Kind, Validator};
use roam_testkit::sftp::{keygen, public_half, sshd, SshServer};
use roam_testkit::{noise, write_file, Scratch};

const BIG: &str = "big.bin";
const BIG_LEN: usize = 1 << 20;

/// A tree served by one sshd; the driver's URL points at `root/`.
struct Served {
    // Declared first so that it is dropped first: the server stops before its tree goes.
    ssh: SshServer,
    scratch: Scratch,
}

impl Served {
    fn start() -> Served {
        let scratch = Scratch::new("sftp-driver");
        let root = scratch.join("root");
        write_file(&root.join("a b.txt"), b"hello world\n", 0o644);
        write_file(&root.join(".hidden"), b"dot", 0o644);
        write_file(&root.join("dir/inner.txt"), b"inner", 0o644);
        write_file(&root.join("dir/sub/deep.txt"), b"deep", 0o644);
        write_file(&root.join(BIG), &noise(BIG_LEN, 7), 0o644);
        write_file(&root.join("secret.txt"), b"nobody may read this", 0o000);
        fs::create_dir(root.join("empty")).unwrap();
        std::os::unix::fs::symlink("a b.txt", root.join("link")).unwrap();
        std::os::unix::fs::symlink("dir", root.join("dirlink")).unwrap();
        let ssh = sshd(&scratch.join("run"));
        Served { ssh, scratch }
    }

    fn root(&self) -> PathBuf {
        self.scratch.join("root")
    }

    fn disk(&self, rel: &str) -> PathBuf {
        self.root().join(rel.trim_start_matches('/'))
    }

    /// Settings that depend on nothing of the machine's own `~/.ssh`.
    fn config(&self) -> SftpConfig {
        SftpConfig {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(10),
            ssh_config: Some(self.scratch.join("no-ssh-config")),
            known_hosts: Some(self.ssh.known_hosts.clone()),
            identity_files: vec![self.ssh.client_key.clone()],
            ..SftpConfig::default()
        }
    }

    fn driver_with(&self, cfg: SftpConfig, user: &str) -> SftpDriver {
        SftpDriver::new(cfg, &self.ssh.url(user, &self.root())).unwrap()
    }

    fn driver(&self) -> SftpDriver {
        self.driver_with(self.config(), "root")
    }
}

fn fetch_bytes(d: &dyn Driver, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match d.fetch(path, &mut out, None).unwrap() {
        Fetched::Body(meta) => assert_eq!(meta.size, Some(out.len() as u64)),
        Fetched::NotModified => panic!("no validator, yet not modified"),
    }
    out
}

/// The error kind of a failed call, with its message for the assertion's output.
fn kind<T: std::fmt::Debug>(result: roam_drivers::Result<T>) -> (ErrorKind, String) {
    let err = result.expect_err("the call should fail");
    (err.kind, err.message)
}

fn assert_kind<T: std::fmt::Debug>(result: roam_drivers::Result<T>, want: ErrorKind) {
    let (got, message) = kind(result);
    assert_eq!(got, want, "{message}");
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn stat_files_dirs_and_symlinks() {
    let s = Served::start();
    let d = s.driver();
    let m = d.stat("/a b.txt").unwrap();
    assert_eq!(
        (m.kind, m.size, m.mode),
        (Kind::File, Some(12), Some(0o644))
    );
    let on_disk = fs::metadata(s.disk("a b.txt")).unwrap().modified().unwrap();
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(m.mtime.map(secs), Some(secs(on_disk)));
    assert!(m.etag.is_some());
    assert_eq!(d.stat("/").unwrap().kind, Kind::Dir);
    assert_eq!(d.stat("/dir/sub").unwrap().kind, Kind::Dir);
    let link = d.stat("/link").unwrap();
    assert_eq!(link.kind, Kind::Symlink);
    assert_eq!(link.symlink_target.as_deref(), Some("a b.txt"));
    assert_kind(d.stat("/missing"), ErrorKind::NotFound);
    assert_kind(d.stat("/missing/deeper"), ErrorKind::NotFound);
    assert_kind(d.stat("/a b.txt/x"), ErrorKind::NotADirectory);
    assert_kind(d.stat("/a/../b"), ErrorKind::InvalidName);
}

#[test]
fn listings() {
    let s = Served::start();
    let d = s.driver();
    let listing = d.list("/").unwrap();
    assert!(listing.complete);
    let mut names: Vec<&str> = listing.entries.iter().map(|e| e.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".hidden",
            "a b.txt",
            BIG,
            "dir",
            "dirlink",
            "empty",
            "link",
            "secret.txt"
        ]
    );
    let entry = |name: &str| listing.entries.iter().find(|e| e.name == name).unwrap();
    assert_eq!(entry("a b.txt").meta.size, Some(12));
    assert_eq!(entry("dir").meta.kind, Kind::Dir);
    assert_eq!(entry("link").meta.kind, Kind::Symlink);
    assert_eq!(
        entry("link").meta.symlink_target.as_deref(),
        Some("a b.txt")
    );
    assert!(d.list("/empty").unwrap().entries.is_empty());
    // A symlink to a directory lists the directory, as opendir(3) does.
    let through: Vec<String> = d
        .list("/dirlink")
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(through.len(), 2);
    assert_kind(d.list("/a b.txt"), ErrorKind::NotADirectory);
    assert_kind(d.list("/link"), ErrorKind::NotADirectory);
    assert_kind(d.list("/missing"), ErrorKind::NotFound);
}

#[test]
fn fetch_is_byte_exact_and_validated() {
    let s = Served::start();
    let d = s.driver();
    assert_eq!(fetch_bytes(&d, "/a b.txt"), b"hello world\n");
    assert_eq!(fetch_bytes(&d, "/link"), b"hello world\n");
    let mut big = Vec::new();
    let Fetched::Body(meta) = d.fetch("/big.bin", &mut big, None).unwrap() else {
        panic!("not modified?")
    };
    assert!(big == noise(BIG_LEN, 7), "1 MiB arrived changed");
    let held = Validator {
        etag: meta.etag.clone(),
        mtime: meta.mtime,
    };
    let mut out = Vec::new();
    assert_eq!(
        d.fetch("/big.bin", &mut out, Some(&held)).unwrap(),
        Fetched::NotModified
    );
    assert!(out.is_empty());
    let by_time = Validator {
        etag: None,
        mtime: meta.mtime,
    };
    assert_eq!(
        d.fetch("/big.bin", &mut out, Some(&by_time)).unwrap(),
        Fetched::NotModified
    );
    fs::OpenOptions::new()
        .append(true)
        .open(s.disk(BIG))
        .and_then(|mut f| io::Write::write_all(&mut f, b"more"))
        .unwrap();
    assert!(matches!(
        d.fetch("/big.bin", &mut out, Some(&held)).unwrap(),
        Fetched::Body(_)
    ));
    assert_eq!(out.len(), BIG_LEN + 4);
    assert_kind(
        d.fetch("/dir", &mut Vec::new(), None),
        ErrorKind::IsADirectory,
    );
    assert_kind(
        d.fetch("/missing", &mut Vec::new(), None),
        ErrorKind::NotFound,
    );
    assert_kind(
        d.fetch("/dir/missing/x", &mut Vec::new(), None),
        ErrorKind::NotFound,
    );
}

#[test]
fn put_replaces_atomically_and_leaves_no_temporary() {
    let s = Served::start();
    let d = s.driver();
    assert!(d.capabilities().write);
    let meta = d.put("/new-empty", &mut io::empty(), 0).unwrap();
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(0)));
    assert_eq!(fs::read(s.disk("new-empty")).unwrap(), b"");
    let big = noise(BIG_LEN, 11);
    let meta = d
        .put("/dir/big copy", &mut &big[..], big.len() as u64)
        .unwrap();
    assert_eq!(meta.size, Some(BIG_LEN as u64));
    assert!(fs::read(s.disk("dir/big copy")).unwrap() == big);
    // Replacing keeps the permission bits of the file replaced.
    fs::set_permissions(s.disk("a b.txt"), fs::Permissions::from_mode(0o751)).unwrap();
    d.put("/a b.txt", &mut &b"replaced"[..], 8).unwrap();
    assert_eq!(fs::read(s.disk("a b.txt")).unwrap(), b"replaced");
    let mode = fs::metadata(s.disk("a b.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o751);
    assert_eq!(fetch_bytes(&d, "/a b.txt"), b"replaced");
    for dir in [s.root(), s.disk("dir")] {
        let left: Vec<String> = names_in(&dir)
            .into_iter()
            .filter(|n| n.starts_with(".roam-put"))
            .collect();
        assert!(left.is_empty(), "temporaries left: {left:?}");
    }
}

#[test]
fn put_with_sends_the_time_with_the_contents() {
    let s = Served::start();
    let d = s.driver();
    let when = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let meta = d
        .put_with("/dir/stamped", &mut &b"old"[..], 3, timed(when))
        .unwrap();
    assert_eq!((meta.size, meta.mtime), (Some(3), Some(when)));
    assert_eq!(
        fs::metadata(s.disk("dir/stamped"))
            .unwrap()
            .modified()
            .unwrap(),
        when
    );
    // Over a file: its permission bits stay, the time is the new one.
    fs::set_permissions(s.disk("dir/stamped"), fs::Permissions::from_mode(0o705)).unwrap();
    let later = when + Duration::from_secs(60);
    let meta = d
        .put_with("/dir/stamped", &mut &b"newer"[..], 5, timed(later))
        .unwrap();
    assert_eq!((meta.mode, meta.mtime), (Some(0o705), Some(later)));
    assert_eq!(fs::read(s.disk("dir/stamped")).unwrap(), b"newer");
    // A time SFTP v3 cannot carry is left out; the contents still go up.
    let meta = d
        .put_with(
            "/dir/stamped",
            &mut &b"x"[..],
            1,
            timed(UNIX_EPOCH - Duration::from_secs(1)),
        )
        .unwrap();
    assert_eq!(meta.size, Some(1));
    assert_ne!(meta.mtime, Some(later));
}

/// With a mode and a time, the upload answers what a `stat` of the name says (it asks
/// none itself): the mode exactly (not masked by the server's umask) and the time, set on
/// the temporary behind its writes; a file larger than the write window too, so the time
/// reaches the server only after every byte.
#[test]
fn put_with_a_mode_and_time_knows_the_result() {
    let s = Served::start();
    let d = s.driver();
    let when = UNIX_EPOCH + Duration::from_secs(1_200_000_000);
    let attrs = Attrs {
        mtime: Some(when),
        mode: Some(0o666),
        atime: None,
    };
    let meta = d
        .put_with("/dir/new", &mut &b"fresh"[..], 5, attrs)
        .unwrap();
    assert_eq!(meta, d.stat("/dir/new").unwrap());
    assert_eq!(
        (meta.size, meta.mode, meta.mtime),
        (Some(5), Some(0o666), Some(when))
    );
    let big = noise(3 << 20, 11);
    let attrs = Attrs {
        mode: Some(0o600),
        ..attrs
    };
    let meta = d
        .put_with("/dir/big", &mut &big[..], big.len() as u64, attrs)
        .unwrap();
    assert_eq!(meta, d.stat("/dir/big").unwrap());
    let md = fs::metadata(s.disk("dir/big")).unwrap();
    assert_eq!(
        (md.permissions().mode() & 0o7777, md.modified().unwrap()),
        (0o600, when)
    );
    assert_eq!(fs::read(s.disk("dir/big")).unwrap(), big);
    // Over an existing file its own mode wins, as for `put`.
    let meta = d
        .put_with("/dir/new", &mut &b"again"[..], 5, attrs)
        .unwrap();
    assert_eq!(
        (meta.mode, meta),
        (Some(0o666), d.stat("/dir/new").unwrap())
    );
}

#[test]
fn put_errors_leave_nothing_behind() {
    let s = Served::start();
    let d = s.driver();
    // A source that ends before the promised length: the old file stays whole.
    let (got, message) = kind(d.put("/a b.txt", &mut &b"short"[..], 100));
    assert_eq!(got, ErrorKind::Io, "{message}");
    assert!(message.contains("5 of 100"), "{message}");
    assert_eq!(fs::read(s.disk("a b.txt")).unwrap(), b"hello world\n");
    let left: Vec<String> = names_in(&s.root())
        .into_iter()
        .filter(|n| n.starts_with(".roam-put"))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// MKDIR carries the mode; a SETSTAT puts back what the server's umask took. A link's
/// own time is set with `lsetstat@openssh.com`, never its target's.
#[test]
fn directory_modes_and_link_times() {
    use std::os::unix::fs::MetadataExt;
    let s = Served::start();
    let d = s.driver();
    d.mkdir("/private", 0o700).unwrap();
    d.mkdir("/open", 0o777).unwrap();
    let mode = |n: &str| fs::metadata(s.disk(n)).unwrap().permissions().mode() & 0o7777;
    assert_eq!((mode("private"), mode("open")), (0o700, 0o777));
    d.symlink("a b.txt", "/l").unwrap();
    let target = fs::metadata(s.disk("a b.txt")).unwrap().mtime();
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    d.set_mtime("/l", at).unwrap();
    assert_eq!(
        fs::symlink_metadata(s.disk("l")).unwrap().mtime(),
        1_000_000_000
    );
    assert_eq!(fs::metadata(s.disk("a b.txt")).unwrap().mtime(), target);
}

/// What a path through a file gives a removal (SFTP tells it from a missing name; the
/// rest of mkdir, rmdir, unlink and rename is tests/behaviour.rs's).
#[test]
fn removal_through_a_file_is_enotdir() {
    let s = Served::start();
    let d = s.driver();
    assert_kind(d.remove_file("/a b.txt/x"), ErrorKind::NotADirectory);
    assert!(s.disk("a b.txt").exists());
}

/// What SFTP v3 cannot carry (a time before 1970) is refused; a link made by the driver
/// is the server's own, followed by a fetch. (chmod, utimes and symlinks themselves:
/// tests/behaviour.rs.)
#[test]
fn times_before_1970_and_links_on_disk() {
    let s = Served::start();
    let d = s.driver();
    assert_kind(
        d.set_mtime("/a b.txt", UNIX_EPOCH - Duration::from_secs(1)),
        ErrorKind::InvalidName,
    );
    d.symlink("dir/inner.txt", "/new link").unwrap();
    assert_eq!(
        fs::read_link(s.disk("new link")).unwrap(),
        Path::new("dir/inner.txt")
    );
    assert_eq!(fetch_bytes(&d, "/new link"), b"inner");
}

/// As `nobody`, permission bits count: EACCES from the server's PERMISSION_DENIED.
#[test]
fn permission_denied_as_an_unprivileged_user() {
    let s = Served::start();
    let d = s.driver_with(s.config(), "nobody");
    assert_eq!(fetch_bytes(&d, "/a b.txt"), b"hello world\n");
    assert_kind(
        d.fetch("/secret.txt", &mut Vec::new(), None),
        ErrorKind::PermissionDenied,
    );
    assert_kind(
        d.put("/dir/new", &mut &b"x"[..], 1),
        ErrorKind::PermissionDenied,
    );
    assert_kind(d.mkdir("/dir/new", 0o755), ErrorKind::PermissionDenied);
    assert_kind(d.remove_file("/dir/inner.txt"), ErrorKind::PermissionDenied);
    assert_kind(d.set_mode("/a b.txt", 0o777), ErrorKind::PermissionDenied);
    fs::set_permissions(s.disk("dir"), fs::Permissions::from_mode(0o700)).unwrap();
    assert_kind(d.list("/dir"), ErrorKind::PermissionDenied);
}

#[test]
fn unknown_host_keys_are_refused_unless_allowed() {
    let s = Served::start();
    let known = s.scratch.join("empty_known_hosts");
    fs::write(&known, "").unwrap();
    let cfg = SftpConfig {
        known_hosts: Some(known.clone()),
        ..s.config()
    };
    let (got, message) = kind(s.driver_with(cfg.clone(), "root").stat("/"));
    assert_eq!(got, ErrorKind::PermissionDenied, "{message}");
    assert!(
        message.contains("not known") && message.contains("StrictHostKeyChecking accept-new"),
        "{message}"
    );
    assert!(message.contains("SHA256:"), "{message}");
    let config = s.scratch.join("accept-new.conf");
    fs::write(&config, "StrictHostKeyChecking accept-new\n").unwrap();
    let allowed = SftpConfig {
        ssh_config: Some(config),
        ..cfg.clone()
    };
    s.driver_with(allowed, "root").stat("/").unwrap();
    let learnt = fs::read_to_string(&known).unwrap();
    assert!(learnt.contains(&s.ssh.host_key), "{learnt}");
    // Once recorded, the key is known without the allowance.
    s.driver_with(cfg, "root").stat("/").unwrap();
}

/// Under every `StrictHostKeyChecking` but `no`, which lets `ssh` (and roam) go on with a
/// warning.
#[test]
fn changed_host_keys_are_refused() {
    let s = Served::start();
    let other = keygen(&s.scratch.join("other_host_key"), "");
    let known = s.scratch.join("changed_known_hosts");
    let port = s.ssh.port;
    fs::write(
        &known,
        format!("[127.0.0.1]:{port} {}\n", public_half(&other)),
    )
    .unwrap();
    for strict in ["yes", "ask", "accept-new"] {
        let config = s.scratch.join(&format!("{strict}.conf"));
        fs::write(&config, format!("StrictHostKeyChecking {strict}\n")).unwrap();
        let cfg = SftpConfig {
            known_hosts: Some(known.clone()),
            ssh_config: Some(config),
            ..s.config()
        };
        let (got, message) = kind(s.driver_with(cfg, "root").stat("/"));
        assert_eq!(got, ErrorKind::PermissionDenied, "{message}");
        assert!(
            message.contains("CHANGED") && message.contains("line 1"),
            "{message}"
        );
    }
    assert!(!fs::read_to_string(&known)
        .unwrap()
        .contains(&s.ssh.host_key));
    let config = s.scratch.join("no.conf");
    fs::write(&config, "StrictHostKeyChecking no\n").unwrap();
    let cfg = SftpConfig {
        known_hosts: Some(known.clone()),
        ssh_config: Some(config),
        ..s.config()
    };
    assert_eq!(
        s.driver_with(cfg, "root").stat("/dir").unwrap().kind,
        Kind::Dir
    );
    // The changed key is not recorded over the old one.
    assert!(!fs::read_to_string(&known)
        .unwrap()
        .contains(&s.ssh.host_key));
}

/// Hashed entries, as `ssh-keygen -H` writes them (and `HashKnownHosts yes`).
#[test]
fn hashed_known_hosts_entries() {
    let s = Served::start();
    let hashed = s.scratch.join("hashed_known_hosts");
    fs::copy(&s.ssh.known_hosts, &hashed).unwrap();
    let status = std::process::Command::new("ssh-keygen")
        .arg("-H")
        .arg("-f")
        .arg(&hashed)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(fs::read_to_string(&hashed).unwrap().starts_with("|1|"));
    let cfg = SftpConfig {
        known_hosts: Some(hashed),
        ..s.config()
    };
    assert_eq!(
        s.driver_with(cfg, "root").stat("/dir").unwrap().kind,
        Kind::Dir
    );
}

/// An alias of `~/.ssh/config` names the host, port, user and key.
#[test]
fn ssh_config_aliases() {
    let s = Served::start();
    let config = s.scratch.join("ssh_config");
    let key = s.ssh.client_key.display();
    fs::write(
        &config,
        format!(
            "Host roam-test-alias other\n  HostName 127.0.0.1\n  Port {}\n  User root\n  IdentityFile {key}\n\
             Host *\n  User nobody-else\n  Port 1\n",
            s.ssh.port
        ),
    )
    .unwrap();
    let cfg = SftpConfig {
        ssh_config: Some(config),
        identity_files: Vec::new(),
        ..s.config()
    };
    let url = format!("sftp://roam-test-alias{}", s.root().display());
    let d = SftpDriver::new(cfg, &url).unwrap();
    assert_eq!(fetch_bytes(&d, "/dir/inner.txt"), b"inner");
    assert!(
        d.describe("/x").starts_with("sftp://roam-test-alias/"),
        "{}",
        d.describe("/x")
    );
}

#[test]
fn refused_logins() {
    let s = Served::start();
    let stranger = keygen(&s.scratch.join("stranger"), "");
    let cfg = SftpConfig {
        identity_files: vec![stranger.clone()],
        ..s.config()
    };
    let (got, message) = kind(s.driver_with(cfg, "root").stat("/"));
    assert_eq!(got, ErrorKind::PermissionDenied, "{message}");
    assert!(
        message.contains(&stranger.display().to_string()),
        "{message}"
    );
    // An encrypted key needs its passphrase, which roam does not ask for: the agent does.
    let locked = keygen(&s.scratch.join("locked"), "a passphrase");
    let cfg = SftpConfig {
        identity_files: vec![locked],
        ..s.config()
    };
    let (got, message) = kind(s.driver_with(cfg, "root").stat("/"));
    assert_eq!(got, ErrorKind::PermissionDenied, "{message}");
    assert!(
        message.contains("encrypted") && message.contains("ssh-add"),
        "{message}"
    );
    assert!(!message.contains("passphrase\""), "{message}");
}

#[test]
fn gone_servers_are_unreachable() {
    let mut s = Served::start();
    let d = s.driver();
    s.ssh.stop();
    let (got, message) = kind(d.stat("/"));
    assert_eq!(got, ErrorKind::Unreachable, "{message}");
    assert!(
        message.starts_with("connect sftp://root@127.0.0.1:"),
        "{message}"
    );
}

/// A server that accepts the connection but never speaks SSH.
#[test]
fn silent_servers_time_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = Served::start();
    let cfg = SftpConfig {
        connect_timeout: Duration::from_millis(300),
        ..s.config()
    };
    let d = SftpDriver::new(cfg, &format!("sftp://root@127.0.0.1:{port}/")).unwrap();
    let started = Instant::now();
    assert_kind(d.stat("/"), ErrorKind::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(listener);
}

/// A connection that stops answering mid-session times out, and the next operation
/// gets a fresh one.
#[test]
fn stalled_connections_time_out_and_are_replaced() {
    let s = Served::start();
    let cfg = SftpConfig {
        read_timeout: Duration::from_secs(1),
        ..s.config()
    };
    let d = s.driver_with(cfg, "root");
    d.stat("/").unwrap();
    s.ssh.pause_connections(true);
    let started = Instant::now();
    assert_kind(d.stat("/dir"), ErrorKind::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(d.stat("/dir").unwrap().kind, Kind::Dir);
    s.ssh.pause_connections(false);
}

/// A connection cut under the driver is replaced; idempotent operations do not notice.
#[test]
fn broken_connections_are_replaced() {
    let s = Served::start();
    let d = s.driver();
    d.stat("/").unwrap();
    for _ in 0..3 {
        s.ssh.drop_connections();
        assert_eq!(d.stat("/dir").unwrap().kind, Kind::Dir);
        assert_eq!(fetch_bytes(&d, "/dir/inner.txt"), b"inner");
    }
    // Given a moment to see the connection closed, a write goes to a fresh one too.
    s.ssh.drop_connections();
    thread::sleep(Duration::from_millis(300));
    d.mkdir("/after", 0o755).unwrap();
}

/// Threads share one connection: requests interleave on it.
#[test]
fn concurrent_operations_share_the_connection() {
    let s = Served::start();
    let d = Arc::new(s.driver());
    let want = noise(BIG_LEN, 7);
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let d = d.clone();
            let want = want.clone();
            thread::spawn(move || {
                for _ in 0..3 {
                    let mut got = Vec::new();
                    d.fetch("/big.bin", &mut got, None).unwrap();
                    assert!(got == want);
                    assert_eq!(d.stat("/dir").unwrap().kind, Kind::Dir);
                    let name = format!("/w{i}");
                    d.put(&name, &mut &b"data"[..], 4).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut total = Vec::new();
    for i in 0..4 {
        fs::File::open(s.disk(&format!("w{i}")))
            .unwrap()
            .read_to_end(&mut total)
            .unwrap();
    }
    assert_eq!(total.len(), 16);
}

#[test]
fn a_full_disk_is_enospc_and_leaves_nothing_behind() {
    let s = Served::start();
    let full = s.root().join("full");
    let _tmpfs = roam_testkit::Tmpfs::mount(&full, "1m");
    write_file(&full.join("kept.txt"), b"kept", 0o644);
    let d = s.driver();
    let two_mib = noise(2 << 20, 9);
    let (got, message) = kind(d.put("/full/big.bin", &mut &two_mib[..], two_mib.len() as u64));
    assert_eq!(got, ErrorKind::NoSpace, "{message}");
    assert_eq!(
        d.put("/full/big.bin", &mut &two_mib[..], two_mib.len() as u64)
            .unwrap_err()
            .errno(),
        libc::ENOSPC
    );
    assert_eq!(names_in(&full), ["kept.txt"], "no temporary is left");
    // With the temporary gone the disk has room again: a small file goes up.
    d.put("/full/small.txt", &mut &b"fits"[..], 4).unwrap();
    assert_eq!(fs::read(full.join("small.txt")).unwrap(), b"fits");
}

/// What an upload with only a time sets.
fn timed(mtime: SystemTime) -> Attrs {
    Attrs {
        mtime: Some(mtime),
        mode: None,
        atime: None,
    }
}
