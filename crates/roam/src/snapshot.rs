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

use roam_vfs::{Copied, Kind, Node, Pinned, Vfs};

use crate::control::{Client, Request};

/// Which serving roam: the `roam mount` holding a path, or the `roam run` of a process.
#[derive(clap::Args)]
pub struct Served {
    /// A `roam mount` directory, or a directory under it; with `--pid`, a roam name as
    /// the programs of that `roam run` see it (`/dav/host/dir`).
    path: PathBuf,
    /// The `roam run` whose roam process is PID, instead of a mount.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
}

impl Served {
    /// The client of the roam meant, with the cache directory in effect.
    fn client(&self) -> Result<Client> {
        let cache = crate::config::Config::load()?.cache_dir();
        match self.pid {
            Some(pid) => Client::of_pid(&cache, pid),
            None => Client::find(&cache, &self.path),
        }
    }

    /// How the roam meant is told in messages.
    fn name(&self, c: &Client) -> String {
        match self.pid {
            Some(pid) => format!("the roam run of process {pid}"),
            None => c.mount.display().to_string(),
        }
    }

    /// The path the serving roam is asked about: a mount's, resolved; a run's, as given.
    fn path(&self) -> Result<PathBuf> {
        match self.pid {
            Some(_) => Ok(self.path.clone()),
            None => Ok(self.path.canonicalize()?),
        }
    }
}

#[derive(clap::Args)]
pub struct SuspendArgs {
    #[command(flatten)]
    served: Served,
    /// Longest wait for changes under way to end and for pending uploads to be
    /// delivered; longer fails (and nothing stays suspended).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
}

#[derive(clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    served: Served,
}

#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// What is copied.
    #[command(flatten)]
    served: Served,
    /// A local directory to copy into (made; must be absent or empty), or a new directory
    /// on the mount, on the same remote, which its server copies into (S3, WebDAV).
    dest: PathBuf,
    /// As for `roam suspend`.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout: u64,
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
    let mut c = args.served.client()?;
    let name = args.served.name(&c);
    if let Err(e) = c.ask(&Request::Suspend {
        timeout_ms: millis(args.timeout),
    }) {
        return refused(e.context(format!("suspending {name}")));
    }
    eprintln!("roam: {name} suspended: changes wait until `roam resume`");
    Ok(0)
}

pub fn resume(args: ResumeArgs) -> Result<i32> {
    let mut c = args.served.client()?;
    match c.ask(&Request::Resume) {
        Ok(_) => Ok(0),
        Err(e) => refused(e.context(format!("resuming {}", args.served.name(&c)))),
    }
}

/// Asks the serving roam to copy `path` to `dest` while suspended: it walks its own
/// namespace, not the mount, since a change waiting at the suspension holds its directory
/// locked in the kernel, and a walk through the mount would wait for it.
pub fn snapshot(args: SnapshotArgs) -> Result<i32> {
    let mut c = args.served.client()?;
    let mount = args.served.pid.is_none().then_some(c.mount.as_path());
    let dest = destination(&args.dest, mount)?;
    let path = &args.served.path;
    let req = Request::Snapshot {
        path: args.served.path()?,
        dest: dest.clone(),
        timeout_ms: millis(args.timeout),
    };
    match c.ask(&req) {
        Ok(reply) => {
            eprintln!(
                "roam: snapshot of {} in {}: {} files, {} bytes",
                path.display(),
                dest.display(),
                reply.files.unwrap_or(0),
                reply.bytes.unwrap_or(0)
            );
            Ok(0)
        }
        Err(e) => refused(e.context(format!("snapshot of {}", path.display()))),
    }
}

/// The absolute name of `dest`, its directory resolved. One holding files would mix two
/// states; one on the mount is for the serving roam to check (its server copies), and is
/// not looked up here: the kernel would keep its absence for T_read. For a `roam run`
/// (no `mount`), `dest` as given: a roam name is the serving roam's to tell.
fn destination(dest: &Path, mount: Option<&Path>) -> Result<PathBuf> {
    let Some(mount) = mount else {
        if std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) {
            bail!("{}: not empty", dest.display());
        }
        return Ok(std::path::absolute(dest)?);
    };
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
    // One version, whatever happens to the file on the server meanwhile.
    let pinned = Pinned::default();
    loop {
        let data = vfs.read_range(node, off, CHUNK, &pinned)?;
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
