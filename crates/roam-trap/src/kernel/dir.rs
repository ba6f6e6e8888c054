//! The working directory. A program that changes into a roam directory really changes
//! into its skeleton directory, so the kernel keeps its cwd (shared or not, inherited by
//! children) and relative names reach roam through [`super::resolve`]. `getcwd` is the only
//! call that must be translated back to the virtual name.

use nix::unistd::Pid;

use super::{rewrite_to, single_node, Decision, Job, Kernel, Served};
use crate::platform::ptrace::Syscall;

pub(super) fn chdir(k: &Kernel, job: &Job) -> Served {
    let Some((arg, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    let dir = k.vfs().dir_path(node).map_err(|e| (node.clone(), e))?;
    k.resolver.roam_dir_handed_out(job.tid);
    Ok(rewrite_to(arg, &dir))
}

/// `getcwd(buf, size)`: the virtual name when the real cwd is a skeleton directory.
pub(super) fn getcwd(k: &Kernel, tid: Pid, call: &Syscall) -> Decision {
    let Some(virt) = k.resolver.virtual_cwd(tid) else {
        return Decision::Continue;
    };
    let mut data = virt.into_bytes();
    data.push(0);
    // A name past a page (a tree deeper than PATH_MAX served in place): where the buffer
    // holds it, the name (the kernel would say ENAMETOOLONG, and libc would then climb
    // `..` by itself, into the local tree's own names); else ENAMETOOLONG, which libc
    // answers that way, as it must for getcwd(NULL, 0).
    if data.len() > call.args[1] as usize {
        let too_long = data.len() > crate::platform::memory::PATH_MAX;
        return Decision::fail(if too_long {
            libc::ENAMETOOLONG
        } else {
            libc::ERANGE
        });
    }
    let ret = data.len() as i64;
    Decision::ReturnData {
        addr: call.args[0],
        data,
        ret,
    }
}
