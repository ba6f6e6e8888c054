//! Uploads against the real server of every writable protocol (nginx with WebDAV, with and
//! without locks; moto; OpenSSH's sshd; pyftpdlib and vsftpd; chirp_server), and against
//! the local and in-memory backends and a layer, through [`Driver::upload`]:
//!
//! - preconditions ([`Expect`]) one at a time (a version that still holds is replaced; one
//!   another client changed, created or removed is not) are tests/behaviour.rs's, for every
//!   service; here are their races and their costs;
//! - races: two clients on separate connections replace the same version (or create the
//!   same new name) at the same moment, round after round. No round is won by both: where
//!   the protocol has an atomic tool exactly one wins each round; where the driver can
//!   only recheck right before its rename, roam's lock on the name makes the recheck and
//!   the rename one step for roam clients (the rounds are printed; docs/SEMANTICS.md);
//! - leftovers: an upload whose data source fails half-way, or whose connection is cut,
//!   leaves no temporary and no multipart upload; one cut off by a crash is announced
//!   before it exists and [`Driver::remove_leftover`] removes it.
//!
//! Two fault injections a real server cannot be asked for, both said where used: the TCP
//! proxy of roam-testkit ([`Proxy`]) cutting a connection at a chosen point, and a data source that
//! panics mid-upload, which unwinds through the driver past its cleanup as a kill of roam
//! would.

mod common;

use std::cell::RefCell;
use std::fs;
use std::io::{self, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::calls::{contents, upload};
use roam_drivers::chirp::{ChirpConfig, ChirpDriver};
use roam_drivers::dav::DavDriver;
use roam_drivers::ftp::{FtpConfig, FtpDriver};
use roam_drivers::layer::{null::Null, rot13::Rot13, Stacked};
use roam_drivers::local::LocalDriver;
use roam_drivers::mem::MemDriver;
use roam_drivers::s3::{S3Config, S3Driver};
use roam_drivers::sftp::{SftpConfig, SftpDriver};
use roam_drivers::{Driver, ErrorKind, Expect, Leftover, Meta, Upload};
use roam_testkit::fault::{Cut, Proxy};
use roam_testkit::{dav, ftp, noise, s3, sftp, Scratch, Server};

/// Rounds of each race.
const ROUNDS: usize = 20;
/// What each racer writes: as in the lost updates seen, two different 2 MB files.
const RACER_LEN: usize = 2 << 20;
const MIB: usize = 1 << 20;

/// Makes a driver of one site that reaches its server at this port (the server's own, or a
/// proxy's), on connections of its own.
type Connect = Box<dyn Fn(u16) -> Box<dyn Driver>>;

/// One backend, ready for uploads under `/`.
struct Site {
    name: &'static str,
    connect: Connect,
    /// The server's port (0: no server).
    port: u16,
    /// The served directory on disk, where temporaries would show.
    disk: Option<PathBuf>,
    /// How to list the bucket's unfinished multipart uploads (S3).
    multipart: Option<Box<dyn Fn() -> Vec<String>>>,
    /// Whether an upload makes a temporary or a multipart upload (all but `mem:`).
    temporaries: bool,
    /// Whether the protocol replaces a version atomically (else: recheck, then rename).
    atomic_replace: bool,
    /// Whether the protocol creates a new name atomically.
    atomic_create: bool,
    /// Keeps the server, scratch tree and anything else alive.
    _keep: Vec<Box<dyn std::any::Any>>,
}

impl Site {
    /// A site whose uploads make temporaries, checked by a recheck before the rename
    /// (see [`Site::atomic`]), with nothing of S3's.
    fn new(name: &'static str, connect: Connect, port: u16, disk: Option<PathBuf>) -> Site {
        Site {
            name,
            connect,
            port,
            disk,
            multipart: None,
            temporaries: true,
            atomic_replace: false,
            atomic_create: false,
            _keep: Vec::new(),
        }
    }

    /// Which of its checks the protocol makes atomically.
    fn atomic(self, replace: bool, create: bool) -> Site {
        Site {
            atomic_replace: replace,
            atomic_create: create,
            ..self
        }
    }

    fn keeping(mut self, keep: Vec<Box<dyn std::any::Any>>) -> Site {
        self._keep = keep;
        self
    }

    fn driver(&self) -> Box<dyn Driver> {
        (self.connect)(self.port)
    }

    /// Temporaries and unfinished multipart uploads the server holds.
    fn litter(&self) -> Vec<String> {
        let mut found = Vec::new();
        if let Some(disk) = &self.disk {
            for entry in fs::read_dir(disk).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                if name.contains("roam-put") {
                    found.push(name);
                }
            }
        }
        if let Some(list) = &self.multipart {
            found.extend(list());
        }
        found
    }
}

// ---- The sites.

fn dav_site(locks: bool) -> Site {
    let scratch = Scratch::new("uploads-dav");
    let www = scratch.join("www");
    fs::create_dir_all(&www).unwrap();
    let server = match locks {
        true => dav::nginx_dav(&www, &scratch.join("run")),
        false => dav::nginx_dav_unlocked(&www, &scratch.join("run")),
    };
    let connect: Connect = Box::new(|port| {
        let client = common::http_client(Duration::from_secs(10));
        Box::new(DavDriver::new(client, &format!("http://127.0.0.1:{port}")).unwrap())
    });
    let name = if locks { "dav" } else { "dav (no locks)" };
    Site::new(name, connect, server.port, Some(www))
        .atomic(locks, true)
        .keeping(vec![Box::new(server), Box::new(scratch)])
}

fn s3_site() -> Site {
    const BUCKET: &str = "uploads";
    let scratch = Scratch::new("uploads-s3");
    // Left open (no `enforce_auth`): the fixture lists multipart uploads unsigned; the
    // driver signs all the same, and s3_moto.rs proves the signatures. One request at a
    // time: moto's conditional writes are then atomic, as S3's are.
    let server = Arc::new(s3::moto_serial(&scratch.join("run")));
    s3::create_bucket(&server, BUCKET);
    let connect: Connect = Box::new(|port| {
        let config = S3Config {
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            region: Some("us-east-1".into()),
            access_key: Some("AK".into()),
            secret_key: Some("SECRET".into()),
            session_token: None,
            path_style: true,
            profile: None,
            ca_bundle: None,
            credential_source: None,
            keys_from: None,
            problem: None,
        };
        let client = common::http_client(Duration::from_secs(60));
        Box::new(S3Driver::new(client, &config, BUCKET).unwrap())
    });
    let lister = server.clone();
    Site {
        multipart: Some(Box::new(move || s3::multipart_uploads(&lister, BUCKET))),
        ..Site::new("s3", connect, server.port, None)
            .atomic(true, true)
            .keeping(vec![Box::new(server), Box::new(scratch)])
    }
}

fn sftp_site() -> Site {
    let scratch = Scratch::new("uploads-sftp");
    let root = scratch.join("root");
    fs::create_dir_all(&root).unwrap();
    let ssh = sftp::sshd(&scratch.join("run"));
    // Through a proxy the host is `[127.0.0.1]:PORT`, a name known_hosts lacks: each
    // driver gets a copy of the file and accepts the (same) key under the new name.
    let (known, key, at) = (
        ssh.known_hosts.clone(),
        ssh.client_key.clone(),
        root.clone(),
    );
    let clients = scratch.join("clients");
    fs::create_dir_all(&clients).unwrap();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let connect: Connect = Box::new(move |port| {
        let copy = clients.join(format!(
            "known_hosts.{}",
            next.fetch_add(1, Ordering::Relaxed)
        ));
        fs::copy(&known, &copy).unwrap();
        let config = clients.join("accept-new.conf");
        fs::write(&config, "StrictHostKeyChecking accept-new\n").unwrap();
        let cfg = SftpConfig {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(10),
            ssh_config: Some(config),
            known_hosts: Some(copy),
            identity_files: vec![key.clone()],
            ..SftpConfig::default()
        };
        let url = format!("sftp://root@127.0.0.1:{port}{}", at.display());
        Box::new(SftpDriver::new(cfg, &url).unwrap())
    });
    Site::new("sftp", connect, ssh.port, Some(root))
        .atomic(false, true)
        .keeping(vec![Box::new(ssh), Box::new(scratch)])
}

fn ftp_site(vsftpd: bool) -> Site {
    let scratch = Scratch::new("uploads-ftp");
    let root = scratch.join("root");
    fs::create_dir_all(root.join("pub")).unwrap();
    let run = scratch.join("run");
    let (server, login, name) = match vsftpd {
        true => (ftp::vsftpd(&root, &run), "", "ftp (vsftpd)"),
        false => {
            let server = ftp::pyftpdlib(&root, &run, "roam", "secret");
            (server, "roam:secret@", "ftp (pyftpdlib)")
        }
    };
    let connect: Connect = Box::new(move |port| {
        let url = format!("ftp://{login}127.0.0.1:{port}/pub");
        let cfg = FtpConfig {
            netrc: None,
            ..FtpConfig::default()
        };
        Box::new(FtpDriver::new(cfg, &url).unwrap())
    });
    Site::new(name, connect, server.port, Some(root.join("pub")))
        .keeping(vec![Box::new(server), Box::new(scratch)])
}

fn chirp_site() -> Site {
    let scratch = Scratch::new("uploads-chirp");
    let root = scratch.join("root");
    fs::create_dir_all(&root).unwrap();
    let server = Server::chirp(&root, &scratch.join("run"));
    let connect: Connect = Box::new(|port| {
        let url = format!("chirp://127.0.0.1:{port}");
        Box::new(ChirpDriver::new(ChirpConfig::default(), &url).unwrap())
    });
    Site::new("chirp", connect, server.port, Some(root))
        .keeping(vec![Box::new(server), Box::new(scratch)])
}

/// `file+cache`: the local driver as roam uses it for a tree it uploads to; or a `rot13:`
/// layer over one, through which the precondition and the leftovers pass.
fn local_site(layered: bool) -> Site {
    let scratch = Scratch::new("uploads-local");
    let root = scratch.join("root");
    fs::create_dir_all(&root).unwrap();
    let at = root.clone();
    let connect: Connect = Box::new(move |_| {
        let local = LocalDriver::cached(&at);
        match layered {
            true => Box::new(Stacked::new(Rot13, Arc::new(local) as Arc<dyn Driver>)),
            false => Box::new(local),
        }
    });
    let name = if layered { "rot13 over local" } else { "local" };
    Site::new(name, connect, 0, Some(root))
        .atomic(false, true)
        .keeping(vec![Box::new(scratch)])
}

/// `mem:`: one tree in this process, reached by each "client" through a `null:` layer.
fn mem_site() -> Site {
    let tree: Arc<dyn Driver> = Arc::new(MemDriver::new());
    let connect: Connect = Box::new(move |_| Box::new(Stacked::new(Null, tree.clone())));
    Site {
        temporaries: false,
        ..Site::new("mem", connect, 0, None).atomic(true, true)
    }
}

// ---- Helpers.

fn sha256(data: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

/// Asserts that `path` holds exactly `want` (by SHA-256, which a failure shows short).
fn assert_holds(d: &dyn Driver, path: &str, want: &[u8], site: &str) {
    let got = contents(d, path);
    assert!(
        sha256(&got) == sha256(want),
        "{site}: {path} holds {} bytes that are not the {} expected",
        got.len(),
        want.len()
    );
}

fn changed<T: std::fmt::Debug>(result: roam_drivers::Result<T>, site: &str, what: &str) {
    let err = result.expect_err(&format!("{site}: {what} must fail"));
    assert_eq!(
        err.kind,
        ErrorKind::Changed,
        "{site}: {what}: {}",
        err.message
    );
    assert_eq!(err.errno(), libc::ESTALE);
}

// ---- Every site: its races and its leftovers.

macro_rules! each_site {
    ($($name:ident => $site:expr,)*) => {
        mod races {
            use super::*;
            $(#[test] fn $name() { races(&$site); })*
        }
        mod leftovers {
            use super::*;
            $(#[test] fn $name() { leftovers(&$site); })*
        }
    };
}

each_site! {
    dav => dav_site(true),
    dav_without_locks => dav_site(false),
    s3 => s3_site(),
    sftp => sftp_site(),
    pyftpdlib => ftp_site(false),
    vsftpd => ftp_site(true),
    chirp => chirp_site(),
    local => local_site(false),
    layer => local_site(true),
    mem => mem_site(),
}

// ---- Preconditions where they cost more than one request (one at a time, small:
// ---- tests/behaviour.rs).

/// Past 64 MiB S3 uploads in parts: the precondition goes with `CompleteMultipartUpload`
/// (and a `HEAD` right before it, as moto ignores `If-Match` there); a failed one is
/// aborted, so no parts stay behind.
#[test]
fn s3_multipart_uploads_keep_their_precondition() {
    let site = s3_site();
    let (ours, other) = (site.driver(), site.driver());
    let big = noise(65 * MIB, 12);
    let base = ours.put("/big", &mut &b"small base"[..], 10).unwrap();
    other.put("/big", &mut &b"their edit"[..], 10).unwrap();
    changed(
        upload(&*ours, "/big", &big, &Expect::version_of(Some(&base))),
        site.name,
        "a stale multipart upload",
    );
    assert_holds(&*ours, "/big", b"their edit", site.name);
    changed(
        upload(&*ours, "/big", &big, &Expect::Absent),
        site.name,
        "a multipart create over a file",
    );
    assert!(site.litter().is_empty(), "{:?}", site.litter());
    let now = ours.stat("/big").unwrap();
    upload(&*ours, "/big", &big, &Expect::version_of(Some(&now))).unwrap();
    assert_holds(&*ours, "/big", &big, site.name);
}

/// What each kind of upload costs on nginx, from its access log: a new file or an
/// unconditional one `PUT`s its temporary and `MOVE`s it (`Overwrite: F` for a new file),
/// then asks for the result; a replacement adds a lock around its check and move. Without
/// locks the check is all that is added (and the one refused `LOCK` that taught it).
#[test]
fn webdav_uploads_cost_what_they_must() {
    for (locks, replace) in [
        (true, "PUT LOCK PROPFIND MOVE UNLOCK PROPFIND"),
        // Without locks, roam clients' own lock on the name: a collection beside it.
        (false, "PUT MKCOL PROPFIND MOVE DELETE PROPFIND"),
    ] {
        let scratch = Scratch::new("uploads-dav-costs");
        let www = scratch.join("www");
        fs::create_dir_all(&www).unwrap();
        let server = match locks {
            true => dav::nginx_dav(&www, &scratch.join("run")),
            false => dav::nginx_dav_unlocked(&www, &scratch.join("run")),
        };
        let client = common::http_client(Duration::from_secs(10));
        let d = DavDriver::new(client, &server.url()).unwrap();
        // nginx logs a request once its reply is sent, a moment after the client has it:
        // the log, once it has stopped growing (the requests before included).
        let settled_log = || {
            let mut log = server.access_log();
            loop {
                thread::sleep(Duration::from_millis(200));
                let now = server.access_log();
                if now == log {
                    return log;
                }
                log = now;
            }
        };
        let methods = |upload: &dyn Fn()| {
            let before = settled_log().lines().count();
            upload();
            let log = settled_log();
            let new = log.lines().skip(before);
            new.map(|l| {
                l.split('"')
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join(" ")
        };
        let made = std::cell::Cell::new(None);
        let create =
            methods(&|| made.set(Some(upload(&d, "/f", b"one", &Expect::Absent).unwrap())));
        assert_eq!(create, "PUT MOVE PROPFIND");
        let any = methods(&|| drop(upload(&d, "/g", b"one", &Expect::Any).unwrap()));
        assert_eq!(any, "PUT MOVE PROPFIND");
        let base = Expect::version_of(made.take().as_ref());
        if !locks {
            // The refused LOCK that teaches the driver there are none.
            let first = methods(&|| drop(upload(&d, "/f", b"two", &base).unwrap()));
            assert_eq!(first, "PUT LOCK MKCOL PROPFIND MOVE DELETE PROPFIND");
            let base = Expect::version_of(Some(&d.stat("/f").unwrap()));
            let again = methods(&|| drop(upload(&d, "/f", b"three", &base).unwrap()));
            assert_eq!(again, replace);
        } else {
            let replaced = methods(&|| drop(upload(&d, "/f", b"two", &base).unwrap()));
            assert_eq!(replaced, replace);
        }
    }
}

// ---- Races.

/// How the rounds of one race ended.
#[derive(Debug, Default)]
struct Tally {
    one_won: usize,
    both_won: usize,
    none_won: usize,
}

/// Two clients, each on its own connections, replace the same version of a file (then
/// create the same new name) at the same moment, [`ROUNDS`] times. No round is won by
/// both; a protocol with an atomic tool lets exactly one win every round. Whatever the
/// protocol, a loser is [`ErrorKind::Changed`] and the server holds a winner's bytes.
fn races(site: &Site) {
    let setup = site.driver();
    let mut bases = Vec::new();
    for round in 0..ROUNDS {
        let path = format!("/race-{round}");
        bases.push(setup.put(&path, &mut &b"the common base"[..], 15).unwrap());
    }
    // Versions known by size and second only must not share the second of the base.
    thread::sleep(Duration::from_millis(1100));
    let racers = [Arc::new(site.driver()), Arc::new(site.driver())];
    let replaced = race(site, &racers, |round| {
        (
            format!("/race-{round}"),
            Expect::version_of(Some(&bases[round])),
        )
    });
    let created = race(site, &racers, |round| {
        (format!("/new-{round}"), Expect::Absent)
    });
    eprintln!(
        "{}: replacing one version: {replaced:?}; creating one name: {created:?} ({ROUNDS} rounds)",
        site.name
    );
    // Between roam clients, roam's lock on a name closes the recheck's window.
    assert_eq!(replaced.both_won, 0, "{}: {replaced:?}", site.name);
    assert_eq!(created.both_won, 0, "{}: {created:?}", site.name);
    if site.atomic_replace {
        assert_eq!(replaced.one_won, ROUNDS, "{}: {replaced:?}", site.name);
    }
    if site.atomic_create {
        assert_eq!(created.one_won, ROUNDS, "{}: {created:?}", site.name);
    }
    assert!(
        site.litter().is_empty(),
        "{}: {:?}",
        site.name,
        site.litter()
    );
}

/// Runs the rounds of one race; `target` names each round's file and expectation.
fn race(
    site: &Site,
    racers: &[Arc<Box<dyn Driver>>; 2],
    target: impl Fn(usize) -> (String, Expect),
) -> Tally {
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        let (path, expect) = target(round);
        let data: Vec<Vec<u8>> = (0..2)
            .map(|i| noise(RACER_LEN, (round * 2 + i) as u64))
            .collect();
        let start = Arc::new(Barrier::new(2));
        let outcomes: Vec<roam_drivers::Result<Meta>> = thread::scope(|s| {
            let runs: Vec<_> = (0..2)
                .map(|i| {
                    let (d, start, data, path, expect) =
                        (racers[i].clone(), start.clone(), &data[i], &path, &expect);
                    s.spawn(move || {
                        start.wait();
                        upload(&**d, path, data, expect)
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for outcome in &outcomes {
            if let Err(e) = outcome {
                assert_eq!(
                    e.kind,
                    ErrorKind::Changed,
                    "{}: {path}: {}",
                    site.name,
                    e.message
                );
            }
        }
        let won: Vec<usize> = (0..2).filter(|&i| outcomes[i].is_ok()).collect();
        let now = sha256(&contents(&**racers[0], &path));
        match won.as_slice() {
            [i] => {
                tally.one_won += 1;
                assert!(
                    now == sha256(&data[*i]),
                    "{}: {path}: not the winner's bytes",
                    site.name
                );
            }
            [_, _] => {
                tally.both_won += 1;
                assert!(
                    now == sha256(&data[0]) || now == sha256(&data[1]),
                    "{}: {path}",
                    site.name
                );
            }
            _ => tally.none_won += 1,
        }
    }
    tally
}

// ---- Leftovers.

/// The leftovers an upload announced, in order.
#[derive(Default)]
struct Journal(RefCell<Vec<Leftover>>);

impl Journal {
    fn hook(&self) -> impl Fn(&Leftover) -> io::Result<()> + '_ {
        |leftover| {
            self.0.borrow_mut().push(leftover.clone());
            Ok(())
        }
    }
}

/// Gives `good` bytes of `data`, then fails (`panics`: panics instead, as a crash).
struct Failing<'a> {
    data: &'a [u8],
    good: usize,
    panics: bool,
}

impl Read for Failing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.good == 0 {
            if self.panics {
                panic!("simulated crash of roam mid-upload");
            }
            return Err(io::Error::other("the copy's disk went away"));
        }
        let n = buf.len().min(self.good).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        self.good -= n;
        Ok(n)
    }
}

/// How large an upload must be for the site to leave something mid-way: S3 makes a
/// multipart upload only past its threshold (64 MiB).
fn leftover_len(site: &Site) -> usize {
    match site.multipart {
        Some(_) => 70 * MIB,
        None => 4 * MIB,
    }
}

fn leftovers(site: &Site) {
    failing_sources_leave_nothing(site);
    crashes_leave_what_remove_leftover_removes(site);
    if site.port != 0 {
        cut_connections_leave_nothing(site);
    }
}

/// Uploads to `path` from a source that fails half-way (`panics`: as a crash), telling
/// `journal` of the leftovers.
fn upload_failing(
    site: &Site,
    d: &dyn Driver,
    path: &str,
    journal: &Journal,
    panics: bool,
) -> roam_drivers::Result<Meta> {
    let len = leftover_len(site);
    let data = noise(len, 9);
    let hook = journal.hook();
    let how = Upload {
        leftovers: Some(&hook),
        ..Upload::default()
    };
    let mut src = Failing {
        data: &data,
        good: len / 2,
        panics,
    };
    d.upload(path, &mut src, len as u64, &how)
}

/// A data source that fails half-way: the upload fails with its error, the file keeps
/// its old contents, and the driver removed what it had made.
fn failing_sources_leave_nothing(site: &Site) {
    let d = site.driver();
    d.put("/failing", &mut &b"old contents"[..], 12).unwrap();
    let journal = Journal::default();
    let err = upload_failing(site, &*d, "/failing", &journal, false).unwrap_err();
    assert!(
        err.message.contains("disk went away"),
        "{}: {}",
        site.name,
        err.message
    );
    assert_holds(&*d, "/failing", b"old contents", site.name);
    assert!(
        site.litter().is_empty(),
        "{}: {:?}",
        site.name,
        site.litter()
    );
    let announced = journal.0.borrow().len();
    assert_eq!(announced, usize::from(site.temporaries), "{}", site.name);
}

/// A crash mid-upload (the data source panics: the unwinding skips the driver's cleanup,
/// as a kill would) leaves what the upload announced first; `remove_leftover`, from
/// another client, removes it, and again finds it gone.
fn crashes_leave_what_remove_leftover_removes(site: &Site) {
    let d = site.driver();
    let journal = Journal::default();
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        upload_failing(site, &*d, "/crashed", &journal, true)
    }));
    assert!(
        crashed.is_err(),
        "{}: the source's panic must unwind",
        site.name
    );
    drop(d);
    let announced = journal.0.borrow().clone();
    if !site.temporaries {
        assert_eq!(announced, [], "{}", site.name);
        return;
    }
    let [leftover] = announced.as_slice() else {
        panic!("{}: one leftover announced, not {announced:?}", site.name);
    };
    // What the crash left is what was announced, if anything: nginx drops a `PUT` whose
    // body never ended, and chirp_server a `putfile` cut short.
    let left = site.litter();
    match leftover {
        Leftover::Temporary { path } => assert!(
            left.is_empty() || left == [path.trim_start_matches('/')],
            "{}: {left:?} after announcing {path}",
            site.name
        ),
        Leftover::Multipart { upload_id, .. } => {
            assert_eq!(left, [upload_id.as_str()], "{}", site.name)
        }
    }
    let cleaner = site.driver();
    cleaner.remove_leftover(leftover).unwrap();
    assert!(
        site.litter().is_empty(),
        "{}: {:?}",
        site.name,
        site.litter()
    );
    cleaner.remove_leftover(leftover).unwrap();
    assert_eq!(
        cleaner.stat("/crashed").unwrap_err().kind,
        ErrorKind::NotFound
    );
}

/// A connection cut mid-upload (by the proxy): the upload fails (or, where the protocol
/// retries a part on a new connection, succeeds whole), and nothing is left.
fn cut_connections_leave_nothing(site: &Site) {
    let proxy = Proxy::start(site.port);
    let d = site.driver_through(&proxy);
    let len = leftover_len(site);
    let data = noise(len, 11);
    // FTP's data goes around the proxy, on the server's own port: its control connection
    // is cut as the server starts receiving. Elsewhere the cut comes within the first
    // 16 MiB part of an S3 multipart upload, which may have a connection of its own.
    let cut = match site.name.starts_with("ftp") {
        true => Cut::OnReply(&["125 ", "150 "]),
        false => Cut::AfterSending(len as u64 / 8),
    };
    proxy.arm(cut);
    match d.put("/cut", &mut &data[..], len as u64) {
        Ok(_) => assert_holds(&*site.driver(), "/cut", &data, site.name),
        Err(e) => assert_eq!(
            site.driver().stat("/cut").unwrap_err().kind,
            ErrorKind::NotFound,
            "{}: after {}",
            site.name,
            e.message
        ),
    }
    assert!(proxy.fired(), "{}: the cut never came", site.name);
    assert!(
        site.litter().is_empty(),
        "{}: {:?}",
        site.name,
        site.litter()
    );
}

impl Site {
    fn driver_through(&self, proxy: &Proxy) -> Box<dyn Driver> {
        (self.connect)(proxy.port)
    }
}
