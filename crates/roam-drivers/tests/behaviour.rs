//! One behaviour suite over every driver (OpenDAL's behaviour tests): each case is a
//! function of a [`Service`] (a driver, its declared [`Capabilities`] and its server), run
//! against the real server of every protocol: nginx (HTTP, and WebDAV with dav-ext),
//! pyftpdlib and vsftpd (FTP; vsftpd also in FTPS), OpenSSH's sshd (SFTP), moto (S3), chirp_server (Chirp), a
//! local directory (served in place and through the cache), `mem:`, and layers over them
//! (`rot13:`, `null:`).
//!
//! Each case holds the capability table to its word both ways: what a service declares
//! works (bytes and metadata checked), and what it does not declare fails with the errno
//! its [`Capabilities`] field names (`EROFS`, `ENOTSUP`, `EXDEV` ...). No case is skipped:
//! a capability that is `false` is a refusal to assert. `behaviour!` at the end makes one
//! `#[test]` per (service, case) pair, named `service::case`, each on a server of its own.
//!
//! What is particular to one protocol (listing formats, logins, TLS, the interview of an
//! FTP 550, upload races) stays in that protocol's own test file.

mod common;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::calls::{contents, named, names, upload};
use roam_drivers::chirp::{ChirpConfig, ChirpDriver};
use roam_drivers::dav::DavDriver;
use roam_drivers::ftp::{FtpConfig, FtpDriver};
use roam_drivers::http::HttpDriver;
use roam_drivers::layer::{null::Null, rot13::Rot13, Stacked};
use roam_drivers::local::LocalDriver;
use roam_drivers::mem::MemDriver;
use roam_drivers::s3::{S3Config, S3Driver};
use roam_drivers::sftp::{SftpConfig, SftpDriver};
use roam_drivers::{
    Attrs, Capabilities, Driver, Expect, Fetched, Kind, Meta, NewFile, Pinned, Result, Validator,
};
use roam_testkit::{self as kit, noise, write_file, Scratch, Server};

/// One backend under test: a driver of its server, what it declares, and what keeps the
/// server and its tree alive.
struct Service {
    driver: Box<dyn Driver>,
    caps: Capabilities,
    /// The served tree on disk: where a read-only service's files are made (they cannot
    /// be put), and where an upload's temporaries would show.
    disk: Option<PathBuf>,
    /// What `set_mode` fails with where modes are not kept: `ENOTSUP`, or the server's
    /// refusal of the user (FTP's anonymous login: `EACCES`).
    chmod_refusal: i32,
    _keep: Vec<Box<dyn std::any::Any>>,
}

impl Service {
    /// `driver` with what it declares after its first request (FTP learns the server's
    /// features at login).
    fn new(driver: Box<dyn Driver>, keep: Vec<Box<dyn std::any::Any>>) -> Service {
        driver.stat("/").expect("the served root");
        Service {
            caps: driver.capabilities(),
            driver,
            disk: None,
            chmod_refusal: libc::ENOTSUP,
            _keep: keep,
        }
    }

    fn d(&self) -> &dyn Driver {
        &*self.driver
    }

    /// `self` serving the tree at `disk`.
    fn on_disk(self, disk: PathBuf) -> Service {
        Service {
            disk: Some(disk),
            ..self
        }
    }

    /// Upload temporaries left at the top of the served tree.
    fn litter(&self) -> Vec<String> {
        let Some(disk) = &self.disk else {
            return Vec::new();
        };
        fs::read_dir(disk)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains("roam-put"))
            .collect()
    }

    /// Makes the file `path` holding `data`: through the driver where it writes, else on
    /// the served disk.
    fn seed(&self, path: &str, data: &[u8]) -> Meta {
        match &self.disk {
            Some(disk) if !self.caps.write => {
                write_file(&disk.join(&path[1..]), data, 0o644);
                self.d().stat(path).unwrap()
            }
            _ => put(self.d(), path, data).unwrap(),
        }
    }

    /// Makes the directory `path` (its parent exists), as [`Service::seed`] does.
    fn seed_dir(&self, path: &str) {
        match &self.disk {
            Some(disk) if !self.caps.write => kit::mkdir(&disk.join(&path[1..])),
            _ => self.d().mkdir(path, 0o755).unwrap(),
        }
    }
}

// ---- The services.

fn http() -> Service {
    let scratch = Scratch::new("behaviour-http");
    let www = scratch.join("www");
    kit::mkdir(&www);
    let server = Server::nginx(&www, &scratch.join("run"));
    let client = common::http_client(Duration::from_secs(10));
    let driver = HttpDriver::new(client, &server.url()).unwrap();
    Service::new(Box::new(driver), vec![Box::new(server), Box::new(scratch)]).on_disk(www)
}

/// WebDAV on nginx with locks (class 2: `dav_ext_lock`), or without (class 1, where
/// the driver takes roam's lock on a name for a conditional replace).
fn dav_with(locks: bool) -> Service {
    let scratch = Scratch::new("behaviour-dav");
    let www = scratch.join("www");
    fs::create_dir_all(&www).unwrap();
    let server = match locks {
        true => kit::dav::nginx_dav(&www, &scratch.join("run")),
        false => kit::dav::nginx_dav_unlocked(&www, &scratch.join("run")),
    };
    let client = common::http_client(Duration::from_secs(10));
    let driver = DavDriver::new(client, &server.url()).unwrap();
    Service::new(Box::new(driver), vec![Box::new(server), Box::new(scratch)]).on_disk(www)
}

fn dav() -> Service {
    dav_with(true)
}

fn dav_unlocked() -> Service {
    dav_with(false)
}

/// The FTP servers: pyftpdlib (a named user: SITE CHMOD, MFMT), vsftpd (anonymous:
/// neither), and vsftpd in FTPS only (`ftps://`, a certificate of the test's own CA).
enum FtpServer {
    Pyftpdlib,
    Vsftpd,
    VsftpdTls,
}

fn ftp_on(which: FtpServer) -> Service {
    let scratch = Scratch::new("behaviour-ftp");
    let root = scratch.join("root");
    fs::create_dir_all(root.join("pub")).unwrap();
    let run = scratch.join("run");
    let mut cfg = FtpConfig {
        netrc: None,
        ..FtpConfig::default()
    };
    let (server, url) = match which {
        FtpServer::Pyftpdlib => {
            let server = kit::ftp::pyftpdlib(&root, &run, "roam", "secret");
            let url = format!("ftp://roam:secret@{}/pub", server.authority());
            (server, url)
        }
        FtpServer::Vsftpd => {
            let server = kit::ftp::vsftpd(&root, &run);
            let url = format!("ftp://{}/pub", server.authority());
            (server, url)
        }
        FtpServer::VsftpdTls => {
            let ca = kit::tls::TestCa::new(&scratch.join("ca"));
            cfg.tls.ca_file = Some(ca.ca_cert.clone());
            let server = kit::ftp::vsftpd_tls(&root, &run, &ca);
            let url = format!("ftps://{}/pub", server.authority());
            (server, url)
        }
    };
    let driver = FtpDriver::new(cfg, &url).unwrap();
    Service {
        chmod_refusal: match which {
            FtpServer::Pyftpdlib => libc::ENOTSUP,
            _ => libc::EACCES,
        },
        ..Service::new(Box::new(driver), vec![Box::new(server), Box::new(scratch)])
            .on_disk(root.join("pub"))
    }
}

fn pyftpdlib() -> Service {
    ftp_on(FtpServer::Pyftpdlib)
}

fn vsftpd() -> Service {
    ftp_on(FtpServer::Vsftpd)
}

fn vsftpd_tls() -> Service {
    ftp_on(FtpServer::VsftpdTls)
}

fn sftp() -> Service {
    let scratch = Scratch::new("behaviour-sftp");
    let root = scratch.join("root");
    fs::create_dir_all(&root).unwrap();
    let ssh = kit::sftp::sshd(&scratch.join("run"));
    let cfg = SftpConfig {
        connect_timeout: Duration::from_secs(10),
        read_timeout: Duration::from_secs(10),
        ssh_config: Some(scratch.join("no-ssh-config")),
        known_hosts: Some(ssh.known_hosts.clone()),
        identity_files: vec![ssh.client_key.clone()],
        ..SftpConfig::default()
    };
    let driver = SftpDriver::new(cfg, &ssh.url("root", &root)).unwrap();
    Service::new(Box::new(driver), vec![Box::new(ssh), Box::new(scratch)]).on_disk(root)
}

fn s3() -> Service {
    const BUCKET: &str = "behaviour";
    let scratch = Scratch::new("behaviour-s3");
    let server = kit::s3::moto(&scratch.join("run"));
    kit::s3::create_bucket(&server, BUCKET);
    // moto checks every request's signature from here on, as AWS does.
    let credentials = kit::s3::enforce_auth(&server);
    let config = S3Config {
        endpoint: Some(server.url()),
        region: Some("us-east-1".into()),
        access_key: Some(credentials.access_key),
        secret_key: Some(credentials.secret_key),
        session_token: None,
        path_style: true,
        profile: None,
        ca_bundle: None,
        credential_source: None,
        keys_from: None,
        problem: None,
    };
    let client = common::http_client(Duration::from_secs(30));
    let driver = S3Driver::new(client, &config, BUCKET).unwrap();
    Service::new(Box::new(driver), vec![Box::new(server), Box::new(scratch)])
}

fn chirp() -> Service {
    let scratch = Scratch::new("behaviour-chirp");
    let root = scratch.join("root");
    fs::create_dir_all(&root).unwrap();
    let server = Server::chirp(&root, &scratch.join("run"));
    let driver = ChirpDriver::new(ChirpConfig::default(), &server.chirp_url()).unwrap();
    Service::new(Box::new(driver), vec![Box::new(server), Box::new(scratch)]).on_disk(root)
}

/// A local directory made by `driver` (served in place, or through the cache).
fn local_by(name: &str, driver: fn(PathBuf) -> Box<dyn Driver>) -> Service {
    let scratch = Scratch::new(name);
    let root = scratch.join("root");
    fs::create_dir_all(&root).unwrap();
    Service::new(driver(root.clone()), vec![Box::new(scratch)]).on_disk(root)
}

/// `file://`: served in place.
fn local() -> Service {
    local_by("behaviour-local", |root| Box::new(LocalDriver::new(root)))
}

/// `file+cache://`: the same tree through roam's cache.
fn file_cache() -> Service {
    local_by("behaviour-file-cache", |root| {
        Box::new(LocalDriver::cached(root))
    })
}

/// `rot13:file+cache://`: a layer, which declares what its lower driver does.
fn rot13() -> Service {
    local_by("behaviour-rot13", |root| {
        let lower: Arc<dyn Driver> = Arc::new(LocalDriver::cached(root));
        Box::new(Stacked::new(Rot13, lower))
    })
}

fn mem() -> Service {
    Service::new(Box::new(MemDriver::new()), Vec::new())
}

/// `null:mem:`: a layer that changes nothing passes being in memory through.
fn null_over_mem() -> Service {
    let lower: Arc<dyn Driver> = Arc::new(MemDriver::new());
    Service::new(Box::new(Stacked::new(Null, lower)), Vec::new())
}

/// `null:/dir`: and being served in place.
fn null_over_local() -> Service {
    local_by("behaviour-null", |root| {
        let lower: Arc<dyn Driver> = Arc::new(LocalDriver::new(root));
        Box::new(Stacked::new(Null, lower))
    })
}

// ---- Helpers.

fn put(d: &dyn Driver, path: &str, data: &[u8]) -> Result<Meta> {
    d.put(path, &mut &data[..], data.len() as u64)
}

/// The errno `result` failed with.
fn errno<T: std::fmt::Debug>(result: Result<T>) -> i32 {
    result.expect_err("the request must fail").errno()
}

/// Asserts that `result` failed with `want`, naming both errnos and the message.
fn refused<T: std::fmt::Debug>(result: Result<T>, want: i32, what: &str) {
    let err = result.expect_err(&format!("{what} must fail"));
    assert_eq!(
        err.errno(),
        want,
        "{what}: {} (errno {}, want {want})",
        err.message,
        err.errno()
    );
}

/// A time every protocol that keeps times keeps exactly (whole seconds, after 2001).
fn when() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_600_000_000)
}

fn secs(t: Option<SystemTime>) -> Option<u64> {
    t.map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs())
}

// ---- The cases: reading.

/// A file: its stat, its entry in a listing, its bytes.
fn file_is_stated_listed_and_fetched(s: &Service) {
    s.seed("/f.txt", b"hello world\n");
    let meta = s.d().stat("/f.txt").unwrap();
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(12)));
    assert_eq!(names(s.d(), "/"), named(&[("f.txt", Kind::File)]));
    assert_eq!(contents(s.d(), "/f.txt"), b"hello world\n");
}

/// A directory: its stat, its listing, and `EISDIR` for its bytes.
fn dir_is_stated_listed_and_not_fetched(s: &Service) {
    s.seed_dir("/d");
    s.seed_dir("/d/sub");
    s.seed("/d/inner.txt", b"inner");
    assert_eq!(s.d().stat("/d").unwrap().kind, Kind::Dir);
    assert_eq!(
        names(s.d(), "/d"),
        named(&[("inner.txt", Kind::File), ("sub", Kind::Dir)])
    );
    assert!(s.d().list("/d").unwrap().complete);
    assert!(s.d().list("/d/sub").unwrap().entries.is_empty());
    refused(
        s.d().fetch("/d", &mut Vec::new(), None),
        libc::EISDIR,
        "fetch of a directory",
    );
}

/// A missing name is `ENOENT` to every request that reads.
fn missing_name_is_enoent(s: &Service) {
    s.seed_dir("/d");
    for path in ["/nope", "/d/nope", "/nope/deeper"] {
        refused(s.d().stat(path), libc::ENOENT, &format!("stat {path}"));
        let fetched = s.d().fetch(path, &mut Vec::new(), None);
        refused(fetched, libc::ENOENT, &format!("fetch {path}"));
    }
    refused(s.d().list("/nope"), libc::ENOENT, "list /nope");
}

/// Byte ranges where declared (the start, the middle, across and past the end); else
/// `ENOTSUP`.
fn ranges_are_read_where_declared(s: &Service) {
    let data = noise(1 << 20, 5);
    s.seed("/big.bin", &data);
    let range = |offset: usize, len: usize| {
        let mut out = Vec::new();
        let n = s
            .d()
            .read_range("/big.bin", offset as u64, len as u64, None, &mut out)
            .map(|n| (n, out));
        n.map(|(n, out)| {
            assert_eq!(n as usize, out.len());
            out
        })
    };
    if !s.caps.read_ranges {
        return refused(range(0, 10), libc::ENOTSUP, "read_range");
    }
    let end = data.len();
    assert!(range(0, 10).unwrap() == data[..10]);
    // Across request chunks (SFTP's 64 KiB) and windows in flight.
    assert!(
        range(1000, 700_000).unwrap() == data[1000..701_000],
        "middle"
    );
    assert!(range(end - 100, 1000).unwrap() == data[end - 100..], "tail");
    assert!(range(end, 10).unwrap().is_empty(), "at the end");
    assert!(range(end + 10, 10).unwrap().is_empty(), "past the end");
    assert!(range(10, 0).unwrap().is_empty(), "nothing");
    let missing = s.d().read_range("/nope", 0, 1, None, &mut Vec::new());
    refused(missing, libc::ENOENT, "read_range of nothing");
}

/// A range read pinned to a version the file no longer is fails with `ESTALE` and writes
/// nothing; one pinned to nothing in particular keeps the first version it meets.
fn ranges_of_a_replaced_version_are_estale(s: &Service) {
    if !s.caps.read_ranges {
        return;
    }
    let before = s.seed("/v.bin", &noise(100_000, 6));
    let pinned = Pinned::new(Validator::of(&before));
    let range = |of: &Pinned, out: &mut Vec<u8>| s.d().read_range("/v.bin", 10, 100, Some(of), out);
    let mut out = Vec::new();
    range(&pinned, &mut out).unwrap();
    assert!(out == noise(100_000, 6)[10..110], "the version pinned");
    // Another length: nginx's and FTP's validators are the time (to the second) and size.
    let after = noise(100_001, 7);
    s.seed("/v.bin", &after);
    let mut out = Vec::new();
    refused(
        range(&pinned, &mut out),
        libc::ESTALE,
        "a range of the old version",
    );
    assert!(out.is_empty(), "nothing of the new version");
    let fresh = Pinned::default();
    range(&fresh, &mut out).unwrap();
    assert!(out == after[10..110], "the new version");
}

/// What reading a name that is not what the request needs gives, as on a local disk:
/// `ENOTDIR` for a file's listing, `EISDIR` for a directory's bytes in ranges. (A path
/// through a file is `ENOTDIR` only where the server tells it apart from a missing
/// one: the FTP and SFTP files check that.)
fn read_errors_are_posix(s: &Service) {
    s.seed("/f", b"f");
    s.seed_dir("/d");
    let mut sink = Vec::new();
    refused(s.d().list("/f"), libc::ENOTDIR, "list of a file");
    if s.caps.read_ranges {
        let range = s.d().read_range("/d", 0, 5, None, &mut sink);
        refused(range, libc::EISDIR, "read_range of a directory");
    }
    assert!(sink.is_empty());
}

// ---- Writing.

/// `put` creates and replaces, `put_with` gives the time and mode the service keeps; a
/// read-only service refuses with `EROFS`.
fn files_are_put_replaced_and_given_attrs(s: &Service) {
    if !s.caps.write {
        return refused(put(s.d(), "/new.txt", b"x"), libc::EROFS, "put");
    }
    let meta = put(s.d(), "/new.txt", b"fresh").unwrap();
    assert_eq!((meta.kind, meta.size), (Kind::File, Some(5)));
    put(s.d(), "/new.txt", b"replaced contents").unwrap();
    assert_eq!(contents(s.d(), "/new.txt"), b"replaced contents");
    put(s.d(), "/empty", b"").unwrap();
    assert_eq!(contents(s.d(), "/empty"), b"");
    let attrs = Attrs {
        mtime: Some(when()),
        mode: Some(0o640),
        atime: None,
    };
    let meta = s
        .d()
        .put_with("/attrs.txt", &mut &b"attrs"[..], 5, attrs)
        .unwrap();
    let stat = s.d().stat("/attrs.txt").unwrap();
    assert_eq!(contents(s.d(), "/attrs.txt"), b"attrs");
    for m in [&meta, &stat] {
        assert_eq!(
            secs(m.mtime) == secs(Some(when())),
            s.caps.set_mtime,
            "{m:?}"
        );
        assert_eq!(m.mode == Some(0o640), s.caps.file_modes, "{m:?}");
    }
}

/// `mkdir` (`EEXIST` again), `rmdir` (`ENOTEMPTY` while it holds a file); `EROFS` on a
/// read-only service.
fn dirs_are_made_and_removed(s: &Service) {
    if !s.caps.write {
        refused(s.d().mkdir("/m", 0o755), libc::EROFS, "mkdir");
        s.seed_dir("/m");
        return refused(s.d().remove_dir("/m"), libc::EROFS, "rmdir");
    }
    s.d().mkdir("/m", 0o755).unwrap();
    assert_eq!(s.d().stat("/m").unwrap().kind, Kind::Dir);
    refused(
        s.d().mkdir("/m", 0o755),
        libc::EEXIST,
        "mkdir of an existing name",
    );
    refused(
        s.d().mkdir("/nope/m", 0o755),
        libc::ENOENT,
        "mkdir in nothing",
    );
    put(s.d(), "/m/f", b"f").unwrap();
    refused(
        s.d().remove_dir("/m"),
        libc::ENOTEMPTY,
        "rmdir of a full dir",
    );
    refused(s.d().remove_dir("/m/f"), libc::ENOTDIR, "rmdir of a file");
    s.d().remove_file("/m/f").unwrap();
    s.d().remove_dir("/m").unwrap();
    refused(s.d().stat("/m"), libc::ENOENT, "stat after rmdir");
}

/// Changes that POSIX refuses are refused with its errno, and change nothing: a put
/// through a missing directory (`ENOENT`) or a file (`ENOTDIR`), onto a directory
/// (`EISDIR`); a mkdir of a file's name (`EEXIST`) or through a file (`ENOTDIR`); an rmdir
/// of nothing (`ENOENT`); a rename into nothing (`ENOENT`), of a file onto a directory
/// (`EISDIR`), of a directory onto a file (`ENOTDIR`) or a full directory (`ENOTEMPTY`).
fn write_errors_are_posix(s: &Service) {
    if !s.caps.write {
        return refused(put(s.d(), "/nope/x", b"x"), libc::EROFS, "put");
    }
    put(s.d(), "/f", b"f").unwrap();
    s.d().mkdir("/d", 0o755).unwrap();
    put(s.d(), "/d/inner", b"inner").unwrap();
    s.d().mkdir("/e", 0o755).unwrap();
    let put_errno = |path: &str| errno(put(s.d(), path, b"data"));
    assert_eq!(put_errno("/nope/x"), libc::ENOENT, "put in nothing");
    assert_eq!(put_errno("/f/x"), libc::ENOTDIR, "put through a file");
    assert_eq!(put_errno("/d"), libc::EISDIR, "put onto a directory");
    assert_eq!(put_errno("/"), libc::EISDIR, "put onto the root");
    refused(
        s.d().mkdir("/f", 0o755),
        libc::EEXIST,
        "mkdir of a file's name",
    );
    refused(
        s.d().mkdir("/f/x", 0o755),
        libc::ENOTDIR,
        "mkdir through a file",
    );
    refused(s.d().remove_dir("/nope"), libc::ENOENT, "rmdir of nothing");
    refused(
        s.d().rename("/f", "/nope/x"),
        libc::ENOENT,
        "rename into nothing",
    );
    if s.caps.rename_files {
        refused(s.d().rename("/f", "/d"), libc::EISDIR, "rename onto a dir");
    }
    if s.caps.rename_dirs {
        refused(
            s.d().rename("/e", "/f"),
            libc::ENOTDIR,
            "rename onto a file",
        );
        refused(
            s.d().rename("/e", "/d"),
            libc::ENOTEMPTY,
            "rename onto a full dir",
        );
    }
    assert_eq!(contents(s.d(), "/f"), b"f");
    assert_eq!(contents(s.d(), "/d/inner"), b"inner");
    assert_eq!(s.d().stat("/e").unwrap().kind, Kind::Dir);
}

/// `remove_file` (`ENOENT` again, `EISDIR` for a directory); `EROFS` on a read-only
/// service.
fn files_are_removed(s: &Service) {
    s.seed("/f", b"f");
    if !s.caps.write {
        return refused(s.d().remove_file("/f"), libc::EROFS, "remove");
    }
    s.d().remove_file("/f").unwrap();
    refused(s.d().stat("/f"), libc::ENOENT, "stat after remove");
    refused(s.d().remove_file("/f"), libc::ENOENT, "remove again");
    s.d().mkdir("/d", 0o755).unwrap();
    refused(
        s.d().remove_file("/d"),
        libc::EISDIR,
        "remove of a directory",
    );
}

/// `rename` of a file, also onto another (replaced, as rename(2) does), onto itself, and
/// into a directory; else `EROFS`.
fn files_are_renamed(s: &Service) {
    s.seed("/a", b"a");
    if !s.caps.rename_files {
        return refused(s.d().rename("/a", "/b"), libc::EROFS, "rename");
    }
    s.d().rename("/a", "/b").unwrap();
    refused(s.d().stat("/a"), libc::ENOENT, "the old name");
    assert_eq!(contents(s.d(), "/b"), b"a");
    put(s.d(), "/c", b"c").unwrap();
    s.d().rename("/b", "/c").unwrap();
    assert_eq!(contents(s.d(), "/c"), b"a");
    s.d().rename("/c", "/c").unwrap();
    assert_eq!(contents(s.d(), "/c"), b"a", "renamed onto itself");
    s.d().mkdir("/d", 0o755).unwrap();
    s.d().rename("/c", "/d/c").unwrap();
    assert_eq!(contents(s.d(), "/d/c"), b"a", "into a directory");
    refused(s.d().stat("/c"), libc::ENOENT, "the old name");
    refused(
        s.d().rename("/nope", "/x"),
        libc::ENOENT,
        "rename of nothing",
    );
}

/// `copy` on the server where declared: the bytes at the new name and the old name kept,
/// also over a file and into a directory; nothing to copy is `ENOENT`, a directory
/// `EISDIR`; else `ENOTSUP`.
fn files_are_copied_on_the_server(s: &Service) {
    s.seed("/a", b"abc");
    if !s.caps.server_copy {
        return refused(s.d().copy("/a", "/b"), libc::ENOTSUP, "copy");
    }
    s.d().copy("/a", "/b").unwrap();
    assert_eq!(contents(s.d(), "/b"), b"abc");
    assert_eq!(contents(s.d(), "/a"), b"abc", "the old name");
    put(s.d(), "/c", b"older").unwrap();
    s.d().copy("/a", "/c").unwrap();
    assert_eq!(contents(s.d(), "/c"), b"abc", "over a file");
    s.d().mkdir("/d", 0o755).unwrap();
    s.d().copy("/a", "/d/a").unwrap();
    assert_eq!(contents(s.d(), "/d/a"), b"abc", "into a directory");
    assert_eq!(names(s.d(), "/d"), named(&[("a", Kind::File)]));
    refused(s.d().copy("/nope", "/x"), libc::ENOENT, "copy of nothing");
    refused(s.d().copy("/d", "/e"), libc::EISDIR, "copy of a directory");
}

/// `rename` of a directory with what it holds; else `EXDEV` (S3) or `EROFS`.
fn dirs_are_renamed(s: &Service) {
    s.seed_dir("/d");
    s.seed("/d/f", b"f");
    if !s.caps.rename_dirs {
        let want = if s.caps.write {
            libc::EXDEV
        } else {
            libc::EROFS
        };
        return refused(s.d().rename("/d", "/e"), want, "rename of a directory");
    }
    s.d().rename("/d", "/e").unwrap();
    refused(s.d().stat("/d"), libc::ENOENT, "the old name");
    assert_eq!(s.d().stat("/e").unwrap().kind, Kind::Dir);
    assert_eq!(contents(s.d(), "/e/f"), b"f");
    // Into another directory, and over an empty one, as rename(2) allows.
    s.d().mkdir("/into", 0o755).unwrap();
    s.d().rename("/e", "/into/e").unwrap();
    assert_eq!(contents(s.d(), "/into/e/f"), b"f");
    s.d().mkdir("/empty", 0o755).unwrap();
    s.d().rename("/into/e", "/empty").unwrap();
    assert_eq!(contents(s.d(), "/empty/f"), b"f");
}

// ---- Metadata.

/// `set_mode` of a file and a directory, and `mkdir`'s mode, where kept; else `ENOTSUP`
/// (FTP's anonymous user: `EACCES`).
fn modes_are_kept_where_declared(s: &Service) {
    s.seed("/f", b"f");
    s.seed_dir("/d");
    if !s.caps.file_modes {
        refused(s.d().set_mode("/f", 0o600), s.chmod_refusal, "chmod");
    } else {
        s.d().set_mode("/f", 0o600).unwrap();
        assert_eq!(s.d().stat("/f").unwrap().mode, Some(0o600));
    }
    if !s.caps.dir_modes {
        if s.caps.write {
            // The directory is made all the same, with the server's mode.
            s.d().mkdir("/m", 0o750).unwrap();
            assert_eq!(s.d().stat("/m").unwrap().kind, Kind::Dir);
        }
        return refused(
            s.d().set_mode("/d", 0o700),
            s.chmod_refusal,
            "chmod of a dir",
        );
    }
    s.d().set_mode("/d", 0o700).unwrap();
    assert_eq!(s.d().stat("/d").unwrap().mode, Some(0o700));
    s.d().mkdir("/m", 0o750).unwrap();
    assert_eq!(s.d().stat("/m").unwrap().mode, Some(0o750));
    refused(
        s.d().set_mode("/nope", 0o600),
        libc::ENOENT,
        "chmod of nothing",
    );
}

/// `set_mtime` where kept; else `ENOTSUP`.
fn mtimes_are_set_where_declared(s: &Service) {
    s.seed("/f", b"f");
    if !s.caps.set_mtime {
        return refused(s.d().set_mtime("/f", when()), libc::ENOTSUP, "set mtime");
    }
    s.d().set_mtime("/f", when()).unwrap();
    assert_eq!(secs(s.d().stat("/f").unwrap().mtime), secs(Some(when())));
    assert_eq!(contents(s.d(), "/f"), b"f");
    refused(
        s.d().set_mtime("/nope", when()),
        libc::ENOENT,
        "set mtime of nothing",
    );
}

/// `set_times` where access times are kept apart (alone, the mtime stays; with an mtime,
/// both are set; a stat shows them); else `ENOTSUP`.
fn atimes_are_set_where_declared(s: &Service) {
    s.seed("/f", b"f");
    let later = when() + Duration::from_secs(86_400);
    if !s.caps.set_atime {
        return refused(
            s.d().set_times("/f", when(), None),
            libc::ENOTSUP,
            "set atime",
        );
    }
    s.d().set_mtime("/f", later).unwrap();
    s.d().set_times("/f", when(), None).unwrap();
    let meta = s.d().stat("/f").unwrap();
    assert_eq!(
        (secs(meta.atime), secs(meta.mtime)),
        (secs(Some(when())), secs(Some(later)))
    );
    refused(
        s.d().set_times("/nope", when(), None),
        libc::ENOENT,
        "set atime of nothing",
    );
    s.d().set_times("/f", later, Some(when())).unwrap();
    let meta = s.d().stat("/f").unwrap();
    assert_eq!(
        (secs(meta.atime), secs(meta.mtime)),
        (secs(Some(later)), secs(Some(when())))
    );
    let attrs = Attrs {
        mtime: Some(later),
        mode: None,
        atime: Some(when()),
    };
    s.d().put_with("/g", &mut &b"g"[..], 1, attrs).unwrap();
    let meta = s.d().stat("/g").unwrap();
    assert_eq!(secs(meta.atime), secs(Some(when())), "an upload's atime");
}

/// `symlink`, read back by `stat` (lstat) and listed; else `ENOTSUP`.
fn symlinks_where_declared(s: &Service) {
    s.seed("/target", b"t");
    if !s.caps.symlinks {
        return refused(s.d().symlink("target", "/l"), libc::ENOTSUP, "symlink");
    }
    s.d().symlink("target", "/l").unwrap();
    let meta = s.d().stat("/l").unwrap();
    assert_eq!(meta.kind, Kind::Symlink);
    assert_eq!(meta.symlink_target.as_deref(), Some("target"));
    assert!(names(s.d(), "/").contains(&("l".into(), Kind::Symlink)));
    refused(
        s.d().symlink("x", "/l"),
        libc::EEXIST,
        "symlink over a name",
    );
    refused(
        s.d().symlink("x", "/nope/l"),
        libc::ENOENT,
        "symlink in nothing",
    );
    // A link to a directory is no directory to rmdir; removing a link leaves its target.
    s.d().mkdir("/d", 0o755).unwrap();
    s.d().symlink("d", "/dl").unwrap();
    refused(s.d().remove_dir("/dl"), libc::ENOTDIR, "rmdir of a link");
    s.d().remove_file("/l").unwrap();
    refused(s.d().stat("/l"), libc::ENOENT, "the removed link");
    assert_eq!(contents(s.d(), "/target"), b"t");
}

/// FIFOs and sockets where declared: by `make_special`, or by the kernel on a tree
/// served in place; else `make_special` fails with `ENOTSUP`.
fn special_files_where_declared(s: &Service) {
    let made = s.d().make_special("/fifo", Kind::Fifo, 0o644);
    if !s.caps.special_files {
        return refused(made, libc::ENOTSUP, "mkfifo");
    }
    if let Some(real) = s.d().local_path("/fifo2") {
        let c = std::ffi::CString::new(real.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(fs::symlink_metadata(&real).unwrap().file_type().is_fifo());
        return;
    }
    made.unwrap();
    s.d().make_special("/sock", Kind::Socket, 0o600).unwrap();
    assert_eq!(s.d().stat("/fifo").unwrap().kind, Kind::Fifo);
    assert_eq!(s.d().stat("/sock").unwrap().kind, Kind::Socket);
}

/// Hard links where declared: by the kernel on a tree served in place, by `hard_link`
/// elsewhere (`mem:`): two names of one file, counted in each one's link count, a change
/// through one seen through the other, each outliving the other's removal; else
/// `hard_link` fails with `ENOTSUP`.
fn hard_links_where_declared(s: &Service) {
    s.seed("/a", b"one");
    let made = s.d().hard_link("/a", "/b");
    if !s.caps.hard_links {
        return refused(made, libc::ENOTSUP, "link");
    }
    if let Some(real) = s.d().local_path("/a") {
        // The kernel's link: frontends hand such calls and stats to the kernel.
        let b = real.with_file_name("b2");
        fs::hard_link(&real, &b).unwrap();
        assert_eq!(contents(s.d(), "/b2"), b"one");
        return;
    }
    made.unwrap();
    for name in ["/a", "/b"] {
        assert_eq!(s.d().stat(name).unwrap().nlink, Some(2), "{name}");
    }
    let b = s.d().open_in_place("/b", None).unwrap();
    b.write_at(b"two", 0).unwrap();
    assert_eq!(contents(s.d(), "/a"), b"two");
    refused(
        s.d().hard_link("/a", "/b"),
        libc::EEXIST,
        "link over a name",
    );
    refused(
        s.d().hard_link("/a", "/nope/c"),
        libc::ENOENT,
        "link in nothing",
    );
    s.d().mkdir("/d", 0o755).unwrap();
    refused(
        s.d().hard_link("/d", "/e"),
        libc::ENOTSUP,
        "link of a directory",
    );
    // rename(2) of a name over another name of the same file changes nothing.
    s.d().rename("/a", "/b").unwrap();
    assert_eq!(s.d().stat("/a").unwrap().nlink, Some(2));
    s.d().remove_file("/a").unwrap();
    assert_eq!(s.d().stat("/b").unwrap().nlink, None, "one name left");
    assert_eq!(contents(s.d(), "/b"), b"two");
    // A symlink's second name is the same link.
    s.d().symlink("b", "/l").unwrap();
    s.d().hard_link("/l", "/l2").unwrap();
    s.d().set_mtime("/l", when()).unwrap();
    let l2 = s.d().stat("/l2").unwrap();
    assert_eq!((l2.kind, l2.nlink), (Kind::Symlink, Some(2)));
    assert_eq!(secs(l2.mtime), secs(Some(when())));
}

/// Files are local files (`local_path`) exactly where declared `in_place`, and open in
/// memory (`open_in_place`, else `ENOTSUP`) exactly where declared `in_memory`.
fn in_place_and_in_memory_where_declared(s: &Service) {
    s.seed("/f", b"f");
    let local = s.d().local_path("/f");
    assert_eq!(local.is_some(), s.caps.in_place, "{local:?}");
    if let Some(real) = local {
        assert_eq!(fs::read(real).unwrap(), b"f");
    }
    let create = NewFile {
        mode: 0o644,
        exclusive: true,
    };
    let opened = s.d().open_in_place("/g", Some(create));
    if !s.caps.in_memory {
        return refused(opened, libc::ENOTSUP, "open in place");
    }
    opened.unwrap().write_at(b"in memory", 0).unwrap();
    assert_eq!(contents(s.d(), "/g"), b"in memory");
    assert_eq!(errno(s.d().open_in_place("/g", Some(create))), libc::EEXIST);
}

// ---- Concurrent writers.

/// An upload's precondition ([`Expect`]), where declared: (1) a version that still holds
/// is replaced; (2) one another client changed is not (`ESTALE`), and the server keeps
/// that client's bytes; (3) a create-only upload meets a name another client made; (4) a
/// version another client removed is not brought back; and no refused upload leaves its
/// temporary. A read-only service refuses the upload itself (`EROFS`).
fn stale_versions_are_not_replaced(s: &Service) {
    if !s.caps.conditional_replace {
        let refusal = upload(s.d(), "/c", b"x", &Expect::Absent);
        return refused(refusal, libc::EROFS, "conditional upload");
    }
    let base = put(s.d(), "/kept", b"version one").unwrap();
    let replaced = upload(
        s.d(),
        "/kept",
        b"version two!",
        &Expect::version_of(Some(&base)),
    );
    assert_eq!(replaced.unwrap().size, Some(12));
    assert_eq!(contents(s.d(), "/kept"), b"version two!");

    let seen = put(s.d(), "/theirs", b"as roam saw it").unwrap();
    let theirs = noise(4096, 3);
    put(s.d(), "/theirs", &theirs).unwrap();
    let stale = upload(s.d(), "/theirs", b"edit", &Expect::version_of(Some(&seen)));
    refused(stale, libc::ESTALE, "replacing a version changed meanwhile");
    assert!(contents(s.d(), "/theirs") == theirs);

    put(s.d(), "/appeared", &theirs).unwrap();
    let create = upload(s.d(), "/appeared", b"new", &Expect::Absent);
    refused(create, libc::ESTALE, "a create over a new file");
    assert!(contents(s.d(), "/appeared") == theirs);
    upload(s.d(), "/fresh", b"new", &Expect::Absent).unwrap();
    assert_eq!(contents(s.d(), "/fresh"), b"new");

    let gone = put(s.d(), "/gone", b"soon removed").unwrap();
    s.d().remove_file("/gone").unwrap();
    let revived = upload(s.d(), "/gone", b"edit", &Expect::version_of(Some(&gone)));
    refused(revived, libc::ESTALE, "replacing a removed version");
    refused(s.d().stat("/gone"), libc::ENOENT, "nothing may come back");
    assert_eq!(s.litter(), Vec::<String>::new());
}

/// A version known by its size and time only (no ETag) is checked by them; else `EROFS`.
fn versions_without_etags_by_size_and_time(s: &Service) {
    let base = s.seed("/timed", b"twelve bytes");
    let by_time = Expect::Version {
        etag: None,
        size: 12,
        mtime: base.mtime,
    };
    if !s.caps.conditional_replace {
        let refusal = upload(s.d(), "/timed", b"x", &by_time);
        return refused(refusal, libc::EROFS, "conditional upload");
    }
    upload(s.d(), "/timed", b"thirteen byte", &by_time).unwrap();
    let stale = upload(s.d(), "/timed", b"again", &by_time);
    refused(stale, libc::ESTALE, "a stale size");
    assert_eq!(contents(s.d(), "/timed"), b"thirteen byte");
}

/// A fetch given the validator of the version it would read answers `NotModified` (the
/// copy roam holds stays the one programs have seen: a new one is a new inode); once the
/// file changed, its new bytes.
fn fetches_are_conditional(s: &Service) {
    let seen = s.seed("/v", b"version one");
    let validator = Validator {
        etag: seen.etag.clone(),
        mtime: seen.mtime,
    };
    let mut body = Vec::new();
    let again = s.d().fetch("/v", &mut body, Some(&validator)).unwrap();
    assert!(
        matches!(again, Fetched::NotModified) && body.is_empty(),
        "{again:?}, {} bytes",
        body.len()
    );
    std::thread::sleep(Duration::from_millis(1100));
    s.seed("/v", b"version two, longer");
    let changed = s.d().fetch("/v", &mut body, Some(&validator)).unwrap();
    assert!(matches!(changed, Fetched::Body(_)), "{changed:?}");
    assert_eq!(body, b"version two, longer");
}

/// One `#[test]` per (service, case): `service::case`, each on a server of its own.
macro_rules! behaviour {
    (services: [$($service:ident),* $(,)?], cases: $cases:tt $(,)?) => {
        $(behaviour!(@one $service, $cases);)*
    };
    (@one $service:ident, [$($case:ident),* $(,)?]) => {
        mod $service {
            $(#[test]
            fn $case() {
                super::$case(&super::$service());
            })*
        }
    };
}

behaviour! {
    services: [
        http, dav, dav_unlocked, pyftpdlib, vsftpd, vsftpd_tls, sftp, s3, chirp, local, file_cache, rot13,
        null_over_local, mem, null_over_mem,
    ],
    cases: [
        file_is_stated_listed_and_fetched,
        dir_is_stated_listed_and_not_fetched,
        missing_name_is_enoent,
        ranges_are_read_where_declared,
        ranges_of_a_replaced_version_are_estale,
        read_errors_are_posix,
        files_are_put_replaced_and_given_attrs,
        dirs_are_made_and_removed,
        write_errors_are_posix,
        files_are_removed,
        files_are_renamed,
        files_are_copied_on_the_server,
        dirs_are_renamed,
        modes_are_kept_where_declared,
        mtimes_are_set_where_declared,
        atimes_are_set_where_declared,
        symlinks_where_declared,
        special_files_where_declared,
        hard_links_where_declared,
        in_place_and_in_memory_where_declared,
        stale_versions_are_not_replaced,
        fetches_are_conditional,
        versions_without_etags_by_size_and_time,
    ],
}
