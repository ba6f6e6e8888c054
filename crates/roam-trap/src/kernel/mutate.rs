//! Calls that change the file system. roam's mounts are read-only until the write path
//! lands: a change to a roam name is EROFS, a rename or link between roam and a local name
//! is EXDEV (as between two mounts), and nothing ever reaches roam's skeleton or cache.
//! Calls that make no sense on a remote name (chroot, mount ...) are refused loudly.

use nix::unistd::Pid;

use super::resolve::Place;
use super::table::Spec;
use super::{Decision, Kernel};
use crate::platform::ptrace::Syscall;

pub(super) fn names(k: &Kernel, tid: Pid, spec: &Spec, places: &[Place]) -> Decision {
    let roam = places
        .iter()
        .filter(|p| matches!(p, Place::Roam(_) | Place::RoamFd(_)))
        .count();
    let errno = if roam < places.len() && places.len() == 2 {
        libc::EXDEV
    } else {
        libc::EROFS
    };
    if let Some(node) = first_node(places) {
        k.report.read_only(spec.name, node.virt(), errno);
    }
    tracing::debug!(%tid, "{} refused with {errno}", spec.name);
    Decision::fail(errno)
}

pub(super) fn unsupported(k: &Kernel, tid: Pid, spec: &Spec, places: &[Place]) -> Decision {
    if let Some(node) = first_node(places) {
        k.report.error(
            tid,
            spec.name,
            node.virt(),
            libc::ENOTSUP,
            "not supported on roam names",
        );
    }
    Decision::fail(libc::ENOTSUP)
}

/// fchmod/fchown/fsetxattr/fremovexattr on an fd: EROFS when the fd is one of roam's.
pub(super) fn on_fd(k: &Kernel, tid: Pid, spec: &Spec, call: &Syscall) -> Decision {
    let fd = call.args[0] as i32;
    let target = std::fs::read_link(format!("/proc/{tid}/fd/{fd}")).ok();
    match target.and_then(|t| k.vfs().unmap(&t.to_string_lossy())) {
        Some(virt) => {
            k.report.read_only(spec.name, &virt, libc::EROFS);
            Decision::fail(libc::EROFS)
        }
        None => Decision::Continue,
    }
}

fn first_node(places: &[Place]) -> Option<&roam_vfs::Node> {
    places.iter().find_map(|p| match p {
        Place::Roam(n) | Place::RoamFd(n) => Some(n),
        _ => None,
    })
}
