//! Calls that only look at a name (the stat family, access, xattr reads, statfs, readlink):
//! redirected to the skeleton entry, whose size, mtime, mode and type are the remote ones,
//! so the kernel fills in `struct stat`/`statx` itself. Also readlink of the magic links
//! `/proc/self/{cwd,exe,fd/N}`, which must show virtual names, not roam's cache.

use nix::unistd::Pid;

use super::resolve::Place;
use super::table::{Family, Spec};
use super::{rewrite_to, single_node, AfterExit, Decision, Job, Kernel, Served};
use crate::platform::ptrace::Syscall;

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    if matches!(job.places.first(), Some(Place::RoamFd(_))) {
        // The object of an fd the program holds: its skeleton entry is already the answer.
        return Ok(Decision::Continue);
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
    let stub = vfs.meta_path(node).map_err(fail)?;
    Ok(match stat_buffer(&job.call) {
        Some((buf, statx)) => Decision::RewriteThen {
            args: vec![(arg, path_bytes(&stub))],
            after: AfterExit::FillBlocks { buf, statx },
        },
        None => rewrite_to(arg, &stub),
    })
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

/// Offsets (x86_64) of mode, size and blocks in `struct stat` and `struct statx`.
const STAT_FIELDS: (u64, u64, u64) = (24, 48, 64);
const STATX_FIELDS: (u64, u64, u64) = (28, 40, 48);

/// After a successful stat of a skeleton stub: a regular file's blocks are those of a whole
/// file of its size (the stub is sparse; the remote file is not), in 512-byte units.
pub(super) fn fill_blocks(tid: Pid, buf: u64, statx: bool) -> nix::Result<()> {
    use crate::platform::memory;
    if crate::platform::ptrace::return_value(tid)? != 0 {
        return Ok(());
    }
    let (mode_at, size_at, blocks_at) = if statx { STATX_FIELDS } else { STAT_FIELDS };
    let mut word = [0u8; 8];
    memory::read(tid, buf + mode_at, &mut word[..4])?;
    let mode = u32::from_ne_bytes(word[..4].try_into().expect("4 bytes"));
    let mode = if statx { mode & 0xffff } else { mode };
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(());
    }
    memory::read(tid, buf + size_at, &mut word)?;
    let size = u64::from_ne_bytes(word);
    memory::read(tid, buf + blocks_at, &mut word)?;
    // In 4 KiB blocks, as local file systems allocate (and `du` then agrees with them).
    let whole = size.div_ceil(4096) * 8;
    if u64::from_ne_bytes(word) < whole {
        memory::write(tid, buf + blocks_at, &whole.to_ne_bytes())?;
    }
    Ok(())
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
