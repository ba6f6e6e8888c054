//! Unix sockets named by a path (`bind`, `connect`). The kernel takes a socket's name from
//! a `sockaddr_un`, not a path argument, so a roam name there would reach it as a local
//! name: a relative one lands in the skeleton behind a remote cwd, unseen by roam, and an
//! absolute one does not exist. A roam name is bound where roam-vfs says the kernel can
//! keep the socket (the local name of a tree served in place, or the skeleton entry of a
//! `mem:` name, which the backend lists as a socket), and found there by `connect`.
//! Abstract addresses, unnamed sockets and other families run as given.

use nix::unistd::Pid;

use super::resolve::Place;
use super::table::Spec;
use super::{later_on, single_node, Decision, Job, Kernel, Served, Triage};
use crate::platform::memory;
use crate::platform::ptrace::Syscall;

/// Bytes of `sun_path`: a name must fit with its NUL.
const SUN_PATH: usize = 108;
/// `sa_family` precedes the path.
const FAMILY: usize = std::mem::size_of::<libc::sa_family_t>();

/// Reads the call's address; a path-named unix socket that is a roam name goes to a worker.
pub(super) fn triage(k: &Kernel, tid: Pid, spec: &'static Spec, call: Syscall) -> Triage {
    let Some(name) = socket_name(tid, call.args[1], call.args[2]) else {
        return Triage::Done(Decision::Continue);
    };
    // bind(2) makes the name itself: a final symlink is not followed (EADDRINUSE).
    let follow = call.nr == libc::SYS_connect;
    match k.resolver.resolve(tid, None, &name, follow) {
        Place::Native => Triage::Done(Decision::Continue),
        Place::Local(p) => Triage::Done(address(p.as_bytes())),
        Place::Roam(node) | Place::RoamFd(node) => later_on(tid, call, spec, node),
        place @ Place::Failed { .. } => {
            let d = k.lookup_failed(tid, spec, &place);
            Triage::Done(d.unwrap_or(Decision::Continue))
        }
        place @ Place::Deferred { .. } => Triage::Later(Job {
            tid,
            call,
            spec,
            places: vec![place],
        }),
    }
}

/// Binds or connects a roam name at the local path roam-vfs gives it.
pub(super) fn serve(k: &Kernel, job: &Job) -> Served {
    let Some((_, node)) = single_node(job) else {
        return Ok(Decision::Continue);
    };
    // A socket's file gets 0777 less the umask, as the kernel's bind gives it.
    let bind = (job.call.nr == libc::SYS_bind).then(|| 0o777 & !super::open::umask(job.tid));
    let path = k
        .vfs()
        .unix_socket(node, bind)
        .map_err(|e| (node.clone(), e))?;
    use std::os::unix::ffi::OsStrExt;
    Ok(address(path.as_os_str().as_bytes()))
}

/// The path of a `sockaddr_un` of `len` bytes at `addr`: `None` for another family, an
/// unnamed or abstract socket, or an address roam cannot read (the kernel then says why).
fn socket_name(tid: Pid, addr: u64, len: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok()?.min(FAMILY + SUN_PATH);
    if addr == 0 || len <= FAMILY {
        return None;
    }
    let mut buf = vec![0; len];
    let read = memory::read(tid, addr, &mut buf).ok()?;
    let family = libc::sa_family_t::from_ne_bytes(buf.get(..FAMILY)?.try_into().ok()?);
    if read < len || family != libc::AF_UNIX as libc::sa_family_t {
        return None;
    }
    let path = &buf[FAMILY..];
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    // An abstract name starts with a NUL: it is no file.
    (end > 0).then(|| path[..end].to_vec())
}

/// The call with a `sockaddr_un` naming `path`, or `ENAMETOOLONG` where it does not fit
/// (roam's local name of the socket is longer than the one the program gave).
fn address(path: &[u8]) -> Decision {
    if path.len() >= SUN_PATH {
        return Decision::fail(libc::ENAMETOOLONG);
    }
    let mut addr = (libc::AF_UNIX as libc::sa_family_t).to_ne_bytes().to_vec();
    addr.extend_from_slice(path);
    Decision::RewriteAddr {
        arg: 1,
        len_arg: 2,
        addr,
    }
}
