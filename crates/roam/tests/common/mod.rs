//! The fixture of roam's end-to-end suites: one real nginx per test binary serving a
//! generated tree (nested dirs, a 10 MB binary, a small C project, a Python package, shell
//! scripts, an unreadable file), the static `probe` program, and helpers that run a shell
//! command under `roam run` (or on a `roam mount`, [`Frontend::Fuse`]) and natively on the
//! local copy, for comparison. The cases shared by both frontends are in [`read_cases`] and
//! [`write_cases`].

#![allow(dead_code)] // each test binary uses its own part of the fixture

pub mod fuse;
pub mod read_cases;
pub mod write_cases;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use fuse::FuseMount;
use roam_testkit::backend::{serve, Served};
use roam_testkit::{noise, write_file, Scratch, Server};

pub const BIG_LEN: usize = 10 * 1024 * 1024;

pub struct Fixture {
    pub www: PathBuf,
    pub server: Server,
    pub probe: PathBuf,
    _scratch: Scratch,
}

impl Fixture {
    /// `/http/127.0.0.1:PORT`, the implicit mount of the fixture server.
    pub fn remote(&self) -> String {
        format!("/http/{}", self.server.authority())
    }
}

/// The shared fixture, started on first use; nginx is stopped when the test binary exits.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let scratch = Scratch::new("e2e");
        let www = scratch.join("www");
        make_tree(&www);
        let server = Server::nginx(&www, &scratch.join("run"));
        server.stop_at_exit();
        let probe = build_probe(&scratch.join("bin"));
        Fixture {
            www,
            server,
            probe,
            _scratch: scratch,
        }
    })
}

/// The fixture tree (also served by other backends in the read suite).
pub fn make_tree(www: &Path) {
    let f = |rel: &str, data: &[u8], mode: u32| write_file(&www.join(rel), data, mode);
    f(
        "hello.txt",
        b"first line\nsecond line with needle\nthird line\n",
        0o644,
    );
    f("dir/a b.txt", b"a name with a space\n", 0o644);
    f(
        "dir/sub/deep.txt",
        b"deep down there is a needle too\n",
        0o644,
    );
    f("dir/sub/other.txt", b"nothing to see\n", 0o644);
    f("big.bin", &noise(BIG_LEN, 1), 0o644);
    f("secret.txt", b"nobody may read this\n", 0o000);
    roam_testkit::mkdir(&www.join("empty"));
    f("proj/util.h", b"int twice(int x);\n", 0o644);
    f(
        "proj/util.c",
        b"#include \"util.h\"\nint twice(int x) { return 2 * x; }\n",
        0o644,
    );
    f(
        "proj/main.c",
        b"#include <stdio.h>\n#include \"util.h\"\nint main(void) { printf(\"twice 21 is %d\\n\", twice(21)); return 0; }\n",
        0o644,
    );
    f(
        "py/helper.py",
        b"def greet(name):\n    return 'hello ' + name\n",
        0o644,
    );
    f(
        "py/app.py",
        b"import helper\nprint(helper.greet('roam'))\n",
        0o644,
    );
    // Read by one test only, which counts the server's GETs of it.
    f("counted/once.txt", b"nothing to see\n", 0o644);
    f(
        "script.sh",
        b"#!/bin/sh\necho script ran with \"$@\"\n",
        0o755,
    );
    f("exit42.sh", b"#!/bin/sh\nexit 42\n", 0o755);
}

/// Builds `tests/fixtures/probe.c` statically.
fn build_probe(bin: &Path) -> PathBuf {
    roam_testkit::mkdir(bin);
    let out = bin.join("probe");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/probe.c");
    let status = Command::new("cc")
        .args(["-O1", "-static", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running cc");
    assert!(
        status.success(),
        "building the static probe failed (is libc6-dev installed?)"
    );
    out
}

/// A `roam run` invocation with its own private cache (so tests do not share state).
pub struct Roam {
    pub cache: Scratch,
    cmd: Command,
}

impl Roam {
    pub fn new() -> Roam {
        let cache = Scratch::new("cache");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_roam"));
        cmd.env("ROAM_CACHE_DIR", cache.join("c"))
            .env("ROAM_CONFIG", cache.join("none.toml"));
        cmd.stdin(Stdio::null());
        Roam { cache, cmd }
    }

    /// A command like this one's (same program, arguments and environment).
    pub fn command(&self) -> Command {
        let mut c = Command::new(self.cmd.get_program());
        c.args(self.cmd.get_args()).stdin(Stdio::null());
        for (k, v) in self.cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Roam {
        self.cmd.env(k, v);
        self
    }

    /// `roam -v ...`: also tell about missing names.
    pub fn verbose(mut self) -> Roam {
        self.cmd.arg("-v");
        self
    }

    /// `roam run [ARGS...] -- sh -c SCRIPT`.
    pub fn sh(mut self, run_args: &[&str], script: &str) -> Output {
        self.cmd
            .arg("run")
            .args(run_args)
            .args(["--", "sh", "-c", script]);
        self.cmd.output().expect("running roam")
    }

    /// `roam ARGS...` (any subcommand).
    pub fn cli(mut self, args: &[&str]) -> Output {
        self.cmd.args(args);
        self.cmd.output().expect("running roam")
    }

    /// `roam run -- PROGRAM ARGS...`.
    pub fn run(self, argv: &[&str]) -> Output {
        self.run_args(&[], argv)
    }

    /// `roam run [ARGS...] -- PROGRAM ARGS...`.
    pub fn run_args(mut self, run_args: &[&str], argv: &[&str]) -> Output {
        self.cmd.arg("run").args(run_args).arg("--").args(argv);
        self.cmd.output().expect("running roam")
    }
}

/// Runs `script` natively with `{}` standing for the local copy of the tree, and under roam
/// with `{}` standing for the remote tree; returns both stdouts with the base put back as
/// `{}`, so they compare equal when roam is exact.
pub fn both(script: &str) -> (String, String) {
    both_with(Roam::new(), script)
}

/// [`both`] with `roam` configured by the caller.
pub fn both_with(roam: Roam, script: &str) -> (String, String) {
    let fx = fixture();
    let local = fx.www.to_string_lossy().into_owned();
    let native = Command::new("sh")
        .args(["-c", &script.replace("{}", &local)])
        .output()
        .unwrap();
    assert!(
        native.status.success(),
        "native run of {script} failed: {}",
        String::from_utf8_lossy(&native.stderr)
    );
    let remote = fx.remote();
    let roamed = roam.sh(&[], &script.replace("{}", &remote));
    assert!(
        roamed.status.success(),
        "roam run of {script} failed ({:?}): {}",
        roamed.status,
        String::from_utf8_lossy(&roamed.stderr)
    );
    let text = |o: &Output, base: &str| String::from_utf8_lossy(&o.stdout).replace(base, "{}");
    (text(&native, &local), text(&roamed, &remote))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// How programs reach roam's namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frontend {
    /// `roam run -m /w=URL -- sh -c SCRIPT` (ptrace).
    Trap,
    /// `sh -c SCRIPT` on `roam mount DIR URL`; one mount serves every call of a test,
    /// started with the settings of the first.
    Fuse,
    /// `roam run --fuse -m /w=URL -- sh -c SCRIPT` (FUSE in a private mount namespace).
    RunFuse,
}

/// A backend mounted at `/w` for a test: its files live in `srv/` of a scratch directory,
/// served in place (`file`), through the cache (`file+cache`), or by a real server
/// (`dav`, `ftp`, `sftp`, `chirp`, `s3`; see `roam_testkit::backend`).
pub struct Backend {
    /// First, so the mount goes before its server and its files.
    fuse: OnceLock<FuseMount>,
    frontend: Frontend,
    pub url: String,
    served: Served,
    scratch: Scratch,
}

impl Backend {
    pub fn new(kind: &str) -> Backend {
        Backend::serving(kind, |_| {})
    }

    /// A backend whose tree `populate` writes before the server starts (servers take
    /// ownership of their tree when they start).
    pub fn serving(kind: &str, populate: impl FnOnce(&Path)) -> Backend {
        let scratch = Scratch::new("backend");
        let srv = scratch.join("srv");
        roam_testkit::mkdir(&srv);
        populate(&srv);
        let served = serve(kind, &srv, &scratch.join("run"));
        Backend {
            fuse: OnceLock::new(),
            frontend: Frontend::Trap,
            url: served.url.clone(),
            served,
            scratch,
        }
    }

    /// The same backend, reached through `frontend`.
    pub fn through(mut self, frontend: Frontend) -> Backend {
        self.frontend = frontend;
        self
    }

    /// Unmounts the `roam mount` of [`Frontend::Fuse`], if any: the next call starts a new
    /// one, with that call's settings (a cache shared with the first, for a warm run).
    pub fn remount(&mut self) {
        self.fuse.take();
    }

    /// The backend's own copy of `/w/REL`, read behind roam's back.
    pub fn backend(&self, rel: &str) -> PathBuf {
        self.scratch.join("srv").join(rel)
    }

    /// The same backend with `k=v` in roam's environment too (and the programs').
    pub fn with_env(mut self, k: &str, v: &str) -> Backend {
        self.served.env.push((k.into(), v.into()));
        self
    }

    /// The access log of an nginx backend (HTTP, WebDAV) so far.
    pub fn access_log(&self) -> String {
        let log = self.scratch.join("run/access.log");
        std::fs::read_to_string(log).unwrap_or_default()
    }

    /// The environment roam needs to reach the server (`HOME` with an `.ssh`, AWS variables).
    pub fn env(&self) -> &[(String, String)] {
        &self.served.env
    }

    /// Runs `script` under roam with the backend at `/w` (and `$B` = the backend directory).
    pub fn sh(&self, script: &str) -> Output {
        self.sh_with(Roam::new(), script)
    }

    pub fn sh_with(&self, roam: Roam, script: &str) -> Output {
        let mut roam = roam.env("B", self.backend(""));
        for (k, v) in &self.served.env {
            roam = roam.env(k, v);
        }
        let o = match self.frontend {
            Frontend::Trap => roam.sh(&["-m", &format!("/w={}", self.url)], script),
            Frontend::RunFuse => roam.sh(&["--fuse", "-m", &format!("/w={}", self.url)], script),
            Frontend::Fuse => {
                let m = self
                    .fuse
                    .get_or_init(|| FuseMount::start(roam, Some(&self.url), &[]));
                let mut env = self.served.env.clone();
                env.push(("B".into(), self.backend("").display().to_string()));
                let o = m.sh(script, &env);
                eprintln!("roam mount log: {}", m.log_text());
                o
            }
        };
        eprintln!("roam stderr: {}", stderr(&o));
        o
    }
}

/// `tests/fixtures/slow_http.py` serving `dir` on loopback, every answer `seconds` late;
/// stopped on drop.
pub struct SlowServer {
    child: std::process::Child,
    pub port: u16,
}

impl SlowServer {
    pub fn start(dir: &Path, seconds: u32) -> SlowServer {
        use std::io::BufRead;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slow_http.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(seconds.to_string())
            .current_dir(dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting slow_http.py");
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        let port = port.trim().parse().expect("slow_http.py prints its port");
        SlowServer { child, port }
    }
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx serving `big.bin` (`len` bytes) behind the fault proxy, which drips it (64 KiB
/// every 100 ms): a fetch a test can watch in flight. Keep all three alive.
pub fn dripping(len: usize) -> (Scratch, Server, roam_testkit::fault::Proxy) {
    let dir = Scratch::new("drip");
    write_file(&dir.join("www/big.bin"), &noise(len, 7), 0o644);
    let server = Server::nginx(&dir.join("www"), &dir.join("run"));
    let proxy = roam_testkit::fault::Proxy::start(server.port);
    proxy.set(roam_testkit::fault::Fault::Drip {
        bytes: 64 << 10,
        every: std::time::Duration::from_millis(100),
    });
    (dir, server, proxy)
}

/// How many GETs of `/NAME` nginx's access `log` lines show, and the bytes it sent for them.
pub fn gets_in(log: &str, name: &str) -> (usize, usize) {
    let gets: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("\"GET /{name} ")))
        .collect();
    let sent = |l: &&str| -> usize {
        let after = l.split('"').nth(2).unwrap_or_default();
        after.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (gets.len(), gets.iter().map(sent).sum())
}
