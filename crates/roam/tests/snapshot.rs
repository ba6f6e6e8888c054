//! `roam suspend`, `resume` and `snapshot` on a `roam mount` of a real WebDAV server
//! (nginx): while suspended a writer blocks and does not fail, reads go on, and resuming
//! lets it finish; a snapshot taken with writers running throughout holds the tree as it
//! stood at one instant, loses nothing they wrote, and delivers the uploads T_write holds
//! back; a suspension that cannot drain in time (the server down: a fault proxy, the one
//! fault a real server cannot be asked for) fails with a clear error, never a hang. A
//! snapshot into a directory of the same remote is copied by the server (WebDAV `COPY` on
//! nginx, S3 `CopyObject` on moto): nothing is uploaded again.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::fuse::FuseMount;
use common::{stderr, Roam};
use roam_testkit::backend::{serve, Served};
use roam_testkit::fault::{Fault, Proxy};
use roam_testkit::Scratch;

/// A WebDAV server, a `roam mount` of it, and the cache both that roam and the commands
/// run here share (so `roam snapshot` finds the mount's control socket).
struct Setup {
    mount: FuseMount,
    cache: PathBuf,
    /// Between roam and the server, when a test must take the server away.
    proxy: Option<Proxy>,
    served: Served,
    scratch: Scratch,
}

impl Setup {
    fn new(mount_args: &[&str]) -> Setup {
        Setup::start("dav", mount_args, false)
    }

    /// A server of `kind` (`dav`, `s3` ...) and a mount of it, through a fault proxy
    /// when `proxied`.
    fn start(kind: &str, mount_args: &[&str], proxied: bool) -> Setup {
        let scratch = Scratch::new("snapshot");
        let srv = scratch.join("srv");
        roam_testkit::mkdir(&srv);
        std::fs::write(srv.join("old.txt"), b"there before\n").unwrap();
        let served = serve(kind, &srv, &scratch.join("run"));
        let cache = scratch.join("cache");
        let proxy = proxied.then(|| {
            let port = served.url.rsplit(':').next().unwrap().parse().unwrap();
            Proxy::start(port)
        });
        let url = match &proxy {
            Some(p) => format!("dav://127.0.0.1:{}", p.port),
            None => served.url.clone(),
        };
        let mount = FuseMount::start(roam_with(&cache, &served), Some(&url), mount_args);
        Setup {
            mount,
            cache,
            proxy,
            served,
            scratch,
        }
    }

    /// `roam ARGS...` with the mount's cache and environment.
    fn roam(&self, args: &[&str]) -> Output {
        roam_with(&self.cache, &self.served).cli(args)
    }

    /// The server's own copy of `rel`.
    fn on_server(&self, rel: &str) -> PathBuf {
        self.scratch.join("srv").join(rel)
    }

    fn dir(&self) -> &Path {
        &self.mount.dir
    }

    /// `roam ARGS...` (a `roam run`) in the background, once its program made `ready`;
    /// with the roam process's id, for `--pid`.
    fn start_run(&self, args: &[&str], ready: &str) -> (Child, String) {
        let run = roam_with(&self.cache, &self.served)
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = run.id().to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Path::new(ready).exists() {
            assert!(Instant::now() < deadline, "the program did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        (run, pid)
    }
}

fn roam_with(cache: &Path, served: &Served) -> Roam {
    let mut roam = Roam::new().env("ROAM_CACHE_DIR", cache);
    for (k, v) in &served.env {
        roam = roam.env(k, v);
    }
    roam
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(o));
    stderr(o)
}

fn sh(script: &str) -> Child {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_writer_waits_while_suspended_reads_go_on_and_resume_lets_it_finish() {
    let s = Setup::new(&[]);
    let dir = s.dir().display().to_string();
    // Made before: a create waiting at the suspension would hold the directory locked
    // in the kernel, and the read below would wait for that lock (docs/SEMANTICS.md).
    std::fs::write(s.dir().join("new.txt"), b"first\n").unwrap();
    ok(&s.roam(&["suspend", &dir]));

    let mut writer = sh(&format!("echo written >> {dir}/new.txt"));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        writer.try_wait().unwrap().is_none(),
        "a write went through a suspended mount"
    );
    assert_eq!(
        std::fs::read(s.dir().join("old.txt")).unwrap(),
        b"there before\n",
        "reads go on while suspended"
    );
    let o = s.roam(&["suspend", &dir]);
    assert_eq!(o.status.code(), Some(1), "suspended twice: {}", stderr(&o));
    assert!(stderr(&o).contains("suspended already"), "{}", stderr(&o));
    assert_eq!(std::fs::read(s.on_server("new.txt")).unwrap(), b"first\n");

    ok(&s.roam(&["resume", &dir]));
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(s.on_server("new.txt")).unwrap(),
        b"first\nwritten\n"
    );
    let o = s.roam(&["resume", &dir]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not suspended"), "{}", stderr(&o));
}

/// Writers run before, during and after the snapshot: a pair writer appends line i to
/// `a.log` then to `b.log` (so at every instant `a` holds as many lines as `b` or one
/// more), appenders add numbered lines, a rewriter replaces `r.txt` with whole versions.
#[test]
fn a_snapshot_with_writers_running_is_one_instant_and_loses_nothing() {
    let s = Setup::new(&[]);
    let dir = s.dir().display().to_string();
    let stop = s.scratch.join("stop");
    let stop = stop.display();
    let loop_ = |body: &str| {
        sh(&format!(
            "i=0; while [ ! -e {stop} ]; do {body} || exit 1; i=$((i+1)); done; echo $i"
        ))
    };
    let mut writers = vec![
        loop_(&format!("echo $i >> {dir}/a.log && echo $i >> {dir}/b.log")),
        loop_(&format!("echo $i >> {dir}/one.log")),
        loop_(&format!(
            "mkdir -p {dir}/sub && echo $i >> {dir}/sub/two.log"
        )),
        loop_(&format!("printf '%s x\\n%s y\\n' $i $i > {dir}/r.txt")),
    ];
    // Writing for a while before, and after, the snapshot.
    let wait_lines = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while lines(&s.dir().join("b.log")).len() < n {
            assert!(Instant::now() < deadline, "the writers are stuck");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_lines(10);
    let snap = s.scratch.join("snap");
    let o = s.roam(&["snapshot", &dir, snap.to_str().unwrap()]);
    assert!(ok(&o).contains("snapshot of"), "{}", stderr(&o));
    let taken = lines(&snap.join("b.log")).len();
    assert!(
        taken >= 10,
        "b.log had 10 lines before the snapshot, has {taken} in it"
    );
    wait_lines(taken + 10);
    std::fs::write(s.scratch.join("stop"), b"").unwrap();
    let counts: Vec<usize> = writers
        .drain(..)
        .map(|w| {
            let out = w.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "a writer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        })
        .collect();

    // One instant: the pair's files agree, every log is a whole prefix, r.txt one version.
    let numbered = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
    let (a, b) = (lines(&snap.join("a.log")), lines(&snap.join("b.log")));
    assert!(
        a.len() == b.len() || a.len() == b.len() + 1,
        "a.log {} lines, b.log {}: not one instant",
        a.len(),
        b.len()
    );
    for f in ["a.log", "b.log", "one.log", "sub/two.log"] {
        let got = lines(&snap.join(f));
        assert!(!got.is_empty(), "{f} is missing from the snapshot");
        assert_eq!(got, numbered(got.len()), "{f} in the snapshot");
    }
    let r = std::fs::read_to_string(snap.join("r.txt")).unwrap();
    let version = r.split(' ').next().unwrap_or_default();
    assert!(
        r.is_empty() || r == format!("{version} x\n{version} y\n"),
        "r.txt in the snapshot is no whole version: {r:?}"
    );
    assert!(
        taken < counts[0],
        "the pair writer went on after the snapshot"
    );

    // Nothing written is lost: every line reached the server.
    for (f, n) in [
        ("a.log", counts[0]),
        ("b.log", counts[0]),
        ("one.log", counts[1]),
        ("sub/two.log", counts[2]),
    ] {
        assert_eq!(lines(&s.on_server(f)), numbered(n), "{f} on the server");
    }
    let last = counts[3] - 1;
    assert_eq!(
        std::fs::read_to_string(s.on_server("r.txt")).unwrap(),
        format!("{last} x\n{last} y\n")
    );
}

#[test]
fn a_snapshot_delivers_the_uploads_t_write_holds_back() {
    let s = Setup::new(&["--t-write", "10m"]);
    std::fs::write(s.dir().join("late.txt"), b"held back\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!s.on_server("late.txt").exists(), "T_write held it back");
    let snap = s.scratch.join("snap");
    let dir = s.dir().display().to_string();
    ok(&s.roam(&["snapshot", &dir, snap.to_str().unwrap()]));
    assert_eq!(
        std::fs::read(s.on_server("late.txt")).unwrap(),
        b"held back\n"
    );
    assert_eq!(
        std::fs::read(snap.join("late.txt")).unwrap(),
        b"held back\n"
    );
    assert_eq!(
        std::fs::read(snap.join("old.txt")).unwrap(),
        b"there before\n"
    );
}

#[test]
fn a_suspension_that_cannot_drain_fails_in_time_and_leaves_nothing_suspended() {
    let s = Setup::start("dav", &["--t-write", "10m"], true);
    std::fs::write(s.dir().join("late.txt"), b"held back\n").unwrap();
    // The server goes down with the change still held back.
    s.proxy.as_ref().unwrap().set(Fault::Kill);
    let dir = s.dir().display().to_string();
    let started = Instant::now();
    let o = s.roam(&["suspend", "--timeout", "3", &dir]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not uploaded within") && stderr(&o).contains("late.txt"),
        "{}",
        stderr(&o)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    // Not suspended: a change goes on (into roam's journal, for later).
    std::fs::write(s.dir().join("after.txt"), b"ok\n").unwrap();
    let o = s.roam(&["resume", &dir]);
    assert!(stderr(&o).contains("not suspended"), "{}", stderr(&o));
}

/// A snapshot into a new directory of the same remote: the server copies (`COPY`,
/// `CopyObject`), after the uploads T_write held back are delivered; the files' bytes are
/// not sent again, and the mount shows the copy at once.
fn a_snapshot_on_the_same_remote_is_made_by_its_server(kind: &str) -> Setup {
    let s = Setup::start(kind, &["--t-write", "10m"], false);
    let d = s.dir();
    std::fs::create_dir_all(d.join("proj/sub")).unwrap();
    std::fs::write(d.join("proj/a.txt"), b"a\n").unwrap();
    let big = roam_testkit::noise(300_000, 7);
    std::fs::write(d.join("proj/sub/b.bin"), &big).unwrap();
    let dir = d.display().to_string();
    let o = s.roam(&["snapshot", &format!("{dir}/proj"), &format!("{dir}/snap")]);
    assert!(ok(&o).contains("2 files, 300002 bytes"), "{}", stderr(&o));
    assert_eq!(std::fs::read(d.join("snap/a.txt")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(d.join("snap/sub/b.bin")).unwrap(), big);
    assert_eq!(std::fs::read(d.join("proj/sub/b.bin")).unwrap(), big);
    let o = s.roam(&["snapshot", &format!("{dir}/proj"), &format!("{dir}/snap")]);
    assert_eq!(o.status.code(), Some(1), "over a snapshot: {}", stderr(&o));
    s
}

#[test]
fn a_snapshot_on_the_same_webdav_server_is_copied_by_it() {
    let s = a_snapshot_on_the_same_remote_is_made_by_its_server("dav");
    assert_eq!(
        std::fs::read(s.on_server("snap/sub/b.bin")).unwrap(),
        std::fs::read(s.on_server("proj/sub/b.bin")).unwrap()
    );
    let log = std::fs::read_to_string(s.scratch.join("run/access.log")).unwrap();
    let copies = log.lines().filter(|l| l.contains("\"COPY /proj/")).count();
    assert_eq!(copies, 2, "{log}");
    assert!(!log.contains("PUT /snap/"), "uploaded again: {log}");
}

#[test]
fn a_snapshot_on_the_same_s3_bucket_is_copied_by_it() {
    a_snapshot_on_the_same_remote_is_made_by_its_server("s3");
}

#[test]
fn a_snapshot_on_a_remote_that_cannot_copy_fails_and_leaves_nothing_suspended() {
    let s = Setup::start("sftp", &[], false);
    std::fs::create_dir(s.dir().join("proj")).unwrap();
    std::fs::write(s.dir().join("proj/a.txt"), b"a\n").unwrap();
    let dir = s.dir().display().to_string();
    let o = s.roam(&["snapshot", &format!("{dir}/proj"), &format!("{dir}/snap")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot copy files"), "{}", stderr(&o));
    std::fs::write(s.dir().join("proj/after.txt"), b"ok\n").unwrap();
    let o = s.roam(&["resume", &dir]);
    assert!(stderr(&o).contains("not suspended"), "{}", stderr(&o));
}

/// Symlinks are kept in a local snapshot, with the server's text (SFTP keeps links): a
/// relative one leads to the snapshot's own file.
#[test]
fn a_snapshot_keeps_symlinks() {
    let s = Setup::start("sftp", &[], false);
    let d = s.dir();
    std::fs::create_dir(d.join("proj")).unwrap();
    std::fs::write(d.join("proj/a.txt"), b"a\n").unwrap();
    std::os::unix::fs::symlink("a.txt", d.join("proj/link")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", d.join("proj/abs")).unwrap();
    let snap = s.scratch.join("snap");
    let dir = d.display().to_string();
    ok(&s.roam(&["snapshot", &format!("{dir}/proj"), snap.to_str().unwrap()]));
    assert_eq!(
        std::fs::read_link(snap.join("link")).unwrap(),
        Path::new("a.txt")
    );
    assert_eq!(std::fs::read(snap.join("link")).unwrap(), b"a\n");
    assert_eq!(
        std::fs::read_link(snap.join("abs")).unwrap(),
        Path::new("/etc/hostname")
    );
}

/// `roam suspend|resume|snapshot --pid` of a `roam run`: while suspended, the program's
/// open for appending waits (it does not fail) and reads go on; a snapshot copies the roam
/// names it asks for, as they stood, with the change T_write held back delivered first.
#[test]
fn a_roam_run_is_suspended_resumed_and_copied_by_its_pid() {
    let s = Setup::new(&[]);
    let r = format!("/dav/{}", s.served.url.trim_start_matches("dav://"));
    let flag = |name: &str| s.scratch.join(name).display().to_string();
    let (ready, go, done) = (flag("ready"), flag("go"), flag("done"));
    let script = format!(
        "echo first > {r}/run.txt && touch {ready} && \
         while [ ! -e {go} ]; do sleep 0.05; done && \
         echo second >> {r}/run.txt && cat {r}/old.txt && touch {done}"
    );
    let (run, pid) = s.start_run(
        &["--t-write", "10m", "run", "--", "sh", "-c", &script],
        &ready,
    );

    let snap = s.scratch.join("snap");
    let o = s.roam(&["snapshot", "--pid", &pid, &r, snap.to_str().unwrap()]);
    assert!(ok(&o).contains("snapshot of"), "{}", stderr(&o));
    assert_eq!(std::fs::read(snap.join("run.txt")).unwrap(), b"first\n");
    assert_eq!(std::fs::read(s.on_server("run.txt")).unwrap(), b"first\n");

    ok(&s.roam(&["suspend", "--pid", &pid, &r]));
    std::fs::write(&go, b"").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !Path::new(&done).exists(),
        "an append went through a suspended run"
    );
    ok(&s.roam(&["resume", "--pid", &pid, &r]));
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"there before\n");
    assert_eq!(
        std::fs::read(s.on_server("run.txt")).unwrap(),
        b"first\nsecond\n"
    );
}

/// A `roam run` whose programs write through descriptors they hold open (writes roam
/// does not hear of: they go to its copies) is held while suspended: two processes each
/// append line i to one file, then to another, throughout, and to a local file too. While
/// suspended none of them goes on (the local file stays as it is), a snapshot finds each
/// pair at one instant, and nothing they wrote is lost.
#[test]
fn a_roam_run_writing_through_open_descriptors_is_held_for_its_snapshot() {
    let s = Setup::new(&[]);
    let r = format!("/dav/{}", s.served.url.trim_start_matches("dav://"));
    let flag = |name: &str| s.scratch.join(name).display().to_string();
    let (ready, stop, progress) = (flag("ready"), flag("stop"), flag("progress"));
    let script = format!(
        r#"
import os
def pair(x, y, ready):
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    a, b = os.open("{r}/" + x, flags, 0o644), os.open("{r}/" + y, flags, 0o644)
    p = os.open("{progress}." + x, flags, 0o644)
    i = 0
    while not os.path.exists("{stop}"):
        os.write(a, b"%d\n" % i)
        os.write(b, b"%d\n" % i)
        os.write(p, b"%d\n" % i)
        i += 1
        if i == 200 and ready:
            open("{ready}", "w").close()
    os.close(a)
    os.close(b)
    return i
child = os.fork()
if child == 0:
    n = pair("c.log", "d.log", False)
    print(n, flush=True)
    os._exit(0)
n = pair("a.log", "b.log", True)
os.waitpid(child, 0)
print(n, flush=True)
"#
    );
    let (run, pid) = s.start_run(&["run", "--", "python3", "-c", &script], &ready);
    let progress = |x: &str| lines(Path::new(&format!("{progress}.{x}"))).len();

    // Suspended: neither process writes a line, not even to its local file.
    ok(&s.roam(&["suspend", "--pid", &pid, &r]));
    let held = (progress("a.log"), progress("c.log"));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        (progress("a.log"), progress("c.log")),
        held,
        "a program wrote while suspended"
    );
    ok(&s.roam(&["resume", "--pid", &pid, &r]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while progress("a.log") == held.0 || progress("c.log") == held.1 {
        assert!(Instant::now() < deadline, "the programs did not go on");
        std::thread::sleep(Duration::from_millis(20));
    }

    let snap = s.scratch.join("snap");
    let o = s.roam(&["snapshot", "--pid", &pid, &r, snap.to_str().unwrap()]);
    assert!(ok(&o).contains("snapshot of"), "{}", stderr(&o));
    std::fs::write(&stop, b"").unwrap();
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut counts: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 2, "{:?}", out.stdout);

    let numbered = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
    for (x, y) in [("a.log", "b.log"), ("c.log", "d.log")] {
        let (a, b) = (lines(&snap.join(x)), lines(&snap.join(y)));
        assert!(
            a.len() == b.len() || a.len() == b.len() + 1,
            "{x} {} lines, {y} {}: not one instant",
            a.len(),
            b.len()
        );
        assert_eq!(a, numbered(a.len()), "{x} in the snapshot");
        assert_eq!(b, numbered(b.len()), "{y} in the snapshot");
    }
    // Everything reached the server when the programs closed their files.
    let mut on_server: Vec<usize> = ["a.log", "c.log"]
        .iter()
        .map(|f| lines(&s.on_server(f)).len())
        .collect();
    on_server.sort_unstable();
    counts.sort_unstable();
    assert_eq!(on_server, counts);
    for (x, y) in [("a.log", "b.log"), ("c.log", "d.log")] {
        let a = lines(&s.on_server(x));
        assert_eq!(a, numbered(a.len()), "{x} on the server");
        assert_eq!(lines(&s.on_server(y)), a, "{y} on the server");
    }
}
