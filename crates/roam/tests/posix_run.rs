//! POSIX behaviour of `roam run` that programs depend on, each case checked against a
//! native run of the same script on a local copy of the tree:
//! - one identity per remote file: `stat`, `lstat`, `fstat` (`stat -L /dev/stdin`) agree
//!   on device, inode, size and mtime before and after the file is fetched and across runs
//!   sharing a cache, so `cp`, `cp -r` and `cp -a` of files and trees work cold and warm,
//!   over HTTP (nginx, whose index gives mtimes to the minute) and writable backends;
//! - names at the root: a listing of `/` shows the scheme roots (`/http`, `/s3` ...) and a
//!   listing of a mount point's local parent shows it, as the kernel's mount points show;
//!   a URL of every scheme roam mounts, used as a path, names the file
//!   (`cat sftp://host/f`); a mount that cannot be looked up (a bad host) fails with the
//!   driver's errno and roam's message on stderr, not ENOENT;
//! - path-taking calls newer than most programs (`getxattrat`, `listxattrat`,
//!   `file_getattr`) see roam names as native calls see local ones; one roam does not
//!   serve (`file_setattr`) fails with ENOSYS and a line naming it;
//! - a shell's redirect of a builtin (`echo x > /w/f`) uploads when the shell puts its
//!   stdout back (a `dup2` over the file's fd), not when the shell exits;
//! - a program that dropped its privileges (root to nobody, under a `roam run` as root)
//!   meets the permission checks the kernel would make with its credentials: it cannot
//!   remove, make, write or chmod what nobody may locally. (Reading is another matter:
//!   roam's cache is private to its user, so such a program cannot read remote files.)

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::{fixture, stderr, stdout, Backend, Roam};
use roam_testkit::backend::KINDS;
use roam_testkit::{write_file, Scratch};

/// A cache directory shared by the runs of one case (cold, then warm).
fn sharing(cache: &Path) -> Roam {
    Roam::new().env("ROAM_CACHE_DIR", cache)
}

/// What a run showed: exit code, stdout and stderr with `base` and `out` written back as
/// `{}` and `{out}`.
fn shown(o: &Output, base: &str, out: &Path) -> (i32, String, String) {
    let text = |s: String| {
        s.replace(&out.display().to_string(), "{out}")
            .replace(base, "{}")
    };
    (
        o.status.code().unwrap_or(-1),
        text(stdout(o)),
        text(stderr(o)),
    )
}

/// Copies with `cp`, `cp -r` and `cp -a` from `{}` into `{out}` and shows what arrived,
/// and checks each file's identity: `stat` before reading, `fstat` of an open fd, and
/// `stat` after must agree on device, inode, size and mtime (printed as `same` or both),
/// through coreutils (`statx`) and Python (`newfstatat`, `fstat`).
const COPY_SCRIPT: &str = r#"
set -e
id() { stat -c '%d %i %s %Y' "$1"; }
same() {
    a=$(id "$1"); b=$(stat -L -c '%d %i %s %Y' /dev/stdin < "$1"); c=$(id "$1")
    l=$(stat -c '%d %i %s %Y' --dereference "$1")
    if [ "$a" = "$b" ] && [ "$b" = "$c" ] && [ "$c" = "$l" ]; then echo "same $2"; else echo "differ $2: $a / $b / $c / $l"; fi
}
same {}/proj/util.h util.h
cp {}/proj/main.c {out}/one.c
cp -r {}/dir {out}/tree
cp -a {}/proj {out}/arch
for f in main.c util.c util.h; do
    [ "$(stat -c %Y {}/proj/$f)" = "$(stat -c %Y {out}/arch/$f)" ] && echo "mtime kept $f"
    [ "$(stat -c %a {}/proj/$f)" = "$(stat -c %a {out}/arch/$f)" ] && echo "mode kept $f"
    same {}/proj/$f $f
done
same {}/dir/sub/deep.txt deep.txt
python3 -c '
import os, sys
def ident(st): return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
for p in sys.argv[1:]:
    a, l = ident(os.stat(p)), ident(os.lstat(p))
    with open(p, "rb") as f: b = ident(os.fstat(f.fileno()))
    print("python", "same" if a == l == b == ident(os.stat(p)) else "differ %s %s %s" % (a, l, b), os.path.basename(p))
' {}/proj/util.c {}/dir/sub/other.txt
cd {out} && find . | sort && find . -type f -print0 | sort -z | xargs -0 md5sum
"#;

/// Runs [`COPY_SCRIPT`] natively with `{}` = `local`, then under `roam` with `{}` =
/// `remote`, each into a fresh directory, and asserts the two showed the same.
fn copies_as_natively(roam: Roam, run_args: &[&str], local: &Path, remote: &str) {
    let scratch = Scratch::new("posix-cp");
    let (out_n, out_r) = (scratch.join("native"), scratch.join("roam"));
    for d in [&out_n, &out_r] {
        roam_testkit::mkdir(d);
    }
    let local = local.display().to_string();
    let script = |base: &str, out: &Path| {
        COPY_SCRIPT
            .replace("{}", base)
            .replace("{out}", &out.display().to_string())
    };
    let native = Command::new("sh")
        .args(["-c", &script(&local, &out_n)])
        .output()
        .unwrap();
    let roamed = roam.sh(run_args, &script(remote, &out_r));
    let native = shown(&native, &local, &out_n);
    assert_eq!(native.0, 0, "native run failed: {native:?}");
    assert_eq!(shown(&roamed, remote, &out_r), native);
}

/// The served fixture tree over HTTP, cold then warm (the second run's listings and copies
/// come from the first run's cache).
#[test]
fn cp_of_http_files_and_trees_cold_and_warm() {
    let fx = fixture();
    let cache = Scratch::new("posix-cache");
    for _run in ["cold", "warm"] {
        copies_as_natively(sharing(&cache.join("c")), &[], &fx.www, &fx.remote());
    }
}

/// The same on writable backends mounted at `/w`, cold then warm.
#[test]
fn cp_of_writable_backend_files_and_trees_cold_and_warm() {
    // FTP's listing gives mtimes to the minute, as nginx's index does.
    for kind in ["file+cache", "sftp", "ftp"] {
        let b = Backend::serving(kind, populate);
        let cache = Scratch::new("posix-cache");
        let mount = format!("/w={}", b.url);
        for _run in ["cold", "warm"] {
            let mut roam = sharing(&cache.join("c"));
            for (k, v) in b.env() {
                roam = roam.env(k, v);
            }
            copies_as_natively(roam, &["-m", &mount], &b.backend(""), "/w");
        }
    }
}

/// The part of the fixture tree [`COPY_SCRIPT`] reads.
fn populate(srv: &Path) {
    let f = |rel: &str, data: &[u8]| write_file(&srv.join(rel), data, 0o644);
    f("proj/main.c", b"int main(void) { return 0; }\n");
    f("proj/util.c", b"int twice(int x) { return 2 * x; }\n");
    f("proj/util.h", b"int twice(int x);\n");
    f("dir/a b.txt", b"a name with a space\n");
    f("dir/sub/deep.txt", b"deep down\n");
    f("dir/sub/other.txt", b"nothing to see\n");
}

/// `cat URL/FILE` and `ls URL/DIR` for a URL of each server kind, as `cat` and `ls` of the
/// served tree show natively.
#[test]
fn urls_of_every_scheme_are_paths() {
    for kind in KINDS {
        let b = Backend::serving(kind, populate);
        let script = |base: &str| format!("cat '{base}/dir/sub/deep.txt' && ls '{base}/dir/sub'");
        let native = Command::new("sh")
            .args(["-c", &script(&b.backend("").display().to_string())])
            .output()
            .unwrap();
        let mut roam = Roam::new();
        for (k, v) in b.env() {
            roam = roam.env(k, v);
        }
        let roamed = roam.sh(&[], &script(&b.url));
        assert_eq!(
            (roamed.status.code(), stdout(&roamed)),
            (Some(0), stdout(&native)),
            "{kind} ({}): {}",
            b.url,
            stderr(&roamed)
        );
    }
}

/// A name whose mount cannot be made (a host no URL can hold, a bucket name S3 refuses)
/// fails with the driver's errno (EINVAL), told on stderr, for a static program (`probe`)
/// and for coreutils.
#[test]
fn a_mount_lookup_error_reaches_the_program() {
    let probe = fixture().probe.display().to_string();
    for name in [
        "/http/bad host/f",
        "/s3/Not_A_Bucket!/f",
        "http://bad host/f",
    ] {
        let o = Roam::new().run(&[&probe, "stat", name]);
        assert_eq!(stdout(&o), "EINVAL\n", "{name}: {}", stderr(&o));
        let line = stderr(&o);
        assert!(
            line.starts_with("roam: ") && line.contains("(EINVAL)"),
            "{name}: {line}"
        );
        let o = Roam::new().run(&["cat", name]);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains("Invalid argument"), "{}", stderr(&o));
    }
}

/// Makes the raw calls `getxattrat`, `listxattrat` and `file_getattr` (Linux 6.13, 6.17;
/// no libc wraps them yet) on `argv[1]` and prints each outcome (`ok N` or the errno).
const NEW_CALLS: &str = r#"
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
path = sys.argv[1].encode()
AT_FDCWD = -100
def show(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, ctypes.c_long(AT_FDCWD), ctypes.c_char_p(path), *args)
    print(name, 'ok %d' % r if r >= 0 else errno.errorcode[ctypes.get_errno()])
value = ctypes.create_string_buffer(64)
xargs = (ctypes.c_uint64 * 2)(ctypes.addressof(value), 64)
show('getxattrat', 464, ctypes.c_uint(0), ctypes.c_char_p(b'user.roam'), xargs, ctypes.c_size_t(16))
names = ctypes.create_string_buffer(1024)
show('listxattrat', 465, ctypes.c_uint(0), names, ctypes.c_size_t(1024))
attr = ctypes.create_string_buffer(24)
show('file_getattr', 468, attr, ctypes.c_size_t(24), ctypes.c_uint(0))
if len(sys.argv) > 2:
    show('file_setattr', 469, attr, ctypes.c_size_t(24), ctypes.c_uint(0))
"#;

/// The new xattr and attribute calls on a remote file answer as on its local copy.
#[test]
fn new_path_calls_see_roam_names() {
    let fx = fixture();
    let native = Command::new("python3")
        .args(["-c", NEW_CALLS])
        .arg(fx.www.join("hello.txt"))
        .output()
        .unwrap();
    let remote = format!("{}/hello.txt", fx.remote());
    let roamed = Roam::new().run(&["python3", "-c", NEW_CALLS, &remote]);
    assert!(native.status.success(), "{}", stderr(&native));
    assert_eq!(stdout(&roamed), stdout(&native), "{}", stderr(&roamed));
}

/// A path-taking call roam does not serve fails with ENOSYS on a roam name, and roam says
/// which call it was; on a local name it is the kernel's.
#[test]
fn an_unserved_path_call_is_enosys_with_its_name() {
    let fx = fixture();
    let remote = format!("{}/hello.txt", fx.remote());
    let o = Roam::new().run(&["python3", "-c", NEW_CALLS, &remote, "set"]);
    assert!(
        stdout(&o).ends_with("file_setattr ENOSYS\n"),
        "{}",
        stdout(&o)
    );
    let line = format!("roam: file_setattr {remote}: ");
    assert!(
        stderr(&o).contains(&line) && stderr(&o).contains("(ENOSYS)"),
        "{}",
        stderr(&o)
    );
    let local = fx.www.join("hello.txt");
    let native = Command::new("python3")
        .args(["-c", NEW_CALLS])
        .arg(&local)
        .arg("set")
        .output()
        .unwrap();
    let o = Roam::new().run(&["python3", "-c", NEW_CALLS, local.to_str().unwrap(), "set"]);
    assert_eq!(stdout(&o), stdout(&native));
}

/// The implicit mounts at `/`: every scheme roam mounts (docs/SEMANTICS.md).
const SCHEMES: [&str; 9] = [
    "http", "https", "dav", "davs", "ftp", "ftps", "sftp", "chirp", "s3",
];

/// The sorted lines of `out`.
fn sorted_lines(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out.lines().map(str::to_owned).collect();
    v.sort();
    v
}

/// `ls -a /` (absolute, and as `.` from `/`), Python's `os.listdir('/')` and `ls` of a
/// mount point's parent show the local names and roam's mount points, each once.
#[test]
fn listings_of_mount_parents_show_the_mount_points() {
    let scratch = Scratch::new("posix-root");
    let parent = scratch.join("parent");
    roam_testkit::mkdir(&parent.join("local"));
    let mount = format!("{}/mp=mem:", parent.display());
    let script = format!(
        "ls -a /; echo --; cd / && ls -a; echo --; python3 -c \"import os; print('\\n'.join(os.listdir('/')))\"; echo --; ls {}",
        parent.display()
    );
    let native = Command::new("sh").args(["-c", &script]).output().unwrap();
    let roamed = Roam::new().sh(&["-m", &mount], &script);
    assert!(roamed.status.success(), "{}", stderr(&roamed));
    let parts = |o: &Output| {
        stdout(o)
            .split("--\n")
            .map(sorted_lines)
            .collect::<Vec<_>>()
    };
    let (native, roamed) = (parts(&native), parts(&roamed));
    for (i, (n, r)) in native.iter().zip(&roamed).enumerate() {
        let mut expected = n.clone();
        match i {
            3 => expected.push("mp".to_owned()),
            _ => expected.extend(
                SCHEMES
                    .iter()
                    .filter(|s| !Path::new("/").join(s).exists())
                    .map(|s| s.to_string()),
            ),
        }
        expected.sort();
        assert_eq!(r, &expected, "listing {i}");
    }
}

/// `echo x > /w/f` then reading the file behind roam's back, in a shell that goes on:
/// the bytes are on the server, as natively in the backend's own directory.
#[test]
fn a_builtin_redirect_uploads_when_the_shell_puts_stdout_back() {
    let script = r#"echo one > "$W/f"; cat "$B/f"; printf 'two\n' >> "$W/f" && cat "$B/f"; { echo three; } > "$W/g"; cat "$B/g""#;
    for kind in ["file+cache", "sftp"] {
        for shell in ["dash", "bash"] {
            let b = Backend::new(kind);
            let srv = b.backend("");
            let native = Command::new(shell)
                .args(["-c", script])
                .env("W", &srv)
                .env("B", &srv)
                .output()
                .unwrap();
            for f in ["f", "g"] {
                std::fs::remove_file(srv.join(f)).unwrap();
            }
            let mut roam = Roam::new().env("W", "/w").env("B", &srv);
            for (k, v) in b.env() {
                roam = roam.env(k, v);
            }
            let mount = format!("/w={}", b.url);
            let roamed = roam.run_args(&["-m", &mount], &[shell, "-c", script]);
            assert_eq!(
                (roamed.status.code(), stdout(&roamed)),
                (native.status.code(), stdout(&native)),
                "{kind}, {shell}: {}",
                stderr(&roamed)
            );
        }
    }
}

/// Root's tree (a 0755 directory, a 0644 file); a program that became nobody tries to
/// remove, make, write and chmod there: every exit status is the native one as nobody, and
/// the server's tree is unchanged.
#[test]
fn a_program_that_dropped_privileges_meets_its_own_permissions() {
    let b = Backend::serving("file+cache", |srv| {
        write_file(&srv.join("f"), b"root's\n", 0o644);
    });
    let srv = b.backend("");
    let script = "rm -f {}/f; echo $?; mkdir {}/d; echo $?; touch {}/x; echo $?; \
                  chmod 777 {}/f; echo $?; (echo hi > {}/f); echo $?";
    let as_nobody = |base: &str| {
        let inner = script.replace("{}", base);
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{inner}' 2>/dev/null")
    };
    let native = Command::new("sh")
        .args(["-c", &as_nobody(&srv.display().to_string())])
        .output()
        .unwrap();
    let o = b.sh(&as_nobody("/w"));
    assert_eq!(stdout(&native), "1\n1\n1\n1\n2\n", "{}", stderr(&native));
    assert_eq!(stdout(&o), stdout(&native), "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(&srv)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["f"]);
    assert_eq!(std::fs::read(srv.join("f")).unwrap(), b"root's\n");
}

/// A program that became nobody reads root's tree as it would natively: what its mode lets
/// others read (a 0644 file, a 0755 directory's listing and attributes) and no more (a
/// 0600 file: `EACCES`) and writes where it may (a 0777 directory), although roam's own
/// copies live in its private cache.
#[test]
fn a_program_that_dropped_privileges_reads_what_it_may() {
    let b = Backend::serving("file+cache", |srv| {
        write_file(&srv.join("f"), b"root's\n", 0o644);
        write_file(&srv.join("secret"), b"hidden\n", 0o600);
        roam_testkit::mkdir(&srv.join("d"));
        write_file(&srv.join("d/g"), b"in d\n", 0o644);
        roam_testkit::mkdir(&srv.join("pub"));
        std::fs::set_permissions(srv.join("pub"), PermissionsExt::from_mode(0o777)).unwrap();
    });
    let srv = b.backend("");
    let script = "cat {}/f; echo $?; cat {}/secret; echo $?; ls {}/d; echo $?; \
                  stat -c %s:%a {}/f; echo $?; head -c 3 {}/d/g; echo; echo $?; \
                  echo mine > {}/pub/{n}; echo $?; cat {}/pub/{n}; echo $?";
    let as_nobody = |base: &str, n: &str| {
        let inner = script.replace("{}", base).replace("{n}", n);
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{inner}' 2>/dev/null")
    };
    let native = Command::new("sh")
        .args(["-c", &as_nobody(&srv.display().to_string(), "n")])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&native),
        "root's\n0\n1\ng\n0\n7:644\n0\nin \n0\n0\nmine\n0\n",
        "{}",
        stderr(&native)
    );
    // Cold (nothing cached), then warm (the copies in roam's cache); a new file each time.
    for n in ["n1", "n2"] {
        let o = b.sh(&as_nobody("/w", n));
        assert_eq!(stdout(&o), stdout(&native), "{}", stderr(&o));
        assert_eq!(std::fs::read(srv.join("pub").join(n)).unwrap(), b"mine\n");
    }
}

/// A file listed before it is fetched (nginx's index gives mtimes to the minute, the
/// fetch to the second) shows one mtime before and after the fetch, under every frontend,
/// also when every stat asks the server again (T_read 0), so `make` and `rsync` never see
/// it change.
#[test]
fn a_files_mtime_stays_what_its_listing_showed_across_its_fetch() {
    use common::Frontend;
    let script = "ls /w/dir/sub > /dev/null && a=$(stat -c %Y /w/dir/sub/deep.txt) && cat /w/dir/sub/deep.txt > /dev/null && b=$(stat -c %Y /w/dir/sub/deep.txt) && echo \"$a $b\"";
    for frontend in [Frontend::Trap, Frontend::RunFuse, Frontend::Fuse] {
        let b = Backend::serving("http", |srv| {
            populate(srv);
            // 37 s into a minute: the listing shows the minute.
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_037);
            std::fs::File::options()
                .write(true)
                .open(srv.join("dir/sub/deep.txt"))
                .and_then(|f| f.set_modified(t))
                .unwrap();
        })
        .through(frontend);
        let roam = Roam::new();
        let conf = roam.cache.join("t_read.toml");
        write_file(&conf, b"[cache]\nt_read = 0\n", 0o644);
        let o = b.sh_with(roam.env("ROAM_CONFIG", &conf), script);
        assert_eq!(
            stdout(&o),
            "1500000000 1500000000\n",
            "via {frontend:?}: {}",
            stderr(&o)
        );
    }
}

/// A remote directory's ctime is its mtime, and stays so while roam fills its skeleton (a
/// fetched copy placed in it): `tar` compares a directory's stat before reading it with an
/// `fstat` after, and said "file changed as we read it" of a cached tree.
#[test]
fn a_directorys_ctime_stays_while_roam_fills_it() {
    use common::Frontend;
    let script = "a=$(stat -c '%Y %Z' /w/dir/sub) && sleep 1.1 && cat /w/dir/sub/deep.txt > /dev/null && b=$(stat -c '%Y %Z' /w/dir/sub) && c=$(python3 -c \"import os\nfd = os.open('/w/dir/sub', os.O_RDONLY)\nst = os.fstat(fd)\nprint(int(st.st_mtime), int(st.st_ctime))\") && echo \"$a / $b / $c\"";
    for frontend in [Frontend::Trap, Frontend::RunFuse, Frontend::Fuse] {
        let b = Backend::serving("file+cache", |srv| {
            populate(srv);
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
            std::fs::File::open(srv.join("dir/sub"))
                .and_then(|f| f.set_modified(t))
                .unwrap();
        })
        .through(frontend);
        let o = b.sh(script);
        let t = "1500000000 1500000000";
        assert_eq!(
            stdout(&o),
            format!("{t} / {t} / {t}\n"),
            "via {frontend:?}: {}",
            stderr(&o)
        );
    }
}

/// A tree written in the run copies out with `cp -r` when every stat asks the server
/// again (T_read 0): files whose modes the backend does not keep (0600, 0755 on WebDAV and
/// S3) keep one identity from the listing through their fetch. Under load, T_read ran out
/// between `cp -r` in and out, and `cp` said a file "was replaced while being copied".
#[test]
fn a_tree_written_in_the_run_copies_out_when_listings_expire() {
    let script = "T=$(mktemp -d) && mkdir $T/src && echo a > $T/src/a && echo s > $T/src/secret && chmod 600 $T/src/secret && echo x > $T/src/run && chmod 755 $T/src/run && cp -r $T/src /w/cpr && sleep 1.1 && cp -r /w/cpr $T/out && cat $T/out/a $T/out/secret $T/out/run && rm -r $T";
    for kind in ["dav", "s3", "sftp", "file+cache"] {
        let b = Backend::serving(kind, |_| {});
        let roam = Roam::new();
        let conf = roam.cache.join("t_read.toml");
        write_file(&conf, b"[cache]\nt_read = 0\n", 0o644);
        let o = b.sh_with(roam.env("ROAM_CONFIG", &conf), script);
        assert_eq!(stdout(&o), "a\ns\nx\n", "{kind}: {}", stderr(&o));
    }
}
