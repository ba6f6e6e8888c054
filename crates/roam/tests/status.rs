//! What roam tells about itself, through the real binary against real servers: `roam
//! status --json` seeing a slow transfer of another roam process in flight (nginx behind
//! the fault proxy, dripping), the changes a `roam run` left pending on a stalled WebDAV
//! server listed with the reason, and `-vv` showing roam's own decisions without the SSH
//! library's internals (a real sshd).

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{stderr, stdout, Roam};
use roam_testkit::fault::{Fault, Proxy};
use roam_testkit::{write_file, Scratch};
use serde_json::Value;

const LEN: usize = 2 << 20;

/// `roam status --json` on the cache of `roam`, parsed.
fn status_json(roam: &Roam) -> Value {
    let o = roam
        .command()
        .args(["status", "--json"])
        .output()
        .expect("roam status");
    assert!(o.status.success(), "roam status --json: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("roam status --json prints JSON")
}

/// Polls `roam status --json` until `pick` finds something in it (at most 20 s).
fn await_status(roam: &Roam, child: &mut Child, pick: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v = status_json(roam);
        if pick(&v) {
            return v;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "roam ended first; last status: {v:#}"
        );
        assert!(start.elapsed() < Duration::from_secs(20), "never: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn status_json_shows_another_process_transfer_in_flight_with_its_counters() {
    let (_dir, _server, proxy) = common::dripping(LEN);
    let roam = Roam::new();
    let file = format!("/http/127.0.0.1:{}/big.bin", proxy.port);
    let mut run = roam
        .command()
        .args(["run", "--", "sh", "-c", &format!("cat {file} | wc -c")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let in_flight = |v: &Value| {
        v["processes"].as_array().unwrap().iter().any(|p| {
            p["transfers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["bytes"].as_u64() > Some(0))
        })
    };
    let v = await_status(&roam, &mut run, in_flight);
    let p = &v["processes"][0];
    assert_eq!(p["pid"].as_u64(), Some(run.id() as u64), "{v:#}");
    assert_eq!(p["command"], "run");
    assert_eq!(p["what"], "sh");
    let t = &p["transfers"][0];
    assert_eq!(t["direction"], "fetch", "{v:#}");
    assert!(t["name"].as_str().unwrap().ends_with("/big.bin"), "{v:#}");
    assert_eq!(t["total"].as_u64(), Some(LEN as u64), "{v:#}");
    assert!(t["bytes"].as_u64().unwrap() < LEN as u64, "{v:#}");
    assert!(t["rate"].as_u64().is_some() && t["seconds"].as_f64().is_some());
    let remote = &p["remotes"][0];
    assert_eq!(
        remote["remote"].as_str(),
        Some(format!("http://127.0.0.1:{}", proxy.port).as_str()),
        "{v:#}"
    );
    assert!(remote["requests"].as_u64() >= Some(1), "{v:#}");
    for key in ["bytes_fetched", "bytes_uploaded", "errors", "retries"] {
        assert!(remote[key].is_u64(), "{key}: {v:#}");
    }

    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), LEN.to_string());
    // An ended process is gone from the status, and its state file with it.
    let v = status_json(&roam);
    assert_eq!(v["processes"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert_eq!(v["counters"]["misses"].as_u64(), Some(1), "{v:#}");
}

#[test]
fn pending_uploads_a_run_left_on_a_stalled_server_are_listed_with_the_reason() {
    let dir = Scratch::new("status-dav");
    roam_testkit::mkdir(&dir.join("www"));
    let server = roam_testkit::dav::nginx_dav(&dir.join("www"), &dir.join("run"));
    let proxy = Proxy::start(server.port);
    let config = dir.join("roam.toml");
    write_file(
        &config,
        b"[http]\nconnect_timeout = 2\nread_timeout = 2\n",
        0o644,
    );
    let roam = Roam::new().env("ROAM_CONFIG", &config);
    let (ready, go) = (dir.join("ready"), dir.join("go"));
    // The file is written while the server answers; its upload waits for T_write, and
    // the server stalls before roam ends and tries it.
    let script = format!(
        "echo hello > /d/new.txt && touch {} && while [ ! -e {} ]; do sleep 0.1; done",
        ready.display(),
        go.display()
    );
    let mount = format!("/d=dav://127.0.0.1:{}", proxy.port);
    let mut run = roam
        .command()
        .args(["--t-write", "60s", "run", "-m", &mount, "--", "sh", "-c"])
        .arg(&script)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    await_file(&ready, &mut run);
    proxy.set(Fault::Freeze);
    write_file(&go, b"", 0o644);
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));

    let v = status_json(&roam);
    let pending = v["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{v:#}");
    let p = &pending[0];
    assert_eq!(p["name"], "/d/new.txt");
    assert_eq!(p["state"], "due");
    assert!(p["owner"].is_null(), "{v:#}");
    let reason = p["reason"].as_str().unwrap();
    assert!(reason.contains("its last upload failed: "), "{reason}");
    assert!(reason.contains("`roam sync` delivers it"), "{reason}");
    assert_eq!(
        std::fs::read(p["copy"].as_str().unwrap()).unwrap(),
        b"hello\n"
    );
    // The text form says the same.
    let text = stdout(&roam.command().arg("status").output().unwrap());
    assert!(
        text.contains("/d/new.txt  (due for upload; left by a roam that ended"),
        "{text}"
    );
}

fn await_file(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        assert!(child.try_wait().unwrap().is_none(), "roam ended first");
        assert!(start.elapsed() < Duration::from_secs(20), "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn vv_shows_roam_decisions_and_no_ssh_library_lines() {
    let dir = Scratch::new("verbose");
    write_file(&dir.join("srv/f.txt"), b"over ssh\n", 0o644);
    let served = roam_testkit::backend::serve("sftp", &dir.join("srv"), &dir.join("run"));
    let roam = || {
        let mut r = Roam::new();
        for (k, v) in &served.env {
            r = r.env(k, v);
        }
        r
    };
    let mount = format!("/s={}", served.url);
    let args = ["-vv", "run", "-m", &mount, "--", "cat", "/s/f.txt"];
    let o = roam().cli(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "over ssh\n");
    let err = stderr(&o);
    assert!(err.contains("open /s/f.txt: a whole copy"), "{err}");
    assert!(
        err.contains("/s/f.txt: not cached: fetched whole, 9 bytes"),
        "{err}"
    );
    assert!(!err.contains("russh"), "SSH library lines at -vv:\n{err}");
    // The library does log at debug: RUST_LOG still shows it.
    let o = roam().env("RUST_LOG", "debug").cli(&args);
    assert!(stderr(&o).contains("russh"), "{}", stderr(&o));
}

#[test]
fn a_mount_and_the_process_serving_it_are_listed_until_unmounted() {
    let roam = Roam::new();
    let scratch = Scratch::new("status-mount");
    let dir = scratch.join("mnt");
    roam_testkit::mkdir(&dir);
    let _guard = common::fuse::UnmountOnDrop(dir.clone());
    let o = roam
        .command()
        .arg("mount")
        .arg(&dir)
        .arg("mem:")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(dir.join("f"), b"x").unwrap();
    let dir = dir.canonicalize().unwrap().display().to_string();
    // The state file is written within half a second of the start.
    let start = Instant::now();
    let v = loop {
        let v = status_json(&roam);
        if v["processes"].as_array().is_some_and(|p| !p.is_empty()) {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mounts = v["mounts"].as_array().unwrap();
    let m = mounts
        .iter()
        .find(|m| m["dir"] == dir.as_str())
        .expect("listed");
    assert_eq!(m["source"], "roam:mem", "{v:#}");
    let p = &v["processes"][0];
    assert_eq!(p["command"], "mount");
    assert_eq!(p["what"], dir.as_str());
    assert_eq!(m["pid"], p["pid"], "{v:#}");
    assert_eq!(p["remotes"][0]["remote"], "mem:", "{v:#}");

    let o = roam.command().arg("umount").arg(&dir).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let start = Instant::now();
    loop {
        let v = status_json(&roam);
        let gone = v["processes"].as_array().unwrap().is_empty()
            && !v["mounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["dir"] == dir.as_str());
        if gone {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still there: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `roam run --fuse` publishes its state as `roam run` does: a `roam status` in its own
/// namespace (the cache is the host's) lists it.
#[test]
fn a_run_through_fuse_is_listed_while_it_runs() {
    let status = format!("{} status --json", env!("CARGO_BIN_EXE_roam"));
    let o = Roam::new().sh(
        &["--fuse", "-m", "/w=mem:"],
        &format!("sleep 1.2 && {status}"),
    );
    let v: Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let listed: Vec<(&str, &str)> = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["command"].as_str().unwrap(), p["what"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [("run", "sh")], "{v:#}");
}
