//! Calls that change the file system. A roam name of the local driver is changed in place
//! by the kernel itself (its path is spelled out); on a writable remote mount the driver
//! does it and the caches follow; on a read-only mount it is EROFS. A rename or link between
//! two different mounts (or roam and local names) is EXDEV, as between file systems.
//! Calls that make no sense on a remote name (chroot, mount ...) are refused loudly.

use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::unistd::Pid;
use roam_vfs::{Need, Node};

use super::resolve::Place;
use super::table::Spec;
use super::{rewrite_to, Decision, Job, Kernel, Served, Triage};
use crate::platform::memory;
use crate::platform::ptrace::Syscall;

/// Decides a name-changing call on the tracer thread when no remote work is needed.
pub(super) fn triage(
    k: &Kernel,
    tid: Pid,
    spec: &'static Spec,
    call: Syscall,
    places: Vec<Place>,
) -> Triage {
    let spelled: Option<Vec<Option<std::path::PathBuf>>> =
        places.iter().map(|p| local_spelling(k, p)).collect();
    if let Some(spelled) = spelled {
        // Every name is a real local path: the kernel decides, exactly as without roam.
        let args = spec
            .paths
            .iter()
            .zip(spelled)
            .filter_map(|(pa, p)| p.map(|p| (pa.path, p.into_os_string().into_encoded_bytes())))
            .collect();
        return Triage::Done(Decision::Rewrite(args));
    }
    let remote = places
        .iter()
        .filter(|p| matches!(p, Place::Roam(_) | Place::RoamFd(_)))
        .count();
    if remote < places.len() {
        return Triage::Done(refuse(k, spec, &places, libc::EXDEV));
    }
    if !places
        .iter()
        .all(|p| node_of(p).is_some_and(|n| k.vfs().writable(n)))
    {
        return Triage::Done(refuse(k, spec, &places, libc::EROFS));
    }
    Triage::Later(Job {
        tid,
        call,
        spec,
        places,
    })
}

/// `Some(None)`: a native name (leave it); `Some(Some(p))`: spell it as the local path `p`;
/// `None`: a name only a driver can change.
fn local_spelling(k: &Kernel, place: &Place) -> Option<Option<std::path::PathBuf>> {
    match place {
        Place::Native => Some(None),
        Place::Local(p) => Some(Some(p.into())),
        Place::Roam(n) => k.vfs().in_place(n).map(Some),
        // Settled before mutations are decided (see `Kernel::serve`); failed lookups
        // fail the call before.
        Place::RoamFd(_) | Place::Deferred { .. } | Place::Failed { .. } => None,
    }
}

fn refuse(k: &Kernel, spec: &Spec, places: &[Place], errno: i32) -> Decision {
    if let Some(node) = places.iter().find_map(node_of) {
        if errno == libc::EXDEV {
            // As between file systems: programs copy instead (mv does), nothing to tell.
            tracing::info!("{} {}: across mounts (EXDEV)", spec.name, node.virt());
        } else {
            k.report.read_only(spec.name, node.virt(), errno);
        }
    }
    Decision::fail(errno)
}

fn node_of(p: &Place) -> Option<&Node> {
    match p {
        Place::Roam(n) | Place::RoamFd(n) => Some(n),
        _ => None,
    }
}

/// The permission bits `mkdir` gives: the mode argument less the thread's umask, as the
/// kernel does for a directory it makes itself.
fn dir_mode(job: &Job, requested: u64) -> u32 {
    requested as u32 & 0o1777 & !super::open::umask(job.tid)
}

/// Serves a change of a writable remote mount on a worker.
pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    let vfs = k.vfs();
    let nodes: Vec<&Node> = job.places.iter().filter_map(node_of).collect();
    let Some(&node) = nodes.first() else {
        return Ok(Decision::Continue);
    };
    let fail = |e| (node.clone(), e);
    if source_first(job.spec, &job.places) {
        return source_then_failure(k, job, node);
    }
    for (n, need) in needs(job.spec.nr, &nodes) {
        super::open::may(vfs, job.tid, n, need).map_err(|e| (n.clone(), e))?;
    }
    let a = &job.call.args;
    let done = |r: roam_vfs::Result<()>| r.map(|()| Decision::Return(0)).map_err(fail);
    match job.spec.nr {
        libc::SYS_mkdir => done(vfs.mkdir(node, dir_mode(job, a[1]))),
        libc::SYS_mkdirat => done(vfs.mkdir(node, dir_mode(job, a[2]))),
        libc::SYS_rmdir => done(vfs.remove_dir(node)),
        libc::SYS_unlink => done(vfs.remove_file(node)),
        libc::SYS_unlinkat if a[2] as i32 & libc::AT_REMOVEDIR != 0 => done(vfs.remove_dir(node)),
        libc::SYS_unlinkat => done(vfs.remove_file(node)),
        libc::SYS_rename | libc::SYS_renameat | libc::SYS_renameat2 => rename(k, job, &nodes),
        libc::SYS_symlink | libc::SYS_symlinkat => match memory::read_cstr(job.tid, a[0]) {
            Ok(target) => done(vfs.symlink(&String::from_utf8_lossy(&target), node)),
            Err(e) => Ok(Decision::fail(e as i32)),
        },
        libc::SYS_chmod => done(vfs.set_mode(node, a[1] as u32 & 0o7777)),
        libc::SYS_fchmodat | libc::SYS_fchmodat2 => done(vfs.set_mode(node, a[2] as u32 & 0o7777)),
        libc::SYS_fchmod => done(vfs.set_mode(node, a[1] as u32 & 0o7777)),
        libc::SYS_truncate => done(vfs.truncate(node, a[1])),
        libc::SYS_utime | libc::SYS_utimes | libc::SYS_futimesat | libc::SYS_utimensat => {
            set_times(k, job, node)
        }
        libc::SYS_link | libc::SYS_linkat => link(k, job, node, nodes[1]),
        libc::SYS_mknod => mknod(k, job, node, a[1]),
        libc::SYS_mknodat => mknod(k, job, node, a[2]),
        libc::SYS_chown | libc::SYS_lchown | libc::SYS_fchownat | libc::SYS_fchown => {
            Ok(chown(k, job, node))
        }
        // The xattr family: no backend keeps extended attributes yet. Programs that copy
        // attributes (cp -a, sed -i) expect ENOTSUP and go on, so it is told only with -v.
        _ => {
            tracing::info!(
                "{} {}: no extended attributes on remote mounts",
                job.spec.name,
                node.virt()
            );
            Ok(Decision::fail(libc::ENOTSUP))
        }
    }
}

/// Remote files keep their owner (roam's user): giving them that owner again succeeds, as
/// `chown` to the current owner does anywhere; any other owner is EPERM.
/// What a name call needs of its names, for a caller that is not roam's user: the
/// directories it changes, the file it truncates, the owner for a mode.
fn needs<'a>(nr: i64, nodes: &[&'a Node]) -> Vec<(&'a Node, Need)> {
    let names = |n: &[&'a Node]| n.iter().map(|&n| (n, Need::ChangeNames)).collect();
    match nr {
        libc::SYS_mkdir
        | libc::SYS_mkdirat
        | libc::SYS_rmdir
        | libc::SYS_unlink
        | libc::SYS_unlinkat
        | libc::SYS_rename
        | libc::SYS_renameat
        | libc::SYS_renameat2
        | libc::SYS_symlink
        | libc::SYS_symlinkat
        | libc::SYS_mknod
        | libc::SYS_mknodat => names(nodes),
        libc::SYS_truncate => nodes.iter().map(|&n| (n, Need::Write)).collect(),
        libc::SYS_chmod | libc::SYS_fchmodat | libc::SYS_fchmodat2 | libc::SYS_fchmod => {
            nodes.iter().map(|&n| (n, Need::Owner)).collect()
        }
        _ => Vec::new(),
    }
}

fn chown(k: &Kernel, job: &Job, node: &Node) -> Decision {
    let a = &job.call.args;
    let (uid, gid) = match job.spec.nr {
        libc::SYS_fchownat => (a[2], a[3]),
        _ => (a[1], a[2]),
    };
    let same = |want: u64, have: u32| want as u32 == u32::MAX || want as u32 == have;
    if same(uid, nix::unistd::getuid().as_raw()) && same(gid, nix::unistd::getgid().as_raw()) {
        return Decision::Return(0);
    }
    refused(k, job, node, libc::EPERM, "remote files keep their owner")
}

/// `mknod`, with the permission bits less the thread's umask, as the kernel does.
fn mknod(k: &Kernel, job: &Job, node: &Node, mode: u64) -> Served {
    let mode = mode as u32 & (libc::S_IFMT | (0o7777 & !super::open::umask(job.tid)));
    k.vfs()
        .mknod(node, mode)
        .map(|()| Decision::Return(0))
        .map_err(|e| (node.clone(), e))
}

/// Whether a call is a link(2) or rename(2) of a roam name whose new name's lookup failed:
/// the kernel walks to the source first (link: the whole source), so its `ENOENT` comes
/// before that failure; decided on a worker ([`source_then_failure`]).
pub(super) fn source_first(spec: &Spec, places: &[Place]) -> bool {
    matches!(
        spec.nr,
        libc::SYS_link
            | libc::SYS_linkat
            | libc::SYS_rename
            | libc::SYS_renameat
            | libc::SYS_renameat2
    ) && matches!(
        places,
        [Place::Roam(_) | Place::RoamFd(_), Place::Failed { .. }]
    )
}

/// The answer to a [`source_first`] call: the source's error, else the new name's.
fn source_then_failure(k: &Kernel, job: &Job, from: &Node) -> Served {
    let vfs = k.vfs();
    let source = match job.spec.nr {
        libc::SYS_link | libc::SYS_linkat => vfs.stat(from).err(),
        _ => vfs.walk_to(from),
    };
    if let Some(e) = source {
        return Err((from.clone(), e));
    }
    Ok(match &job.places[1] {
        Place::Failed { errno, .. } => Decision::fail(*errno),
        _ => Decision::fail(libc::EINVAL),
    })
}

/// link(2) of a remote name: the kernel's checks in its order, then EPERM (no remote
/// backend keeps hard links; see [`roam_vfs::Vfs::link`]), told on stderr as before.
fn link(k: &Kernel, job: &Job, from: &Node, to: &Node) -> Served {
    match k.vfs().link(from, to, false) {
        Err(e) if e.errno() == libc::EPERM => Ok(refused(
            k,
            job,
            to,
            libc::EPERM,
            "hard links are not supported on remote mounts",
        )),
        done => done
            .map(|()| Decision::Return(0))
            .map_err(|e| (from.clone(), e)),
    }
}

fn refused(k: &Kernel, job: &Job, node: &Node, errno: i32, why: &str) -> Decision {
    k.report
        .error(job.tid, job.spec.name, node.virt(), errno, why);
    Decision::fail(errno)
}

fn rename(k: &Kernel, job: &Job, nodes: &[&Node]) -> Served {
    let (from, to) = (nodes[0], nodes[1]);
    if job.spec.nr == libc::SYS_renameat2 {
        let flags = job.call.args[4] as u32;
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Ok(refused(
                k,
                job,
                from,
                libc::EINVAL,
                "RENAME_EXCHANGE/WHITEOUT are not supported on remote mounts",
            ));
        }
        if flags & libc::RENAME_NOREPLACE != 0 && k.vfs().stat(to).is_ok() {
            return Ok(Decision::fail(libc::EEXIST));
        }
    }
    k.vfs()
        .rename(from, to)
        .map(|()| Decision::Return(0))
        .map_err(|e| (from.clone(), e))
}

/// utime, utimes, futimesat, utimensat: the new times (an access time where the backend
/// keeps one apart).
fn set_times(k: &Kernel, job: &Job, node: &Node) -> Served {
    let vfs = k.vfs();
    if k.vfs().is_dirty(node.virt()) {
        // The program's own copy is still open: its times are local until the upload.
        return Ok(rewrite_to(
            job.spec.paths[0].path,
            &vfs.copy_path(node.virt()),
        ));
    }
    // A final symlink the resolver could not follow (a dangling one) is followed here:
    // ENOENT, as the kernel says; only AT_SYMLINK_NOFOLLOW sets a link's own times.
    let followed;
    let node = match super::table::follows_last(job.spec, &job.call.args) {
        true => match vfs.follow(node.clone()).map_err(|e| (node.clone(), e))? {
            roam_vfs::Resolved::Node(n, _) => {
                followed = n;
                &followed
            }
            roam_vfs::Resolved::Local(p) => {
                return Ok(rewrite_to(job.spec.paths[0].path, Path::new(&p)))
            }
        },
        false => node,
    };
    let (atime, mtime) = match requested_times(job) {
        Ok(times) => times,
        Err(errno) => return Ok(Decision::fail(errno)),
    };
    vfs.set_times(node, atime, mtime)
        .map(|()| Decision::Return(0))
        .map_err(|e| (node.clone(), e))
}

/// The access and modification times a times call asks for (`None`: leave it,
/// `UTIME_OMIT`).
fn requested_times(job: &Job) -> Result<(Option<SystemTime>, Option<SystemTime>), i32> {
    let (nr, a) = (job.spec.nr, &job.call.args);
    let times_arg = match nr {
        libc::SYS_utime | libc::SYS_utimes => a[1],
        _ => a[2],
    };
    if times_arg == 0 {
        let now = Some(SystemTime::now());
        return Ok((now, now));
    }
    // utimbuf {actime, modtime}; timeval[2] / timespec[2]: {sec, usec|nsec} each.
    let mut raw = [0u8; 32];
    let n = if nr == libc::SYS_utime { 16 } else { 32 };
    memory::read(job.tid, times_arg, &mut raw[..n]).map_err(|e| e as i32)?;
    let word = |i: usize| i64::from_ne_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap());
    let time = |secs: i64, sub: i64| -> Option<SystemTime> {
        let nanos = match nr {
            libc::SYS_utimensat if sub == libc::UTIME_OMIT => return None,
            libc::SYS_utimensat if sub == libc::UTIME_NOW => return Some(SystemTime::now()),
            libc::SYS_utimensat => sub,
            _ => sub * 1000,
        };
        let since = Duration::from_secs(secs.max(0) as u64)
            + Duration::from_nanos(nanos.clamp(0, 999_999_999) as u64);
        Some(SystemTime::UNIX_EPOCH + since)
    };
    Ok(match nr {
        libc::SYS_utime => (time(word(0), 0), time(word(1), 0)),
        _ => (time(word(0), word(1)), time(word(2), word(3))),
    })
}

pub(super) fn unsupported(k: &Kernel, tid: Pid, spec: &Spec, places: &[Place]) -> Decision {
    refuse_told(
        k,
        tid,
        spec,
        places,
        libc::ENOTSUP,
        "not supported on roam names",
    )
}

/// A path-taking call roam does not serve: ENOSYS, named on stderr.
pub(super) fn unserved(k: &Kernel, tid: Pid, spec: &Spec, places: &[Place]) -> Decision {
    refuse_told(
        k,
        tid,
        spec,
        places,
        libc::ENOSYS,
        "roam does not serve this call on its names",
    )
}

/// Fails a call on roam names with `errno`, saying `why` once.
fn refuse_told(
    k: &Kernel,
    tid: Pid,
    spec: &Spec,
    places: &[Place],
    errno: i32,
    why: &str,
) -> Decision {
    if let Some(node) = places.iter().find_map(node_of) {
        k.report.error(tid, spec.name, node.virt(), errno, why);
    }
    Decision::fail(errno)
}

/// fchmod/fchown/fsetxattr/fremovexattr on an fd of one of roam's copies.
pub(super) fn on_fd(k: &Kernel, tid: Pid, spec: &'static Spec, call: Syscall) -> Triage {
    match k.resolver.resolve_fd_itself(tid, Some(call.args[0] as i32)) {
        place @ Place::RoamFd(_) => triage(k, tid, spec, call, vec![place]),
        _ => Triage::Done(Decision::Continue),
    }
}
