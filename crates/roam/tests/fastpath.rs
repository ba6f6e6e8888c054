//! roam's fast path under `roam run`: the library preloaded into dynamic programs makes
//! calls on local names natively (through the gadget page the filter lets through), and
//! every answer must be the one roam gives without it (`ROAM_FASTPATH=0`): on local and
//! remote names, for calls made through libc and with `syscall(2)`, through a local symlink
//! into roam, relative to a remote cwd and back, with a program's own `LD_PRELOAD`, in a
//! static program (which never loads it) and across storms of `vfork` + exec.
//!
//! The remote tree is the fixture's nginx, mounted at [`MOUNT`]; `tests/fixtures/fastcalls.c`
//! prints what each interposed call answers for each name.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{fixture, stderr, stdout, Roam};
use roam_testkit::{required, write_file, Scratch};

const MOUNT: &str = "/roam-www";

/// The fixture programs, built once: `fastcalls` (dynamic) and `userhook.so`.
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = fixture().probe.parent().unwrap().join("fastpath");
        roam_testkit::mkdir(&dir);
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for (out, args) in [
            ("fastcalls", &["-O1", "-Wall"][..]),
            ("userhook.so", &["-O1", "-Wall", "-shared", "-fPIC"][..]),
        ] {
            let name = out.trim_end_matches(".so");
            let o = Command::new("cc")
                .args(args)
                .arg("-o")
                .arg(dir.join(out))
                .arg(src.join(format!("{name}.c")))
                .arg("-ldl")
                .output()
                .expect("running cc");
            assert!(o.status.success(), "building {name}.c: {}", stderr(&o));
        }
        dir
    })
}

fn fastcalls() -> String {
    built().join("fastcalls").to_str().unwrap().to_owned()
}

/// `sh -c script` under roam with the tree mounted, with the fast path or without.
fn run(fastpath: bool, script: &str) -> Output {
    run_with(roam(fastpath), script)
}

fn roam(fastpath: bool) -> Roam {
    let r = Roam::new();
    if fastpath {
        r
    } else {
        r.env("ROAM_FASTPATH", "0")
    }
}

fn run_with(roam: Roam, script: &str) -> Output {
    let mount = format!("{MOUNT}={}", fixture().server.url());
    roam.sh(&["-m", &mount], script)
}

/// The script's stdout with and without the fast path, which must agree; the library must
/// have been loaded only with it. Returns the stdout.
fn same_both_ways(script: &str) -> String {
    let (fast, slow) = (run(true, script), run(false, script));
    assert!(fast.status.success(), "{script}: {}", stderr(&fast));
    assert_eq!(stdout(&fast), stdout(&slow), "{script}: with and without");
    assert!(
        stderr(&fast).contains("fastpath loaded"),
        "{}",
        stderr(&fast)
    );
    assert!(
        !stderr(&slow).contains("fastpath loaded"),
        "{}",
        stderr(&slow)
    );
    stdout(&fast)
}

const NAMES: [&str; 5] = [
    "hello.txt",
    "dir/sub/deep.txt",
    "dir/sub",
    "missing.txt",
    "hello.txt/x",
];

#[test]
fn libc_calls_and_direct_system_calls_answer_as_without_the_fast_path() {
    let www = fixture().www.to_str().unwrap().to_owned();
    let names = |base: &str| NAMES.map(|n| format!("{base}/{n}")).join(" ");
    let script = format!("{} {} {}", fastcalls(), names(&www), names(MOUNT));
    let out = same_both_ways(&script);
    let native = Command::new(fastcalls())
        .args(NAMES.map(|n| format!("{www}/{n}")))
        .output()
        .unwrap();
    let native = stdout(&native);
    // Local names as natively; remote names as the same files would be, where they are.
    let (local, remote) = out.split_at(native.len());
    assert_eq!(local, native);
    assert_eq!(remote.replace(MOUNT, &www), native);
    assert!(
        native.contains("hello.txt: stat=46 lstat=8 syscall=46 access=0 read=46 first=first line"),
        "{native}"
    );
    assert!(native.contains("missing.txt: stat=ENOENT"), "{native}");
    assert!(native.contains("hello.txt/x: stat=ENOTDIR"), "{native}");
}

#[test]
fn a_programs_own_preload_library_sees_calls_first() {
    let www = fixture().www.to_str().unwrap().to_owned();
    let hook = built().join("userhook.so");
    let script = format!("{} {www}/hello.txt {MOUNT}/hello.txt", fastcalls());
    let o = run_with(roam(true).env("LD_PRELOAD", &hook), &script);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("fastpath loaded"), "{}", stderr(&o));
    let out = stdout(&o);
    for base in [www.as_str(), MOUNT] {
        // The program's hook ran (its +1000000), over roam's answer; syscall(2) bypasses it.
        let line = format!("{base}/hello.txt: stat=1000046 lstat=8 syscall=46 access=0");
        assert!(out.contains(&line), "{out}");
    }
}

#[test]
fn a_static_program_is_served_as_without_the_library() {
    let bb = required("busybox", "busybox-static");
    let www = fixture().www.to_str().unwrap().to_owned();
    let script = format!(
        "{bb} stat -c %s {www}/hello.txt {MOUNT}/hello.txt {MOUNT}/dir/sub/deep.txt; \
         {bb} cat {MOUNT}/dir/sub/deep.txt; {bb} readlink -f {MOUNT}/dir/../hello.txt",
        bb = bb.display()
    );
    for fastpath in [true, false] {
        let o = run(fastpath, &script);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            stdout(&o),
            format!("46\n46\n32\ndeep down there is a needle too\n{MOUNT}/hello.txt\n")
        );
    }
}

#[test]
fn a_local_symlink_into_roam_resolves_through_realpath_and_stat() {
    let dir = Scratch::new("fastlink");
    std::os::unix::fs::symlink(format!("{MOUNT}/dir"), dir.join("link")).unwrap();
    let d = dir.path.display();
    let script = format!(
        "{} {d}/link/sub/deep.txt {d}/link {d}/link/sub/missing.txt; realpath {d}/link/sub; \
         stat -L -c %s {d}/link/sub/deep.txt; cat {d}/link/sub/deep.txt",
        fastcalls()
    );
    let out = same_both_ways(&script);
    assert!(
        out.contains(&format!(
            "{d}/link/sub/deep.txt: stat=32 lstat=8 syscall=32 access=0 read=32 \
             first=deep down there is a needle too realpath={MOUNT}/dir/sub/deep.txt readlink=EINVAL\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("realpath={MOUNT}/dir readlink={MOUNT}/dir\n")),
        "{out}"
    );
    assert!(out.contains("missing.txt: stat=ENOENT"), "{out}");
    assert!(
        out.ends_with(&format!(
            "{MOUNT}/dir/sub\n32\ndeep down there is a needle too\n"
        )),
        "{out}"
    );
}

#[test]
fn relative_names_follow_the_cwd_into_roam_and_back() {
    let local = Scratch::new("fastcwd");
    write_file(&local.join("hello.txt"), b"local hello\n", 0o644);
    let l = local.path.display();
    let f = fastcalls();
    // Within one process (chdir in the program) and across execs (cd in the shell).
    let script = format!(
        "{f} cd:{MOUNT}/dir sub/deep.txt 'a b.txt' hello.txt cd:{l} hello.txt sub/deep.txt; \
         cd {MOUNT}/dir && {f} sub/deep.txt hello.txt && cat sub/deep.txt && cd {l} && {f} hello.txt sub/deep.txt"
    );
    let out = same_both_ways(&script);
    let deep = "sub/deep.txt: stat=32 lstat=8 syscall=32 access=0 read=32 first=deep down there";
    let local_hello = "hello.txt: stat=12 lstat=8 syscall=12 access=0 read=12 first=local hello";
    assert_eq!(out.matches(deep).count(), 2, "{out}");
    assert!(out.contains("a b.txt: stat=20"), "{out}");
    assert_eq!(out.matches(local_hello).count(), 2, "{out}");
    assert_eq!(out.matches("hello.txt: stat=ENOENT").count(), 2, "{out}");
    assert_eq!(out.matches("sub/deep.txt: stat=ENOENT").count(), 2, "{out}");
}

#[test]
fn vfork_and_exec_storms_get_the_same_answers() {
    let www = fixture().www.to_str().unwrap().to_owned();
    // Python's subprocess starts children with vfork; os.posix_spawn with clone(CLONE_VFORK).
    let script = format!(
        r#"python3 -c '
import os, subprocess, sys
argv = ["{f}", "{www}/hello.txt", "{MOUNT}/hello.txt", "{MOUNT}/dir/sub/deep.txt"]
seen = set()
for i in range(40):
    seen.add(subprocess.run(argv, capture_output=True).stdout)
    r, w = os.pipe()
    pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=[(os.POSIX_SPAWN_DUP2, w, 1)])
    os.close(w)
    seen.add(os.read(r, 65536))
    os.close(r)
    os.waitpid(pid, 0)
print(len(seen))
sys.stdout.write(seen.pop().decode())
'; {f} /dev/null"#,
        f = fastcalls()
    );
    let out = same_both_ways(&script);
    assert!(out.starts_with("1\n"), "{out}");
    assert!(
        out.contains(&format!("{MOUNT}/dir/sub/deep.txt: stat=32")),
        "{out}"
    );
    assert!(out.contains(&format!("{www}/hello.txt: stat=46")), "{out}");
}

/// A program that drops to another user still loads the library (it is readable by every
/// user: its bytes are no secret), so ld.so has nothing to say on stderr.
#[test]
fn a_program_that_drops_to_another_user_loads_the_library_silently() {
    let script = "setpriv --reuid=65534 --regid=65534 --clear-groups cat /etc/hostname >/dev/null && echo ran";
    let o = run(true, script);
    assert_eq!(stdout(&o), "ran\n", "{}", stderr(&o));
    assert!(!stderr(&o).contains("preloaded"), "{}", stderr(&o));
}
