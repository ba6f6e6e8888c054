//! Debuggers and tracers inside roam (Parrot §2): `gdb` and `strace -f` run under
//! `roam run` on programs that use remote files. roam hands the debugged process over to
//! the debugger and serves its names from afar (seccomp notifications), so the debugger
//! gets real ptrace: breakpoints, steps, backtraces, attach by pid.
//!
//! The debuggee is `tests/fixtures/debuggee.c`, built here with debug information.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{fixture, stderr, stdout, Roam};
use roam_testkit::{required, Scratch};

/// The debuggee, built once per test binary.
fn debuggee() -> &'static Path {
    static BUILT: OnceLock<(Scratch, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = Scratch::new("debuggee");
            let bin = dir.join("debuggee");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/debuggee.c");
            let o = Command::new(required("/usr/bin/gcc", "gcc"))
                .args(["-g", "-O0", "-o"])
                .arg(&bin)
                .arg(src)
                .output()
                .unwrap();
            assert!(o.status.success(), "gcc: {}", stderr(&o));
            (dir, bin)
        })
        .1
}

/// Every debugger runs under `timeout`: a handover gone wrong leaves a debugger waiting
/// for ever (stopped: only SIGKILL ends it), which must fail the case, not hang the suite.
const LIMIT: &str = "timeout -s KILL 60";

fn gdb() -> String {
    let gdb = required("/usr/bin/gdb", "gdb");
    format!("{LIMIT} {}", gdb.display())
}

fn strace() -> String {
    let strace = required("/usr/bin/strace", "strace");
    format!("{LIMIT} {}", strace.display())
}

/// `gdb()` or `strace()` as argument words.
fn words(tool: &str) -> Vec<&str> {
    tool.split(' ').collect()
}

/// Both ways roam's calls reach it: the listener (the default on Linux 6.6+; the process
/// keeps roam's listener once handed over) and ptrace stops (`ROAM_NOTIFY=0`; a second
/// filter with a listener of its own goes in at the handover).
#[test]
fn gdb_breaks_steps_and_backtraces_a_program_reading_a_remote_file() {
    for notify in ["1", "0"] {
        gdb_breaks_steps_and_backtraces(notify);
    }
}

fn gdb_breaks_steps_and_backtraces(notify: &str) {
    let hello = format!("{}/hello.txt", fixture().remote());
    let prog = debuggee().display().to_string();
    let gdb = gdb();
    let out = Roam::new().env("ROAM_NOTIFY", notify).run(
        &[
            &words(&gdb)[..],
            &[
                "-batch",
                "-nx",
                "-ex",
                "break count_lines",
                "-ex",
                "run",
                "-ex",
                "bt",
                "-ex",
                "next",
                "-ex",
                "continue",
                "--args",
                &prog,
                &hello,
            ],
        ]
        .concat(),
    );
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "ROAM_NOTIFY={notify} gdb: {so}{se}");
    assert!(
        so.contains("Breakpoint 1, count_lines (path=0x")
            && so.contains(&format!("\"{hello}\") at")),
        "the breakpoint is hit with the virtual name: {so}"
    );
    assert!(so.contains(" in main (argc=2"), "backtrace: {so}");
    assert!(
        so.contains("\t    if (!f) {"),
        "a step to the next line: {so}"
    );
    assert!(so.contains("lines=3\n"), "the remote file was read: {so}");
    assert!(so.contains("exited normally"), "{so}");
    assert!(!se.contains("roam:"), "nothing to complain about: {se}");
}

#[test]
fn strace_f_shows_the_virtual_names_a_program_opens() {
    let remote = fixture().remote();
    let log = Scratch::new("strace");
    let trace = log.join("trace");
    // One process at a time: strace splits the lines of calls that overlap.
    let script = format!("wc -l < {remote}/hello.txt; cat {remote}/dir/sub/deep.txt");
    let strace = strace();
    let out = Roam::new().run(
        &[
            &words(&strace)[..],
            &[
                "-f",
                "-e",
                "trace=openat",
                "-o",
                trace.to_str().unwrap(),
                "sh",
                "-c",
                &script,
            ],
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "3\ndeep down there is a needle too\n");
    let trace = std::fs::read_to_string(trace).unwrap();
    for name in ["hello.txt", "dir/sub/deep.txt"] {
        let line = trace
            .lines()
            .find(|l| l.contains(&format!("openat(AT_FDCWD, \"{remote}/{name}\", O_RDONLY")))
            .unwrap_or_else(|| panic!("no open of {name} in the trace: {trace}"));
        let ret = line.rsplit("= ").next().unwrap();
        assert!(ret.parse::<i32>().is_ok_and(|fd| fd >= 0), "{line}");
    }
}

#[test]
fn gdb_attaches_to_a_running_process_that_goes_on_reading_remote_files() {
    let out = gdb_attaches("", "info inferiors", "^\\* 1 *process");
    assert_eq!(
        stdout(&out),
        "1\nfirst line\nsecond line with needle\nthird line\n",
        "gdb attached, and the process read the remote file afterwards: {}",
        stderr(&out)
    );
}

/// A Python program (with `setup` run first) started under roam, which gdb attaches to by
/// pid with `-ex CMD` and detaches from; the program then reads the fixture's remote
/// `hello.txt`. Returns the run: on stdout, how many lines of gdb's output matched
/// `pattern`, then what the program printed.
fn gdb_attaches(setup: &str, cmd: &str, pattern: &str) -> std::process::Output {
    let remote = fixture().remote();
    let dir = Scratch::new("attach-gdb");
    let flag = dir.join("go");
    // It tells when it is ready, then waits for the flag, set after gdb detached.
    let py = format!(
        "import os, sys, threading, time\n{setup}\
         open(sys.argv[1] + '.ready', 'w').close()\n\
         while not os.path.exists(sys.argv[1]): time.sleep(0.02)\n\
         print(open(sys.argv[2]).read(), end='')\n"
    );
    let script = format!(
        "python3 -c \"$PY\" {flag} {remote}/hello.txt & p=$!\n\
         while [ ! -e {flag}.ready ]; do sleep 0.02; done\n\
         {gdb} -batch -nx -p $p -ex '{cmd}' -ex detach 2>&1 | grep -c '{pattern}'\n\
         touch {flag}; wait $p",
        flag = flag.display(),
        gdb = gdb()
    );
    let out = Roam::new().env("PY", py).sh(&[], &script);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    out
}

#[test]
fn a_debugged_program_writes_a_remote_file_uploaded_at_its_close() {
    let hello = format!("{}/hello.txt", fixture().remote());
    let srv = Scratch::new("debuggee-writes");
    let mount = format!("/w=file+cache://{}", srv.path.display());
    let prog = debuggee().display().to_string();
    // gdb's own `shell` looks at the server while roam (and gdb) still run: the upload
    // happened at the program's fclose, not at the end of the run.
    let look = format!("shell cat {}/out.txt", srv.path.display());
    let gdb = gdb();
    let out = Roam::new().cli(
        &[
            &["run", "-m", &mount, "--"],
            &words(&gdb)[..],
            &[
                "-batch",
                "-nx",
                "-ex",
                "run",
                "-ex",
                &look,
                "--args",
                &prog,
                &hello,
                "/w/out.txt",
            ],
        ]
        .concat(),
    );
    let so = stdout(&out);
    assert!(out.status.success(), "{so}{}", stderr(&out));
    assert!(
        so.contains("lines=3\n") && so.contains(&format!("{hello} has 3 lines\n")),
        "{so}"
    );
}

#[test]
fn a_debugged_program_finds_relative_names_but_cannot_enter_a_remote_directory() {
    let remote = fixture().remote();
    // An inherited remote working directory works for relative names.
    let script = format!(
        "cd {remote}/dir/sub && {} -f -o /dev/null cat deep.txt",
        strace()
    );
    let out = Roam::new().sh(&[], &script);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "deep down there is a needle too\n");
    // Moving into one is a change of the thread itself, which roam cannot make from afar.
    let script = format!(
        "{} -f -o /dev/null sh -c 'cd {remote}/dir 2>/dev/null; echo $?'",
        strace()
    );
    let out = Roam::new().sh(&[], &script);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "2\n", "the shell's cd failed");
    assert!(
        stderr(&out)
            .contains("chdir: a process under a debugger cannot move into a remote directory"),
        "roam says why: {}",
        stderr(&out)
    );
}

#[test]
fn gdb_attaches_to_every_thread_of_a_process_that_goes_on_reading_remote_files() {
    // A second thread stats the remote file in a loop all along.
    let spin = "def spin():\n    while True: os.stat(sys.argv[2]); time.sleep(0.01)\n\
                threading.Thread(target=spin, daemon=True).start()\n";
    let out = gdb_attaches(spin, "info threads", "^[ *] *[0-9][0-9]* *Thread ");
    assert_eq!(
        stdout(&out),
        "2\nfirst line\nsecond line with needle\nthird line\n",
        "gdb saw both threads, and the process read the remote file afterwards: {}",
        stderr(&out)
    );
}

#[test]
fn a_debugged_program_that_dropped_its_privileges_reads_as_itself() {
    // roam makes a handed-over process's calls on roam names itself, with roam's
    // credentials; for a program that changed its own (root becoming nobody here: the
    // suite runs as root, as CI does) it checks them first, as the kernel would: a file
    // others may read is read, a 0600 one is EACCES.
    assert!(
        nix::unistd::geteuid().is_root(),
        "this case drops root's privileges"
    );
    let dir = roam_testkit::Scratch::new("dropped");
    roam_testkit::write_file(&dir.join("open"), b"open\n", 0o644);
    roam_testkit::write_file(&dir.join("secret"), b"secret\n", 0o600);
    let mount = format!("/w=file+cache://{}", dir.path.display());
    let strace = strace();
    let drop = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let out = Roam::new().run_args(
        &["-m", &mount],
        &[
            &words(&strace)[..],
            &["-f", "-o", "/dev/null"],
            &drop,
            &["cat", "/w/open", "/w/secret"],
        ]
        .concat(),
    );
    assert_eq!(stdout(&out), "open\n", "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("/w/secret: Permission denied"), "{err}");
}
