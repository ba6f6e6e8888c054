//! The FUSE frontend end to end: the read and write cases of the `roam run` suites on a
//! `roam mount` of every backend, a POSIX semantics suite, and mounting itself (a non-root
//! user through fusermount3, a server that dies, roam killed with -9).

mod common;

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use common::fuse::{is_mounted, FuseMount};
use common::read_cases::read_suite;
use common::write_cases::ok;
use common::Frontend::Fuse;
use common::{stderr, stdout, Roam};
use roam_testkit::Scratch;

common::write_cases::for_each_backend!(Fuse);

mod read {
    use super::*;

    #[test]
    fn webdav() {
        read_suite("dav", Fuse);
    }

    #[test]
    fn ftp() {
        read_suite("ftp", Fuse);
    }

    #[test]
    fn sftp() {
        read_suite("sftp", Fuse);
    }

    #[test]
    fn chirp() {
        read_suite("chirp", Fuse);
    }

    #[test]
    fn s3() {
        read_suite("s3", Fuse);
    }

    #[test]
    fn local_through_the_cache() {
        read_suite("file+cache", Fuse);
    }
}

/// POSIX semantics on a mount of `url`: what a local file system does, or the precise
/// errno where the backend cannot (hard links).
fn posix_suite(roam: Roam, url: &str, hard_links: bool) {
    let m = FuseMount::start(roam, Some(url), &[]);
    let sh = |script: &str| ok(&m.sh(&format!("cd /w && {script}"), &[]));
    // Permission bits are kept and shown.
    assert_eq!(sh("echo x > p && chmod 640 p && stat -c %a p"), "640\n");
    // rename over an existing file replaces it, atomically for a reader.
    assert_eq!(
        sh("echo old > y && echo new > x && mv x y && cat y && ls | grep -c '^[xy]$'"),
        "new\n1\n"
    );
    // An unlinked file stays readable through the fds open on it.
    assert_eq!(
        sh("echo kept > u && exec 3<u && rm u && cat <&3 && ls u 2>/dev/null; echo $?"),
        "kept\n2\n"
    );
    // Sparse files: a hole reads as zeros, the size is exact.
    assert_eq!(
        sh("dd if=/dev/zero of=s bs=1 count=1 seek=3000000 status=none && stat -c %s s && cmp -n 3000001 s /dev/zero && echo zeros"),
        "3000001\nzeros\n"
    );
    // O_APPEND from two processes loses nothing.
    let o = m.sh("cd /w && (for i in $(seq 100); do echo A$i; done >> log) & (for i in $(seq 100); do echo B$i; done >> /w/log); wait; wc -l < /w/log", &[]);
    assert_eq!(stdout(&o).trim(), "200", "{}", stderr(&o));
    // A shared mapping written, then read back with read(2) after munmap and close.
    let mmap = "import mmap, os\nfd = os.open('mm', os.O_RDWR | os.O_CREAT, 0o644)\nos.ftruncate(fd, 8192)\nm = mmap.mmap(fd, 8192)\nm[4096:4101] = b'hello'\nm.flush(); m.close(); os.close(fd)\nprint(open('mm', 'rb').read()[4090:4105])";
    assert_eq!(
        sh(&format!("python3 -c \"{mmap}\"")),
        "b'\\x00\\x00\\x00\\x00\\x00\\x00hello\\x00\\x00\\x00\\x00'\n"
    );
    // A missing name is remembered as absent (for T_read), yet what is made through the
    // mount shows at once: a file from another process, a directory, a rename's target;
    // and a removed name is gone at once.
    assert_eq!(
        sh("for i in 1 2; do ls n d t 2>/dev/null; done; sh -c 'echo y > n' && mkdir d && echo z > s && mv s t && cat n t && ls -d d && rm n && ls n 2>/dev/null; echo $?"),
        "y\nz\nd\n2\n"
    );
    // A file uploaded at the close of a dup of its fd, then chmod'ed and touched while the
    // fd is still open: stat shows the new mode and time.
    assert_eq!(
        sh("exec 3>o; echo x >&3; chmod 640 o && touch -d @1000000000 o && stat -c '%a %Y %s' o"),
        "640 1000000000 2\n"
    );
    // A write-only fd writes straight through, past the page cache: the pages another fd
    // cached of what it changed are dropped, so that fd reads the new bytes.
    let coherent = "import os\nopen('c', 'w').write('aaaa')\nr = os.open('c', os.O_RDONLY)\nos.read(r, 4)\nw = os.open('c', os.O_WRONLY)\nos.pwrite(w, b'bb', 1)\nos.close(w)\nprint(os.pread(r, 4, 0), open('c').read())";
    assert_eq!(sh(&format!("python3 -c \"{coherent}\"")), "b'abba' abba\n");
    let o = m.sh("cd /w && echo l > h && ln h h2 && stat -c %h h", &[]);
    if hard_links {
        assert_eq!(stdout(&o), "2\n", "{}", stderr(&o));
    } else {
        assert!(
            stderr(&o).contains("Operation not permitted"),
            "no hard links: EPERM, as Linux says: {}",
            stderr(&o)
        );
    }
}

mod posix {
    use super::Roam;

    #[test]
    fn mem() {
        super::posix_suite(Roam::new(), "mem:", true);
    }

    #[test]
    fn local_in_place_through_null() {
        let dir = roam_testkit::Scratch::new("null");
        super::posix_suite(Roam::new(), &format!("null:{}", dir.path.display()), true);
    }

    #[test]
    fn local_through_the_cache() {
        let dir = roam_testkit::Scratch::new("cached");
        let url = format!("file+cache://{}", dir.path.display());
        super::posix_suite(Roam::new(), &url, false);
    }
}

/// Requests through FUSE over io_uring (`ROAM_FUSE_URING=1`): the POSIX suite, the
/// concurrent writers, remote backends and passthrough, as through `/dev/fuse`.
mod uring {
    use super::*;
    use common::write_cases;
    use common::Backend;

    fn uring() -> Roam {
        Roam::new().env("ROAM_FUSE_URING", "1")
    }

    fn mounted(kind: &str) -> Backend {
        Backend::new(kind)
            .through(Fuse)
            .with_env("ROAM_FUSE_URING", "1")
    }

    /// Whether this kernel lets FUSE servers use io_uring (`.ci/run` turns it on).
    fn allowed() -> bool {
        fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
            .is_ok_and(|v| v.trim() == "Y")
    }

    /// What the mount said about its transport (it says so once, right after mounting).
    fn transport(m: &FuseMount) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = m.log_text();
            if let Some(line) = log.lines().find(|l| l.contains(": requests through ")) {
                return line.to_owned();
            }
            assert!(Instant::now() < deadline, "no transport line: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_cached_listing_shows_a_file_made_elsewhere_after_t_read() {
        cached_listing(uring());
    }

    #[test]
    fn the_mount_says_which_transport_it_took() {
        let m = FuseMount::start(uring(), Some("mem:"), &[]);
        assert_eq!(ok(&m.sh("echo x > /w/f && cat /w/f", &[])), "x\n");
        let line = transport(&m);
        // Where the kernel does not allow it, the mount falls back to /dev/fuse.
        let expected = match allowed() {
            true => "requests through FUSE over io_uring (",
            false => "requests through /dev/fuse (",
        };
        assert!(line.contains(expected), "{line}");
        let plain = Roam::new().env("ROAM_FUSE_URING", "0");
        let plain = FuseMount::start(plain, Some("mem:"), &[]);
        let line = transport(&plain);
        assert!(
            line.contains("requests through /dev/fuse (2 readers)"),
            "{line}"
        );
    }

    /// The rings answer no extended attributes: a mount that serves roam's (`--xattrs`)
    /// takes its requests through /dev/fuse.
    #[test]
    fn a_mount_with_xattrs_goes_through_dev_fuse() {
        let m = FuseMount::start(uring(), Some("mem:"), &["--xattrs"]);
        let line = transport(&m);
        assert!(
            line.contains("requests through /dev/fuse (2 readers)"),
            "{line}"
        );
    }

    #[test]
    fn posix_mem() {
        posix_suite(uring(), "mem:", true);
    }

    #[test]
    fn posix_local_in_place_through_null() {
        let dir = Scratch::new("null");
        posix_suite(uring(), &format!("null:{}", dir.path.display()), true);
    }

    #[test]
    fn posix_local_through_the_cache() {
        let dir = Scratch::new("cached");
        posix_suite(
            uring(),
            &format!("file+cache://{}", dir.path.display()),
            false,
        );
    }

    #[test]
    fn concurrent_appenders_in_place() {
        write_cases::concurrent_appenders_lose_nothing(&mounted("file"));
    }

    #[test]
    fn concurrent_appenders_through_the_cache() {
        write_cases::concurrent_appenders_lose_nothing(&mounted("file+cache"));
    }

    #[test]
    fn forked_and_execed_writers_in_place() {
        write_cases::forked_and_execed_writers_share_an_fd(&mounted("file"));
    }

    /// `kind` under `roam run --fuse` over io_uring.
    fn run_fuse(kind: &str) -> Backend {
        Backend::new(kind)
            .through(common::Frontend::RunFuse)
            .with_env("ROAM_FUSE_URING", "1")
    }

    #[test]
    fn a_touch_during_the_upload_of_a_release_lands_after_it() {
        super::a_touch_during_the_upload_of_a_release_lands_after_it(&run_fuse("sftp"));
    }

    #[test]
    fn chmod_right_after_close_finds_the_file_over_sftp() {
        super::chmod_right_after_close_finds_the_file(&mounted("sftp"));
    }

    #[test]
    fn files_left_open_at_exit_are_delivered_over_sftp() {
        super::files_left_open_at_exit_are_delivered(&run_fuse("sftp"));
    }

    #[test]
    fn files_left_open_at_exit_are_delivered_over_webdav() {
        super::files_left_open_at_exit_are_delivered(&run_fuse("dav"));
    }

    #[test]
    fn forked_and_execed_writers_through_the_cache() {
        write_cases::forked_and_execed_writers_share_an_fd(&mounted("file+cache"));
    }

    /// Requests that wait for a server hold their ring entry, not the queue.
    #[test]
    fn round_trips_through_sftp() {
        write_cases::round_trips_are_byte_exact(&mounted("sftp"));
    }

    #[test]
    fn andrew_like_through_webdav() {
        write_cases::andrew_like_copy_build_delete(&mounted("dav"));
    }

    #[test]
    fn a_null_layer_passes_reads_and_writes_to_the_kernel() {
        null_layer_passthrough(uring());
    }
}

/// rot13 over a local directory: names and contents rotated on the way down, restored on
/// the way up.
#[test]
fn rot13_layer_rotates_names_and_contents() {
    let dir = Scratch::new("rot13");
    let m = FuseMount::start(
        Roam::new(),
        Some(&format!("rot13:file://{}", dir.path.display())),
        &[],
    );
    assert_eq!(
        ok(&m.sh(
            "mkdir /w/Dir && echo 'Hello, World' > /w/Dir/a.txt && cat /w/Dir/a.txt && ls /w",
            &[]
        )),
        "Hello, World\nDir\n"
    );
    assert_eq!(
        fs::read_to_string(dir.join("Qve/n.gkg")).unwrap(),
        "Uryyb, Jbeyq\n"
    );
}

/// The whole namespace: `DIR/http/HOST:PORT/...` and explicit mounts side by side.
#[test]
fn the_whole_namespace_is_one_mount() {
    let fx = common::fixture();
    let m = FuseMount::start(Roam::new(), None, &["-m", "/scratch/area=mem:"]);
    let host = fx.server.authority();
    let script = format!(
        "cat /w/http/{host}/hello.txt | head -1 && ls /w && ls /w/scratch && echo x > /w/scratch/area/f && cat /w/scratch/area/f"
    );
    let out = ok(&m.sh(&script, &[]));
    assert!(out.starts_with("first line\n"), "{out}");
    for name in ["http\n", "s3\n", "scratch\n", "area\n", "x\n"] {
        assert!(out.contains(name), "{name:?} in {out}");
    }
    let o = m.sh("cat /w/nothere; mkdir /w/new", &[]);
    assert!(
        stderr(&o).contains("/w/nothere: No such file or directory"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("mkdir: cannot create directory ‘/w/new’: Read-only file system"),
        "{}",
        stderr(&o)
    );
}

/// URLs as paths, as far as the kernel lets them through: it reads `DIR/http://h/f` as
/// `DIR/http:/h/f`, and `http:` at the root is a symlink to `http`; from the root as cwd a
/// bare URL works too. The alias is not listed and cannot be removed.
#[test]
fn urls_work_as_paths_at_the_root_of_the_whole_namespace() {
    let fx = common::fixture();
    let m = FuseMount::start(Roam::new(), None, &[]);
    let host = fx.server.authority();
    let script = format!(
        "head -1 /w/http://{host}/hello.txt && cd /w && head -1 http://{host}/hello.txt && readlink http: && ls /w | grep -c : ; rm /w/ftp:"
    );
    let o = m.sh(&script, &[]);
    assert_eq!(
        stdout(&o),
        "first line\nfirst line\nhttp\n0\n",
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("cannot remove '/w/ftp:': Read-only file system"),
        "{}",
        stderr(&o)
    );
}

/// A server that accepts connections and never answers: the request fails with
/// ETIMEDOUT after roam's read timeout, and the mount keeps serving meanwhile.
#[test]
fn a_hung_server_times_out_and_the_mount_stays_usable() {
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hung.local_addr().unwrap().port();
    let roam = Roam::new();
    let conf = roam.cache.join("timeouts.toml");
    fs::write(&conf, "[http]\nconnect_timeout = 2\nread_timeout = 2\n").unwrap();
    let m = FuseMount::start(roam.env("ROAM_CONFIG", &conf), None, &["-m", "/m=mem:"]);
    let path = m.dir.join(format!("http/127.0.0.1:{port}/f"));
    let start = Instant::now();
    let reader = std::thread::spawn(move || fs::read(path).map_err(|e| e.raw_os_error()));
    std::thread::sleep(Duration::from_millis(300));
    // Another request meanwhile is served at once.
    let t = Instant::now();
    assert_eq!(ok(&m.sh("echo ok > /w/m/f && cat /w/m/f", &[])), "ok\n");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "blocked by the hung server"
    );
    let res = reader.join().unwrap();
    assert_eq!(res, Err(Some(libc::ETIMEDOUT)));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}

/// A server that is gone: EHOSTUNREACH at once, never a hang.
#[test]
fn a_dead_server_fails_fast() {
    let port = roam_testkit::free_port();
    let m = FuseMount::start(Roam::new(), None, &[]);
    let start = Instant::now();
    let err = fs::read(m.dir.join(format!("http/127.0.0.1:{port}/f"))).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EHOSTUNREACH), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// kill -9 of roam leaves no dead mount behind; SIGTERM and `roam umount` unmount and
/// end roam cleanly.
mod unmount {
    use super::*;

    #[test]
    fn kill_9_leaves_no_stale_mount() {
        let mut m = FuseMount::start(Roam::new(), Some("mem:"), &[]);
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) };
        m.wait_exit(Duration::from_secs(5)).expect("roam ended");
        let deadline = Instant::now() + Duration::from_secs(5);
        while is_mounted(&m.dir) {
            assert!(Instant::now() < deadline, "still mounted 5 s after kill -9");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            fs::read_dir(&m.dir).is_ok(),
            "the directory is usable again"
        );
    }

    #[test]
    fn sigterm_unmounts() {
        let mut m = FuseMount::start(Roam::new(), Some("mem:"), &[]);
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) };
        let status = m.wait_exit(Duration::from_secs(5)).expect("roam ended");
        assert!(status.success(), "{status}: {}", m.log_text());
        assert!(!is_mounted(&m.dir));
    }

    #[test]
    fn roam_umount_ends_roam() {
        let mut m = FuseMount::start(Roam::new(), Some("mem:"), &[]);
        let o = Roam::new()
            .command()
            .arg("umount")
            .arg(&m.dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let status = m.wait_exit(Duration::from_secs(5)).expect("roam ended");
        assert!(status.success(), "{status}");
        assert!(!is_mounted(&m.dir));
    }

    /// The watcher of a roam that ended cleanly leaves alone the next mount made there.
    #[test]
    fn a_new_mount_survives_the_end_of_the_old_one() {
        let roam = Roam::new();
        let dir = Scratch::new("remount");
        let _guard = common::fuse::UnmountOnDrop(dir.path.clone());
        let mount = || {
            roam.command()
                .arg("mount")
                .arg(&dir.path)
                .arg("mem:")
                .output()
                .unwrap()
        };
        assert!(mount().status.success());
        let umount = Command::new("fusermount3")
            .arg("-u")
            .arg(&dir.path)
            .status()
            .unwrap();
        assert!(umount.success());
        assert!(mount().status.success());
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            is_mounted(&dir.path),
            "the old roam's watcher unmounted the new mount"
        );
    }

    #[test]
    fn a_daemon_returns_once_mounted() {
        let roam = Roam::new();
        let dir = Scratch::new("daemon");
        let o = roam
            .command()
            .arg("mount")
            .arg(&dir.path)
            .arg("mem:")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(is_mounted(&dir.path), "mounted when roam mount returned");
        assert!(
            stderr(&o).contains(": requests through "),
            "says its transport once: {}",
            stderr(&o)
        );
        fs::write(dir.join("f"), b"x").unwrap();
        let o = roam
            .command()
            .arg("umount")
            .arg(&dir.path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!is_mounted(&dir.path));
    }
}

/// `sh -c SCRIPT` as nobody (uid and gid 65534, no supplementary groups).
fn nobody_sh(script: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sh",
        "-c",
        script,
    ]);
    c
}

/// A user without privileges mounts through the setuid fusermount3, and the kernel
/// enforces permission bits for them (`default_permissions`).
#[test]
fn a_non_root_user_mounts_through_fusermount3() {
    const NOBODY: u32 = 65534;
    let m = FuseMount::start_as(Roam::new(), Some("mem:"), &[], Some(NOBODY));
    let as_nobody = |script: &str| {
        nobody_sh(&script.replace("/w", m.dir.to_str().unwrap()))
            .output()
            .unwrap()
    };
    let o = as_nobody(
        "echo mine > /w/f && cat /w/f && stat -c '%u %a' /w/f && chmod 000 /w/f && cat /w/f",
    );
    assert_eq!(
        stdout(&o),
        format!("mine\n{NOBODY} 644\n"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = m.dir.to_str().unwrap();
    assert!(
        mounts
            .lines()
            .any(|l| l.contains(dir) && l.contains("user_id=65534")),
        "mounted for uid 65534"
    );
}

/// `roam mount --allow-other`: other users get in, and the kernel checks their permissions
/// against the owner and mode roam shows (`default_permissions`), as for a local directory;
/// without it, only the user who mounted does.
#[test]
fn allow_other_lets_other_users_in_with_the_permission_bits_checked() {
    let srv = roam_testkit::Scratch::new("allow-other");
    roam_testkit::write_file(&srv.join("open.txt"), b"for all\n", 0o644);
    roam_testkit::write_file(&srv.join("secret.txt"), b"root's\n", 0o600);
    let url = format!("null:{}", srv.path.display());
    let script = "cat /w/open.txt; cat /w/secret.txt; echo more >> /w/open.txt; touch /w/new";
    for allow in [true, false] {
        let args: &[&str] = if allow { &["--allow-other"] } else { &[] };
        let m = FuseMount::start(Roam::new(), Some(&url), args);
        let o = nobody_sh(&script.replace("/w", m.dir.to_str().unwrap()))
            .output()
            .unwrap();
        let denied = stderr(&o).matches("Permission denied").count();
        match allow {
            // The open file reads; the private one, a write and a new name are refused.
            true => assert_eq!(
                (stdout(&o).as_str(), denied),
                ("for all\n", 3),
                "{}",
                stderr(&o)
            ),
            // Nothing of the mount is reachable.
            false => assert_eq!((stdout(&o).as_str(), denied), ("", 4), "{}", stderr(&o)),
        }
        assert_eq!(fs::read(srv.join("open.txt")).unwrap(), b"for all\n");
        assert!(!srv.join("new").exists());
    }
}

/// `roam doctor` names each mechanism with a verdict and a reason, and fails when one is
/// missing.
#[test]
fn doctor_tells_which_mechanisms_work() {
    let o = Roam::new().command().arg("doctor").output().unwrap();
    let out = stdout(&o);
    for name in ["ptrace", "seccomp", "FUSE", "user namespaces"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in {out}"));
        let verdict = line[16..].trim_start();
        assert!(
            verdict.starts_with("yes  ") || verdict.starts_with("no   "),
            "{line}"
        );
        assert!(verdict.len() > 10, "a reason is given: {line}");
    }
    assert_eq!(o.status.success(), !out.contains(" no  "), "{out}");
    // FUSE over io_uring is a speed-up: `off` with how to turn it on, never a failure.
    let uring = out
        .lines()
        .find(|l| l.starts_with("FUSE io_uring"))
        .unwrap_or_else(|| panic!("no FUSE io_uring line in {out}"));
    assert!(
        uring[16..].starts_with(" yes  ")
            || uring.contains(" off  the kernel's switch is off; to turn it on: echo Y | sudo tee /sys/module/fuse/parameters/enable_uring")
            || uring.contains(" off  this kernel has none"),
        "{uring}"
    );
    // Which channel `roam run` uses; ROAM_NOTIFY=0 always means ptrace stops.
    let seccomp_line = |o: &std::process::Output| {
        let out = stdout(o);
        let line = out.lines().find(|l| l.starts_with("seccomp")).unwrap_or("");
        line.to_owned()
    };
    let line = seccomp_line(&o);
    assert!(
        line.contains("listener") || line.contains("ptrace stops"),
        "{line}"
    );
    let stops = Roam::new()
        .env("ROAM_NOTIFY", "0")
        .command()
        .arg("doctor")
        .output()
        .unwrap();
    assert!(
        seccomp_line(&stops).contains("ptrace stops"),
        "{}",
        seccomp_line(&stops)
    );
}

/// `roam run --fuse`: the program sees `/http/...` and the configured mounts, is not
/// traced, and runs as its user; without root too (an unprivileged user namespace).
mod run_fuse {
    use super::*;

    fn script(host: &str) -> String {
        format!(
            "head -1 /http/{host}/hello.txt && head -1 /http://{host}/hello.txt && echo hi > /scratch/x/a && cat /scratch/x/a && grep TracerPid /proc/self/status && id -u && cat /http/{host}/nothere"
        )
    }

    fn check(o: &std::process::Output, uid: u32) {
        assert_eq!(
            stdout(o),
            format!("first line\nfirst line\nhi\nTracerPid:\t0\n{uid}\n"),
            "{}",
            stderr(o)
        );
        assert!(
            stderr(o).contains("/nothere': No such file or directory"),
            "{}",
            stderr(o)
        );
        assert_eq!(o.status.code(), Some(1), "cat's own exit status");
    }

    #[test]
    fn as_root() {
        let host = common::fixture().server.authority();
        let o = Roam::new()
            .command()
            .args(["run", "--fuse", "-m", "/scratch/x=mem:", "--", "sh", "-c"])
            .arg(script(&host))
            .output()
            .unwrap();
        check(&o, 0);
    }

    /// As root every id is mapped: a local file's owner shows as outside, `chown` to
    /// another user works, and so do supplementary groups.
    #[test]
    fn as_root_owners_and_chown_are_the_hosts() {
        let dir = Scratch::new("chown");
        let f = dir.join("f");
        fs::write(&f, "x").unwrap();
        std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
        let g = dir.join("g");
        fs::write(&g, "y").unwrap();
        let o = Roam::new()
            .command()
            .args(["run", "--fuse", "--", "sh", "-c"])
            .arg(format!(
                "stat -c %u:%g {f} && chown 4321:8765 {g} && stat -c %u:%g {g} && setpriv --groups=7,8 id -G",
                f = f.display(),
                g = g.display()
            ))
            .output()
            .unwrap();
        assert_eq!(
            stdout(&o),
            "1234:5678\n4321:8765\n0 7 8\n",
            "{}",
            stderr(&o)
        );
        use std::os::unix::fs::MetadataExt;
        let md = fs::metadata(&g).unwrap();
        assert_eq!((md.uid(), md.gid()), (4321, 8765));
    }

    #[test]
    fn as_a_user_without_privileges() {
        let host = common::fixture().server.authority();
        let cache = Scratch::new("userns");
        std::os::unix::fs::chown(&cache.path, Some(65534), Some(65534)).unwrap();
        let roam = Roam::new().command();
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(roam.get_program())
            .args(["run", "--fuse", "-m", "/scratch/x=mem:", "--", "sh", "-c"])
            .arg(script(&host))
            .env("ROAM_CACHE_DIR", cache.join("c"))
            .env("ROAM_CONFIG", cache.join("none.toml"))
            .current_dir("/")
            .output()
            .unwrap();
        check(&o, 65534);
    }
}

/// `chmod` right after `close` of a file just made (as `git` does with its `.lock` files):
/// the kernel sends the file's `RELEASE` in the background, and the `SETATTR` may come
/// while that release is putting the file on the server. It must find the file and give
/// it the mode, every time.
fn chmod_right_after_close_finds_the_file(m: &common::Backend) {
    let script = r#"python3 - <<'PY'
import os
failed = 0
for i in range(100):
    p = "/w/c%d.lock" % i
    with open(p, "w") as f:
        f.write("x" * i)
    try:
        os.chmod(p, 0o600)
        assert os.stat(p).st_mode & 0o777 == 0o600
    except (OSError, AssertionError) as e:
        failed += 1
        print(p, repr(e))
print("failed", failed)
PY"#;
    let o = m.sh(script);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).ends_with("failed 0\n"), "{}", stdout(&o));
}

#[test]
fn chmod_right_after_close_finds_the_file_over_sftp() {
    chmod_right_after_close_finds_the_file(&common::Backend::new("sftp").through(Fuse));
}

/// A program that exits with 20 files still open for writing: the kernel closes them as
/// the program ends and sends their `RELEASE`s afterwards, in the background. `roam run
/// --fuse` waits for those releases and the uploads they make, so it exits 0 with every
/// file on the server whole (it exited 75 naming some "not uploaded" when it looked too
/// early). Three rounds, each a new run, then one where a child the program forked holds
/// the files half a second longer (their releases come that much later).
fn files_left_open_at_exit_are_delivered(m: &common::Backend) {
    let script = |hold: &str| {
        format!(
            r#"python3 - <<'PY'
import os, time
for i in range(1, 21):
    fd = os.open("/w/f%d" % i, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"%d\n" % i * (1000 * i))
if {hold} and os.fork() == 0:
    time.sleep(0.5)
os._exit(0)
PY"#
        )
    };
    for (round, hold) in ["False", "False", "False", "True"].iter().enumerate() {
        let o = m.sh(&script(hold));
        assert_eq!(o.status.code(), Some(0), "round {round}: {}", stderr(&o));
        for i in 1..=20 {
            let got = fs::read(m.backend(&format!("f{i}"))).unwrap();
            let want = format!("{i}\n").repeat(1000 * i).into_bytes();
            assert!(got == want, "round {round}: f{i} has {} bytes", got.len());
        }
    }
}

#[test]
fn files_left_open_at_exit_are_delivered_over_sftp() {
    files_left_open_at_exit_are_delivered(
        &common::Backend::new("sftp").through(common::Frontend::RunFuse),
    );
}

#[test]
fn files_left_open_at_exit_are_delivered_over_webdav() {
    files_left_open_at_exit_are_delivered(
        &common::Backend::new("dav").through(common::Frontend::RunFuse),
    );
}

/// Writes delivered by a file's last `RELEASE` (a mapping written after the `close`,
/// written back at `munmap`), and a `utimensat` by name while that release uploads them
/// (the kernel sends it in the background and does not wait for it): both reach the
/// server, the time last, and `roam run --fuse` ends with nothing pending. A request that
/// changes the name waits for such a release ((roam-fuse's `names`)); here the kernel
/// holds the `utimensat` back until the release is answered, so this passed before that
/// lock too: it guards the outcome, the model's runs under io_uring found the race.
fn a_touch_during_the_upload_of_a_release_lands_after_it(m: &common::Backend) {
    // Python's own mmap keeps a dup of the fd, whose close would flush: libc's, bare.
    let script = r#"python3 - <<'PY'
import ctypes, mmap, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
p, n = "/w/f", 16 << 20
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, os.urandom(n))
at = libc.mmap(None, n, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
assert at not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
os.close(fd)
ctypes.memmove(at, b"later", 5)
# munmap writes the page back (no msync: that is an fsync, which roam uploads at).
assert libc.munmap(at, n) == 0
time.sleep(0.2)  # the release's upload is under way
# The mtime alone, by name (touch -m opens the file: a writer of its own).
class Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
AT_FDCWD, UTIME_OMIT = -100, (1 << 30) - 2
times = (Timespec * 2)(Timespec(0, UTIME_OMIT), Timespec(1500000000, 0))
assert libc.utimensat(AT_FDCWD, p.encode(), times, 0) == 0, os.strerror(ctypes.get_errno())
PY"#;
    // `roam run --fuse` ends when the program does, saying which changes stay pending.
    ok(&m.sh(script));
    let on_server = fs::File::open(m.backend("f")).unwrap();
    let mtime = on_server.metadata().unwrap().modified().unwrap();
    let want = std::time::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    assert_eq!(mtime, want, "the server's mtime is not the one set");
    let mut head = [0u8; 5];
    std::os::unix::fs::FileExt::read_exact_at(&on_server, &mut head, 0).unwrap();
    assert_eq!(&head, b"later");
}

#[test]
fn a_touch_during_the_upload_of_a_release_lands_after_it_dev_fuse() {
    a_touch_during_the_upload_of_a_release_lands_after_it(
        &common::Backend::new("sftp").through(common::Frontend::RunFuse),
    );
}

/// A file changed on the server behind roam's back (same size, new mtime): with T_read 0
/// the next read through the mount sees the new bytes, not the kernel's cached pages.
#[test]
fn a_remote_change_reaches_past_the_kernel_page_cache() {
    let m = common::Backend::new("file+cache").through(Fuse);
    let roam = Roam::new();
    let conf = roam.cache.join("t_read.toml");
    fs::write(&conf, "[cache]\nt_read = 0\n").unwrap();
    let roam = roam.env("ROAM_CONFIG", &conf);
    assert_eq!(
        ok(&m.sh_with(roam, "echo one > /w/f && cat /w/f && cat /w/f")),
        "one\none\n"
    );
    std::thread::sleep(Duration::from_millis(1100));
    fs::write(m.backend("f"), "two\n").unwrap();
    assert_eq!(ok(&m.sh("cat /w/f")), "two\n");
}

/// The same when the old version's mtime is a whole minute and the new one falls in that
/// minute (what a minute's listing could not tell apart): the version, not the minute,
/// decides what the kernel may keep.
#[test]
fn a_remote_change_within_a_whole_minute_reaches_past_the_kernel_page_cache() {
    let m = common::Backend::new("file+cache").through(Fuse);
    let at = |s: u64| std::time::UNIX_EPOCH + Duration::from_secs(s);
    let set = |data: &str, mtime| {
        fs::write(m.backend("f"), data).unwrap();
        let f = fs::File::options()
            .write(true)
            .open(m.backend("f"))
            .unwrap();
        f.set_modified(at(mtime)).unwrap();
    };
    set("one\n", 1_500_000_000);
    let roam = Roam::new();
    let conf = roam.cache.join("t_read.toml");
    fs::write(&conf, "[cache]\nt_read = 0\n").unwrap();
    let roam = roam.env("ROAM_CONFIG", &conf);
    assert_eq!(ok(&m.sh_with(roam, "cat /w/f && cat /w/f")), "one\none\n");
    set("two\n", 1_500_000_030);
    assert_eq!(ok(&m.sh("cat /w/f")), "two\n");
}

/// Mounting as root, the kernel reads and writes the files of a null layer itself
/// (passthrough): the bytes are the local file's, and no READ or WRITE reaches roam (the
/// request counts roam logs when the mount ends).
#[test]
fn a_null_layer_passes_reads_and_writes_to_the_kernel() {
    null_layer_passthrough(Roam::new());
}

fn null_layer_passthrough(roam: Roam) {
    let dir = Scratch::new("null");
    let roam = roam.env("RUST_LOG", "roam_fuse=debug");
    let mut m = FuseMount::start(roam, Some(&format!("null:{}", dir.path.display())), &[]);
    assert_eq!(
        ok(&m.sh("head -c 3000000 /dev/urandom > /w/r && echo more >> /w/r && cat /w/r | wc -c && tail -c 5 /w/r && cmp /w/r /w/r && echo same", &[])),
        "3000005\nmore\nsame\n"
    );
    assert_eq!(fs::metadata(dir.join("r")).unwrap().len(), 3_000_005);
    let counts = request_counts_at_exit(&mut m);
    let counts = counts.as_str();
    assert!(
        counts.contains("OPEN") && !counts.contains("READ ") && !counts.contains("WRITE"),
        "{counts}"
    );
}

/// Without CAP_SYS_ADMIN the kernel refuses passthrough: a user's null layer serves its
/// files through roam's requests instead, with the same bytes.
#[test]
fn a_null_layer_of_a_user_without_privileges_is_served_through_requests() {
    const NOBODY: u32 = 65534;
    let dir = Scratch::new("null");
    std::os::unix::fs::chown(&dir.path, Some(NOBODY), Some(NOBODY)).unwrap();
    let roam = Roam::new().env("RUST_LOG", "roam_fuse=debug");
    let url = format!("null:{}", dir.path.display());
    let m = FuseMount::start_as(roam, Some(&url), &[], Some(NOBODY));
    let o = nobody_sh(&format!(
        "cd {} && echo a > f && cat f && echo b >> f && cat f && wc -c < f",
        m.dir.display()
    ))
    .output()
    .unwrap();
    assert_eq!(ok(&o), "a\na\nb\n4\n");
    assert_eq!(fs::read_to_string(dir.join("f")).unwrap(), "a\nb\n");
    assert!(
        m.log_text()
            .contains("no FUSE passthrough without CAP_SYS_ADMIN"),
        "{}",
        m.log_text()
    );
}

/// Listings stay in the kernel's page cache (`FOPEN_CACHE_DIR`) while roam's listing is
/// the same: five `ls` of a directory cost fewer `READDIR` requests than five; a file made
/// on the server behind roam's back shows once T_read has passed, and one made through
/// the mount at once.
#[test]
fn a_cached_listing_shows_a_file_made_elsewhere_after_t_read() {
    cached_listing(Roam::new());
}

fn cached_listing(roam: Roam) {
    let b = common::Backend::new("file+cache");
    fs::create_dir(b.backend("d")).unwrap();
    fs::write(b.backend("d/a"), "a").unwrap();
    // Changed an hour ago: a directory changed a moment before was listed anew each time.
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    let dir = fs::File::open(b.backend("d")).unwrap();
    dir.set_modified(hour_ago).unwrap();
    let conf = roam.cache.join("t_read.toml");
    fs::write(&conf, "[cache]\nt_read = 1\n").unwrap();
    let roam = roam
        .env("ROAM_CONFIG", &conf)
        .env("RUST_LOG", "roam_fuse=debug");
    let mut m = FuseMount::start(roam, Some(&b.url), &[]);
    let ls = "for i in 1 2 3 4 5; do ls /w/d | tr '\\n' ' '; echo; done | sort | uniq -c";
    assert_eq!(ok(&m.sh(ls, &[])).trim(), "5 a");
    fs::write(b.backend("d/late"), "late").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(ok(&m.sh("ls /w/d", &[])), "a\nlate\n");
    assert_eq!(
        ok(&m.sh("touch /w/d/mine && ls /w/d", &[])),
        "a\nlate\nmine\n"
    );
    let counts = request_counts_at_exit(&mut m);
    let counts = counts.as_str();
    let listed: u64 = ["READDIR", "READDIRPLUS"]
        .iter()
        .filter_map(|op| {
            let at = counts.find(&format!(" {op} "))?;
            counts[at + op.len() + 2..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(listed > 0 && listed < 7, "{counts}");
}

/// The kernel remembers a missing name as absent only for T_read: a file made in the
/// null layer's directory behind roam's back shows once that has passed.
#[test]
fn a_name_made_behind_the_null_layer_shows_after_t_read() {
    let dir = Scratch::new("null");
    let roam = Roam::new();
    let conf = roam.cache.join("t_read.toml");
    fs::write(&conf, "[cache]\nt_read = 1\n").unwrap();
    let m = FuseMount::start(
        roam.env("ROAM_CONFIG", &conf),
        Some(&format!("null:{}", dir.path.display())),
        &[],
    );
    let o = m.sh("cat /w/late 2>&1", &[]);
    assert!(stdout(&o).contains("No such file"), "{}", stdout(&o));
    fs::write(dir.join("late"), "here\n").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(ok(&m.sh("cat /w/late", &[])), "here\n");
}

/// /proc/mounts is world-readable: a URL's login never shows there.
#[test]
fn a_url_s_password_stays_out_of_the_mount_table() {
    let scratch = Scratch::new("ftp-login");
    let srv = scratch.join("srv");
    roam_testkit::mkdir(&srv);
    let server = roam_testkit::ftp::pyftpdlib(&srv, &scratch.join("run"), "roam", "hunter2");
    let m = FuseMount::start(
        Roam::new(),
        Some(&format!("ftp://roam:hunter2@{}/", server.authority())),
        &[],
    );
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(m.dir.to_str().unwrap()))
        .expect("mounted");
    assert!(line.contains("roam:ftp"), "{line}");
    assert!(!mounts.contains("hunter2"), "{line}");
}

/// A remote named on `roam mount`'s command line that cannot be used fails the mount at
/// once, with status 1 and the reason on stderr, nothing left mounted (as sshfs and rclone
/// do): a closed port, in the background and in the foreground; a missing bucket; an SFTP
/// server whose host key is not known.
mod fail_at_the_door {
    use super::*;

    /// `roam mount [ARGS] DIR URL` with `env`: its exit status and stderr, and whether
    /// DIR is mounted afterwards.
    fn mount(args: &[&str], url: &str, env: &[(String, String)]) -> (Option<i32>, String, bool) {
        let scratch = Scratch::new("door");
        let dir = scratch.join("mnt");
        roam_testkit::mkdir(&dir);
        let roam = Roam::new();
        let mut cmd = roam.command();
        cmd.arg("mount").args(args).arg(&dir).arg(url);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let o = cmd.output().unwrap();
        let mounted = is_mounted(&dir);
        if mounted {
            let _ = Command::new("fusermount3").arg("-u").arg(&dir).status();
        }
        (o.status.code(), stderr(&o), mounted)
    }

    #[test]
    fn a_closed_port() {
        let port = roam_testkit::free_port();
        let url = format!("http://127.0.0.1:{port}/");
        for args in [&[][..], &["--foreground"][..]] {
            let (code, err, mounted) = mount(args, &url, &[]);
            assert_eq!(code, Some(1), "{args:?}: {err}");
            assert!(!mounted, "{args:?}");
            assert!(
                err.contains(&format!("127.0.0.1:{port}")) && err.contains("Connection refused"),
                "{args:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        }
    }

    #[test]
    fn a_missing_bucket() {
        let b = common::Backend::new("s3");
        let (code, err, mounted) = mount(&[], "s3://no-such-bucket", b.env());
        assert_eq!(code, Some(1), "{err}");
        assert!(!mounted);
        assert!(err.contains("no-such-bucket"), "{err}");
    }

    #[test]
    fn an_unknown_host_key() {
        let b = common::Backend::new("sftp");
        // The user's ssh config (the host alias, the key), without a known_hosts.
        let home = Scratch::new("door-home");
        roam_testkit::mkdir(&home.join(".ssh"));
        let theirs = &b.env().iter().find(|(k, _)| k == "HOME").unwrap().1;
        let config = std::path::Path::new(theirs).join(".ssh/config");
        fs::copy(config, home.join(".ssh/config")).unwrap();
        let mut env = b.env().to_vec();
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".into(), home.path.display().to_string()));
        let (code, err, mounted) = mount(&[], &b.url, &env);
        assert_eq!(code, Some(1), "{err}");
        assert!(!mounted);
        assert!(err.contains("host key"), "{err}");
    }

    /// A login the server refuses (a wrong password in the URL, FTP's `530`, HTTP's `401`)
    /// is status 1 and the reason, the password never shown.
    #[test]
    fn bad_credentials() {
        const PASSWORD: &str = "Wrong-Secret";
        let ftp = common::Backend::new("ftp");
        let (user, server) = ftp.url["ftp://".len()..].split_once('@').unwrap();
        let user = user.split(':').next().unwrap();
        let url = format!("ftp://{user}:{PASSWORD}@{server}/");
        let scratch = Scratch::new("door-login");
        let www = scratch.join("www");
        roam_testkit::mkdir(&www.join("private"));
        let http =
            roam_testkit::Server::nginx_with_login(&www, &scratch.join("run"), "alice", "right");
        let web = format!(
            "{}/private/",
            http.url().replace("://", &format!("://alice:{PASSWORD}@"))
        );
        for url in [url, web] {
            let (code, err, mounted) = mount(&[], &url, &[]);
            assert_eq!(code, Some(1), "{err}");
            assert!(!mounted);
            assert!(err.contains("530") || err.contains("401"), "{err}");
            assert!(!err.contains(PASSWORD), "{err}");
        }
    }
}

/// Stops the mount (SIGTERM) and returns the line of FUSE request counts it logs at exit.
fn request_counts_at_exit(m: &mut FuseMount) -> String {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(m.pid() as i32, libc::SIGTERM) };
    m.wait_exit(Duration::from_secs(5)).expect("roam ended");
    let log = m.log_text();
    match log.lines().find(|l| l.contains("requests:")) {
        Some(line) => line.to_owned(),
        None => panic!("no request counts: {log}"),
    }
}
