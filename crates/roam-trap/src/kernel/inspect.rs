//! Calls that only look at a name (the stat family, access, xattr reads, statfs, readlink):
//! redirected to the skeleton entry, whose size, mtime, mode and type are the remote ones,
//! so the kernel fills in `struct stat`/`statx` itself. Also readlink of the magic links
//! `/proc/self/{cwd,exe,fd/N}`, which must show virtual names, not roam's cache.

use nix::unistd::Pid;

use super::resolve::Place;
use super::table::{Family, Spec};
use super::{rewrite_to, single_node, Decision, Job, Kernel, Served};
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
    Ok(rewrite_to(arg, &vfs.meta_path(node).map_err(fail)?))
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
