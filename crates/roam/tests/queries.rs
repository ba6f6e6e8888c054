//! Persistent queries (Sprockets): `roam find --watch` against a real WebDAV server (nginx)
//! with a small T_read follows the tree as MP3s appear on the server, change and vanish:
//! `+`, `-` and `~` lines, each once, within a few T_read; files whose version did not
//! change are not read again (nginx's log); SIGTERM ends it with status 0. The same over
//! a `roam mount` of the server, with the changes made by programs through the mount. A
//! query as a mount source (`query:id3:artist=Radiohead@dav://...`) under `roam mount`
//! and `roam run`: its tree holds the matching files with the source's bytes, and follows
//! the server.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant, SystemTime};

use common::fuse::FuseMount;
use common::Roam;
use roam_testkit::backend::{serve, Served};
use roam_testkit::Scratch;

/// An MP3-like file: `pad` bytes of silence, then an ID3v1 tag.
fn mp3(artist: &str, title: &str, pad: usize) -> Vec<u8> {
    let mut data = vec![0u8; pad];
    let mut tag = [0u8; 128];
    tag[..3].copy_from_slice(b"TAG");
    tag[3..3 + title.len()].copy_from_slice(title.as_bytes());
    tag[33..33 + artist.len()].copy_from_slice(artist.as_bytes());
    data.extend_from_slice(&tag);
    data
}

/// Writes `data` at `path` on the server's side, with an mtime of its own (`age` seconds
/// in the past), so a listing shows a new version even within one second.
fn put(path: &Path, data: &[u8], age: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(age))
        .unwrap();
}

/// A running `roam find --watch` and its output lines as they come.
struct Watch {
    child: Child,
    lines: Receiver<String>,
    /// Every line so far.
    seen: Vec<String>,
}

impl Watch {
    fn start(mut cmd: Command, dir: &str) -> Watch {
        let mut child = cmd
            .args(["--t-read", "1", "find", dir, "--ext", "id3"])
            .args(["--where", "artist=Radiohead", "--watch"])
            .env("ROAM_EXT_DIR", roam_testkit::ext::extensions())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watch {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (generously) for exactly the lines `want`, in any order, relative to `dir`.
    fn expect(&mut self, dir: &str, want: &[&str]) {
        let mut want: Vec<String> = want
            .iter()
            .map(|l| {
                let (sign, rel) = l.split_at(2);
                format!("{sign}{dir}/{rel}")
            })
            .collect();
        want.sort();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < want.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => got.push(line),
                Err(_) => panic!("waited for {want:?}, got {got:?} (before: {:?})", self.seen),
            }
        }
        self.seen.extend(got.iter().cloned());
        got.sort();
        assert_eq!(got, want, "before: {:?}", self.seen);
    }

    /// SIGTERM ends it with status 0, after no line beyond those expected.
    fn stop(mut self) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{status:?}");
        let extra: Vec<String> = self.lines.try_iter().collect();
        assert!(extra.is_empty(), "lines not expected: {extra:?}");
    }
}

/// A WebDAV server of `srv/music` (made by `fill`) and the cache of the roam run here.
struct Setup {
    served: Served,
    scratch: Scratch,
}

impl Setup {
    fn new(fill: impl FnOnce(&Path)) -> Setup {
        let scratch = Scratch::new("queries");
        let srv = scratch.join("srv");
        fill(&srv.join("music"));
        let served = serve("dav", &srv, &scratch.join("run"));
        Setup { served, scratch }
    }

    fn music(&self) -> PathBuf {
        self.scratch.join("srv/music")
    }

    fn roam(&self) -> Roam {
        let mut roam = Roam::new().env("ROAM_CACHE_DIR", self.scratch.join("cache"));
        for (k, v) in &self.served.env {
            roam = roam.env(k, v);
        }
        roam
    }

    /// GETs of the server's `music/NAME` so far.
    fn gets(&self, name: &str) -> usize {
        let log = std::fs::read_to_string(self.scratch.join("run/access.log")).unwrap();
        common::gets_in(&log, &format!("music/{name}")).0
    }
}

fn fill(music: &Path) {
    put(&music.join("a.mp3"), &mp3("Radiohead", "Airbag", 1000), 100);
    put(&music.join("b.mp3"), &mp3("Portishead", "Roads", 1000), 100);
    put(
        &music.join("sub/c.mp3"),
        &mp3("Radiohead", "Creep", 1000),
        100,
    );
    put(
        &music.join("z.mp3"),
        &mp3("Portishead", "Glory Box", 1000),
        100,
    );
}

#[test]
fn find_watch_follows_the_server_as_files_appear_change_and_vanish() {
    let s = Setup::new(fill);
    let dir = format!("/dav/{}/music", s.served.url.trim_start_matches("dav://"));
    let mut w = Watch::start(s.roam().command(), &dir);
    w.expect(&dir, &["+ a.mp3", "+ sub/c.mp3"]);
    let z_read = s.gets("z.mp3");
    assert!(z_read > 0, "the first round reads every file's tag");

    let m = s.music();
    put(&m.join("d.mp3"), &mp3("Radiohead", "Nude", 2000), 50);
    put(&m.join("e.mp3"), &mp3("Portishead", "Sour Times", 2000), 50);
    w.expect(&dir, &["+ d.mp3"]);
    put(&m.join("b.mp3"), &mp3("Radiohead", "Reckoner", 1500), 40);
    w.expect(&dir, &["+ b.mp3"]);
    put(
        &m.join("a.mp3"),
        &mp3("Radiohead", "Airbag (live)", 1200),
        30,
    );
    w.expect(&dir, &["~ a.mp3"]);
    put(
        &m.join("sub/c.mp3"),
        &mp3("Portishead", "Cowboys", 1300),
        20,
    );
    w.expect(&dir, &["- sub/c.mp3"]);
    std::fs::remove_file(m.join("d.mp3")).unwrap();
    w.expect(&dir, &["- d.mp3"]);
    // Rounds went on all along: the unchanged file was never read again.
    assert_eq!(s.gets("z.mp3"), z_read, "an unchanged file was read again");
    w.stop();
}

#[test]
fn find_watch_over_a_roam_mount_follows_programs_writing_through_it() {
    let s = Setup::new(fill);
    let mount = FuseMount::start(s.roam(), Some(&s.served.url), &["--t-read", "1"]);
    let dir = mount.dir.join("music").display().to_string();
    let mut w = Watch::start(s.roam().command(), &dir);
    w.expect(&dir, &["+ a.mp3", "+ sub/c.mp3"]);

    std::fs::write(
        mount.dir.join("music/new.mp3"),
        mp3("Radiohead", "Lucky", 700),
    )
    .unwrap();
    w.expect(&dir, &["+ new.mp3"]);
    let status = Command::new("mv")
        .arg(mount.dir.join("music/a.mp3"))
        .arg(mount.dir.join("music/sub/a2.mp3"))
        .status()
        .unwrap();
    assert!(status.success());
    w.expect(&dir, &["- a.mp3", "+ sub/a2.mp3"]);
    std::fs::remove_file(mount.dir.join("music/new.mp3")).unwrap();
    w.expect(&dir, &["- new.mp3"]);
    w.stop();
    assert_eq!(
        std::fs::read(s.music().join("sub/a2.mp3")).unwrap(),
        mp3("Radiohead", "Airbag", 1000),
        "moved on the server"
    );
}

/// The files under `dir`, relative to it.
fn tree(dir: &Path) -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap();
                files.insert(rel.display().to_string());
            }
        }
    }
    files
}

/// Waits (generously) until `dir` holds exactly the files `want`.
fn wait_for_tree(dir: &Path, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|w| w.to_string()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = tree(dir);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{dir:?} holds {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_query_mount_holds_the_matches_and_follows_the_server() {
    let s = Setup::new(fill);
    let url = format!("query:id3:artist=Radiohead@{}/music", s.served.url);
    let ext = roam_testkit::ext::extensions();
    let roam = || s.roam().env("ROAM_EXT_DIR", &ext);
    let mount = FuseMount::start(roam(), Some(&url), &["--t-read", "1"]);
    wait_for_tree(&mount.dir, &["a.mp3", "sub/c.mp3"]);
    assert_eq!(
        std::fs::read(mount.dir.join("a.mp3")).unwrap(),
        mp3("Radiohead", "Airbag", 1000),
        "a result reads the source's bytes"
    );

    let m = s.music();
    put(&m.join("d.mp3"), &mp3("Radiohead", "Nude", 2000), 50);
    put(
        &m.join("sub/c.mp3"),
        &mp3("Portishead", "Cowboys", 1300),
        20,
    );
    wait_for_tree(&mount.dir, &["a.mp3", "d.mp3"]);
    assert!(
        !mount.dir.join("sub").exists(),
        "a directory without results"
    );

    let o = roam().sh(
        &["-m", &format!("/q={url}")],
        "ls -R /q && wc -c < /q/d.mp3 && cat /q/b.mp3",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("a.mp3") && out.contains("d.mp3"), "{out}");
    assert!(!out.contains("c.mp3") && !out.contains("z.mp3"), "{out}");
    assert!(out.contains("2128"), "{out}");
    assert_ne!(o.status.code(), Some(0), "b.mp3 is no result");
    let err = common::stderr(&o);
    assert!(err.contains("No such file"), "{err}");
}
