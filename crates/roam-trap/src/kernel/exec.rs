//! execve/execveat of a roam program or script: the kernel runs the fetched copy (mode
//! r-x when it is an ELF binary or starts with `#!`). A script whose `#!` interpreter is a
//! roam name (local or remote script alike) is started the way the kernel would start it,
//! with the interpreter's fetched copy: the kernel reads `#!` lines itself, past any trap.
//! A privileged program (setuid, setgid, file capabilities) is never traced: roam runs it
//! untraced in the tracee's place and says so.

use std::os::unix::fs::PermissionsExt;

use nix::unistd::Pid;

use super::{rewrite_to, single_node, Decision, Job, Kernel, Served};
use crate::platform::{memory, ptrace::Syscall};

pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    let path_arg = if job.call.nr == libc::SYS_execveat {
        1
    } else {
        0
    };
    let file = match single_node(job) {
        Some((_, node)) => k.vfs().open_path(node).map_err(|e| (node.clone(), e))?,
        None => match local_file(job.tid, &job.call) {
            Some(p) => p.into(),
            None => return Ok(Decision::Continue),
        },
    };
    if let Some((interp, node)) = roam_interpreter(k, job.tid, &file) {
        let copy = k.vfs().open_path(&node).map_err(|e| (node.clone(), e))?;
        return Ok(script_exec(job, path_arg, &copy, interp).unwrap_or(Decision::Continue));
    }
    match single_node(job) {
        Some(_) => Ok(rewrite_to(path_arg, &file)),
        None => Ok(Decision::Continue),
    }
}

/// Whether a local program about to be exec'd is a script with a roam interpreter.
pub(super) fn has_roam_interpreter(k: &Kernel, tid: Pid, call: &Syscall) -> bool {
    local_file(tid, call)
        .is_some_and(|p| roam_interpreter(k, tid, std::path::Path::new(&p)).is_some())
}

/// The local file an exec names (relative names resolved against the cwd).
fn local_file(tid: Pid, call: &Syscall) -> Option<String> {
    let arg = if call.nr == libc::SYS_execveat { 1 } else { 0 };
    let raw = memory::read_cstr(tid, call.args[arg]).ok()?;
    let path = String::from_utf8(raw).ok()?;
    Some(if path.starts_with('/') {
        path
    } else {
        format!("/proc/{tid}/cwd/{path}")
    })
}

/// The `#!` line of `file`, when its interpreter is a roam name: (the line's interpreter
/// and optional argument as written, the interpreter's node).
fn roam_interpreter(
    k: &Kernel,
    tid: Pid,
    file: &std::path::Path,
) -> Option<((String, Option<String>), roam_vfs::Node)> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = std::str::from_utf8(&line[..line.iter().position(|&b| b == b'\n')?])
        .ok()?
        .trim();
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, Some(a.trim().to_owned()).filter(|a| !a.is_empty())),
        None => (line, None),
    };
    match k.resolver.resolve(tid, None, interp.as_bytes(), true) {
        super::resolve::Place::Roam(node) => Some(((interp.to_owned(), arg), node)),
        _ => None,
    }
}

/// The exec the kernel would do for a script: `INTERP [ARG] SCRIPT ARGV[1..]`.
fn script_exec(
    job: &Job,
    path_arg: usize,
    interp_copy: &std::path::Path,
    interp: (String, Option<String>),
) -> Option<Decision> {
    use std::os::unix::ffi::OsStrExt;
    let argv_arg = path_arg + 1;
    let script = memory::read_cstr(job.tid, job.call.args[path_arg]).ok()?;
    let old = memory::read_argv(job.tid, job.call.args[argv_arg], 1 << 16).ok()?;
    let mut argv = vec![interp.0.into_bytes()];
    argv.extend(interp.1.map(String::into_bytes));
    argv.push(script);
    argv.extend(old.into_iter().skip(1));
    let path = interp_copy.as_os_str().as_bytes().to_vec();
    Some(Decision::Exec {
        path_arg,
        path,
        argv_arg,
        argv,
    })
}

/// A local program about to be exec'd that would gain privileges (setuid, setgid, file
/// capabilities): it runs untraced in the tracee's place, and the user is told.
pub(super) fn privileged(k: &Kernel, tid: Pid, call: &Syscall) -> Option<Decision> {
    let file = local_file(tid, call)?;
    let md = std::fs::metadata(&file).ok()?;
    let setid = md.permissions().mode() & (libc::S_ISUID | libc::S_ISGID) != 0;
    if !md.is_file() || !(setid || has_file_caps(&file)) {
        return None;
    }
    let arg = if call.nr == libc::SYS_execveat { 1 } else { 0 };
    let path = memory::read_cstr(tid, call.args[arg]).ok()?;
    let argv = memory::read_argv(tid, call.args[arg + 1], 1 << 16).ok()?;
    let envp = memory::read_argv(tid, call.args[arg + 2], 1 << 16).ok()?;
    let shown = String::from_utf8_lossy(&path).into_owned();
    k.report.once(
        format!("privileged {shown}"),
        format!("{shown} is a privileged program (setuid/setgid/capabilities): roam never traces one, so it runs untraced and sees only local files"),
    );
    Some(Decision::RunUntraced {
        path: file.into_bytes(),
        argv,
        envp,
    })
}

/// Whether `path` carries file capabilities (`security.capability`).
fn has_file_caps(path: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(path) else {
        return false;
    };
    // SAFETY: asks only for the size of the attribute (no buffer).
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}
