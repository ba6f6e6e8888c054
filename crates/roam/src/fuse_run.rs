//! `roam run --fuse -- PROGRAM`: the namespace through FUSE instead of ptrace. roam makes a
//! user and mount namespace of its own (no root needed where the system allows
//! unprivileged user namespaces), mounts the namespace with FUSE inside it, and builds the
//! program a root as bubblewrap does: a tmpfs holding binds of the real top-level
//! directories, with the FUSE subtrees bound at `/http`, `/s3`, ... and at the configured
//! mount points; then `pivot_root` into it. The program runs as the user (same uid and
//! gid; root keeps every id mapped, so owners and `chown` are the host's) and sees
//! nothing else change. When it exits, the namespace and its
//! mounts go with it.

use roam_drivers::secrets::scrub;
use std::ffi::CString;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use roam_fuse::{Options, Roamfs};

/// Where the FUSE mount itself sits in the new root (hidden from `ls /`).
const FUSE_AT: &str = ".roam";
const OLD_ROOT: &str = ".oldroot";

pub fn run(mounts: &[String], program: &[std::ffi::OsString]) -> Result<i32> {
    // Before any thread exists: unshare(CLONE_NEWUSER) refuses a threaded process.
    enter_namespaces().context("making a user and mount namespace (see `roam doctor`)")?;
    let vfs = Arc::new(crate::open_vfs(mounts, crate::Use::Work)?);
    let live = crate::live::start(vfs.clone(), "run", program[0].to_string_lossy().into());
    let cwd = std::env::current_dir().context("the current directory")?;
    let root = vfs
        .cache_root()
        .join(format!("root-{}", std::process::id()));
    std::fs::create_dir_all(&root)?;
    mount(Some("tmpfs"), &root, Some("tmpfs"), 0, Some("mode=0755"))?;
    let prefixes = vfs.prefixes();
    bind_host_tree(&root, &prefixes)?;
    let fuse_dir = root.join(FUSE_AT);
    std::fs::create_dir(&fuse_dir)?;
    let opts = Options {
        threads: 16,
        fsname: "roam".into(),
        allow_other: false,
        direct: true,
        read_only: false,
        xattrs: false,
        uring: crate::mount::uring_wanted(),
    };
    let mounted = roam_fuse::mount(Roamfs::new(vfs.clone(), "/"), &fuse_dir, &opts)
        .context("mounting FUSE in the namespace")?;
    let releases = mounted.releases();
    // Never unmounted by hand: the mount ends with the namespace, when roam exits (after
    // pivot_root its path would not even name it).
    std::mem::forget(mounted);
    for prefix in &prefixes {
        bind_prefix(&root, prefix)?;
    }
    url_aliases(&root);
    enter_root(&root)?;
    std::env::set_current_dir(&cwd).ok();
    let status = std::process::Command::new(&program[0])
        .args(&program[1..])
        .status()
        .with_context(|| format!("{}", program[0].to_string_lossy()))?;
    std::io::stdout().flush().ok();
    live.stop();
    // The kernel answers the program's last closes before their RELEASEs reach roam, and
    // the uploads those make are the program's too.
    let limit = crate::config::Config::load()?.settle_setting().value;
    let left = vfs.settle_closes(&*releases, limit);
    if left.open > 0 {
        eprintln!(
            "roam: {} file(s) still open by processes the program left running: the mount ends with roam",
            left.open
        );
    }
    if left.busy {
        tracing::warn!("uploads still under way after {limit:?} (`[cache] settle`)");
    }
    vfs.deliver_pending(&|_, message| eprintln!("roam: {}", scrub(&message)));
    let code = crate::exit_status(
        status.code().unwrap_or_else(|| 128 + exit_signal(&status)),
        &vfs,
    );
    vfs.finish();
    Ok(code)
}

fn exit_signal(status: &std::process::ExitStatus) -> i32 {
    std::os::unix::process::ExitStatusExt::signal(status).unwrap_or(0)
}

/// A user namespace mapping the caller's ids to themselves, and a private mount namespace
/// in it. Root maps every id, so files keep their owners and `chown` to any user works as
/// outside (and so does `setgroups`); anyone else may map only their own uid and gid, and
/// only once `setgroups` is denied.
fn enter_namespaces() -> Result<()> {
    // SAFETY: plain syscalls; the process is single-threaded here.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if uid == 0 {
        return enter_as_root();
    }
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        bail!("unshare: {}", std::io::Error::last_os_error());
    }
    std::fs::write("/proc/self/setgroups", "deny").context("/proc/self/setgroups")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).context("uid_map")?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).context("gid_map")?;
    private_mounts()
}

/// Root's namespaces with every id mapped. A map of more than the writer's own id must be
/// written from the parent namespace, so a child forked before `unshare` writes it.
fn enter_as_root() -> Result<()> {
    let (ready, go) = nix::unistd::pipe()?;
    // SAFETY: the process is single-threaded, so the child may do anything until it exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if child == 0 {
        drop(go);
        let mut byte = [0u8];
        let ok = nix::unistd::read(&ready, &mut byte) == Ok(1) && write_full_maps().is_ok();
        // SAFETY: leaving the forked child without running the parent's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    drop(ready);
    let shared = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) };
    let unshared = std::io::Error::last_os_error();
    if shared == 0 {
        nix::unistd::write(&go, &[1])?;
    }
    drop(go);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    if shared != 0 {
        bail!("unshare: {unshared}");
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("could not write the uid and gid maps of the namespace");
    }
    private_mounts()
}

/// Writes, from the parent namespace, maps of every id onto itself for the parent process.
fn write_full_maps() -> std::io::Result<()> {
    let parent = std::os::unix::process::parent_id();
    for map in ["uid_map", "gid_map"] {
        std::fs::write(format!("/proc/{parent}/{map}"), "0 0 4294967295")?;
    }
    Ok(())
}

/// Nothing done in the new mount namespace may reach the mounts outside.
fn private_mounts() -> Result<()> {
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

/// The real top-level entries, bound (recursively) into `root`; names that roam's
/// namespace takes at the top are left for [`bind_prefix`].
fn bind_host_tree(root: &Path, prefixes: &[String]) -> Result<()> {
    let taken: Vec<&str> = prefixes
        .iter()
        .filter_map(|p| p.split('/').nth(1))
        .collect();
    for entry in std::fs::read_dir("/")? {
        let entry = entry?;
        let name = entry.file_name();
        let (host, inside) = (entry.path(), root.join(&name));
        if taken.iter().any(|t| name == **t) && !host.is_dir() {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&host)?, &inside)?;
        } else {
            if kind.is_dir() {
                std::fs::create_dir(&inside)?;
            } else {
                std::fs::File::create(&inside)?;
            }
            mount(
                host.to_str(),
                &inside,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )?;
        }
    }
    Ok(())
}

/// Binds the FUSE subtree of `prefix` (`/http`, a configured mount point) at `prefix` in
/// the new root. A mount point inside a real directory must exist there already: roam does
/// not create directories on the host.
fn bind_prefix(root: &Path, prefix: &str) -> Result<()> {
    let rel = prefix.trim_start_matches('/');
    let target = root.join(rel);
    if !target.exists() {
        if let Err(e) = std::fs::create_dir_all(&target) {
            tracing::warn!("{prefix}: no mount point in the program's root ({e}); left out");
            return Ok(());
        }
    }
    let source = root.join(FUSE_AT).join(rel);
    mount(source.to_str(), &target, None, libc::MS_BIND, None)
}

/// `/http:` → `http` and the like for every implicit mount, so that a URL passed as an
/// absolute-looking path resolves (the kernel reads `/http://h/f` as `/http:/h/f`), as the
/// whole-namespace `roam mount` does at its root.
fn url_aliases(root: &Path) {
    for scheme in roam_vfs::IMPLICIT_SCHEMES {
        let link = root.join(format!("{scheme}:"));
        if let Err(e) = std::os::unix::fs::symlink(scheme, &link) {
            tracing::warn!("/{scheme}: not made in the program's root ({e})");
        }
    }
}

/// pivot_root into `root`; the old root is detached.
fn enter_root(root: &Path) -> Result<()> {
    let old = root.join(OLD_ROOT);
    std::fs::create_dir(&old)?;
    std::env::set_current_dir(root)?;
    let (new, put_old) = (cstr(Path::new("."))?, cstr(Path::new(OLD_ROOT))?);
    // SAFETY: valid C strings; pivot_root has no libc wrapper.
    if unsafe { libc::syscall(libc::SYS_pivot_root, new.as_ptr(), put_old.as_ptr()) } != 0 {
        bail!("pivot_root: {}", std::io::Error::last_os_error());
    }
    let old = cstr(&Path::new("/").join(OLD_ROOT))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(old.as_ptr(), libc::MNT_DETACH) } != 0 {
        bail!(
            "detaching the old root: {}",
            std::io::Error::last_os_error()
        );
    }
    std::fs::remove_dir(Path::new("/").join(OLD_ROOT)).ok();
    Ok(())
}

fn cstr(p: &Path) -> Result<CString> {
    Ok(CString::new(p.as_os_str().as_encoded_bytes())?)
}

fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<()> {
    let c = |s: Option<&str>| s.map(CString::new).transpose();
    let (src, fst, dat) = (c(source)?, c(fstype)?, c(data)?);
    let tgt = cstr(target)?;
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: valid C strings or null, as mount(2) takes them.
    let rc = unsafe {
        libc::mount(
            ptr(&src),
            tgt.as_ptr(),
            ptr(&fst),
            flags,
            ptr(&dat) as *const libc::c_void,
        )
    };
    if rc != 0 {
        bail!(
            "mount {} on {}: {}",
            source.unwrap_or("-"),
            target.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
