//! `roam suspend`, `roam resume` and `roam snapshot`: a running `roam mount` suspended
//! through its control channel (`control.rs`), and a point-in-time copy of a tree under it.
//! While suspended, programs changing files on the mount wait (they never fail) and reads
//! go on, so a snapshot, made by the serving roam itself, copies the tree as it stood at
//! the moment of suspension. A destination on the mount, on the same remote, is copied by
//! the server itself where its protocol can (S3 `CopyObject`, WebDAV `COPY`).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use roam_drivers::secrets::scrub;

use roam_vfs::{Copied, Kind, Node, Vfs};

use crate::control::{Client, Request};

#[derive(clap::Args)]
pub struct SuspendArgs {
    /// A `roam mount` directory, or a directory under it.
    path: PathBuf,
    /// Longest wait for changes under way to end and for pending uploads to be
    /// delivered; longer fails (and nothing stays suspended).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
}

#[derive(clap::Args)]
pub struct ResumeArgs {
    /// A `roam mount` directory, or a directory under it.
    path: PathBuf,
}

#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// A `roam mount` directory, or a directory under it: what is copied.
    path: PathBuf,
    /// A local directory to copy into (made; must be absent or empty), or a new directory
    /// on the mount, on the same remote, which its server copies into (S3, WebDAV).
    dest: PathBuf,
    /// As for `roam suspend`.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
}

/// The client for `path`, with the cache directory in effect.
fn client(path: &Path) -> Result<Client> {
    Client::find(&crate::config::Config::load()?.cache_dir(), path)
}

fn millis(seconds: u64) -> u64 {
    Duration::from_secs(seconds).as_millis() as u64
}

/// What the serving roam refused (a suspension not reached in time ...): said on
/// stderr, exit status 1.
fn refused(e: anyhow::Error) -> Result<i32> {
    eprintln!("roam: {}", scrub(&format!("{e:#}")));
    Ok(1)
}

pub fn suspend(args: SuspendArgs) -> Result<i32> {
    let mut c = client(&args.path)?;
    if let Err(e) = c.ask(&Request::Suspend {
        timeout_ms: millis(args.timeout),
    }) {
        return refused(e.context(format!("suspending {}", c.mount.display())));
    }
    eprintln!(
        "roam: {} suspended: changes wait until `roam resume`",
        c.mount.display()
    );
    Ok(0)
}

pub fn resume(args: ResumeArgs) -> Result<i32> {
    let mut c = client(&args.path)?;
    match c.ask(&Request::Resume) {
        Ok(_) => Ok(0),
        Err(e) => refused(e.context(format!("resuming {}", c.mount.display()))),
    }
}

/// Asks the serving roam to copy `path` to `dest` while suspended: it walks its own
/// namespace, not the mount, since a change waiting at the suspension holds its directory
/// locked in the kernel, and a walk through the mount would wait for it.
pub fn snapshot(args: SnapshotArgs) -> Result<i32> {
    let mut c = client(&args.path)?;
    let dest = destination(&args.dest, &c.mount)?;
    let req = Request::Snapshot {
        path: args.path.canonicalize()?,
        dest: dest.clone(),
        timeout_ms: millis(args.timeout),
    };
    match c.ask(&req) {
        Ok(reply) => {
            eprintln!(
                "roam: snapshot of {} in {}: {} files, {} bytes",
                args.path.display(),
                dest.display(),
                reply.files.unwrap_or(0),
                reply.bytes.unwrap_or(0)
            );
            Ok(0)
        }
        Err(e) => refused(e.context(format!("snapshot of {}", args.path.display()))),
    }
}

/// The absolute name of `dest`, its directory resolved. One holding files would mix two
/// states; one on the mount is for the serving roam to check (its server copies), and is
/// not looked up here: the kernel would keep its absence for T_read.
fn destination(dest: &Path, mount: &Path) -> Result<PathBuf> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = parent
        .canonicalize()
        .with_context(|| format!("resolving {}", parent.display()))?;
    let name = dest
        .file_name()
        .with_context(|| format!("{}: names no directory", dest.display()))?;
    if !parent.starts_with(mount) && std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) {
        bail!("{}: not empty", dest.display());
    }
    Ok(parent.join(name))
}

/// Where a snapshot goes.
pub enum Dest {
    /// A local directory, written by this roam.
    Local(PathBuf),
    /// A new directory of the remote copied (its virtual name), made by the server.
    OnServer(String),
}

/// Suspends `vfs` (draining within `limit`), copies the tree `virt` into `dest`, resumes.
pub fn take(vfs: &Vfs, virt: &str, dest: &Dest, limit: Duration) -> Result<Copied> {
    vfs.suspend(limit)?;
    let mut n = Copied::default();
    let copied = match dest {
        Dest::Local(to) => copy_dir(vfs, virt, to, &mut n)
            .with_context(|| format!("copying into {}", to.display())),
        Dest::OnServer(to) => vfs
            .copy_on_server(virt, to)
            .map(|done| n = done)
            .with_context(|| format!("copying into {to} on the server")),
    };
    vfs.resume();
    copied?;
    Ok(n)
}

/// Copies the directory `virt` (as roam's namespace sees it: listings, and the copies
/// being written) into `to`: directories and files, with their modes, and symlinks with
/// the server's text of them; special files are passed over.
fn copy_dir(vfs: &Vfs, virt: &str, to: &Path, n: &mut Copied) -> Result<()> {
    let node = vfs
        .lookup(virt)?
        .with_context(|| format!("{virt}: not roam's"))?;
    let meta = vfs.stat(&node)?;
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let listing = vfs.open_path(&node)?;
    for entry in std::fs::read_dir(&listing)? {
        let name = entry?.file_name();
        let child = format!("{}/{}", virt.trim_end_matches('/'), name.to_string_lossy());
        let Some(node) = vfs.lookup(&child)? else {
            continue;
        };
        match vfs.stat(&node)?.kind {
            Kind::Dir => copy_dir(vfs, &child, &to.join(&name), n)?,
            Kind::File => {
                n.bytes += copy_file(vfs, &node, &to.join(&name))?;
                n.files += 1;
            }
            Kind::Symlink => {
                if let Some((_, text)) = vfs.link_target(&node)? {
                    let link = to.join(&name);
                    std::os::unix::fs::symlink(&text, &link)
                        .with_context(|| format!("creating {}", link.display()))?;
                }
            }
            _ => {}
        }
    }
    set_mode(to, meta.mode)?;
    Ok(())
}

fn copy_file(vfs: &Vfs, node: &Node, to: &Path) -> Result<u64> {
    const CHUNK: u64 = 1 << 20;
    let mut out =
        std::fs::File::create(to).with_context(|| format!("creating {}", to.display()))?;
    let mut off = 0;
    loop {
        let data = vfs.read_range(node, off, CHUNK)?;
        out.write_all(&data)?;
        off += data.len() as u64;
        if (data.len() as u64) < CHUNK {
            break;
        }
    }
    set_mode(to, vfs.stat(node)?.mode)?;
    Ok(off)
}

fn set_mode(path: &Path, mode: Option<u32>) -> Result<()> {
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))?;
    }
    Ok(())
}
