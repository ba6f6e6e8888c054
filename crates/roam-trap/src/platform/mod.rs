//! The platform: *how* system calls are caught (gVisor's split). Today: ptrace with a
//! seccomp-BPF filter. The kernel module decides what each caught call *means*.

pub mod attach;
pub mod fastpath;
pub mod handoff;
pub mod inject;
pub mod launch;
pub mod memory;
pub mod notify;
pub mod proxy;
pub mod ptrace;
pub mod remote_call;
pub mod scratch;
pub mod seccomp;
