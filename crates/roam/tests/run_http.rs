//! `roam run` end to end over HTTP: real programs (coreutils, grep, find, cc, python3, sh,
//! a static C program) on a tree served by a real nginx, each compared with the same
//! command on the local copy; exit statuses; and the exact errno of each failure.

mod common;

use common::{both, both_with, fixture, stderr, stdout, Roam, BIG_LEN};

#[test]
fn reads_match_the_local_copy() {
    for script in [
        "cat {}/hello.txt",
        "cat '{}/dir/a b.txt'",
        "md5sum {}/big.bin {}/hello.txt",
        "wc -l {}/hello.txt {}/dir/sub/deep.txt",
        "grep -r needle {}/dir {}/hello.txt | sort",
        "head -c 100000 {}/big.bin | od -An -tx1 | tail -3",
    ] {
        let (native, roamed) = both(script);
        assert!(!native.is_empty(), "{script}: no output natively");
        assert_eq!(roamed, native, "{script}");
    }
}

/// Both ways roam's calls reach it serve local and remote names alike: the listener
/// (`ROAM_NOTIFY=1`, the default on Linux 6.6+: local names answered by the listener, roam
/// names taken over by the tracer, a missing one answered by a worker) and ptrace stops
/// (`ROAM_NOTIFY=0`, as `roam attach` always uses).
#[test]
fn the_listener_and_ptrace_stops_serve_local_and_remote_names_alike() {
    for notify in ["1", "0"] {
        for script in [
            "cat {}/hello.txt /etc/hostname && ls {}/dir && stat -c '%n %s' {}/dir/sub/deep.txt",
            "cd {}/dir && cat 'a b.txt' && ls sub && ls nothere 2>/dev/null; echo $?",
            "md5sum {}/big.bin && grep -r needle {}/dir | sort && test ! -e {}/missing.txt && echo ok",
        ] {
            let (native, roamed) = both_with(Roam::new().env("ROAM_NOTIFY", notify), script);
            assert!(!native.is_empty(), "{script}: no output natively");
            assert_eq!(roamed, native, "ROAM_NOTIFY={notify}: {script}");
        }
    }
}

#[test]
fn listings_match_the_local_copy() {
    for script in [
        "ls {} {}/dir {}/dir/sub {}/empty",
        // Names, sizes and times (the mode of an HTTP file is not known; see SEMANTICS.md).
        "ls -l {}/dir/sub {} | grep '^-' | awk '{print $5, $6, $7, $8, $9}'",
        "ls -la --time-style=+%Y-%m-%dT%H:%M {}/dir | grep '^-' | awk '{print $5, $6, $7}'",
        // Directories show their own mtimes too.
        "ls -l --time-style=+%Y-%m-%dT%H:%M {} {}/dir | grep '^d' | awk '{print $6, $7}'",
        "find {} | sort",
        "find {} -type f -name '*.c' | sort",
        "stat -c '%n %s %F' {}/big.bin {}/dir {}/dir/sub/deep.txt",
        // Blocks as a local file system counts them (a not yet fetched stub is sparse).
        "stat -c '%n %s %b' {}/big.bin {}/hello.txt && du -s {} {}/dir && ls -s {}/dir/sub",
    ] {
        let (native, roamed) = both(script);
        assert!(!native.is_empty(), "{script}: no output natively");
        assert_eq!(roamed, native, "{script}");
    }
}

/// A stat before the first read and an `fstat` after it describe the same file: the same
/// inode, size and one link, the remote mtime as ctime (the cache entry's own ctime changes
/// as roam fills it); after the read, stat and `fstat` agree in everything. (Before the
/// fetch an HTTP listing gives the mtime to the minute only: see SEMANTICS.md.)
#[test]
fn stat_and_fstat_agree_across_the_first_read() {
    let script = "import os, sys\n\
        p = sys.argv[1] + '/dir/sub/deep.txt'\n\
        a = os.stat(p); fd = os.open(p, os.O_RDONLY); os.read(fd, 1 << 20); b = os.fstat(fd)\n\
        c = os.stat(p)\n\
        same = lambda s: (s.st_ino, s.st_size, s.st_nlink, s.st_mtime_ns, s.st_ctime_ns)\n\
        print(same(a)[:3] == same(b)[:3], same(b) == same(c), a.st_nlink, \
              all(s.st_ctime_ns == s.st_mtime_ns for s in (a, b, c)))\n";
    let fx = fixture();
    let o = Roam::new().run(&["python3", "-c", script, &fx.remote()]);
    assert_eq!(stdout(&o), "True True 1 True\n", "{}", stderr(&o));
}

#[test]
fn cd_pwd_and_relative_names_in_a_remote_directory() {
    let script = "cd {}/dir/sub && pwd && ls && cat deep.txt && cd .. && pwd && cat 'a b.txt' sub/other.txt \
                  && /bin/pwd && ls ../proj";
    let (native, roamed) = both(script);
    assert_eq!(roamed, native);
    assert!(roamed.starts_with("{}/dir/sub\n"), "{roamed}");
}

#[test]
fn cc_builds_a_remote_project() {
    let out_dir = roam_testkit::Scratch::new("cc");
    let bin = out_dir.join("twice");
    let fx = fixture();
    let script = format!(
        "cc -o {} {r}/proj/main.c {r}/proj/util.c && {}",
        bin.display(),
        bin.display(),
        r = fx.remote()
    );
    let o = Roam::new().sh(&[], &script);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "twice 21 is 42\n");
}

#[test]
fn python_imports_a_sibling_module() {
    let (native, roamed) = both("python3 {}/py/app.py");
    assert_eq!(native, "hello roam\n");
    assert_eq!(roamed, native);
}

#[test]
fn shell_scripts_run_from_remote_files() {
    let (native, roamed) = both("sh {}/script.sh one two; {}/script.sh three");
    assert_eq!(native, "script ran with one two\nscript ran with three\n");
    assert_eq!(roamed, native);
}

#[test]
fn a_static_program_reads_a_remote_file() {
    let fx = fixture();
    let probe = fx.probe.to_str().unwrap();
    let o = Roam::new().run(&[probe, "cat", &format!("{}/hello.txt", fx.remote())]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, std::fs::read(fx.www.join("hello.txt")).unwrap());
    let o = Roam::new().run(&[probe, "read", &format!("{}/big.bin", fx.remote())]);
    assert_eq!(stdout(&o), format!("ok {BIG_LEN}\n"));
}

#[test]
fn exit_statuses_pass_through() {
    assert_eq!(Roam::new().sh(&[], "exit 42").status.code(), Some(42));
    assert_eq!(
        Roam::new().sh(&[], "kill -9 $$").status.code(),
        Some(128 + 9)
    );
    let remote = format!("{}/exit42.sh", fixture().remote());
    assert_eq!(Roam::new().run(&[&remote]).status.code(), Some(42));
    assert_eq!(
        Roam::new().run(&["/nonexistent/program"]).status.code(),
        Some(127)
    );
}

/// Runs the static probe under `roam -v run`: `probe OP PATH`, returning its one-line
/// verdict and roam's stderr.
fn probe(op: &str, path: &str) -> (String, String) {
    let o = Roam::new()
        .verbose()
        .run(&[fixture().probe.to_str().unwrap(), op, path]);
    (stdout(&o).trim().to_owned(), stderr(&o))
}

#[test]
fn failures_reach_the_program_with_the_exact_errno() {
    let r = fixture().remote();
    let cases = [
        ("open", format!("{r}/missing.txt"), "ENOENT"),
        ("stat", format!("{r}/dir/missing"), "ENOENT"),
        ("open", format!("{r}/secret.txt"), "EACCES"),
        ("openw", format!("{r}/hello.txt"), "EROFS"),
        ("accessw", format!("{r}/hello.txt"), "EROFS"),
        ("read", format!("{r}/dir"), "EISDIR"),
        ("opendir", format!("{r}/hello.txt"), "ENOTDIR"),
        ("open", "/http/127.0.0.1:1/x".to_owned(), "EHOSTUNREACH"),
    ];
    for (op, path, want) in cases {
        assert_eq!(probe(op, &path).0, want, "probe {op} {path}");
    }
    // Each failure the server caused is explained on roam's stderr in one line (a missing
    // name only with -v: programs probe for missing names all the time).
    let (_, err) = probe("open", &format!("{r}/missing.txt"));
    assert!(
        err.contains("missing.txt: not in the listing of its directory (ENOENT)"),
        "{err}"
    );
    let (_, err) = probe("open", &format!("{r}/nodir/missing.txt"));
    assert!(
        err.contains("nodir/: 404") && err.contains("ENOENT"),
        "{err}"
    );
    let (_, err) = probe("open", &format!("{r}/secret.txt"));
    assert!(err.contains("403") && err.contains("EACCES"), "{err}");
}

#[test]
fn writes_never_touch_the_cache() {
    let r = fixture().remote();
    let o = Roam::new().sh(
        &[],
        &format!("mkdir {r}/newdir; touch {r}/new.txt; rm -f {r}/hello.txt; cat {r}/hello.txt"),
    );
    let err = stderr(&o);
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(
        stdout(&o),
        "first line\nsecond line with needle\nthird line\n"
    );
    assert!(fixture().www.join("hello.txt").exists());
}

#[test]
fn a_server_that_dies_mid_run_gives_ehostunreach() {
    use std::io::{BufRead, Write};
    let scratch = roam_testkit::Scratch::new("dies");
    let www = scratch.join("www");
    roam_testkit::write_file(&www.join("a.txt"), b"alive\n", 0o644);
    roam_testkit::write_file(&www.join("b.txt"), b"never read\n", 0o644);
    let mut server = roam_testkit::Server::nginx(&www, &scratch.join("run"));
    let base = format!("/http/{}", server.authority());
    let probe = fixture().probe.to_str().unwrap().to_owned();
    // The program reads one file, then waits for a line on stdin, then reads another.
    let script = format!("{probe} read {base}/a.txt; read line; {probe} read {base}/b.txt");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", scratch.join("cache"))
        .env("ROAM_CONFIG", scratch.join("none.toml"))
        .args(["run", "--", "sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "ok 6\n");
    server.stop();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut second = String::new();
    out.read_line(&mut second).unwrap();
    assert_eq!(second, "EHOSTUNREACH\n");
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("b.txt") && err.contains("EHOSTUNREACH"),
        "{err}"
    );
}

#[test]
fn urls_work_as_paths() {
    let fx = fixture();
    let o = Roam::new().run(&["cat", &format!("{}/hello.txt", fx.server.url())]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "first line\nsecond line with needle\nthird line\n"
    );
}

#[test]
fn explicit_mounts_from_flags_and_config() {
    let fx = fixture();
    let o = Roam::new().sh(
        &["-m", &format!("/web={}/dir", fx.server.url())],
        "cat /web/sub/deep.txt; ls /web",
    );
    assert_eq!(
        stdout(&o),
        "deep down there is a needle too\na b.txt\nsub\n",
        "{}",
        stderr(&o)
    );

    let roam = Roam::new();
    let conf = roam.cache.join("roam.toml");
    std::fs::write(
        &conf,
        format!(
            "[mounts]\n\"/proj\" = \"{}/proj\"\n\"/local\" = \"file://{}\"\n",
            fx.server.url(),
            fx.www.join("dir").display()
        ),
    )
    .unwrap();
    let o = roam.env("ROAM_CONFIG", &conf).sh(
        &[],
        "ls /proj; cat /local/sub/other.txt; cd /local/sub && pwd",
    );
    assert_eq!(
        stdout(&o),
        "main.c\nutil.c\nutil.h\nnothing to see\n/local/sub\n",
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_cache_is_private_and_reused_within_t_read() {
    let fx = fixture();
    let roam = Roam::new();
    let cache = roam.cache.join("c");
    let path = format!("{}/counted/once.txt", fx.remote());
    let gets = || {
        fx.server
            .access_log()
            .lines()
            .filter(|l| l.contains("GET /counted/once.txt "))
            .count()
    };
    let listings = || {
        fx.server
            .access_log()
            .lines()
            .filter(|l| l.contains("GET /counted/ "))
            .count()
    };
    let before = gets();
    let listed_before = listings();
    for _ in 0..2 {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_roam"))
            .env("ROAM_CACHE_DIR", &cache)
            .env("ROAM_CONFIG", roam.cache.join("none.toml"))
            .args(["run", "--", "cat", &path])
            .output()
            .unwrap();
        assert_eq!(stdout(&o), "nothing to see\n");
    }
    assert_eq!(
        gets() - before,
        1,
        "the second run must reuse the cached copy"
    );
    assert_eq!(listings() - listed_before, 1, "and the listing it saved");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o700
    );

    // With T_read = 0 every open revalidates, and an unchanged file is answered 304.
    let conf = roam.cache.join("t0.toml");
    std::fs::write(&conf, "[cache]\nt_read = 0\n").unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", &cache)
        .env("ROAM_CONFIG", &conf)
        .args(["run", "--", "cat", &path])
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "nothing to see\n");
    let log = fx.server.access_log();
    let last = log
        .lines()
        .rfind(|l| l.contains("GET /counted/once.txt "))
        .unwrap();
    assert!(last.contains("\" 304 "), "{last}");
}

#[test]
fn https_is_verified_and_per_host_ca_files_are_honoured() {
    let scratch = roam_testkit::Scratch::new("tls");
    let ca = roam_testkit::tls::TestCa::new(&scratch.join("ca"));
    let www = scratch.join("www");
    roam_testkit::write_file(&www.join("secure.txt"), b"over TLS\n", 0o644);
    let server = roam_testkit::tls::nginx_tls(&www, &scratch.join("run"), &ca);
    let path = format!("/https/{}/secure.txt", server.authority());

    // A certificate from an unknown authority is refused, with a clear reason.
    let (verdict, err) = probe("read", &path);
    assert_eq!(verdict, "EIO");
    assert!(
        err.contains("certificate") && err.contains(&server.authority()),
        "{err}"
    );

    // Trusting the test's CA for that host makes it work.
    let roam = Roam::new();
    let conf = roam.cache.join("tls.toml");
    std::fs::write(
        &conf,
        format!(
            "[tls.\"{}\"]\nca_file = \"{}\"\n",
            server.authority(),
            ca.ca_cert.display()
        ),
    )
    .unwrap();
    let o = roam.env("ROAM_CONFIG", &conf).run(&["cat", &path]);
    assert_eq!(stdout(&o), "over TLS\n", "{}", stderr(&o));

    // `insecure` accepts any certificate, and says so.
    let roam = Roam::new();
    let conf = roam.cache.join("insecure.toml");
    std::fs::write(
        &conf,
        format!("[tls.\"{}\"]\ninsecure = true\n", server.authority()),
    )
    .unwrap();
    let o = roam.env("ROAM_CONFIG", &conf).run(&["cat", &path]);
    assert_eq!(stdout(&o), "over TLS\n", "{}", stderr(&o));
    assert!(stderr(&o).contains("not verified"), "{}", stderr(&o));
}

#[test]
fn sigterm_to_roam_reaches_the_program() {
    use std::io::{BufRead, BufReader};
    // Kept for the whole test: the cache lives in it.
    let scratch = roam_testkit::Scratch::new("term");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_roam"))
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "trap 'echo got TERM; kill $!; exit 3' TERM; sleep 30 & echo ready; wait",
        ])
        .env("ROAM_CONFIG", "/nonexistent/roam.toml")
        .env("ROAM_CACHE_DIR", scratch.join("c"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "got TERM\n");
    assert_eq!(child.wait().unwrap().code(), Some(3));
}

#[test]
fn a_slow_server_blocks_only_the_thread_that_asked() {
    let www = roam_testkit::Scratch::new("slow");
    roam_testkit::write_file(&www.join("f.txt"), b"slow\n", 0o644);
    let server = common::SlowServer::start(&www.path, 1);
    let slow = format!("/http/127.0.0.1:{}/f.txt", server.port);
    // 10,000 local stats, timed inside the program, alone and next to a slow remote read
    // (each answer takes 1 s, far longer than the stats). Best of 3: these machines are noisy.
    let stats = "python3 -c \"import os,time; t=time.time(); [os.stat('/tmp') for _ in range(10000)]; print(time.time()-t)\"";
    let secs = |o: std::process::Output| {
        stdout(&o)
            .trim()
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{}", stderr(&o)))
    };
    let best = |script: &str| {
        (0..3)
            .map(|_| secs(Roam::new().sh(&[], script)))
            .fold(f64::MAX, f64::min)
    };
    let alone = best(stats);
    let together = best(&format!("cat {slow} > /dev/null & {stats}; wait"));
    drop(server);
    assert!(
        together < 2.0 * alone,
        "10,000 stats took {together:.3}s next to a slow read, {alone:.3}s alone"
    );
}

/// A compiler run with `-I.` looks for every system header under the project too
/// (`./bits/types.h`, `./sys/cdefs.h` ...): names under a directory that does not exist
/// must be answered from the listing above it, not with one failed request each.
#[test]
fn names_under_a_missing_directory_cost_no_request_each() {
    let fx = fixture();
    let dir = format!("{}/dir", fx.remote());
    let script = format!(
        "for n in 1 2 3 4 5 6; do cat {dir}/nothere/f$n.h {dir}/nothere/deeper/g$n.h 2>&1; done | grep -c 'No such file'"
    );
    let o = Roam::new().sh(&[], &script);
    assert_eq!(stdout(&o), "12\n", "{}", stderr(&o));
    let asked = fx
        .server
        .access_log()
        .lines()
        .filter(|l| l.contains("GET /dir/nothere"))
        .count();
    assert!(asked <= 1, "{asked} requests under /dir/nothere");
}

/// `roam run` takes its proxy from the environment (docs/CONNECTING.md): two runs with
/// caches of their own read a file through a real squid, which answers the second from its
/// cache, the origin seeing one request; `no_proxy` sends a third run straight to the
/// origin; a dead proxy gives the program EHOSTUNREACH and roam's message names it.
#[test]
fn the_proxy_of_the_environment_is_used_and_named() {
    let scratch = roam_testkit::Scratch::new("run-proxy");
    let www = scratch.join("www");
    roam_testkit::write_file(&www.join("a.txt"), b"through squid\n", 0o644);
    // Ten days old: squid's heuristic keeps it fresh for two days.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10 * 86400);
    std::fs::File::open(www.join("a.txt"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let origin = roam_testkit::Server::nginx(&www, &scratch.join("origin"));
    let squid = roam_testkit::squid::squid(&scratch.join("squid"));
    let file = format!("/http/{}/a.txt", origin.authority());
    // nginx logs an answer a moment after giving it: wait for `n` reads (10 s at most).
    let origin_reads = |n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let reads = origin.access_log().matches("GET /a.txt ").count();
            if reads >= n || std::time::Instant::now() > deadline {
                return reads;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    for _ in 0..2 {
        let o = Roam::new()
            .env("http_proxy", squid.url())
            .run(&["cat", &file]);
        assert_eq!(stdout(&o), "through squid\n", "{}", stderr(&o));
    }
    assert_eq!(origin_reads(1), 1, "{}", origin.access_log());
    let squid_log = std::fs::read_to_string(scratch.join("squid/access.log")).unwrap();
    assert!(squid_log.contains("HIT/200"), "{squid_log}");

    let o = Roam::new()
        .env("http_proxy", squid.url())
        .env("no_proxy", "127.0.0.1")
        .run(&["cat", &file]);
    assert_eq!(stdout(&o), "through squid\n", "{}", stderr(&o));
    assert_eq!(origin_reads(2), 2, "{}", origin.access_log());

    let dead = roam_testkit::free_port();
    let probe = fixture().probe.to_str().unwrap().to_owned();
    let o = Roam::new()
        .env("http_proxy", format!("http://127.0.0.1:{dead}"))
        .run(&[&probe, "read", &file]);
    assert_eq!(stdout(&o), "EHOSTUNREACH\n");
    let named = format!("through the proxy 127.0.0.1:{dead} (from http_proxy)");
    assert!(stderr(&o).contains(&named), "{}", stderr(&o));
}
