//! Real programs under `roam run`, each compared with a native run of the same command:
//! exit code, stdout and stderr must be the same. Every case runs on local paths, where roam
//! must be invisible, and, where it makes sense, on the remote tree that the fixture's nginx
//! serves (read-only: whatever a case writes goes to a fresh local directory per run).
//!
//! The programs: a static C program, busybox, a static Go program with goroutines, Python
//! with threads, multiprocessing and subprocess, posix_spawn/vfork, a multi-threaded
//! stat/open storm, stats interrupted by a timer, signals, shebang scripts, `make -j2`, `tar`, `git`, `sqlite3`,
//! `find | xargs`, pipes and stdin, exit codes, openat2/statx/O_PATH and io_uring_setup.
//! The C and Go programs are in `tests/fixtures/` and are built here, statically.
//!
//! Scripts name the served tree `{}` (its local copy natively; under roam, that copy or
//! the served tree mounted at `/roam-www`) and a fresh local scratch directory `{out}`.
//! A death by signal N compares as exit code 128+N, which is what `roam run` exits with.
//!
//! Runs use roam's fast path (the preloaded library, on by default); the path-heavy cases
//! also run without it, and `ROAM_FASTPATH=0 cargo test --test programs` runs every case
//! without it.

mod common;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use common::{fixture, stderr, stdout, Fixture, Roam};
use roam_testkit::{required, write_file, Scratch};

/// Where `{}` points under roam; natively it is always the local copy of the served tree.
#[derive(Clone, Copy, Debug)]
enum Tree {
    /// The local copy: roam must be invisible.
    Local,
    /// The tree served over HTTP (read-only), mounted at [`MOUNT`].
    Remote,
}

const BOTH: [Tree; 2] = [Tree::Local, Tree::Remote];

/// Where the served tree is mounted for [`Tree::Remote`]: a name without the `:` of
/// `/http/HOST:PORT` (`run_http.rs` covers those names), which make reads as a rule
/// separator and coreutils quote in messages, so outputs could not be compared.
const MOUNT: &str = "/roam-www";

/// What a run showed, with the tree and the scratch directory written back as `{}` and
/// `{out}`. A death by signal N is code 128+N, as roam and shells report it.
#[derive(Debug, PartialEq)]
struct Shown {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Shown {
    fn new(o: &Output, base: &str, out: &Path) -> Shown {
        let out = out.to_str().unwrap();
        let text = |b: &[u8]| {
            String::from_utf8_lossy(b)
                .replace(out, "{out}")
                .replace(base, "{}")
        };
        Shown {
            code: o
                .status
                .code()
                .unwrap_or_else(|| 128 + o.status.signal().unwrap()),
            stdout: text(&o.stdout),
            stderr: text(&o.stderr),
        }
    }
}

/// The fixture, with this suite's additions to the served tree (made once): `src/` (the
/// make project of `tests/fixtures/make`); `tools/`: `conc.py`, `hello.py` (a
/// `#!/usr/bin/env python3` script), `sh` (a copy of the local `/bin/sh`, an interpreter
/// to run from the server) and `src.tar.gz`; and `bin/`, `db/`, `git/` for the busybox,
/// sqlite3 and git cases to fill (made now, so that the top directory does not change
/// while other cases run).
fn fx() -> &'static Fixture {
    static EXTENDED: OnceLock<()> = OnceLock::new();
    let fx = fixture();
    EXTENDED.get_or_init(|| {
        let www = &fx.www;
        for entry in std::fs::read_dir(fixtures().join("make")).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            write_file(
                &www.join("src").join(path.file_name().unwrap()),
                &data,
                0o644,
            );
        }
        let conc = std::fs::read(fixtures().join("conc.py")).unwrap();
        write_file(&www.join("tools/conc.py"), &conc, 0o644);
        let hello =
            b"#!/usr/bin/env python3\nimport sys\nprint('hello.py ran with', sys.argv[1:])\n";
        write_file(&www.join("tools/hello.py"), hello, 0o755);
        let sh = std::fs::read(std::fs::canonicalize("/bin/sh").unwrap()).unwrap();
        write_file(&www.join("tools/sh"), &sh, 0o755);
        for dir in ["bin", "db", "git"] {
            roam_testkit::mkdir(&www.join(dir));
        }
        native(&format!(
            "tar -C {w} -czf {w}/tools/src.tar.gz src",
            w = www.display()
        ));
    });
    fx
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Runs `script` with `sh -c` natively (to prepare the served tree) and asserts it succeeded.
fn native(script: &str) {
    let o = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", stderr(&o));
}

/// Runs `script` natively and under roam with `{}` standing for `tree`, each with its own
/// fresh `{out}`; returns what the native run showed and, if the roam run showed anything
/// else (exit code, stdout or stderr), the difference. On the remote tree, roam's own
/// `roam: ` lines on stderr are left out.
fn compare(tree: Tree, script: &str) -> (Shown, Option<String>) {
    compare_with(Roam::new(), tree, script)
}

/// [`compare`] with `roam` configured by the caller.
fn compare_with(roam: Roam, tree: Tree, script: &str) -> (Shown, Option<String>) {
    let fx = fx();
    let local = fx.www.to_str().unwrap().to_owned();
    let mount = format!("{MOUNT}={}", fx.server.url());
    let mount_args = ["-m", &mount];
    let (base, run_args): (&str, &[&str]) = match tree {
        Tree::Local => (&local, &[]),
        Tree::Remote => (MOUNT, &mount_args),
    };
    let expand = |base: &str, out: &Path| {
        script
            .replace("{out}", out.to_str().unwrap())
            .replace("{}", base)
    };
    let out = Scratch::new("out");
    let o = Command::new("sh")
        .args(["-c", &expand(&local, &out.path)])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let want = Shown::new(&o, &local, &out.path);
    let out = Scratch::new("out");
    let o = roam.sh(run_args, &expand(base, &out.path));
    let mut got = Shown::new(&o, base, &out.path);
    if let Tree::Remote = tree {
        got.stderr = got
            .stderr
            .lines()
            .filter(|l| !l.starts_with("roam: "))
            .map(|l| format!("{l}\n"))
            .collect();
    }
    let diff = (got != want)
        .then(|| format!("{tree:?} tree: {script}\n  native: {want:?}\n  roam:   {got:?}"));
    (want, diff)
}

/// Fails with every difference found, if any.
fn assert_no_differences(diffs: Vec<String>) {
    assert!(
        diffs.is_empty(),
        "{} run(s) differ from native:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

/// Each script on both trees must show what it shows natively (failures included);
/// returns the native runs, one per script.
fn all_same<S: AsRef<str>>(scripts: &[S]) -> Vec<Shown> {
    let mut diffs = vec![];
    let mut natives = vec![];
    for script in scripts {
        let [(native, local), (_, remote)] = BOTH.map(|tree| compare(tree, script.as_ref()));
        diffs.extend([local, remote].into_iter().flatten());
        natives.push(native);
    }
    assert_no_differences(diffs);
    natives
}

/// [`all_same`], and every script must succeed natively with some output (so that a case
/// cannot pass by failing alike); returns the native stdouts.
fn all_succeed_alike<S: AsRef<str>>(scripts: &[S]) -> Vec<String> {
    let natives = all_same(scripts);
    for (script, native) in scripts.iter().zip(&natives) {
        assert!(
            native.code == 0 && !native.stdout.is_empty(),
            "{} natively: {native:?}",
            script.as_ref()
        );
    }
    natives.into_iter().map(|n| n.stdout).collect()
}

/// [`all_succeed_alike`] for one script; returns its native stdout for checks of its own.
fn same_on_both(script: &str) -> String {
    all_succeed_alike(&[script]).remove(0)
}

/// The static C programs of `tests/fixtures/` by name, built once (in parallel) beside the
/// fixture's probe.
fn bin(name: &str) -> String {
    static BINS: OnceLock<PathBuf> = OnceLock::new();
    let dir = BINS.get_or_init(|| {
        let dir = fx().probe.parent().unwrap().to_owned();
        let builds: Vec<_> = ["spawn", "storm", "statstorm", "signals", "newcalls"]
            .into_iter()
            .map(|name| {
                let child = Command::new("cc")
                    .args(["-O1", "-static", "-pthread", "-Wall", "-o"])
                    .arg(dir.join(name))
                    .arg(fixtures().join(format!("{name}.c")))
                    .spawn()
                    .expect("running cc");
                (name, child)
            })
            .collect();
        for (name, mut child) in builds {
            assert!(child.wait().unwrap().success(), "building {name}.c failed");
        }
        dir
    });
    dir.join(name).to_str().unwrap().to_owned()
}

#[test]
fn a_static_c_program() {
    let probe = fx().probe.to_str().unwrap();
    let script = [
        "read {}/big.bin",
        "read {}/dir",
        "stat {}/dir",
        "stat {}/dir/sub/deep.txt",
        "open {}/missing.txt",
        "opendir {}/hello.txt",
        "cat '{}/dir/a b.txt'",
        "cat {}/dir/missing",
    ]
    .map(|op| format!("{probe} {op}; echo \"exit $?\""))
    .join("; ");
    let out = same_on_both(&script);
    assert!(out.starts_with("ok 10485760\nexit 0\nEISDIR\n"), "{out}");
}

#[test]
fn busybox() {
    let bb = required("busybox", "busybox-static");
    let bb = bb.to_str().unwrap();
    // A copy on the server too, to run a static binary from there.
    let data = std::fs::read(bb).unwrap();
    write_file(&fx().www.join("bin/busybox"), &data, 0o755);
    let scripts = [
        "B cat {}/hello.txt '{}/dir/a b.txt'",
        "B md5sum {}/big.bin {}/proj/main.c",
        "B find {}/dir {}/proj | B sort",
        "B grep -rn needle {}/dir {}/hello.txt | B sort",
        "B wc -l {}/hello.txt {}/src/main.c",
        "B ls {}/dir {}/dir/sub",
        "B stat -c '%n %s %F' {}/big.bin {}/dir",
        "B sh -c 'cd {}/dir/sub && pwd && B ls && B cat deep.txt && cd .. && pwd'",
        "B head -c 4096 {}/big.bin | B od -An -tx1 | B tail -2",
        "B tar -C {} -cf - src | B tar -tf - | B sort",
        "B find {}/src -name '*.c' | B sort | B xargs B cat | B md5sum",
        "B cat {}/missing; echo $?",
        "{}/bin/busybox sh -c 'cd {}/dir && {}/bin/busybox md5sum sub/*'",
    ]
    .map(|script| script.replace("B ", &format!("{bb} ")));
    all_succeed_alike(&scripts);
}

/// Builds `tests/fixtures/gofiles` with `CGO_ENABLED=0` (a static binary) into `dir`,
/// with the Go cache and module path in `dir` and no network.
fn build_go(dir: &Scratch) -> PathBuf {
    let go = required("go", "golang");
    let out = dir.join("gofiles");
    let o = Command::new(go)
        .args(["build", "-C"])
        .arg(fixtures().join("gofiles"))
        .arg("-o")
        .arg(&out)
        .arg(".")
        .env("CGO_ENABLED", "0")
        .env("GOCACHE", dir.join("cache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .output()
        .unwrap();
    assert!(o.status.success(), "go build: {}", stderr(&o));
    out
}

#[test]
fn a_static_go_program_with_goroutines() {
    let dir = Scratch::new("go");
    let prog = build_go(&dir);
    let prog = prog.to_str().unwrap();
    let out = same_on_both(&format!(
        "{prog} {{}}/dir {{out}} && {prog} {{}}/src {{out}} && ls {{out}}"
    ));
    assert!(out.contains("3 files, 3 copies verified"), "{out}");
    assert!(out.contains("6 files, 6 copies verified"), "{out}");
}

#[test]
fn a_long_name_is_never_written_on_a_small_stack() {
    // roam puts a rewritten name in the program's memory for the call to read. Below the
    // stack pointer there may be little room: a Go goroutine has ~800 bytes, and a static
    // Go program reading ~2 KB names from 64 goroutines crashed every time when roam wrote
    // them there. `tinystack` opens a ~1 KB name on a 4 KiB stack with an inaccessible page
    // under it (the write failed with EFAULT); roam now uses a scratch region of its own.
    let dir = Scratch::new("tinystack");
    let prog = dir.join("tinystack");
    let o = Command::new(required("/usr/bin/gcc", "gcc"))
        .args(["-O2", "-static", "-o"])
        .arg(&prog)
        .arg(fixtures().join("tinystack.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {}", stderr(&o));
    let srv = dir.join("srv");
    let deep: Vec<String> = (0..5).map(|i| format!("{i}{}", "m".repeat(200))).collect();
    let rel = format!("{}/f.txt", deep.join("/"));
    write_file(&srv.join(&rel), b"hello from deep\n", 0o644);
    let mount = format!("/w=file+cache://{}", srv.display());
    let name = format!("/w/{rel}");
    let out = Roam::new().cli(&["run", "-m", &mount, "--", prog.to_str().unwrap(), &name]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out), "hello from deep\n");
}

#[test]
fn python_threads_multiprocessing_and_subprocess() {
    let conc = fixtures().join("conc.py");
    let out = same_on_both(&format!("python3 {} {{}}/dir", conc.display()));
    assert!(out.contains("threads: 3 files\n"), "{out}");
    assert!(out.contains("spawn pool agrees: True\n"), "{out}");
    assert!(
        out.contains("agrees: True | cat | wc -c agrees: True"),
        "{out}"
    );
    // The script itself from the server: spawn's fresh interpreters import it from there.
    let out = same_on_both("python3 {}/tools/conc.py {}/src");
    assert!(
        out.contains("fork pool agrees: True\nspawn pool agrees: True\n"),
        "{out}"
    );
}

#[test]
fn exec_from_a_thread_of_a_multithreaded_process() {
    // The exec'ing thread takes over the process (and its leader's id); roam follows it.
    let script = "import os, sys, threading, time\n\
                  def spin():\n    while True: time.sleep(0.001)\n\
                  [threading.Thread(target=spin, daemon=True).start() for _ in range(3)]\n\
                  t = threading.Thread(target=lambda: os.execv('/bin/cat', ['cat', sys.argv[1]]))\n\
                  t.start(); t.join()\n";
    let out = same_on_both(&format!("python3 -c \"{script}\" {{}}/hello.txt"));
    assert!(out.contains("second line with needle"), "{out}");
}

#[test]
fn posix_spawn_and_vfork() {
    let out = same_on_both(&format!("{} {{}}/hello.txt {{}}/exit42.sh", bin("spawn")));
    assert!(out.contains("posix_spawnp wc < FILE: exit 0"), "{out}");
    assert!(out.contains("posix_spawn missing: ENOENT"), "{out}");
    assert!(out.contains("posix_spawn PROGRAM: exit 42"), "{out}");
    assert!(out.ends_with("vfork open+read: exit 3\n"), "{out}");
}

#[test]
fn a_multithreaded_stat_open_storm() {
    let storm = bin("storm");
    let files = "{}/hello.txt '{}/dir/a b.txt' {}/dir/sub/deep.txt {}/proj/main.c \
                 {}/src/Makefile {}/missing.txt";
    let out = same_on_both(&format!("{storm} 8 40 {files}; {storm} 4 2 {{}}/big.bin"));
    assert!(out.contains("8 threads x 40 rounds: all agree"), "{out}");
    assert!(out.contains("{}/missing.txt: stat ENOENT"), "{out}");
    assert!(out.contains("4 threads x 2 rounds: all agree"), "{out}");
}

/// Stats that a timer's signal may interrupt: on the served tree roam answers them itself,
/// writing the `struct stat` into the program's buffer, which it must do only while the
/// call is still the program's (never after an interrupted call returned); and with
/// `ROAM_AFAR=0`, where the tracer takes each over, an interrupted call must leave nothing
/// behind that changes how the program's next one is served.
#[test]
fn stats_interrupted_by_a_timer() {
    let statstorm = bin("statstorm");
    let script = format!("{statstorm} {{}}/hello.txt 3000; {statstorm} {{}}/dir/sub/deep.txt 1000");
    let out = same_on_both(&script);
    assert_eq!(
        out,
        "3000 stats under a timer: all the same, none written late\n\
         1000 stats under a timer: all the same, none written late\n"
    );
    let (_, diff) = compare_with(Roam::new().env("ROAM_AFAR", "0"), Tree::Remote, &script);
    assert_no_differences(diff.into_iter().collect());
}

#[test]
fn signals() {
    let out = same_on_both(&format!("{} {{}}/hello.txt", bin("signals")));
    assert_eq!(
        out,
        "SIGCHLD: CLD_EXITED status 3, waitpid exit 3\n\
         SIGUSR1: raised 100, delivered 100\n\
         stop: Stopped (signal)\n\
         cont: continued\n\
         child: exit 46\n\
         EINTR: read -1 EINTR, alarms seen: yes\n\
         SA_RESTART: read 1 'r', alarms seen: yes\n"
    );
}

#[test]
fn shebang_scripts_from_the_server_with_local_interpreters() {
    let out = same_on_both("{}/script.sh one 'two words'; {}/tools/hello.py x; echo $?");
    assert_eq!(
        out,
        "script ran with one two words\nhello.py ran with ['x']\n0\n"
    );
}

#[test]
fn a_local_script_with_an_interpreter_from_the_server() {
    // The interpreter runs from the server when executed directly; the kernel must also find
    // it when it reads the `#!` line of a local script.
    let out = same_on_both(
        "{}/tools/sh -c 'echo direct' \
         && printf '#!{}/tools/sh\\necho \"$0 ran with $*\"\\n' > {out}/s.sh \
         && chmod +x {out}/s.sh && {out}/s.sh one two",
    );
    assert_eq!(out, "direct\n{out}/s.sh ran with one two\n");
}

#[test]
fn make_j2_builds_a_local_copy() {
    let out = same_on_both(
        "cp -r {}/src {out}/src && cd {out}/src && make -s -j2 && ./prog \
         && { make -q; echo \"up to date: $?\"; } && touch beta.c \
         && { make -q; echo \"after touch: $?\"; } && make -s -j2 && ./prog && make -s clean && ls",
    );
    assert!(
        out.contains("gamma(2) = 36\nup to date: 0\nafter touch: 1\n"),
        "{out}"
    );
}

#[test]
fn make_j2_builds_remote_sources_into_a_local_directory() {
    let out = same_on_both(
        "cd {out} && make -s -j2 -f {}/src/Makefile SRC={}/src && ./prog \
         && { make -q -f {}/src/Makefile SRC={}/src; echo \"up to date: $?\"; } && ls",
    );
    assert!(out.contains("gamma(2) = 36\nup to date: 0\n"), "{out}");
}

#[test]
fn path_heavy_cases_are_the_same_without_the_fast_path() {
    // What gcc, make, tar and find ask most is what the fast path makes natively.
    let scripts = [
        "cp -r {}/src {out}/src && cd {out}/src && make -s -j2 && ./prog && make -s clean && ls",
        "cd {out} && make -s -j2 -f {}/src/Makefile SRC={}/src && ./prog",
        "find {}/dir {}/proj {}/src -type f -print0 | sort -z | xargs -0 md5sum",
        "cd {}/dir && ls sub && realpath sub/../sub/deep.txt && cat sub/deep.txt",
        "cd {out} && tar -C {} -cf t.tar dir proj && tar -tf t.tar | sort",
    ];
    let mut diffs = vec![];
    for script in scripts {
        for tree in BOTH {
            let (native, diff) = compare_with(Roam::new().env("ROAM_FASTPATH", "0"), tree, script);
            assert!(
                native.code == 0 && !native.stdout.is_empty(),
                "{script}: {native:?}"
            );
            diffs.extend(diff);
        }
    }
    assert_no_differences(diffs);
}

#[test]
fn tar_creates_from_the_tree_and_extracts_locally() {
    // Fixed modes, times and owners: the archive is the same bytes natively and under roam.
    let tar = "tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX";
    let out = same_on_both(&format!(
        "cd {{out}} && {tar} -C {{}} -cf t.tar dir proj src && md5sum t.tar && tar -tvf t.tar \
         && gzip -n < t.tar > t.tgz && mkdir x && tar -C x -xzf t.tgz \
         && diff -r {{}}/dir x/dir && diff -r {{}}/src x/src && echo extracted \
         && mkdir y && tar -C y -xzf {{}}/tools/src.tar.gz && find y -type f | sort | xargs md5sum"
    ));
    assert!(out.contains("extracted\n"), "{out}");
    assert!(out.contains("y/src/Makefile"), "{out}");
}

/// The environment of a deterministic git: no user or system configuration, fixed names
/// and dates (so commit ids are the same in every run).
const GIT_ENV: &str = "export HOME={out} GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=roam \
    GIT_AUTHOR_EMAIL=roam@example.org GIT_COMMITTER_NAME=roam GIT_COMMITTER_EMAIL=roam@example.org \
    GIT_AUTHOR_DATE=2024-01-01T00:00:00Z GIT_COMMITTER_DATE=2024-01-01T00:00:00Z;";

#[test]
fn git_init_add_commit_log() {
    required("git", "git");
    let out = same_on_both(&format!(
        "{GIT_ENV} cd {{out}} && git init -q -b main repo && cp -r {{}}/dir {{}}/proj repo/ \
         && cd repo && chmod -R u+w . && git add . && git commit -q -m first \
         && echo '/* changed */' >> proj/main.c && git commit -qam second \
         && git log --format='%H %an %s' && git status --porcelain && git fsck --strict \
         && git cat-file -p 'HEAD^{{tree}}' && git show --stat --format=%s HEAD~1"
    ));
    assert!(out.contains(" roam second\n"), "{out}");
}

#[test]
fn git_reads_and_clones_a_repository_on_the_server() {
    let fx = fx();
    let work = Scratch::new("git");
    native(&format!(
        "{env} git init -q --bare -b main {bare} && git init -q -b main {work} && cd {work} \
         && cp -r {www}/proj . && git add . && git commit -q -m proj && git push -q {bare} main",
        env = GIT_ENV.replace("{out}", work.path.to_str().unwrap()),
        bare = fx.www.join("git/repo.git").display(),
        work = work.path.display(),
        www = fx.www.display(),
    ));
    let out = same_on_both(&format!(
        "{GIT_ENV} git --git-dir={{}}/git/repo.git log --format='%H %s' \
         && git clone -q {{}}/git/repo.git {{out}}/clone && cat {{out}}/clone/proj/util.h \
         && git -C {{out}}/clone fsck --strict && git -C {{out}}/clone log --format=%s"
    ));
    assert!(out.ends_with("int twice(int x);\nproj\n"), "{out}");
}

/// `text` quoted for `sh` as one word.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
fn sqlite3_writes_pass_integrity_check() {
    required("sqlite3", "sqlite3");
    let fill = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); \
        WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000) \
        INSERT INTO t(v) SELECT 'row ' || i FROM c; CREATE INDEX tv ON t(v); \
        UPDATE t SET v = v || '!' WHERE id % 7 = 0; DELETE FROM t WHERE id % 11 = 0;";
    let check = "PRAGMA integrity_check; SELECT count(*), sum(id), max(v) FROM t;";
    // A WAL database; a rollback-journal one with four writers at once; remote files read
    // into a local database.
    let wal = sh_quote(&format!("PRAGMA journal_mode=WAL; {fill}"));
    let wal_check = sh_quote(&format!(
        "{check} PRAGMA wal_checkpoint(TRUNCATE); VACUUM; {check}"
    ));
    let write = sh_quote(
        "BEGIN IMMEDIATE; INSERT INTO t(v) SELECT v || ' again' FROM t WHERE id <= 100; COMMIT;",
    );
    let remote = sh_quote(&format!(
        "CREATE TABLE f AS SELECT length(readfile('{{}}/big.bin')) AS n, \
         readfile('{{}}/hello.txt') AS h; SELECT n, h FROM f; {check}"
    ));
    let (fill, check) = (sh_quote(fill), sh_quote(check));
    let out = same_on_both(&format!(
        "cd {{out}} && sqlite3 w.db {wal} && sqlite3 w.db {wal_check} && sqlite3 j.db {fill} \
         && for i in 1 2 3 4; do sqlite3 -cmd '.timeout 20000' j.db {write} & done; wait \
         && sqlite3 j.db {check} && sqlite3 j.db {remote}"
    ));
    assert!(out.starts_with("wal\nok\n"), "{out}");
    assert!(out.contains("10485760|first line"), "{out}");
}

#[test]
fn sqlite3_reads_a_database_on_the_server() {
    required("sqlite3", "sqlite3");
    let db = fx().www.join("db/rows.db");
    let fill = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t(v) VALUES ('a'), ('b'), ('c');";
    native(&format!("sqlite3 {} {}", db.display(), sh_quote(fill)));
    let out = same_on_both(
        "sqlite3 {}/db/rows.db 'PRAGMA integrity_check; SELECT count(*), group_concat(v) FROM t;'",
    );
    assert_eq!(out, "ok\n3|a,b,c\n");
}

#[test]
fn find_and_xargs() {
    all_succeed_alike(&[
        "find {}/dir {}/proj {}/src -type f -print0 | sort -z | xargs -0 md5sum",
        "find {}/dir {}/py -name '*.*' | sort | xargs -d '\\n' -n1 -P2 wc -c | sort",
        "find {}/src -name '*.c' | sort | xargs grep -l alpha",
        "find {}/dir -type d | sort | xargs ls -d",
        "find {}/proj -type f -size -2k | sort | xargs -I@ sh -c 'wc -l < @'",
    ]);
}

#[test]
fn pipes_and_stdin_within_the_run() {
    all_succeed_alike(&[
        "cat {}/hello.txt | tr a-z A-Z | sort -r | head -2",
        "grep -c line < {}/hello.txt",
        "exec 3< {}/dir/sub/deep.txt; read -r l <&3; echo \"$l\"",
        "wc -c < {}/big.bin",
        "{ read a; read b; echo \"$b / $a\"; } < {}/hello.txt",
        "mkfifo {out}/f && { cat {}/hello.txt > {out}/f & } && cat {out}/f && wait",
        "cat {}/big.bin | md5sum; cat < {}/big.bin | head -c 1000 | wc -c",
        "python3 -c 'import sys; print(len(sys.stdin.read()))' < {}/src/main.c",
    ]);
}

/// Runs `cmd` with `input` on its stdin; returns its output.
fn fed(mut cmd: Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    o
}

#[test]
fn stdin_reaches_the_program_through_roam() {
    // `Roam` gives programs an empty stdin; this one gets 1 MiB through roam's own stdin.
    let input = roam_testkit::noise(1 << 20, 7);
    let script = "md5sum; wc -l < {}/hello.txt";
    let fx = fx();
    let mut sh = Command::new("sh");
    sh.args(["-c", &script.replace("{}", fx.www.to_str().unwrap())]);
    let native = fed(sh, &input);
    let cache = Scratch::new("cache");
    let mut roam = Command::new(env!("CARGO_BIN_EXE_roam"));
    roam.env("ROAM_CACHE_DIR", cache.join("c"))
        .env("ROAM_CONFIG", cache.join("none.toml"))
        .args(["run", "--", "sh", "-c", &script.replace("{}", &fx.remote())]);
    let o = fed(roam, &input);
    assert_eq!(stdout(&o), stdout(&native), "{}", stderr(&o));
    assert!(stdout(&native).ends_with(" -\n3\n"));
}

#[test]
fn exit_codes() {
    all_same(&[
        "exit 3",
        "exit 255",
        "false",
        "kill -TERM $$",
        "kill -KILL $$",
        "kill -USR1 $$",
        "sh -c 'exit 7'; echo \"child $?\"; sh -c 'kill -INT $$'; echo \"killed $?\"",
        "{}/exit42.sh",
        "{}/exit42.sh; echo $?",
        "{}/hello.txt",
        "{}/dir",
        "{}/missing.sh",
        "/nonexistent/program",
        "cat {}/missing.txt",
        "grep -q absent {}/hello.txt",
        "cat {}/hello.txt | grep -q needle",
        // A writer to a closed pipe dies of SIGPIPE (141), it does not see EPIPE.
        "{ yes; echo \"yes: $?\" >&2; } | head -c 1",
    ]);
}

#[test]
fn openat2_statx_and_o_path() {
    let newcalls = bin("newcalls");
    let out = same_on_both(&format!(
        "{newcalls} {{}}/dir/sub deep.txt && {newcalls} {{}}/dir 'a b.txt'"
    ));
    for line in [
        "openat2 beneath escaping: EXDEV",
        "openat2 unknown flag: EINVAL",
        "read O_PATH: EBADF",
        "readlink fd: ok {}/dir/sub/deep.txt\n",
        "getcwd: {}/dir/sub\n",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
}

#[test]
fn io_uring_setup_is_enosys_under_roam() {
    let newcalls = bin("newcalls");
    let r = fx().remote();
    for script in [
        format!("{newcalls} --uring"),
        format!("cd {r}/dir && {newcalls} --uring"),
    ] {
        let o = Roam::new().sh(&[], &script);
        assert_eq!(
            stdout(&o),
            "io_uring_setup: ENOSYS\n",
            "{script}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_close_in_a_multithreaded_program_uploads_at_once() {
    // Every thread of a process shows the fd being closed; only another fd table holding
    // the file open may delay the upload.
    let dir = Scratch::new("mt-close");
    let srv = dir.join("srv");
    roam_testkit::mkdir(&srv);
    let script = "import os, threading, time\n\
                  stop = False\n\
                  def spin():\n    while not stop: time.sleep(0.001)\n\
                  ts = [threading.Thread(target=spin, daemon=True) for _ in range(3)]\n\
                  [t.start() for t in ts]\n\
                  with open('/w/f.txt', 'w') as f: f.write('written\\n')\n\
                  print(open(os.environ['SRV'] + '/f.txt').read(), end='')\n\
                  stop = True\n\
                  [t.join() for t in ts]\n";
    let mount = format!("/w=file+cache://{}", srv.display());
    let out = Roam::new()
        .env("SRV", &srv)
        .cli(&["run", "-m", &mount, "--", "python3", "-c", script]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "written\n", "uploaded when close returned");
}

#[test]
fn an_interactive_shell_has_job_control() {
    // Ctrl-Z stops a job, `jobs` lists it, `fg` resumes it, Ctrl-C ends it (status 130),
    // through a pseudo-terminal, natively and under roam.
    let driver = fixtures().join("jobctl.py");
    let shell = ["bash", "--norc", "-i"];
    let cache = Scratch::new("jobctl");
    let native = Command::new("python3")
        .arg(&driver)
        .args(shell)
        .output()
        .unwrap();
    assert!(native.status.success(), "natively: {}", stderr(&native));
    let roamed = Command::new("python3")
        .arg(&driver)
        .arg(env!("CARGO_BIN_EXE_roam"))
        .args(["run", "--"])
        .args(shell)
        .env("ROAM_CACHE_DIR", cache.join("c"))
        .env("ROAM_CONFIG", cache.join("none.toml"))
        .output()
        .unwrap();
    assert!(roamed.status.success(), "under roam: {}", stderr(&roamed));
}

#[test]
fn a_setuid_program_runs_untraced_with_its_privileges() {
    // As an unprivileged user: a setuid-root copy of cat must run as root and untraced,
    // with the caller's fds (a pipe), arguments, cwd and exit status.
    use std::os::unix::fs::PermissionsExt;
    let dir = Scratch::new("setuid");
    let cat = dir.join("cat");
    std::fs::copy("/bin/cat", &cat).unwrap();
    std::fs::set_permissions(&cat, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.join("c");
    roam_testkit::mkdir(&cache);
    std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).unwrap();
    let script = format!(
        "cd {d} && echo piped | ./cat && ./cat /proc/self/status | grep -E '^(Uid|TracerPid)' \
         | tr -s '\\t' ' '; ./cat /nonexistent 2>/dev/null; echo status=$?",
        d = dir.path.display()
    );
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_roam"))
        .args(["run", "--", "sh", "-c", &script])
        .env("ROAM_CACHE_DIR", &cache)
        .env("ROAM_CONFIG", dir.join("none.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "piped\nTracerPid: 0\nUid: 65534 0 0 0\nstatus=1\n"
    );
    assert!(
        stderr(&out).contains("is a privileged program") && stderr(&out).contains("untraced"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn when_roam_dies_no_tracee_is_left_behind() {
    // A program and its child under roam; roam is killed with SIGKILL: both must end
    // (EXITKILL) rather than stay stopped forever.
    let dir = Scratch::new("orphans");
    let pids = dir.join("pids");
    let script = format!("sleep 300 & echo $$ $! > {}; wait", pids.display());
    let mut roam = Command::new(env!("CARGO_BIN_EXE_roam"))
        .args(["run", "--", "sh", "-c", &script])
        .env("ROAM_CACHE_DIR", dir.join("c"))
        .env("ROAM_CONFIG", dir.join("none.toml"))
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let ids = loop {
        if let Ok(text) = std::fs::read_to_string(&pids) {
            if text.ends_with('\n') {
                break text;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the program never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    roam.kill().unwrap();
    roam.wait().unwrap();
    for pid in ids.split_whitespace() {
        let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        // Gone, or a zombie waiting for its parent (not stopped, not running).
        while proc_dir.exists()
            && !std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z "))
        {
            assert!(std::time::Instant::now() < deadline, "{pid} outlived roam");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
