//! Calls that only look at a name (the stat family, access, xattr reads, statfs, readlink):
//! redirected to the skeleton entry, whose size, mtime, mode and type are the remote ones,
//! so the kernel fills in `struct stat`/`statx` itself. Also readlink of the magic links
//! `/proc/self/{cwd,exe,fd/N}`, which must show virtual names, not roam's cache; and
//! `getxattr` of roam's own attributes (fingerprints), which roam-vfs answers.

use nix::unistd::Pid;

use super::resolve::Place;
use super::table::{Family, Spec};
use super::{rewrite_to, single_node, AfterExit, Decision, Job, Kernel, Served};
use crate::platform::ptrace::Syscall;

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    if matches!(job.places.first(), Some(Place::RoamFd(_))) {
        // The object of an fd the program holds (`fstat` is `fstatat(fd, "", AT_EMPTY_PATH)`
        // in glibc): the kernel answers from the fd, and roam makes it the remote file's
        // stat, as for its name.
        return Ok(match stat_buffer(&job.call) {
            Some((buf, statx)) => Decision::RewriteThen {
                args: Vec::new(),
                after: AfterExit::RemoteStat {
                    buf,
                    statx,
                    link: None,
                },
            },
            None => Decision::Continue,
        });
    }
    let Some((arg, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    let vfs = k.vfs();
    let fail = |e| (node.clone(), e);
    if job.spec.family == Family::Access {
        let mode = job.call.args[job.spec.aux] as i32;
        if mode & libc::W_OK != 0 && !vfs.writable(node) {
            vfs.stat(node).map_err(fail)?;
            return Ok(Decision::fail(libc::EROFS));
        }
    }
    if let Some(value) = roam_xattr(job, vfs, node) {
        return Ok(xattr_reply(job, value.map_err(fail)?));
    }
    let Some((target, text)) = vfs.link_target(node).map_err(fail)? else {
        return stat_of(k, job, arg, node, None);
    };
    if job.spec.family == Family::Readlink {
        return Ok(link_text(job, text));
    }
    if !super::table::follows_last(job.spec, &job.call.args) {
        return stat_of(k, job, arg, node, Some(text.len() as u64));
    }
    // Followed by roam's rule, not by the kernel through the skeleton.
    let followed = match target {
        roam_vfs::LinkTarget::Local(p) => return Ok(rewrite_to(arg, p.as_ref())),
        roam_vfs::LinkTarget::Roam(_) => vfs.follow(node.clone()).map_err(fail)?,
    };
    match followed {
        roam_vfs::Resolved::Node(n, _) => stat_of(k, job, arg, &n, None),
        roam_vfs::Resolved::Local(p) => Ok(rewrite_to(arg, p.as_ref())),
    }
}

/// A look at the roam name `node` itself: redirected to its skeleton entry (`link`: the
/// length of the server's text, when `node` is a link).
fn stat_of(k: &Kernel, job: &Job, arg: usize, node: &roam_vfs::Node, link: Option<u64>) -> Served {
    let vfs = k.vfs();
    let stub = vfs.meta_path(node).map_err(|e| (node.clone(), e))?;
    // Entries of roam's cache stand for remote files; a local driver's own files are real.
    let in_cache = vfs.unmap(&stub.to_string_lossy()).is_some();
    Ok(match stat_buffer(&job.call).filter(|_| in_cache) {
        Some((buf, statx)) => Decision::RewriteThen {
            args: vec![(arg, path_bytes(&stub))],
            after: AfterExit::RemoteStat { buf, statx, link },
        },
        None => rewrite_to(arg, &stub),
    })
}

/// The value of roam's own extended attribute (`user.roam.sha256` ...) that a `getxattr`
/// asks for, if it asks for one.
fn roam_xattr(
    job: &Job,
    vfs: &roam_vfs::Vfs,
    node: &roam_vfs::Node,
) -> Option<roam_vfs::Result<Vec<u8>>> {
    if !matches!(job.call.nr, libc::SYS_getxattr | libc::SYS_lgetxattr) {
        return None;
    }
    let name = crate::platform::memory::read_cstr(job.tid, job.call.args[1]).ok()?;
    vfs.roam_xattr(node, std::str::from_utf8(&name).ok()?)
}

/// `getxattr`'s answer of `value`, as the kernel gives it: size 0 asks for the length,
/// a smaller buffer is `ERANGE`.
fn xattr_reply(job: &Job, value: Vec<u8>) -> Decision {
    let (buf, size) = (job.call.args[2], job.call.args[3] as usize);
    let ret = value.len() as i64;
    match size {
        0 => Decision::Return(ret),
        s if s < value.len() => Decision::fail(libc::ERANGE),
        _ => Decision::ReturnData {
            addr: buf,
            data: value,
            ret,
        },
    }
}

/// `readlink` of a roam link: the server's text (its skeleton entry points elsewhere),
/// cut to the program's buffer as the kernel would.
fn link_text(job: &Job, text: String) -> Decision {
    let (buf, size) = (job.call.args[job.spec.aux], job.call.args[job.spec.aux + 1]);
    if (size as i64) <= 0 {
        return Decision::fail(libc::EINVAL);
    }
    let mut data = text.into_bytes();
    data.truncate(size as usize);
    let ret = data.len() as i64;
    Decision::ReturnData {
        addr: buf,
        data,
        ret,
    }
}

fn path_bytes(p: &std::path::Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes().to_vec()
}

/// The buffer a stat-family call fills, and whether it is a `statx`.
fn stat_buffer(call: &Syscall) -> Option<(u64, bool)> {
    match call.nr {
        libc::SYS_stat | libc::SYS_lstat => Some((call.args[1], false)),
        libc::SYS_newfstatat => Some((call.args[2], false)),
        libc::SYS_statx => Some((call.args[4], true)),
        _ => None,
    }
}

/// Offsets (x86_64) of mode, size, blocks, link count, mtime and ctime (each time 16
/// bytes: seconds and nanoseconds) in `struct stat` and `statx`.
struct Fields {
    mode: u64,
    size: u64,
    blocks: u64,
    nlink: u64,
    mtime: u64,
    ctime: u64,
}
const STAT: Fields = Fields {
    mode: 24,
    size: 48,
    blocks: 64,
    nlink: 16,
    mtime: 88,
    ctime: 104,
};
const STATX: Fields = Fields {
    mode: 28,
    size: 40,
    blocks: 48,
    nlink: 16,
    mtime: 112,
    ctime: 96,
};

/// After a successful stat of a cache entry (by name or fd) standing for a remote object,
/// what the remote one would show: for a regular file, the blocks of a whole file of its
/// size (a stub is sparse; the remote file is not), in 512-byte units, and one link
/// (roam's copies are linked to each other inside the cache); for every kind, its mtime
/// as ctime — the cache entry's own ctime changes when roam fills it (or, for a
/// directory, places entries in it), which programs that compare a stat before reading
/// with an `fstat` after (`tar`) would take for a change.
pub(super) fn as_remote_stat(
    tid: Pid,
    buf: u64,
    statx: bool,
    link: Option<u64>,
) -> nix::Result<()> {
    use crate::platform::memory;
    if crate::platform::ptrace::return_value(tid)? != 0 {
        return Ok(());
    }
    let mut st = vec![0u8; stat_size(statx)];
    if memory::read(tid, buf, &mut st)? != st.len() {
        return Err(nix::errno::Errno::EFAULT);
    }
    make_remote(&mut st, statx, link);
    memory::write(tid, buf, &st)?;
    Ok(())
}

/// Bytes of a `struct stat` or `struct statx` (x86_64).
pub(super) fn stat_size(statx: bool) -> usize {
    if statx {
        256
    } else {
        144
    }
}

/// [`as_remote_stat`] on a stat buffer.
pub(super) fn make_remote(st: &mut [u8], statx: bool, link: Option<u64>) {
    let f = if statx { &STATX } else { &STAT };
    let field = |st: &[u8], at: u64, n: usize| {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&st[at as usize..at as usize + n]);
        u64::from_ne_bytes(w)
    };
    let put = |st: &mut [u8], at: u64, bytes: &[u8]| {
        st[at as usize..at as usize + bytes.len()].copy_from_slice(bytes)
    };
    let mode = field(st, f.mode, 4) as u32;
    let mode = if statx { mode & 0xffff } else { mode };
    match (mode & libc::S_IFMT, link) {
        // A link's size is the length of its text: the server's, not its skeleton entry's.
        (libc::S_IFLNK, Some(len)) => {
            put(st, f.size, &len.to_ne_bytes());
        }
        (libc::S_IFREG, _) => {
            // In 4 KiB blocks, as local file systems allocate (and `du` then agrees).
            let whole = field(st, f.size, 8).div_ceil(4096) * 8;
            if field(st, f.blocks, 8) < whole {
                put(st, f.blocks, &whole.to_ne_bytes());
            }
            // st_nlink is 8 bytes, stx_nlink 4 (little-endian: the low bytes come first).
            let one = 1u64.to_ne_bytes();
            put(st, f.nlink, if statx { &one[..4] } else { &one });
        }
        _ => {}
    }
    // Every kind: a skeleton directory's own ctime moves whenever roam places an entry in
    // it (a fetched copy, a listing's stubs), which `tar` would take for a change of the
    // directory it is reading.
    let mtime = st[f.mtime as usize..f.mtime as usize + 16].to_vec();
    put(st, f.ctime, &mtime);
}

/// readlink of a magic link into roam's cache answers with the virtual name.
pub(super) fn readlink_magic(
    k: &Kernel,
    tid: Pid,
    spec: &Spec,
    call: &Syscall,
) -> Option<Decision> {
    let pa = spec.paths[0];
    let raw = crate::platform::memory::read_cstr(tid, call.args[pa.path]).ok()?;
    let virt = k.resolver.virtual_magic_target(tid, &raw)?;
    let (buf, size) = (call.args[spec.aux], call.args[spec.aux + 1] as usize);
    let mut data = virt.into_bytes();
    data.truncate(size);
    let ret = data.len() as i64;
    Some(Decision::ReturnData {
        addr: buf,
        data,
        ret,
    })
}
