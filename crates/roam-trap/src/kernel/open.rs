//! open, openat, openat2, creat on roam names: redirected to the fetched file (or the
//! filled skeleton directory), so every later read, mmap and fstat on the fd runs natively.
//! Write intent goes to the local copy of a writable mount (journaled, uploaded when the
//! last writer closes it), to the file itself for the local driver, and is EROFS elsewhere.

use super::{rewrite_to, single_node, Decision, Job, Kernel, Served};
use crate::platform::memory;
use crate::platform::ptrace::Syscall;

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    if job.spec.nr != libc::SYS_openat2 {
        return serve_open(k, job);
    }
    // openat2's RESOLVE_* flags speak of the name as the program wrote it, relative to its
    // dirfd; roam hands the kernel an absolute path of its cache, so roam checks them.
    let (how, name) = match (read_how(job), memory::read_cstr(job.tid, job.call.args[1])) {
        (Ok(h), Ok(n)) => (h, n),
        (Err(e), _) | (_, Err(e)) => return Ok(Decision::fail(e as i32)),
    };
    let resolve = u64::from_ne_bytes(how[16..24].try_into().unwrap());
    if resolve & RESOLVE_BENEATH != 0 && escapes(&name) {
        return Ok(Decision::fail(libc::EXDEV));
    }
    match serve_open(k, job)? {
        Decision::Rewrite(mut args) => {
            let mut plain = how;
            plain[16..24].copy_from_slice(&0u64.to_ne_bytes());
            args.push((2, plain));
            Ok(Decision::Rewrite(args))
        }
        other => Ok(other),
    }
}

/// `RESOLVE_BENEATH` of `<linux/openat2.h>`.
const RESOLVE_BENEATH: u64 = 0x08;

/// The program's `struct open_how` (all `size` bytes of it, as the kernel reads them).
fn read_how(job: &Job) -> nix::Result<Vec<u8>> {
    let size = (job.call.args[3] as usize).clamp(24, 4096);
    let mut how = vec![0u8; size];
    memory::read(job.tid, job.call.args[2], &mut how)?;
    Ok(how)
}

/// Whether a name leaves the directory it is relative to (absolute, or `..` above it).
fn escapes(name: &[u8]) -> bool {
    if name.starts_with(b"/") {
        return true;
    }
    let mut depth = 0i32;
    for comp in name.split(|&b| b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => depth -= 1,
            _ => depth += 1,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

fn serve_open(k: &Kernel, job: &Job) -> Served {
    let Some((arg, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    let flags = match open_flags(job) {
        Ok(f) => f,
        Err(errno) => return Ok(Decision::fail(errno)),
    };
    let how = roam_vfs::OpenHow {
        flags,
        mode: create_mode(job),
        caller: &|| caller(job.tid),
        memory: false,
    };
    let opened = match k.vfs().open(node, &how) {
        Ok(o) => o,
        Err(e) if e.errno() == libc::EROFS => return Ok(read_only(k, job, node)),
        Err(e) => return Err((node.clone(), e)),
    };
    Ok(match opened {
        roam_vfs::Opened::Change(copy) => {
            k.write_granted(job.tid, node.virt());
            // At a watched number, so that its close (the upload) is seen.
            watched(arg, &copy, flags, node)
        }
        roam_vfs::Opened::Partial(copy) => watched(arg, &copy, flags, node),
        roam_vfs::Opened::Local(p) | roam_vfs::Opened::Copy(p) => {
            if p.is_dir() {
                k.resolver.roam_dir_handed_out(job.tid);
            }
            rewrite_to(arg, &p)
        }
        roam_vfs::Opened::Memory(_) => unreachable!("roam run asks for no file in memory"),
    })
}

/// Whether `call` is an `open` or `openat` that reads and changes nothing (no `O_CREAT`,
/// `O_TRUNC`, `O_TMPFILE` or `O_PATH`): roam may make it itself and hand the fd over
/// (`SECCOMP_IOCTL_NOTIF_ADDFD`), since it creates no name whose mode the program's umask
/// decides and the kernel picks the fd's number in the program. `openat2` (flags in
/// memory) and `creat` keep the tracer's way.
pub(crate) fn only_reads(call: &Syscall) -> bool {
    let flags = match call.nr {
        libc::SYS_open => call.args[1],
        libc::SYS_openat => call.args[2],
        _ => return false,
    } as i32;
    let changes = libc::O_CREAT | libc::O_TRUNC | libc::O_TMPFILE | libc::O_PATH;
    flags & libc::O_ACCMODE == libc::O_RDONLY && flags & changes == 0
}

/// Opens `copy` at a watched fd number.
fn watched(arg: usize, copy: &std::path::Path, flags: i32, node: &roam_vfs::Node) -> Decision {
    use std::os::unix::ffi::OsStrExt;
    let path = copy.as_os_str().as_bytes().to_vec();
    let cloexec = flags & libc::O_CLOEXEC != 0;
    Decision::OpenWatched {
        arg,
        path,
        cloexec,
        virt: node.virt().to_owned(),
    }
}

fn read_only(k: &Kernel, job: &Job, node: &roam_vfs::Node) -> Decision {
    k.report.read_only(job.spec.name, node.virt(), libc::EROFS);
    Decision::fail(libc::EROFS)
}

/// The permission bits a file created by this call gets: its mode argument less the
/// process's umask (the kernel would apply both to a file it creates itself).
fn create_mode(job: &Job) -> u32 {
    let a = &job.call.args;
    let requested = match job.spec.nr {
        libc::SYS_creat => a[1],
        libc::SYS_open => a[2],
        libc::SYS_openat => a[3],
        _ => {
            // openat2: `struct open_how { u64 flags; u64 mode; u64 resolve; }`.
            let mut how = [0u8; 16];
            match memory::read(job.tid, a[2], &mut how) {
                Ok(16) => u64::from_ne_bytes(how[8..].try_into().unwrap()),
                _ => 0o644,
            }
        }
    } as u32;
    requested & 0o7777 & !umask(job.tid)
}

/// The credentials a thread acts with (`Uid:`/`Gid:` in `/proc/TID/status`: the file-system
/// ids, the fourth of each; `Groups:`), for roam's permission checks.
pub(super) fn caller(tid: nix::unistd::Pid) -> Option<roam_vfs::Caller> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let fs_id = |name: &str| field(name)?.split_whitespace().nth(3)?.parse().ok();
    let groups = field("Groups:")?
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .collect();
    Some(roam_vfs::Caller {
        uid: fs_id("Uid:")?,
        gid: fs_id("Gid:")?,
        groups,
    })
}

/// Whether the thread `tid` may do what `need` says to `node` (see `roam_vfs::Vfs::may`).
pub(super) fn may(
    vfs: &roam_vfs::Vfs,
    tid: nix::unistd::Pid,
    node: &roam_vfs::Node,
    need: roam_vfs::Need,
) -> roam_vfs::Result<()> {
    match caller(tid) {
        Some(c) => vfs.may(&c, node, need),
        None => Ok(()),
    }
}

/// The umask of a thread (`Umask:` in `/proc/TID/status`).
pub(super) fn umask(tid: nix::unistd::Pid) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Umask:")
                    .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
            })
        })
        .unwrap_or(0o022)
}

/// The open flags: a register, or for openat2 the first field of `struct open_how`.
fn open_flags(job: &Job) -> Result<i32, i32> {
    if job.spec.nr == libc::SYS_creat {
        return Ok(libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC);
    }
    let raw = job.call.args[job.spec.aux];
    if job.spec.nr != libc::SYS_openat2 {
        return Ok(raw as i32);
    }
    let mut how = [0u8; 8];
    memory::read(job.tid, raw, &mut how).map_err(|e| e as i32)?;
    Ok(u64::from_ne_bytes(how) as i32)
}
