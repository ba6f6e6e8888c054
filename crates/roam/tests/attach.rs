//! `roam attach PID` / `roam detach PID` on a real program started without roam (Ufo's
//! `ufo -pid`): a multi-threaded Python process, blocked reading its stdin when roam takes
//! it over, sees the namespace only while attached; its children follow it; a file it is
//! writing when it is released is still delivered at its close.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::{fixture, stderr, Roam};
use roam_testkit::Scratch;

/// The program under test, talking over pipes.
struct Attachee {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Attachee {
    fn start() -> Attachee {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attachee.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut a = Attachee {
            child,
            stdin,
            stdout,
        };
        // Answers once its threads run.
        assert_eq!(a.ask("errors"), "0");
        a
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_owned()
    }

    /// Ends it (stdin closed) and returns its exit code.
    fn finish(mut self) -> Option<i32> {
        drop(self.stdin);
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        assert_eq!(rest, "bye\n");
        self.child.wait().unwrap().code()
    }
}

/// A roam sharing one cache (and so one agent directory) across calls.
fn roam(cache: &Scratch) -> Roam {
    Roam::new().env("ROAM_CACHE_DIR", cache.join("c"))
}

fn ok(o: std::process::Output) -> String {
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    stderr(&o)
}

/// Writable anonymous mappings of at least the size of roam's scratch region (16 MiB; the
/// kernel may merge it with a neighbour) in process `pid`.
fn scratch_regions(pid: &str) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let len = |range: &str| {
        let (lo, hi) = range.split_once('-').unwrap();
        u64::from_str_radix(hi, 16).unwrap() - u64::from_str_radix(lo, 16).unwrap()
    };
    maps.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        // No path: address, perms, offset, device, inode.
        .filter(|f| f.len() == 5 && f[1].starts_with("rw") && len(f[0]) >= 16 << 20)
        .count()
}

const HELLO: &str = "first line|second line with needle|third line";

#[test]
fn attach_shows_the_namespace_and_detach_takes_it_back() {
    let fx = fixture();
    let hello = format!("cat {}/hello.txt", fx.remote());
    let cache = Scratch::new("attach");
    let mut p = Attachee::start();
    assert_eq!(p.ask(&hello), "ERR ENOENT");

    let regions = || scratch_regions(&p.pid());
    let before = regions();
    let said = ok(roam(&cache).cli(&["attach", &p.pid()]));
    assert!(said.contains(&format!("attached to {}", p.pid())), "{said}");
    assert_eq!(
        regions(),
        before + 1,
        "a scratch region for rewritten names"
    );
    assert_eq!(p.ask(&hello), HELLO);
    assert_eq!(
        p.ask(&format!("spawn {}/dir/sub/deep.txt", fx.remote())),
        "deep down there is a needle too",
        "a child started after attach follows its parent"
    );
    assert_eq!(
        p.ask("cat /etc/hostname"),
        std::fs::read_to_string("/etc/hostname").unwrap().trim()
    );

    let said = ok(roam(&cache).cli(&["detach", &p.pid()]));
    assert!(
        said.contains(&format!("detached from {}", p.pid())),
        "{said}"
    );
    assert_eq!(
        p.ask(&hello),
        "ERR ENOENT",
        "after detach names are local again"
    );
    assert_eq!(p.ask("errors"), "0", "no thread saw a failed call");
    assert_eq!(p.finish(), Some(0));
}

#[test]
fn a_file_being_written_at_detach_is_delivered_at_its_close() {
    let cache = Scratch::new("attach");
    let srv = cache.join("srv");
    roam_testkit::mkdir(&srv);
    let mount = format!("/w=file+cache://{}", srv.display());
    let mut p = Attachee::start();
    ok(roam(&cache).cli(&["attach", "-m", &mount, &p.pid()]));
    assert_eq!(p.ask("open /w/out.txt"), "opened");
    assert_eq!(p.ask("write before detach"), "written");
    let said = ok(roam(&cache).cli(&["detach", &p.pid()]));
    assert!(
        said.contains("/w/out.txt"),
        "detach names the file still open: {said}"
    );
    assert_eq!(p.ask("write after detach"), "written");
    assert_eq!(p.ask("close"), "closed");
    assert_eq!(
        std::fs::read_to_string(srv.join("out.txt")).unwrap(),
        "before detach\nafter detach\n"
    );
    assert_eq!(p.finish(), Some(0));
}

#[test]
fn the_agent_ends_with_the_process_and_a_second_detach_is_refused() {
    let cache = Scratch::new("attach");
    let p = Attachee::start();
    let pid = p.pid();
    ok(roam(&cache).cli(&["attach", &pid]));
    assert_eq!(p.finish(), Some(0));
    // The agent noticed the end of its tree and removed its control socket.
    let socket = cache.join(&format!("c/run/attach-{pid}.sock"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while socket.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!socket.exists(), "the agent outlived its process tree");
    let out = roam(&cache).cli(&["detach", &pid]);
    assert_eq!(out.status.code(), Some(126));
    assert!(stderr(&out).contains("is not attached"), "{}", stderr(&out));
}

#[test]
fn attach_to_a_missing_or_forbidden_process_fails_clearly() {
    let cache = Scratch::new("attach");
    let out = roam(&cache).cli(&["attach", "--foreground", "999999999"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no process 999999999"),
        "{}",
        stderr(&out)
    );
    // An unprivileged user may not take over a root process.
    let nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_roam"))
        .args(["attach", "--foreground", "1"])
        .env("ROAM_CACHE_DIR", "/tmp/roam-nobody-attach-test")
        .output()
        .unwrap();
    assert!(!nobody.status.success());
    assert!(
        stderr(&nobody).contains("cannot trace 1: EPERM"),
        "{}",
        stderr(&nobody)
    );
}
