//! `roam mount` and `roam umount`: the namespace (or one remote) served through FUSE.
//!
//! `roam mount DIR` serves the whole namespace (`DIR/http/HOST/...`, `DIR/s3/...`, the
//! configured mounts); `roam mount DIR URL` serves one remote at `DIR`. Without
//! `--foreground` roam starts itself again in the background and returns once the mount is
//! ready. As with sshfs and rclone, a directory that holds files or is a mount point already
//! (whose files the mount would hide) is refused unless `--nonempty`; `--read-only` mounts
//! `ro` (the kernel fails every change with EROFS). A remote named on the
//! command line that cannot be used fails the mount at once
//! (exit status 1, the reason on stderr). Ending roam (SIGINT, SIGTERM, SIGHUP, `roam umount`) unmounts; so does killing
//! it: a watcher process waits for roam's end and lazily unmounts what it leaves behind.
//! While mounted, roam answers `roam suspend`/`resume`/`snapshot` on its control socket.

use roam_drivers::secrets::scrub;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use roam_fuse::{Options, Roamfs};

/// Where one remote is put in the namespace when it is mounted alone.
const SINGLE_ROOT: &str = "/.roam-mount";
/// Set for the background copy of roam: print `ready` and the transport on stdout once
/// mounted.
const READY_ENV: &str = "ROAM_MOUNT_NOTIFY";

#[derive(clap::Args)]
pub struct MountArgs {
    /// The directory to mount on: empty and not a mount point, unless --nonempty.
    dir: PathBuf,
    /// Mount only this remote (any mount URL: http://, s3://, mem:, null:/dir, rot13:URL ...).
    url: Option<String>,
    /// Stay in the foreground (otherwise return once the mount is ready).
    #[arg(short, long)]
    foreground: bool,
    #[arg(short = 'm', long = "mount", value_name = "LOCAL=URL", help = crate::MOUNT_HELP)]
    mounts: Vec<String>,
    /// Worker threads for requests on remote names (a slow server holds one each; local
    /// and in-memory requests are answered by the two threads reading /dev/fuse).
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// Let other users in (sshfs' and rclone's `allow_other`): the kernel checks each
    /// caller's permissions against the owner and mode roam shows (`default_permissions`).
    /// Without root, needs `user_allow_other` in /etc/fuse.conf.
    #[arg(long)]
    allow_other: bool,
    /// Mount on DIR even if it holds files or is a mount point already (hiding them).
    #[arg(long)]
    nonempty: bool,
    /// Serve the files read-only: every change fails with EROFS (nothing is uploaded).
    #[arg(long)]
    read_only: bool,
    /// Answer `getxattr` for roam's fingerprints (`user.roam.md5`, `user.roam.sha256`).
    /// Costs a request per file written: the kernel then asks for `security.capability`
    /// before an inode's first write.
    #[arg(long)]
    xattrs: bool,
}

#[derive(clap::Args)]
pub struct UmountArgs {
    /// A directory `roam mount` mounted on.
    dir: PathBuf,
}

pub fn mount(args: MountArgs) -> Result<i32> {
    if !args.dir.is_dir() {
        bail!("{}: not a directory", args.dir.display());
    }
    if !args.nonempty {
        if let Err(e) = refuse_occupied(&args.dir) {
            return refuse(&e);
        }
    }
    if args.foreground || std::env::var_os(READY_ENV).is_some() {
        serve(&args)
    } else {
        daemonize()
    }
}

pub fn umount(args: UmountArgs) -> Result<i32> {
    let status = Command::new("fusermount3")
        .arg("-u")
        .arg("--")
        .arg(&args.dir)
        .status()
        .context("running fusermount3 (is fuse3 installed?)")?;
    Ok(if status.success() { 0 } else { 1 })
}

/// Fails for a directory that holds entries or is a mount point: a mount there would hide
/// them (a second `roam mount` on the same DIR is the usual slip). Exit status 1, as for a
/// remote that cannot be used.
fn refuse_occupied(dir: &Path) -> Result<()> {
    let hint = "(--nonempty mounts over it anyway)";
    if is_mount_point(dir)? {
        bail!("{}: already a mount point {hint}", dir.display());
    }
    let mut entries =
        std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    if entries.next().is_some() {
        bail!("{}: not empty {hint}", dir.display());
    }
    Ok(())
}

/// Whether `dir` is listed as a mount point in /proc/self/mountinfo (its fifth field, with
/// spaces and the like written as octal escapes).
fn is_mount_point(dir: &Path) -> Result<bool> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let table =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    Ok(table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| unescape_octal(m) == dir))
}

/// `/a\040b` → `/a b` (bytes: a mount point need not be UTF-8).
pub(crate) fn unescape_octal(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let code = b
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok());
        match code.and_then(|d| u8::from_str_radix(d, 8).ok()) {
            Some(c) if b[i] == b'\\' => {
                out.push(c);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out).into()
}

/// Starts `roam mount --foreground ...` in its own session and waits until it says the
/// mount is ready (or fails).
fn daemonize() -> Result<i32> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding roam's own executable")?;
    let cache = crate::config::Config::load()?.cache_dir();
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .recursive(true)
        .create(&cache)
        .with_context(|| format!("creating {}", cache.display()))?;
    let log = cache.join("mount.log");
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut child = Command::new(exe)
        .args(crate::argv::original().iter().skip(1))
        .env(READY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .context("starting roam in the background")?;
    let mut line = String::new();
    let out = child.stdout.take().expect("piped");
    std::io::BufReader::new(out).read_line(&mut line)?;
    if let Some(transport) = line.trim_end().strip_prefix("ready ") {
        eprintln!("roam: {transport}");
        return Ok(0);
    }
    let status = child.wait()?;
    if let Some(why) = line.trim().strip_prefix(REFUSED) {
        eprintln!("roam: {}", scrub(why));
        return Ok(1);
    }
    bail!("mount failed ({status}); see {} for why", log.display())
}

/// What the background roam prints instead of `ready` when a remote cannot be used.
const REFUSED: &str = "refused: ";

/// Asks the root of each mount named on the command line (`roam mount DIR URL`, `-m`)
/// for its attributes before mounting, so that a remote roam cannot use (a closed port,
/// an unknown host key, a refused login, a missing bucket) fails `roam mount` with the
/// reason, as sshfs and rclone do, rather than every call on the mount later. Mounts of
/// `roam.toml` are not asked: one server down must not keep the others away.
fn check_remotes(vfs: &roam_vfs::Vfs, mounts: &[String]) -> Result<()> {
    for m in mounts {
        let local = m.split_once('=').map_or(m.as_str(), |(l, _)| l);
        let virt = roam_vfs::path::normalize(local);
        let Some(node) = vfs.lookup(&virt)? else {
            continue;
        };
        vfs.stat(&node).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// Says why the mount cannot be made: to the waiting parent when roam went to the
/// background, else on stderr. Exit status 1.
fn refuse(e: &anyhow::Error) -> Result<i32> {
    if std::env::var_os(READY_ENV).is_some() {
        let mut out = std::io::stdout();
        writeln!(out, "{REFUSED}{e:#}")?;
        out.flush()?;
    } else {
        eprintln!("roam: {}", scrub(&format!("{e:#}")));
    }
    Ok(1)
}

/// Whether FUSE requests are to come through io_uring (`ROAM_FUSE_URING=1`), where the
/// kernel allows it; `/dev/fuse` otherwise.
pub fn uring_wanted() -> bool {
    std::env::var_os("ROAM_FUSE_URING").is_some_and(|v| v == "1")
}

/// Mounts and serves until unmounted or told to stop.
fn serve(args: &MountArgs) -> Result<i32> {
    // Signals are taken by sigtimedwait below: blocked before any thread exists.
    let signals = block_signals();
    let mut mounts = args.mounts.clone();
    let root = match &args.url {
        Some(url) => {
            mounts.push(format!("{SINGLE_ROOT}={url}"));
            SINGLE_ROOT
        }
        None => "/",
    };
    let vfs = Arc::new(crate::open_vfs(&mounts, crate::Use::Work)?);
    if let Err(e) = check_remotes(&vfs, &mounts) {
        return refuse(&e);
    }
    let fs = Roamfs::new(vfs.clone(), root);
    let opts = Options {
        threads: args.threads,
        // /proc/mounts is world-readable: the scheme only, never a URL's login.
        fsname: format!(
            "roam:{}",
            args.url
                .as_deref()
                .map_or("", |u| u.split(':').next().unwrap_or(""))
        ),
        allow_other: args.allow_other,
        direct: false,
        read_only: args.read_only,
        xattrs: args.xattrs,
        uring: uring_wanted(),
    };
    // Started first, so no moment exists when a killed roam would leave its mount behind.
    let mut watcher = unmount_watcher(&args.dir)?;
    let mounted = roam_fuse::mount(fs, &args.dir, &opts)
        .with_context(|| format!("mounting on {}", args.dir.display()))?;
    let control = crate::control::listen(vfs.clone(), Some(&args.dir), root)?;
    // Said once: by the waiting parent when roam went to the background.
    let transport = format!(
        "{}: requests through {}",
        args.dir.display(),
        mounted.transport()
    );
    if std::env::var_os(READY_ENV).is_some() {
        let mut out = std::io::stdout();
        writeln!(out, "ready {transport}")?;
        out.flush()?;
    } else {
        eprintln!("roam: {transport}");
    }
    let dir = args.dir.canonicalize().unwrap_or_else(|_| args.dir.clone());
    let live = crate::live::start(vfs.clone(), "mount", dir.display().to_string());
    while !mounted.ended() {
        if wait_signal(&signals, Duration::from_millis(200)) {
            break;
        }
    }
    live.stop();
    // A suspension ends with the mount: the changes waiting for it go on.
    drop(control);
    vfs.resume();
    mounted.unmount().context("unmounting")?;
    // Ended cleanly: the watcher must not unmount what may by now be a new mount there.
    writeln!(watcher, "done").ok();
    if let Err(e) = vfs.save_stats() {
        tracing::warn!("could not save cache counters: {e}");
    }
    vfs.deliver_pending(&|_, message| eprintln!("roam: {}", scrub(&message)));
    let code = crate::exit_status(0, &vfs);
    vfs.finish();
    Ok(code)
}

/// A process that lazily unmounts `dir` when roam dies (its stdin is a pipe whose other
/// end only roam holds), so a killed roam leaves no dead mount behind. A roam that ends
/// cleanly says `done` first: by then another mount may sit at `dir`.
fn unmount_watcher(dir: &Path) -> Result<std::process::ChildStdin> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read x; [ \"$x\" = done ] || exec fusermount3 -u -z -- \"$0\" 2>/dev/null")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the unmount watcher")?;
    Ok(child.stdin.take().expect("piped"))
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it starts after),
/// for [`wait_signal`].
pub(crate) fn block_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Whether one of the blocked signals arrived within `timeout`.
pub(crate) fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a valid set and timespec; no siginfo wanted.
    unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) > 0 }
}
