//! roam against a reference model, mountpoint-s3's way: sequences of file operations drawn
//! from fixed seeds (write, append, `O_EXCL` create, read, stat, lstat, list, mkdir, rmdir,
//! unlink, rename, truncate, chmod, symlink, readlink, hard link, setting mtime, atime and a
//! symlink's own times, reading times back, over a few colliding names) run in a local
//! tmpfs, the oracle, and through roam on each backend (mem:, the null layer, file+cache,
//! SFTP, WebDAV, FTP, S3, Chirp) under `roam run`, `roam run --fuse` and `roam mount`.
//! Every result (bytes, kind, size, mode, link count, times to the second, errno) must be
//! the oracle's. What a backend cannot express (its [`cannot`]: WebDAV and S3 keep no modes
//! and no symlinks, FTP no symlinks and no directory times, only `null:` keeps hard links,
//! access times are kept apart by `mem:` and `null:` ...) is left out of its sequences, the
//! oracle's too, or answered with its documented errno (a `link`: the oracle's checks,
//! then `EPERM`).
//! The test prints, per backend and frontend, how many operations ran, matched the oracle
//! and were left out. [`visibility`] models T_read and T_write between processes.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::fuse::FuseMount;
use common::{stderr, stdout, Backend, Roam};
use roam_testkit::{Scratch, Tmpfs};

/// Seeds of the sequences (fixed: CI runs the same ones every time); slow servers run the
/// first [`Cannot::seeds`] of them.
const SEEDS: u64 = 32;
/// Operations per sequence.
const OPS: usize = 40;
/// Names a sequence works on (few, so that operations meet each other's names).
const NAMES: [&str; 7] = ["a", "b", "d", "d/x", "d/y", "e", "e/z"];
const DATA: [&str; 4] = ["x", "hello", "", "line\nline"];
/// Modes that leave the owner `rwx`: the oracle runs as root, whom no mode stops, while
/// servers check modes as their own users.
const MODES: [u32; 3] = [0o755, 0o700, 0o750];
/// Times the sequences set (whole seconds: every backend keeps those; `model_ops.py` shows
/// any other time as `now` when it is within a day).
const TIMES: [u64; 3] = [1_000_000_000, 1_234_567_890, 1_500_000_000];

/// What a backend cannot express: operations it leaves out, whether it keeps modes (a mode
/// in a stat is not compared where it does not; `dir_modes`: of directories), hard links
/// (`links`: under FUSE; `run_links`: under `roam run`; elsewhere a `link` must fail as on
/// a file system without them: the oracle's checks, then `EPERM`) and access times apart
/// from modification times (`atime`: of files under FUSE; `run_atime`: under `roam run`;
/// `dir_atime`: of directories and symlinks).
struct Cannot {
    ops: &'static [&'static str],
    modeless: bool,
    dir_modes: bool,
    links: bool,
    run_links: bool,
    atime: bool,
    run_atime: bool,
    dir_atime: bool,
    /// Whether a directory's link count is 2 and one per subdirectory, as on a local disk.
    dir_links: bool,
    /// What setting a directory's mtime answers where it cannot be set (`None`: it can).
    dir_mtime: Option<&'static str>,
    /// How many of the seeds run (all but on slow servers).
    seeds: u64,
}

/// A backend that expresses every operation, keeping modes, but no hard links and no access
/// times apart.
const ALL: Cannot = Cannot {
    ops: &[],
    modeless: false,
    dir_modes: true,
    links: false,
    run_links: false,
    atime: false,
    run_atime: false,
    dir_atime: false,
    dir_links: false,
    dir_mtime: None,
    seeds: SEEDS,
};

fn cannot(kind: &str) -> Cannot {
    match kind {
        // Served in place: every call is the local one.
        "null" => Cannot {
            links: true,
            run_links: true,
            atime: true,
            run_atime: true,
            dir_atime: true,
            dir_links: true,
            ..ALL
        },
        // A file's access time is its own; hard links where its files are served in
        // place (under FUSE; `roam run` goes through copies and whole uploads).
        "mem" => Cannot {
            links: true,
            atime: true,
            run_atime: true,
            dir_links: true,
            ..ALL
        },
        // A file's access time is kept on the server; reads of roam's copy move the
        // copy's. A directory's moves with listings only the server makes.
        "file+cache" | "sftp" => Cannot {
            atime: true,
            run_atime: true,
            ..ALL
        },
        // The server sets mtimes (PUT time): setting one is ENOTSUP.
        "dav" => Cannot {
            ops: &["symlink", "readlink", "chmod", "touch_m", "touch_h"],
            modeless: true,
            dir_modes: false,
            ..ALL
        },
        // Directories are key prefixes: renaming one is EXDEV (`mv` copies); S3 sets its
        // own times (the PUT's).
        "s3" => Cannot {
            ops: &[
                "symlink", "readlink", "chmod", "rename", "touch_m", "touch_a", "touch_h",
            ],
            modeless: true,
            dir_modes: false,
            ..ALL
        },
        // MFMT sets the times of files only (pyftpdlib: 550 for a directory, which the
        // interview finds is a directory: ENOTSUP).
        "ftp" => Cannot {
            ops: &["symlink", "readlink", "touch_h"],
            dir_mtime: Some("err ENOTSUP"),
            ..ALL
        },
        // chirp_server shows every directory as 0700 (its access lists stand for modes).
        "chirp" => Cannot {
            dir_modes: false,
            ..ALL
        },
        _ => ALL,
    }
}

/// The name of operation `op` (a JSON line).
fn op_name(op: &str) -> &str {
    op.split('"').nth(1).unwrap_or("")
}

/// A small xorshift generator: the same sequence for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// The operations of sequence `seed`, as JSON lines, in directory `s{seed}`.
fn sequence(seed: u64) -> Vec<String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
    let dir = format!("s{seed}");
    let at = |name: &str| format!("\"{dir}/{name}\"");
    let mut ops = vec![format!("[\"mkdir\", \"{dir}\", 493]")];
    for _ in 0..OPS {
        let (a, b) = (at(rng.pick(&NAMES)), at(rng.pick(&NAMES)));
        let data = serde_json_str(rng.pick(&DATA));
        let op = match rng.next() % 21 {
            0 | 1 => format!("[\"write\", {a}, {data}]"),
            2 => format!("[\"append\", {a}, {data}]"),
            3 => format!("[\"create_excl\", {a}, {data}]"),
            4 | 5 => format!("[\"read\", {a}]"),
            6 => format!("[\"stat\", {a}]"),
            7 => format!("[\"lstat\", {a}]"),
            8 => format!("[\"list\", {}]", at(rng.pick(&[".", "d", "e"]))),
            9 => format!("[\"mkdir\", {a}, {}]", rng.pick(&MODES)),
            10 => format!("[\"rmdir\", {a}]"),
            11 => format!("[\"unlink\", {a}]"),
            12 => format!("[\"rename\", {a}, {b}]"),
            13 => format!("[\"truncate\", {a}, {}]", rng.next() % 8),
            14 => format!("[\"chmod\", {a}, {}]", rng.pick(&MODES)),
            15 => match rng.next() % 2 {
                0 => format!("[\"symlink\", \"{}\", {a}]", rng.pick(&NAMES)),
                _ => format!("[\"readlink\", {a}]"),
            },
            16 => format!("[\"touch_m\", {a}, {}]", rng.pick(&TIMES)),
            17 => format!("[\"touch_a\", {a}, {}]", rng.pick(&TIMES)),
            18 => format!("[\"touch_h\", {a}, {}]", rng.pick(&TIMES)),
            19 => match rng.next() % 2 {
                0 => format!("[\"times\", {a}]"),
                _ => format!("[\"ltimes\", {a}]"),
            },
            _ => format!("[\"link\", {a}, {b}]"),
        };
        ops.push(op);
    }
    ops
}

/// `s` as a JSON string.
fn serde_json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('\n', "\\n"))
}

/// The operations of every seed a backend that can do `c` runs under `frontend`, as it
/// can express them (a `link` where it keeps no hard links: `link_none`, which the oracle
/// answers as a file system without them); and how many were left out.
fn operations(c: &Cannot, frontend: Frontend) -> (Vec<String>, usize) {
    let links = match frontend {
        Frontend::Run => c.run_links,
        _ => c.links,
    };
    let all: Vec<String> = (1..=c.seeds).flat_map(sequence).collect();
    let total = all.len();
    let ops: Vec<String> = all
        .into_iter()
        .filter(|op| !c.ops.contains(&op_name(op)))
        .map(|op| match links || op_name(&op) != "link" {
            true => op,
            false => op.replacen("\"link\"", "\"link_none\"", 1),
        })
        .collect();
    let left_out = total - ops.len();
    (ops, left_out)
}

/// Writes the executor and `ops` into `dir`; returns the command that runs them under a
/// root given as its first argument (`dir` holds no `/w`, which [`FuseMount::sh`] replaces).
fn prepare(dir: &Path, ops: &[String]) -> String {
    let script = dir.join("model_ops.py");
    fs::write(&script, include_str!("fixtures/model_ops.py")).unwrap();
    let file = dir.join("ops");
    fs::write(&file, ops.join("\n") + "\n").unwrap();
    assert!(!dir.display().to_string().contains("/w"));
    format!("python3 {} ROOT {}", script.display(), file.display())
}

/// Results of the operations run natively in `root`, a tmpfs.
fn oracle(run: &str, root: &Path) -> Vec<String> {
    let _tmpfs = Tmpfs::mount(root, "16m");
    let o = Command::new("sh")
        .args([
            "-c",
            &format!(
                "{} oracle",
                run.replace("ROOT", &root.display().to_string())
            ),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "oracle: {}", stderr(&o));
    stdout(&o).lines().map(str::to_owned).collect()
}

/// How the operations reach roam.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frontend {
    /// `roam run -m /w=URL` (ptrace).
    Run,
    /// `roam run --fuse -m /w=URL`.
    RunFuse,
    /// `roam mount DIR URL`, the operations run on `DIR`.
    Mount,
}

const FRONTENDS: [Frontend; 3] = [Frontend::Run, Frontend::RunFuse, Frontend::Mount];

impl Frontend {
    fn name(self) -> &'static str {
        match self {
            Frontend::Run => "roam run",
            Frontend::RunFuse => "roam run --fuse",
            Frontend::Mount => "roam mount",
        }
    }
}

/// Results of the operations through roam with `url` mounted at `/w` (`env`: what its
/// server needs).
fn through_roam(run: &str, url: &str, env: &[(String, String)], frontend: Frontend) -> Vec<String> {
    let mut roam = Roam::new();
    for (k, v) in env {
        roam = roam.env(k, v);
    }
    let script = run.replace("ROOT", "/w");
    let o = match frontend {
        Frontend::Mount => FuseMount::start(roam, Some(url), &[]).sh(&script, &[]),
        _ => {
            let mount = format!("/w={url}");
            let mut args = vec!["-m", mount.as_str()];
            if frontend == Frontend::RunFuse {
                args.insert(0, "--fuse");
            }
            roam.sh(&args, &script)
        }
    };
    assert!(o.status.success(), "{url} {frontend:?}: {}", stderr(&o));
    stdout(&o).lines().map(str::to_owned).collect()
}

/// `result` of `op` as far as `c` can express it under `frontend`: a stat without the mode
/// where the backend keeps none, times without the access time where it keeps none apart.
fn comparable(c: &Cannot, frontend: Frontend, op: &str, result: &str) -> String {
    match op_name(op) {
        "stat" | "lstat" if result.starts_with("ok ") => {
            let mut words: Vec<&str> = result.split(' ').collect();
            if c.modeless || (!c.dir_modes && words[1] == "dir") {
                words[3] = "_";
            }
            if !c.dir_links && words[1] == "dir" {
                words[4] = "_";
            }
            words.join(" ")
        }
        "times" | "ltimes" => {
            let file = result.starts_with("ok file ");
            let kept = match frontend {
                Frontend::Run => c.run_atime,
                _ => c.atime,
            };
            match result.split_once(" a ") {
                Some((m, _)) if !kept || !(file || c.dir_atime) => m.to_owned(),
                _ => result.to_owned(),
            }
        }
        _ => result.to_owned(),
    }
}

/// What the oracle's `result` of `op` promises on `c`: a directory's mtime set where the
/// backend cannot set it is its documented errno, and its times show no mtime.
fn promised(c: &Cannot, op: &str, result: &str) -> String {
    match (op_name(op), c.dir_mtime) {
        ("touch_m", Some(errno)) if result == "ok dir" => errno.to_owned(),
        ("times" | "ltimes", Some(_)) if result.starts_with("ok dir ") => "ok dir".to_owned(),
        _ => result.to_owned(),
    }
}

/// One line of the report: a backend under a frontend.
struct Row {
    kind: String,
    frontend: &'static str,
    ran: usize,
    matched: usize,
    left_out: usize,
}

/// Runs the model on a fresh `kind` backend under every frontend; returns the mismatches.
fn model(kind: &str) -> Vec<String> {
    let scratch = Scratch::new("model");
    let c = cannot(kind);
    let mut wrong = Vec::new();
    let mut rows = Vec::new();
    for frontend in FRONTENDS {
        let (ops, left_out) = operations(&c, frontend);
        let dir = scratch.join(&format!("{frontend:?}"));
        fs::create_dir_all(&dir).unwrap();
        let run = prepare(&dir, &ops);
        let want = oracle(&run, &dir.join("oracle"));
        let (url, env, _server) = backend(kind);
        let got = through_roam(&run, &url, &env, frontend);
        let mut matched = 0;
        for (i, op) in ops.iter().enumerate() {
            let w = comparable(&c, frontend, op, &promised(&c, op, &want[i]));
            let g = got.get(i).map_or("(nothing)".to_owned(), |g| {
                comparable(&c, frontend, op, &promised(&c, op, g))
            });
            match g == w {
                true => matched += 1,
                false => wrong.push(format!("{kind} {frontend:?} #{i} {op}: {g}, not {w}")),
            }
        }
        rows.push(Row {
            kind: kind.to_owned(),
            frontend: frontend.name(),
            ran: ops.len(),
            matched,
            left_out,
        });
    }
    for r in rows {
        eprintln!(
            "| {} | {} | {} run | {} as the oracle | {} left out |",
            r.kind, r.frontend, r.ran, r.matched, r.left_out
        );
    }
    wrong
}

/// A fresh, empty `kind` backend: its mount URL, the environment its server needs, and
/// what keeps the server alive.
fn backend(kind: &str) -> (String, Vec<(String, String)>, Option<Backend>) {
    match kind {
        "mem" => ("mem:".into(), Vec::new(), None),
        "null" => {
            let b = Backend::new("file");
            (
                format!("null:{}", b.backend("").display()),
                Vec::new(),
                Some(b),
            )
        }
        _ => {
            let b = Backend::new(kind);
            (b.url.clone(), b.env().to_vec(), Some(b))
        }
    }
}

fn model_on(kind: &str) {
    let wrong = model(kind);
    assert!(wrong.is_empty(), "{} mismatches: {wrong:#?}", wrong.len());
}

#[test]
fn mem() {
    model_on("mem");
}

#[test]
fn null_layer() {
    model_on("null");
}

#[test]
fn file_through_the_cache() {
    model_on("file+cache");
}

#[test]
fn sftp() {
    model_on("sftp");
}

#[test]
fn webdav() {
    model_on("dav");
}

#[test]
fn ftp() {
    model_on("ftp");
}

#[test]
fn s3() {
    model_on("s3");
}

#[test]
fn chirp() {
    model_on("chirp");
}

/// T_read and T_write between processes, as docs/SEMANTICS.md promises them: what one
/// process sees of another's change (through roam, sharing its cache) and of a change made
/// behind roam's back (a direct writer to the backend), and when the backend sees a change
/// delayed by T_write. `mem:` is left out: its tree is one roam process's own.
mod visibility {
    use super::*;
    use std::time::{Duration, Instant};

    /// T_read and T_write of the runs (seconds).
    const T_READ: u64 = 3;
    const T_WRITE: u64 = 3;

    /// One step of a scenario: what it is, the promised answer and the one seen.
    struct Step {
        what: &'static str,
        want: String,
        got: String,
    }

    /// Processes on one cache: `roam run`s and one `roam mount`, all with `config`.
    struct Shared {
        cache: Scratch,
        url: String,
        env: Vec<(String, String)>,
    }

    impl Shared {
        fn roam(&self) -> Roam {
            let mut roam = Roam::new()
                .env("ROAM_CACHE_DIR", self.cache.join("c"))
                .env("ROAM_CONFIG", self.cache.join("roam.toml"));
            for (k, v) in &self.env {
                roam = roam.env(k, v);
            }
            roam
        }

        /// `roam run -m /w=URL -- sh -c SCRIPT`: its stdout.
        fn run(&self, script: &str) -> String {
            let o = self.roam().sh(&["-m", &format!("/w={}", self.url)], script);
            assert!(o.status.success(), "{script}: {}", stderr(&o));
            stdout(&o)
        }

        /// `roam mount DIR -m /w=URL`: the names are the runs' (`/w/...`, at `DIR/w`), so
        /// the mount and the runs share the cache's entries.
        fn mount(&self) -> FuseMount {
            FuseMount::start(self.roam(), None, &["-m", &format!("/w={}", self.url)])
        }

        fn status(&self) -> String {
            stdout(&self.roam().cli(&["status"]))
        }
    }

    fn shared(kind: &str, config: &str) -> (Shared, Option<Backend>) {
        let (url, env, server) = backend(kind);
        let cache = Scratch::new("model-cache");
        fs::write(cache.join("roam.toml"), config).unwrap();
        (Shared { cache, url, env }, server)
    }

    /// `sh -c SCRIPT` on the mount, `/w/` in the script standing for `DIR/w/`.
    fn sh(m: &FuseMount, script: &str) -> String {
        let o = sh_output(m, script);
        assert!(o.status.success(), "{script}: {}", stderr(&o));
        stdout(&o)
    }

    fn sh_output(m: &FuseMount, script: &str) -> std::process::Output {
        let here = format!("{}/w/", m.dir.display());
        Command::new("sh")
            .args(["-c", &script.replace("/w/", &here)])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    /// What the backend itself holds at `rel` (`-` when nothing).
    fn behind(b: &Backend, rel: &str) -> String {
        fs::read_to_string(b.backend(rel)).unwrap_or_else(|_| "-".into())
    }

    /// The scenarios on `kind` (`cached`: served through roam's cache, so a change made
    /// behind roam's back is seen once T_read has passed; in place, at once).
    fn scenarios(kind: &str, cached: bool) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut step = |what, want: &str, got: String| {
            steps.push(Step {
                what,
                want: want.to_owned(),
                got,
            })
        };
        // T_write = 0: a change is on the backend when its writer's close returns.
        let config = format!("[cache]\nt_read = {T_READ}\nt_write = 0\n");
        let (s, server) = shared(kind, &config);
        let b = server.expect("a backend with a tree");
        s.run("echo one > /w/f");
        step(
            "T_write=0: the backend after the writer closed",
            "one\n",
            behind(&b, "f"),
        );
        step(
            "T_write=0: a second process after the writer closed",
            "one\n",
            s.run("cat /w/f"),
        );
        let m = s.mount();
        step("a mount reads it", "one\n", sh(&m, "cat /w/f"));
        // A direct writer changes it (another size: a version known by size and second
        // differs).
        fs::write(b.backend("f"), "two, changed\n").unwrap();
        let changed = Instant::now();
        let within = if cached { "one\n" } else { "two, changed\n" };
        step(
            "a change behind roam's back, within T_read: the mount",
            within,
            sh(&m, "cat /w/f"),
        );
        let o = sh_output(&m, "echo three > /w/g; cat /w/g");
        step(
            "a file written through the mount: a reader on the mount at once",
            "three\n",
            stdout(&o),
        );
        step(
            "a file written through the mount: the backend at once (T_write=0)",
            "three\n",
            behind(&b, "g"),
        );
        step(
            "a file written through the mount: a roam run at once",
            "three\n",
            s.run("cat /w/g"),
        );
        let wait = Duration::from_millis(T_READ * 1000 + 600).saturating_sub(changed.elapsed());
        std::thread::sleep(wait);
        step(
            "a change behind roam's back, after T_read: the mount",
            "two, changed\n",
            sh(&m, "cat /w/f"),
        );
        step(
            "a change behind roam's back, after T_read: a roam run",
            "two, changed\n",
            s.run("cat /w/f"),
        );
        // A conflict: the file changes behind roam's back while a writer holds it open.
        sh(&m, "echo base > /w/c");
        // (Not a shell's `exec 3>>`: its redirections close dups of the fd, and each
        // close uploads with T_write = 0.)
        let script = format!(
            "python3 -c \"import os; fd = os.open('/w/c', os.O_WRONLY | os.O_APPEND); \
             os.write(fd, b'mine\\n'); open('{}', 'w').write('theirs\\n'); os.close(fd)\"",
            b.backend("c").display()
        );
        let o = sh_output(&m, &script);
        let (theirs, kept) = match cached {
            true => ("theirs\n", "base\nmine\n"),
            false => ("theirs\n", "-"),
        };
        step(
            "a conflict: the backend keeps the other's bytes",
            theirs,
            behind(&b, "c"),
        );
        let conflict = fs::read_dir(b.backend("")).unwrap().flatten().find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("c.roam-conflict-")
        });
        step(
            "a conflict: NAME.roam-conflict-TIME holds the writer's",
            kept,
            conflict.map_or("-".into(), |e| fs::read_to_string(e.path()).unwrap()),
        );
        step(
            "a conflict: the writer's close succeeds",
            "true",
            o.status.success().to_string(),
        );
        drop(m);
        drop(s);
        drop(b);

        // T_write > 0: the backend keeps the old bytes until the delay passes; readers
        // through roam see the new ones at once; `roam status` lists the change.
        let config = format!("[cache]\nt_read = {T_READ}\nt_write = {T_WRITE}\n");
        let (s, server) = shared(kind, &config);
        let b = server.expect("a backend with a tree");
        s.run("echo old > /w/h");
        let m = s.mount();
        // Taken before the writer's close: no delivery can come T_write after it sooner.
        let closed = Instant::now();
        let o = sh_output(&m, "(echo new > /w/h); cat /w/h");
        step(
            "T_write>0: a reader on the writer's mount at once",
            "new\n",
            stdout(&o),
        );
        if !cached {
            // Served in place: there is no upload to delay.
            step(
                "T_write>0, in place: the backend at once",
                "new\n",
                behind(&b, "h"),
            );
            step(
                "T_write>0, in place: nothing pending",
                "pending: 0",
                pending_none(&s),
            );
            return steps;
        }
        step(
            "T_write>0: the backend before T_write passed",
            "old\n",
            behind(&b, "h"),
        );
        let status = s.status();
        step(
            "T_write>0: roam status lists the pending change",
            "h  (due for upload",
            match status.contains("h  (due for upload") {
                true => "h  (due for upload".into(),
                false => status,
            },
        );
        let deadline = closed + Duration::from_secs(T_WRITE + 10);
        while behind(&b, "h") != "new\n" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let took = closed.elapsed();
        step(
            "T_write>0: the backend once T_write passed",
            "new\n",
            behind(&b, "h"),
        );
        step(
            "T_write>0: not delivered before T_write",
            "true",
            (took >= Duration::from_secs(T_WRITE)).to_string(),
        );
        drop(m);
        step(
            "T_write>0: nothing pending after the delivery",
            "pending: 0",
            pending_none(&s),
        );
        steps
    }

    /// `pending: 0` when `roam status` says so, else what it says.
    fn pending_none(s: &Shared) -> String {
        let status = s.status();
        match status.contains("pending:  0 change") {
            true => "pending: 0".into(),
            false => status,
        }
    }

    fn visibility_on(kind: &str, cached: bool) {
        let steps = scenarios(kind, cached);
        let wrong: Vec<String> = steps
            .iter()
            .filter(|s| s.want != s.got)
            .map(|s| format!("{kind}: {}: {:?}, not {:?}", s.what, s.got, s.want))
            .collect();
        eprintln!(
            "| {kind} | processes, T_read, T_write | {} run | {} as promised |",
            steps.len(),
            steps.len() - wrong.len()
        );
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn null_layer() {
        visibility_on("null", false);
    }

    #[test]
    fn file_through_the_cache() {
        visibility_on("file+cache", true);
    }

    #[test]
    fn sftp() {
        visibility_on("sftp", true);
    }

    #[test]
    fn webdav() {
        visibility_on("dav", true);
    }
}
