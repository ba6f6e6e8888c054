//! Several roam processes on one cache (`roam run`s, a `roam mount`), and what a killed
//! roam leaves in it: every reader gets the server's bytes, never a copy another process
//! is still filling; a change whose writer never closed it is kept, not uploaded; a whole
//! change waiting for its upload is delivered by `roam sync`; a run whose changes stayed
//! pending says so in its exit status.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::fuse::FuseMount;
use common::{stderr, stdout, Backend as Mount, Roam};
use roam_testkit::{noise, write_file, Scratch, Server};

/// The status `roam run` and `roam sync` exit with when changes stayed pending.
const EXIT_PENDING: i32 = 75;

/// nginx serving `big.bin` (12 MiB: arrives in ranges) and `mid.bin` (3 MiB: fetched
/// whole), with their sha256 sums.
struct Files {
    server: Server,
    sums: String,
    _scratch: Scratch,
}

fn files() -> Files {
    let scratch = Scratch::new("sharing");
    let www = scratch.join("www");
    write_file(&www.join("big.bin"), &noise(12 << 20, 7), 0o644);
    write_file(&www.join("mid.bin"), &noise(3 << 20, 8), 0o644);
    let server = Server::nginx(&www, &scratch.join("run"));
    let o = Command::new("sha256sum")
        .args(["big.bin", "mid.bin"])
        .current_dir(&www)
        .output()
        .unwrap();
    Files {
        server,
        sums: String::from_utf8(o.stdout).unwrap(),
        _scratch: scratch,
    }
}

/// `roam run -- sha256sum big.bin mid.bin`, started with `cache` as the cache.
fn summer(cache: &Path, files: &Files) -> std::process::Child {
    let dir = format!("/http/{}", files.server.authority());
    Roam::new()
        .env("ROAM_CACHE_DIR", cache)
        .command()
        .args(["run", "--", "sh", "-c"])
        .arg(format!("cd {dir} && sha256sum big.bin mid.bin"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn readers_sharing_a_cache_all_get_the_servers_bytes() {
    let files = files();
    // Before the cache was shared safely, one reader in most rounds got zeros (exit 0).
    for round in 0..4 {
        let scratch = Scratch::new("shared-cache");
        let cache = scratch.join("c");
        let readers: Vec<_> = (0..3).map(|_| summer(&cache, &files)).collect();
        for r in readers {
            let o = r.wait_with_output().unwrap();
            assert!(o.status.success(), "round {round}: {}", stderr(&o));
            assert_eq!(stdout(&o), files.sums, "round {round}: {}", stderr(&o));
        }
        // Whole copies were published; nothing private was left behind.
        assert!(cache.join("data").is_dir());
        assert_eq!(work_dirs(&cache), Vec::<PathBuf>::new(), "round {round}");
    }
}

#[test]
fn a_mount_and_runs_on_one_cache_read_alike() {
    let files = files();
    let scratch = Scratch::new("shared-mount");
    let cache = scratch.join("c");
    let m = FuseMount::start(Roam::new().env("ROAM_CACHE_DIR", &cache), None, &[]);
    let dir = format!("/w/http/{}", files.server.authority());
    let through_fuse = std::thread::spawn(move || {
        let o = m.sh(&format!("cd {dir} && sha256sum big.bin mid.bin"), &[]);
        (stdout(&o), stderr(&o))
    });
    let runs: Vec<_> = (0..2).map(|_| summer(&cache, &files)).collect();
    for r in runs {
        let o = r.wait_with_output().unwrap();
        assert_eq!(stdout(&o), files.sums, "{}", stderr(&o));
    }
    let (out, err) = through_fuse.join().unwrap();
    assert_eq!(out, files.sums, "{err}");
}

#[test]
fn a_partly_read_large_file_is_never_published() {
    let files = files();
    let roam = Roam::new();
    let cache = roam.cache.join("c");
    let dir = format!("/http/{}", files.server.authority());
    let o = roam.sh(&[], &format!("head -c 1000 {dir}/big.bin | wc -c"));
    assert_eq!(stdout(&o), "1000\n", "{}", stderr(&o));
    let published = cache.join("data/http").join(files.server.authority());
    assert!(
        !published.join("big.bin").exists(),
        "a copy with 1 of 12 MiB is no copy"
    );
    let o = Roam::new()
        .env("ROAM_CACHE_DIR", &cache)
        .sh(&[], &format!("cd {dir} && sha256sum big.bin mid.bin"));
    assert_eq!(stdout(&o), files.sums, "{}", stderr(&o));
}

/// The work directories roam processes left in `cache` (one that holds changes stays).
fn work_dirs(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache.join("work"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// `roam ARGS...` with `cache` and `config`.
fn roam_cli(cache: &Path, config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", cache)
        .env("ROAM_CONFIG", config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Starts `roam run -m /w=URL -- sh -c SCRIPT` in the background.
fn start_run(cache: &Path, config: &Path, url: &str, script: &str) -> std::process::Child {
    start_run_through(cache, config, url, script, false)
}

/// [`start_run`], under `roam run --fuse` when `fuse`.
fn start_run_through(
    cache: &Path,
    config: &Path,
    url: &str,
    script: &str,
    fuse: bool,
) -> std::process::Child {
    let frontend = if fuse { &["--fuse"][..] } else { &[] };
    Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", cache)
        .env("ROAM_CONFIG", config)
        .arg("run")
        .args(frontend)
        .args(["-m", &format!("/w={url}"), "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `roam status` says `what`.
fn await_status(cache: &Path, config: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = roam_cli(cache, config, &["status"]);
        if stdout(&o).contains(what) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "status never said {what:?}: {}",
            stdout(&o)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_change_whose_writer_never_closed_it_is_kept_after_kill_9() {
    let m = Mount::new("file+cache");
    let roam = Roam::new();
    let (cache, config) = (roam.cache.join("c"), roam.cache.join("none.toml"));
    // Killed once its write is made, not only its open (a flag outside roam's names).
    let written = roam.cache.join("written");
    let script = format!(
        "exec 3>/w/k; echo half >&3; : > {}; sleep 60",
        written.display()
    );
    let mut run = start_run(&cache, &config, &m.url, &script);
    await_status(&cache, &config, "/w/k  (being written");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !written.exists() {
        assert!(Instant::now() < deadline, "the program never wrote");
        std::thread::sleep(Duration::from_millis(20));
    }
    run.kill().unwrap(); // SIGKILL: no close, no flush
    run.wait().unwrap();
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(
        status.contains("/w/k  KEPT, not uploaded: roam (pid") && status.contains("--force /w/k"),
        "{status}"
    );
    let mount = format!("/w={}", m.url);
    let sync = roam_cli(&cache, &config, &["sync", "-m", &mount]);
    assert_eq!(sync.status.code(), Some(EXIT_PENDING), "{}", stderr(&sync));
    assert!(
        stderr(&sync).contains("ended before the file's writer closed it"),
        "{}",
        stderr(&sync)
    );
    assert!(
        !m.backend("k").exists(),
        "a half-written copy is not uploaded"
    );
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(status.contains("/w/k  KEPT, not uploaded"), "{status}");
    // The user's word: upload it as it is.
    let force = roam_cli(&cache, &config, &["sync", "-m", &mount, "--force", "/w/k"]);
    assert!(force.status.success(), "{}", stderr(&force));
    assert_eq!(std::fs::read_to_string(m.backend("k")).unwrap(), "half\n");
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(status.contains("pending:  0 change(s)"), "{status}");
}

#[test]
fn a_kept_change_can_be_discarded() {
    let m = Mount::serving("file+cache", |srv| {
        std::fs::write(srv.join("k"), "server's\n").unwrap()
    });
    let roam = Roam::new();
    let (cache, config) = (roam.cache.join("c"), roam.cache.join("none.toml"));
    let mut run = start_run(
        &cache,
        &config,
        &m.url,
        "exec 3>/w/k; echo mine >&3; sleep 60",
    );
    await_status(&cache, &config, "/w/k  (being written");
    run.kill().unwrap();
    run.wait().unwrap();
    let mount = format!("/w={}", m.url);
    let discard = roam_cli(
        &cache,
        &config,
        &["sync", "-m", &mount, "--discard", "/w/k"],
    );
    assert!(discard.status.success(), "{}", stderr(&discard));
    assert_eq!(
        std::fs::read_to_string(m.backend("k")).unwrap(),
        "server's\n"
    );
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(status.contains("pending:  0 change(s)"), "{status}");
    let o = Roam::new()
        .env("ROAM_CACHE_DIR", &cache)
        .sh(&["-m", &mount], "cat /w/k");
    assert_eq!(stdout(&o), "server's\n", "{}", stderr(&o));
}

/// T_write is the core's under both frontends: a change closed and waiting for it when
/// roam is killed is delivered whole by `roam sync`, never before.
#[test]
fn a_closed_change_waiting_for_t_write_is_delivered_by_sync_after_kill_9() {
    for fuse in [false, true] {
        closed_change_waiting_for_t_write(fuse);
    }
}

fn closed_change_waiting_for_t_write(fuse: bool) {
    let m = Mount::new("file+cache");
    let roam = Roam::new();
    let cache = roam.cache.join("c");
    let config = roam.cache.join("roam.toml");
    std::fs::write(&config, "[cache]\nt_write = 60\n").unwrap();
    // In a child that ends: its exit closes the file (a shell's own `>` is closed only when
    // it puts its fd 1 back, a `dup2` roam does not see).
    let script = "(echo whole > /w/s); sleep 30";
    let mut run = start_run_through(&cache, &config, &m.url, script, fuse);
    await_status(&cache, &config, "/w/s  (due for upload");
    run.kill().unwrap();
    run.wait().unwrap();
    assert!(
        !m.backend("s").exists(),
        "fuse {fuse}: T_write had not come yet"
    );
    let sync = roam_cli(&cache, &config, &["sync", "-m", &format!("/w={}", m.url)]);
    assert!(sync.status.success(), "{}", stderr(&sync));
    assert!(stderr(&sync).contains("uploaded /w/s"), "{}", stderr(&sync));
    assert_eq!(std::fs::read_to_string(m.backend("s")).unwrap(), "whole\n");
}

#[test]
fn a_run_whose_changes_stayed_pending_exits_75() {
    let m = Mount::new("file+cache");
    let roam = Roam::new();
    let cache = roam.cache.join("c");
    let config = roam.cache.join("roam.toml");
    std::fs::write(&config, "[cache]\nt_write = 30\n").unwrap();
    // The program succeeds; its upload, left for later, then finds the directory gone.
    let o = Command::new(env!("CARGO_BIN_EXE_roam"))
        .env("ROAM_CACHE_DIR", &cache)
        .env("ROAM_CONFIG", &config)
        .env("B", m.backend(""))
        .args(["run", "-m", &format!("/w={}", m.url), "--", "sh", "-c"])
        .arg("mkdir /w/d && echo x > /w/d/f && rm -r $B/d")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(EXIT_PENDING), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not uploaded: /w/d/f"),
        "{}",
        stderr(&o)
    );
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(status.contains("/w/d/f"), "{status}");
}

/// roam killed while an upload is under way: what the upload had made on the server (its
/// temporary) is named by `roam status`, and `roam sync` removes it and delivers the change
/// whole.
#[test]
fn what_an_upload_cut_by_kill_9_left_is_listed_then_removed_by_sync() {
    let m = Mount::new("sftp");
    let roam = Roam::new();
    let (cache, config) = (roam.cache.join("c"), roam.cache.join("none.toml"));
    let data = roam.cache.join("data");
    write_file(&data, &noise(96 << 20, 11), 0o644);
    let mount = format!("/w={}", m.url);
    let with_env = |mut c: Command| {
        c.env("ROAM_CACHE_DIR", &cache).env("ROAM_CONFIG", &config);
        for (k, v) in m.env() {
            c.env(k, v);
        }
        c.stdin(Stdio::null());
        c
    };
    let mut run = with_env(Command::new(env!("CARGO_BIN_EXE_roam")))
        .args([
            "run",
            "-m",
            &mount,
            "--",
            "cp",
            data.to_str().unwrap(),
            "/w/big",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let temporaries = || -> Vec<String> {
        std::fs::read_dir(m.backend(""))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".roam-put-"))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while temporaries().is_empty() {
        assert!(run.try_wait().unwrap().is_none(), "the upload ended unseen");
        assert!(Instant::now() < deadline, "no upload began");
        std::thread::sleep(Duration::from_millis(1));
    }
    run.kill().unwrap(); // SIGKILL, mid-upload
    run.wait().unwrap();
    let left = temporaries();
    assert_eq!(left.len(), 1, "{left:?}");
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(
        status.contains("/w/big  (due for upload")
            && status.contains(&format!("may have left on the server: /w/{}", left[0])),
        "{status}"
    );
    let sync = with_env(Command::new(env!("CARGO_BIN_EXE_roam")))
        .args(["sync", "-m", &mount])
        .output()
        .unwrap();
    assert!(sync.status.success(), "{}", stderr(&sync));
    assert_eq!(temporaries(), Vec::<String>::new());
    assert!(std::fs::read(m.backend("big")).unwrap() == std::fs::read(&data).unwrap());
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(status.contains("pending:  0 change(s)"), "{status}");
}

/// A program killed by a signal while it writes a remote file: the kernel closes its fd,
/// but what it wrote is no whole version, so the change is kept, never uploaded over the
/// server's file, and `roam run` says so in its exit status. Under `roam run --fuse` the
/// kernel flushes the dead program's fd like any close; roam tells the two apart.
#[test]
fn a_change_whose_writer_was_killed_is_kept_not_uploaded() {
    for fuse in [false, true] {
        killed_writer_kept(fuse);
    }
}

fn killed_writer_kept(fuse: bool) {
    let m = Mount::serving("file+cache", |srv| {
        std::fs::write(srv.join("k"), "server's\n").unwrap()
    });
    // A cache that outlives `roam` (whose scratch goes with it), for `roam status` after.
    let scratch = Scratch::new("killed");
    let (cache, config) = (scratch.join("c"), scratch.join("none.toml"));
    let roam = Roam::new().env("ROAM_CACHE_DIR", &cache);
    let killed =
        "import os\nf = open('/w/k', 'w')\nf.write('half')\nf.flush()\nos.kill(os.getpid(), 9)";
    let mount = format!("/w={}", m.url);
    let args = match fuse {
        true => vec!["--fuse", "-m", &mount],
        false => vec!["-m", &mount],
    };
    let o = roam.sh(&args, &format!("python3 -c \"{killed}\"; echo $?"));
    assert_eq!(stdout(&o), "137\n", "fuse {fuse}: {}", stderr(&o));
    assert_eq!(
        o.status.code(),
        Some(EXIT_PENDING),
        "fuse {fuse}: {}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(m.backend("k")).unwrap(),
        "server's\n",
        "fuse {fuse}"
    );
    let status = stdout(&roam_cli(&cache, &config, &["status"]));
    assert!(
        status.contains("/w/k  KEPT, not uploaded: its writer (pid")
            && status.contains("was killed by signal 9 before closing it"),
        "fuse {fuse}: {status}"
    );
}

/// A program killed after it closed what it wrote (the upload waiting for T_write): the
/// change was whole, so it is delivered as usual.
#[test]
fn a_change_closed_before_its_writer_was_killed_is_delivered() {
    let m = Mount::new("file+cache");
    let scratch = Scratch::new("closed");
    let config = scratch.join("roam.toml");
    std::fs::write(&config, "[cache]\nt_write = 30\n").unwrap();
    let roam = Roam::new().env("ROAM_CONFIG", &config);
    let closed =
        "import os\nf = open('/w/k', 'w')\nf.write('whole')\nf.close()\nos.kill(os.getpid(), 9)";
    let o = roam.sh(
        &["-m", &format!("/w={}", m.url)],
        &format!("python3 -c \"{closed}\"; echo $?"),
    );
    assert_eq!(stdout(&o), "137\n", "{}", stderr(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(m.backend("k")).unwrap(), "whole");
}
