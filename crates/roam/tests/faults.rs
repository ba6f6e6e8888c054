//! Faults of servers and networks on the read path, for every protocol roam reads (HTTP,
//! WebDAV, FTP, SFTP, S3, Chirp) and both frontends (`roam run`, `roam run --fuse`).
//!
//! Each protocol's real server sits behind roam-testkit's fault proxy (one proxy per case;
//! FTP's passive data connections go through it too), and roam runs with short timeouts
//! ([`CONNECT`], [`READ`]). Cases: the server killed mid-read of a large file (12 MiB,
//! streamed) and of a small one (2 MiB, fetched whole); the server frozen
//! mid-read; a server dripping one byte every 2 s mid-read (each byte beats the per-read
//! timeout: the low-speed limit must end it); a black hole at connect. Each case asserts
//! that the program got the server's exact bytes or failed with the case's errno
//! (docs/SEMANTICS.md, "Failures"), that the bytes it got before failing are the file's own
//! (a prefix of it), that it ended within a bound derived from the timeouts, and that
//! `roam status` shows nothing pending and no copy of a file that failed. SIGTERM to a
//! `roam run` whose program waits on a frozen server ends the run at once. The write side
//! for comparison: a server frozen mid-upload, or taking 1 byte every 2 s, makes the
//! writer's `close` fail with ETIMEDOUT, and the change stays pending (for `roam sync`).
//!
//! Network partitions (`partition_*`): the test thread makes a network namespace of its
//! own, where the servers, proxies and roam run, and its firewall drops every packet of
//! a transfer in the middle (of a read, and of an upload over a file the server has). The
//! read fails as for a frozen server; the writer's `close` fails with ETIMEDOUT, the
//! server keeps its old version whole, and once the network heals, `roam sync` (without
//! the run's `-m`) delivers the change and leaves nothing behind on the server.

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;
use std::thread;
use std::time::{Duration, Instant};

use common::{fixture, stderr, stdout, Roam};
use roam_testkit::backend::{serve, Served};
use roam_testkit::fault::{Fault, Proxy};
use roam_testkit::net::{command_ok, own_network};
use roam_testkit::{noise, write_file, Scratch};

/// The timeouts roam runs with here (`[http]` in roam.toml; every driver takes them).
const CONNECT: u64 = 2;
const READ: u64 = 3;
const BIG: usize = 12 << 20;
const SMALL: usize = 2 << 20;
/// Where a mid-read fault begins: after this many bytes of the file (and the requests
/// before it, a few KiB) came through.
const MID_BIG: u64 = 4 << 20;
const MID_SMALL: u64 = 1 << 20;

/// How a program reaches the remote files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frontend {
    Trap,
    Fuse,
}

/// One fault case.
#[derive(Clone, Copy, Debug)]
struct Case {
    name: &'static str,
    file: &'static str,
    /// When the fault begins: after this many bytes served, or (`None`) from the start.
    after: Option<u64>,
    fault: Fault,
    /// The errno the read fails with when it fails.
    errno: &'static str,
}

const DRIP: Fault = Fault::Drip {
    bytes: 1,
    every: Duration::from_secs(2),
};

const CASES: [Case; 6] = [
    Case {
        name: "killed mid-read, large",
        file: "big.bin",
        after: Some(MID_BIG),
        fault: Fault::Kill,
        errno: "EIO",
    },
    Case {
        name: "killed mid-read, small",
        file: "small.bin",
        after: Some(MID_SMALL),
        fault: Fault::Kill,
        errno: "EIO",
    },
    Case {
        name: "frozen mid-read",
        file: "big.bin",
        after: Some(MID_BIG),
        fault: Fault::Freeze,
        errno: "ETIMEDOUT",
    },
    Case {
        name: "drip mid-read, large",
        file: "big.bin",
        after: Some(MID_BIG),
        fault: DRIP,
        errno: "ETIMEDOUT",
    },
    Case {
        name: "drip mid-read, small",
        file: "small.bin",
        after: Some(MID_SMALL),
        fault: DRIP,
        errno: "ETIMEDOUT",
    },
    Case {
        name: "black hole at connect",
        file: "small.bin",
        after: None,
        fault: Fault::BlackHole,
        errno: "ETIMEDOUT",
    },
];

/// The longest a case may take: a read tries a transfer twice (partial.rs), each bounded
/// by a connect, a first answer and then either a read timeout or a window of the
/// low-speed limit (plus the drip's own gap); and roam's start, the listing, the bytes
/// before the fault.
fn bound() -> Duration {
    Duration::from_secs(2 * (CONNECT + READ + READ + 2) + 6)
}

/// A protocol's real server with the two files, and the way to reach it through a proxy.
struct Site {
    kind: &'static str,
    served: Served,
    upstream: u16,
    big: Vec<u8>,
    small: Vec<u8>,
    scratch: Scratch,
}

impl Site {
    fn start(kind: &'static str) -> Site {
        let scratch = Scratch::new("faults");
        let srv = scratch.join("srv");
        let (big, small) = (noise(BIG, 21), noise(SMALL, 22));
        write_file(&srv.join("big.bin"), &big, 0o644);
        write_file(&srv.join("small.bin"), &small, 0o644);
        let served = serve(kind, &srv, &scratch.join("run"));
        let upstream = upstream_port(&served);
        Site {
            kind,
            served,
            upstream,
            big,
            small,
            scratch,
        }
    }

    fn proxy(&self) -> Proxy {
        match self.kind {
            "ftp" => Proxy::ftp(self.upstream),
            _ => Proxy::start(self.upstream),
        }
    }

    /// The URL and environment that reach the server through `proxy`; `home` is a fresh
    /// directory for an SSH client's files.
    fn via(&self, proxy: &Proxy, home: &Path) -> (String, Vec<(String, String)>) {
        let (from, to) = (
            format!("127.0.0.1:{}", self.upstream),
            format!("127.0.0.1:{}", proxy.port),
        );
        let mut env: Vec<_> = self
            .served
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.replace(&from, &to)))
            .collect();
        if self.kind == "sftp" {
            ssh_home(&self.served, self.upstream, proxy.port, home);
            env.retain(|(k, _)| k != "HOME");
            env.push(("HOME".into(), home.display().to_string()));
        }
        (self.served.url.replace(&from, &to), env)
    }

    fn bytes(&self, file: &str) -> &[u8] {
        match file {
            "big.bin" => &self.big,
            _ => &self.small,
        }
    }
}

/// The port of the server behind `served`: its `port` fact, or the one in its URL or
/// S3 endpoint.
fn upstream_port(served: &Served) -> u16 {
    let fact = served.facts.iter().find(|(k, _)| k == "port");
    if let Some((_, port)) = fact {
        return port.parse().unwrap();
    }
    let text = served
        .env
        .iter()
        .find(|(k, _)| k == "AWS_ENDPOINT_URL")
        .map_or(served.url.as_str(), |(_, v)| v.as_str());
    let digits = text.split("127.0.0.1:").nth(1).unwrap();
    digits
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// An SSH client's `HOME` that reaches the sshd fixture at `port` instead of `upstream`:
/// the same alias, key and host key, the host key filed under the new port.
fn ssh_home(served: &Served, upstream: u16, port: u16, home: &Path) {
    let fact = |name: &str| {
        let (_, v) = served.facts.iter().find(|(k, _)| k == name).unwrap();
        v.clone()
    };
    let known = fs::read_to_string(fact("known_hosts")).unwrap().replace(
        &format!("[127.0.0.1]:{upstream}"),
        &format!("[127.0.0.1]:{port}"),
    );
    write_file(&home.join(".ssh/known_hosts"), known.as_bytes(), 0o600);
    let config = format!(
        "Host {}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {}\n",
        roam_testkit::backend::SSH_ALIAS,
        fact("key")
    );
    write_file(&home.join(".ssh/config"), config.as_bytes(), 0o600);
}

/// A roam with its own cache and short timeouts that reaches `site` through `proxy`, and
/// the `roam run [--fuse] -m /w=URL -- sh -c SCRIPT` command of it (`dir`: the case's
/// own directory). The command shares the roam's cache, which lives as long as the roam.
fn roam_through(
    site: &Site,
    proxy: &Proxy,
    dir: &Path,
    read_timeout: u64,
    frontend: Frontend,
    script: &str,
) -> (Roam, std::process::Command) {
    roam_testkit::mkdir(dir);
    let (url, env) = site.via(proxy, &dir.join("home"));
    let mut roam = Roam::new();
    let conf = roam.cache.join("roam.toml");
    fs::write(
        &conf,
        format!("[http]\nconnect_timeout = {CONNECT}\nread_timeout = {read_timeout}\n"),
    )
    .unwrap();
    roam = roam.env("ROAM_CONFIG", conf);
    for (k, v) in &env {
        roam = roam.env(k, v);
    }
    let mut cmd = roam.command();
    cmd.arg("run");
    if frontend == Frontend::Fuse {
        cmd.arg("--fuse");
    }
    cmd.args(["-m", &format!("/w={url}"), "--", "sh", "-c", script]);
    (roam, cmd)
}

/// What a case came to.
struct Outcome {
    /// The probe's exit status and errno (`None`: it read the whole file).
    errno: Option<String>,
    bytes: Vec<u8>,
    took: Duration,
    status: String,
    roam_stderr: String,
    /// Whether the fault began (a mid-read one may never come if the read ended first).
    fired: bool,
    served: u64,
}

/// Runs `probe cat /w/FILE` under `frontend` through a proxy carrying `case`'s fault.
fn run_case(site: &Site, frontend: Frontend, case: &Case) -> Outcome {
    let dir = site.scratch.join(&format!(
        "case-{}-{frontend:?}",
        case.name.replace([' ', ','], "_")
    ));
    let proxy = site.proxy();
    match case.after {
        Some(bytes) => proxy.after_served(bytes, case.fault),
        None => proxy.set(case.fault),
    }
    let (out, err) = (dir.join("out"), dir.join("err"));
    let script = format!(
        "{} cat /w/{} > {} 2> {}",
        fixture().probe.display(),
        case.file,
        out.display(),
        err.display()
    );
    let (roam, mut cmd) = roam_through(site, &proxy, &dir, READ, frontend, &script);
    let start = Instant::now();
    let o = cmd.output().unwrap();
    let took = start.elapsed();
    let status = status_of(roam.command());
    // The program's errno; if it never ran (`roam run --fuse` could not bind a mount
    // whose root the server did not answer for), roam's.
    let errno = fs::read_to_string(&err).unwrap_or_else(|_| roam_errno(&stderr(&o)));
    Outcome {
        errno: (!o.status.success()).then(|| errno.trim().to_owned()),
        bytes: fs::read(&out).unwrap_or_default(),
        took,
        status,
        roam_stderr: stderr(&o),
        fired: case.after.is_none() || proxy.fired(),
        served: proxy.served(),
    }
}

/// The errno named by roam's message of a failure to start (`... (os error 110)`).
fn roam_errno(message: &str) -> String {
    let code = message
        .split("(os error ")
        .nth(1)
        .and_then(|rest| rest.split(')').next()?.parse().ok());
    match code {
        Some(libc::ETIMEDOUT) => "ETIMEDOUT".into(),
        Some(libc::EHOSTUNREACH) => "EHOSTUNREACH".into(),
        Some(libc::EIO) => "EIO".into(),
        _ => format!("no errno in {message:?}"),
    }
}

/// `roam status` with the same cache and configuration.
fn status_of(mut cmd: std::process::Command) -> String {
    let o: Output = cmd.arg("status").output().unwrap();
    assert!(o.status.success(), "roam status: {}", stderr(&o));
    stdout(&o)
}

/// Checks one outcome against its case; `Err` says what is wrong.
fn check(site: &Site, case: &Case, o: &Outcome) -> Result<(), String> {
    let want = site.bytes(case.file);
    if !o.fired {
        return Err(format!("the fault never began ({} bytes served)", o.served));
    }
    if !want.starts_with(&o.bytes) {
        return Err(format!(
            "wrong bytes: {} bytes that are not the file's",
            o.bytes.len()
        ));
    }
    match &o.errno {
        None if o.bytes.len() != want.len() => {
            return Err(format!("succeeded with {} bytes", o.bytes.len()))
        }
        Some(got) if got != case.errno => {
            return Err(format!("{got}, not {}: {}", case.errno, o.roam_stderr))
        }
        _ => {}
    }
    if o.took > bound() {
        return Err(format!("took {:?} (bound {:?})", o.took, bound()));
    }
    if !o.status.contains("pending:  0 change(s)") {
        return Err(format!("roam status: {}", o.status));
    }
    if o.errno.is_some() && !o.status.contains("copies:   0 files") {
        return Err(format!("a copy of a failed file is kept: {}", o.status));
    }
    Ok(())
}

/// How much an upload case writes: more than loopback sockets and the proxy can hold
/// while the server is frozen.
const UPLOAD: usize = 16 << 20;

/// `probe put /w/NAME < SRC`: the script of an upload case.
fn put(name: &str, src: &Path) -> String {
    format!(
        "{} put /w/{name} < {}",
        fixture().probe.display(),
        src.display()
    )
}

/// The upload faults: the server frozen, and a server that takes 1 byte every 2 s (on
/// every connection: a retry's commands crawl too).
const UPLOAD_FAULTS: [(&str, Fault); 2] = [
    ("frozen mid-upload", Fault::Freeze),
    (
        "drip mid-upload",
        Fault::DripUp {
            bytes: 1,
            every: Duration::from_secs(2),
        },
    ),
];

/// `probe put /w/NAME` of [`UPLOAD`] bytes under `frontend`, `fault` beginning once 1 MiB
/// of it went through: what the writer's `close` says, and what stays pending.
fn upload_case(site: &Site, frontend: Frontend, fault: Fault) -> (String, Duration, String) {
    let case = match fault {
        Fault::Freeze => "frozen",
        _ => "drip",
    };
    let dir = site.scratch.join(&format!("upload-{frontend:?}-{case}"));
    let proxy = site.proxy();
    let src = dir.join("src");
    write_file(&src, &noise(UPLOAD, 23), 0o644);
    proxy.after_sent(1 << 20, fault);
    let name = format!("up-{frontend:?}-{case}.bin");
    let script = put(&name, &src);
    let (roam, mut cmd) = roam_through(site, &proxy, &dir, READ, frontend, &script);
    let start = Instant::now();
    let o = cmd.output().unwrap();
    let took = start.elapsed();
    (
        stdout(&o).trim().to_owned(),
        took,
        status_of(roam.command()),
    )
}

/// Every case under both frontends against `kind`'s server, at once; reports a table line
/// per case and fails with every case that went wrong.
fn faults(kind: &'static str) {
    let site = Site::start(kind);
    let (runs, uploads): (Vec<_>, Vec<_>) = thread::scope(|s| {
        let frontends = [Frontend::Trap, Frontend::Fuse];
        let handles: Vec<_> = frontends
            .into_iter()
            .flat_map(|f| CASES.iter().map(move |c| (f, c)))
            .map(|(f, c)| {
                let site = &site;
                s.spawn(move || (f, c, run_case(site, f, c)))
            })
            .collect();
        let uploads: Vec<_> = frontends
            .into_iter()
            .flat_map(|f| UPLOAD_FAULTS.iter().map(move |u| (f, u)))
            .filter(|_| kind != "http")
            .map(|(f, (name, fault))| {
                let site = &site;
                s.spawn(move || (f, *name, upload_case(site, f, *fault)))
            })
            .collect();
        (
            handles.into_iter().map(|h| h.join().unwrap()).collect(),
            uploads.into_iter().map(|h| h.join().unwrap()).collect(),
        )
    });
    let mut failures = Vec::new();
    for (frontend, case, (said, took, status)) in &uploads {
        let pending = status.lines().find(|l| l.starts_with("pending:"));
        eprintln!(
            "| {kind} | {frontend:?} | {case} | {said} | {:.1} s | {} |",
            took.as_secs_f64(),
            pending.unwrap_or("?")
        );
        // The writer's close says ETIMEDOUT and the change waits for `roam sync`; the run
        // tries the upload once more before it ends: twice the bound of a read.
        let ok = said == "ETIMEDOUT"
            && *took < bound() * 2
            && pending.is_some_and(|p| p.starts_with("pending:  1 change(s)"));
        if !ok {
            failures.push(format!(
                "{kind} {frontend:?} {case}: {said} after {took:?}; {status}"
            ));
        }
    }
    for (frontend, case, o) in &runs {
        let verdict = check(&site, case, o);
        eprintln!(
            "| {kind} | {frontend:?} | {} | {} | {:.1} s | {} |",
            case.name,
            o.errno.as_deref().unwrap_or("exact bytes"),
            o.took.as_secs_f64(),
            verdict.as_ref().map_or("FAIL", |()| "ok"),
        );
        if let Err(why) = verdict {
            failures.push(format!("{kind} {frontend:?} {}: {why}", case.name));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn http() {
    faults("http");
}

#[test]
fn webdav() {
    faults("dav");
}

#[test]
fn ftp() {
    faults("ftp");
}

#[test]
fn sftp() {
    faults("sftp");
}

#[test]
fn s3() {
    faults("s3");
}

#[test]
fn chirp() {
    faults("chirp");
}

/// SIGTERM to `roam run` (either frontend) while its program waits on a frozen server ends
/// the run at once, long before the read timeout (30 s here) would.
#[test]
fn sigterm_ends_a_run_blocked_on_a_frozen_server() {
    let site = Site::start("http");
    thread::scope(|s| {
        for frontend in [Frontend::Trap, Frontend::Fuse] {
            let site = &site;
            s.spawn(move || sigterm_while_frozen(site, frontend));
        }
    });
}

fn sigterm_while_frozen(site: &Site, frontend: Frontend) {
    let dir = site.scratch.join(&format!("term-{frontend:?}"));
    let proxy = site.proxy();
    proxy.after_served(MID_BIG, Fault::Freeze);
    // `exec`: the program itself gets the SIGTERM roam forwards (a shell would die and
    // leave its child reading).
    let program = format!(
        "exec {} cat /w/big.bin > /dev/null",
        fixture().probe.display()
    );
    let (_roam, mut cmd) = roam_through(site, &proxy, &dir, 30, frontend, &program);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !proxy.fired() {
        assert!(
            Instant::now() < deadline,
            "{frontend:?}: the read never began"
        );
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("{frontend:?}: roam run still running 5 s after SIGTERM");
        }
        thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "| http | {frontend:?} | SIGTERM while frozen | ended | {:.1} s |",
        sent.elapsed().as_secs_f64()
    );
}

/// A slow link (1.25 MiB/s both ways), so that a test can partition a transfer in the
/// middle.
const SLOW: Fault = Fault::Slow {
    bytes: 64 << 10,
    every: Duration::from_millis(50),
};

/// Drops every packet to and from `port` (both ends of each connection through it): a
/// partition, as a pulled cable or a dead router makes one; nothing is refused or reset.
fn partition(port: u16) {
    drop_rules(port, "-A");
}

/// Ends the partition of `port` (only: other cases' partitions go on).
fn heal(port: u16) {
    drop_rules(port, "-D");
}

fn drop_rules(port: u16, action: &str) {
    let port = port.to_string();
    for way in ["--dport", "--sport"] {
        let rule = ["INPUT", "-p", "tcp", way, &port, "-j", "DROP"];
        command_ok("iptables", &[&[action][..], &rule].concat());
    }
}

/// Waits until `moved()` reaches `bytes` (a transfer is under way), for at most 20 s.
fn wait_for(bytes: u64, moved: impl Fn() -> u64, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while moved() < bytes {
        if Instant::now() > deadline {
            return Err(format!("{what} never began ({} bytes)", moved()));
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// `probe cat /w/big.bin` over a slow link, partitioned once 1 MiB came through: the
/// program fails with ETIMEDOUT within the bound, having read only the file's own bytes.
fn partition_read(site: &Site, frontend: Frontend) -> Result<(), String> {
    let case = Case {
        name: "partition mid-read",
        file: "big.bin",
        after: None,
        fault: SLOW,
        errno: "ETIMEDOUT",
    };
    let dir = site.scratch.join(&format!("partition-read-{frontend:?}"));
    let proxy = site.proxy();
    proxy.set(SLOW);
    let (out, err) = (dir.join("out"), dir.join("err"));
    let script = format!(
        "{} cat /w/big.bin > {} 2> {}",
        fixture().probe.display(),
        out.display(),
        err.display()
    );
    let (roam, mut cmd) = roam_through(site, &proxy, &dir, READ, frontend, &script);
    let start = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let began = wait_for(1 << 20, || proxy.served(), "the read");
    partition(proxy.port);
    let o = child.wait_with_output().unwrap();
    began?;
    let outcome = Outcome {
        errno: (!o.status.success()).then(|| {
            let said = fs::read_to_string(&err).unwrap_or_else(|_| roam_errno(&stderr(&o)));
            said.trim().to_owned()
        }),
        bytes: fs::read(&out).unwrap_or_default(),
        took: start.elapsed(),
        status: status_of(roam.command()),
        roam_stderr: stderr(&o),
        fired: true,
        served: proxy.served(),
    };
    eprintln!(
        "| {} | {frontend:?} | partition mid-read | {} | {:.1} s |",
        site.kind,
        outcome.errno.as_deref().unwrap_or("exact bytes"),
        outcome.took.as_secs_f64()
    );
    check(site, &case, &outcome).map_err(|why| format!("{frontend:?} mid-read: {why}"))
}

/// `probe put` of [`UPLOAD`] bytes over a file the server has, over a slow link
/// partitioned once 1 MiB of the upload went out: the writer's `close` fails with
/// ETIMEDOUT, the server keeps its old version whole, and the change stays pending; once
/// the network heals, `roam sync` delivers it and leaves nothing behind.
fn partition_upload(site: &Site, frontend: Frontend) -> Result<(), String> {
    let dir = site.scratch.join(&format!("partition-up-{frontend:?}"));
    // A directory of the case's own: its leftovers are its own.
    let name = format!("up-{frontend:?}/f.bin");
    let served = site.scratch.join("srv").join(&name);
    let (old, new) = (noise(1 << 20, 24), noise(UPLOAD, 25));
    write_file(&served, &old, 0o644);
    // Made after the server started: writable by its workers too (nginx's).
    let perms = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    fs::set_permissions(served.parent().unwrap(), perms).unwrap();
    let src = dir.join("src");
    write_file(&src, &new, 0o644);
    let proxy = site.proxy();
    proxy.set(SLOW);
    let script = put(&name, &src);
    let (roam, mut cmd) = roam_through(site, &proxy, &dir, READ, frontend, &script);
    let start = Instant::now();
    let child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let began = wait_for((1 << 20) + proxy.sent(), || proxy.sent(), "the upload");
    partition(proxy.port);
    let o = child.wait_with_output().unwrap();
    let took = start.elapsed();
    began?;
    let said = stdout(&o).trim().to_owned();
    let status = status_of(roam.command());
    eprintln!(
        "| {} | {frontend:?} | partition mid-upload | {said} | {:.1} s |",
        site.kind,
        took.as_secs_f64()
    );
    if said != "ETIMEDOUT" || took > bound() * 2 {
        return Err(format!("{frontend:?} mid-upload: {said} after {took:?}"));
    }
    if fs::read(&served).ok().as_deref() != Some(&old[..]) {
        let there = fs::read(&served).map(|b| b.len());
        return Err(format!(
            "{frontend:?} mid-upload: the server's old version is gone: {there:?} bytes there"
        ));
    }
    if !status.contains("pending:  1 change(s)") {
        return Err(format!("{frontend:?} mid-upload: roam status: {status}"));
    }
    heal(proxy.port);
    proxy.set(Fault::None);
    let o = roam.command().arg("sync").output().unwrap();
    let status = status_of(roam.command());
    let litter: Vec<_> = fs::read_dir(served.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".roam-"))
        .collect();
    match () {
        _ if !o.status.success() => Err(format!("{frontend:?} roam sync: {}", stderr(&o))),
        _ if fs::read(&served).ok().as_deref() != Some(&new[..]) => Err(format!(
            "{frontend:?} after sync: the server does not have the new version"
        )),
        _ if !status.contains("pending:  0 change(s)") => {
            Err(format!("{frontend:?} after sync: {status}"))
        }
        _ if !litter.is_empty() => Err(format!(
            "{frontend:?} after sync: left on the server: {litter:?}"
        )),
        _ => Ok(()),
    }
}

/// A network partition (every packet dropped by the firewall of a network namespace the
/// test made) mid-read, and mid-upload where the protocol writes, under both frontends.
fn partitions(kind: &'static str) {
    own_network();
    let site = Site::start(kind);
    let failures: Vec<String> = thread::scope(|s| {
        let mut cases = Vec::new();
        for frontend in [Frontend::Trap, Frontend::Fuse] {
            let site = &site;
            cases.push(s.spawn(move || partition_read(site, frontend)));
            if kind != "http" {
                cases.push(s.spawn(move || partition_upload(site, frontend)));
            }
        }
        let results = cases.into_iter().map(|h| h.join().unwrap());
        results.filter_map(Result::err).collect()
    });
    assert!(failures.is_empty(), "{kind}: {failures:#?}");
}

#[test]
fn partition_http() {
    partitions("http");
}

#[test]
fn partition_webdav() {
    partitions("dav");
}

#[test]
fn partition_sftp() {
    partitions("sftp");
}
