//! execve/execveat of a roam program or script: the kernel runs the fetched copy (mode
//! r-x when it is an ELF binary or starts with `#!`). Exec of a setuid/setgid program is
//! noted on stderr: under roam it cannot gain privileges.

use std::os::unix::fs::PermissionsExt;

use nix::unistd::Pid;

use super::{rewrite_to, single_node, Decision, Job, Kernel, Served};
use crate::platform::{memory, ptrace::Syscall};

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    let Some((arg, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    let program = k.vfs().open_path(node).map_err(|e| (node.clone(), e))?;
    Ok(rewrite_to(arg, &program))
}

/// Warns when a local program about to be exec'd is setuid or setgid.
pub(super) fn warn_if_privileged(k: &Kernel, tid: Pid, call: &Syscall) {
    if nix::unistd::geteuid().is_root() {
        return;
    }
    let arg = if call.nr == libc::SYS_execveat { 1 } else { 0 };
    let Ok(raw) = memory::read_cstr(tid, call.args[arg]) else {
        return;
    };
    let path = String::from_utf8_lossy(&raw).into_owned();
    let full = if path.starts_with('/') {
        path.clone()
    } else {
        format!("/proc/{tid}/cwd/{path}")
    };
    let Ok(md) = std::fs::metadata(&full) else {
        return;
    };
    if md.permissions().mode() & (libc::S_ISUID | libc::S_ISGID) != 0 {
        k.report.once(
            format!("setuid {path}"),
            format!("{path} is setuid/setgid: roam does not trace privileged programs, so it runs without its privileges"),
        );
    }
}
