//! Serving a thread roam does not trace (a process handed over to a debugger, see
//! `platform::handoff`): its calls arrive as seccomp notifications, and with no registers
//! to change, roam carries a [`Decision`] out itself. It makes the call in its own process
//! on the names the decision spells out, then hands over the result: the bytes the call
//! returns (written into the program's buffers) or a new fd (installed in the program by
//! `SECCOMP_IOCTL_NOTIF_ADDFD`, at a watched number when roam must see its close).
//!
//! Two things change the thread itself and cannot be done from afar: moving its working
//! directory into a remote tree, and exec of a roam name. Both fail with a message.
//!
//! Threads roam traces but whose credentials are not roam's (a daemon that dropped its
//! privileges) are served from here too when a call names roam's private cache, which the
//! kernel would refuse them: roam makes opens and stats of its own copies for them, after
//! checking their permissions as the kernel would (`for_another_user`).

use std::os::fd::{FromRawFd, OwnedFd};

use nix::unistd::Pid;

use super::inspect::{make_remote, stat_size};
use super::table::{self, Family, Spec};
use super::{AfterExit, Decision, Kernel};
use crate::platform::memory;
use crate::platform::ptrace::Syscall;
use crate::platform::seccomp::WATCHED_FD_BASE;

/// How a notified call is answered.
#[derive(Debug)]
pub enum Reply {
    /// It runs as the program made it.
    Run,
    /// It returns this (`-errno` for a failure).
    Return(i64),
    /// It returns `ret` once `data` is written at `addr` in the program's memory (the
    /// listener writes it, see `Listener::answer_with_data`).
    Data { addr: u64, data: Vec<u8>, ret: i64 },
    /// It returns a copy of roam's `fd` installed in the program, at number `at` if given.
    Fd {
        fd: OwnedFd,
        cloexec: bool,
        at: Option<i32>,
    },
}

/// A buffer of the program's that the call fills: where, and how much of roam's copy to
/// write back (the whole struct, or as many bytes as the call returns).
struct Out {
    addr: u64,
    whole: bool,
}

/// roam's own version of a program's call: its registers, the buffers they point to (kept
/// alive until it is made; an output buffer last) and the program's buffer it fills.
struct OwnCall {
    regs: [u64; 6],
    keep: Vec<Vec<u8>>,
    out: Option<Out>,
}

impl Kernel {
    /// Carries `decision` out for `call` of untraced thread `tid`.
    pub fn afar(&self, tid: Pid, call: &Syscall, decision: Decision) -> Reply {
        let spec = table::lookup(call.nr);
        match decision {
            Decision::Continue => Reply::Run,
            Decision::Return(ret) => Reply::Return(ret),
            Decision::ReturnData { addr, data, ret } => Reply::Data { addr, data, ret },
            // A close whose upload failed: a notified call either runs or returns, so the
            // fd stays open with the error (the change stays journaled either way).
            Decision::RunThenReturn(ret) if ret < 0 => Reply::Return(ret),
            Decision::RunThenReturn(_) => Reply::Run,
            // Under a debugger the kernel runs a privileged program without its
            // privileges, as it would without roam.
            Decision::RunUntraced { .. } => Reply::Run,
            // A debugger inside the debugger's process: the kernel decides.
            Decision::HandOver { .. } => Reply::Run,
            Decision::Rewrite(args) => self.make_call(tid, call, spec, &args, None),
            // A listing of a directory holding mount points reads the program's own fd.
            Decision::RewriteThen {
                after: AfterExit::Append { .. },
                ..
            } => Reply::Run,
            Decision::RewriteThen { args, after } => {
                self.make_call(tid, call, spec, &args, Some(after))
            }
            Decision::OpenWatched {
                arg, path, virt, ..
            } => match self.make_call(tid, call, spec, &[(arg, path)], None) {
                Reply::Fd { fd, cloexec, .. } => {
                    let at = free_watched_fd(tid);
                    if at.is_none() {
                        self.complete_copy(&virt);
                    }
                    Reply::Fd { fd, cloexec, at }
                }
                other => other,
            },
            Decision::Exec { .. } => self.cannot_afar(tid, spec, "exec a roam name"),
            Decision::RewriteAddr { .. } => {
                self.cannot_afar(tid, spec, "bind or connect a unix socket by a roam name")
            }
        }
    }

    /// Makes `call` in roam's process with the names of `rewritten` (register, bytes),
    /// every other name made absolute through `/proc/TID`.
    fn make_call(
        &self,
        tid: Pid,
        call: &Syscall,
        spec: Option<&'static Spec>,
        rewritten: &[(usize, Vec<u8>)],
        after: Option<AfterExit>,
    ) -> Reply {
        let Some(spec) = spec else {
            return Reply::Run;
        };
        match spec.family {
            Family::Chdir => {
                return self.cannot_afar(tid, Some(spec), "move into a remote directory")
            }
            Family::Exec => return self.cannot_afar(tid, Some(spec), "exec a roam name"),
            _ if spec.nr == libc::SYS_inotify_add_watch => {
                return self.cannot_afar(tid, Some(spec), "watch a roam name")
            }
            _ => {}
        }
        if !acts_as_roam(tid) {
            if let Err(errno) = self.for_another_user(tid, call, spec, rewritten) {
                return Reply::Return(-(errno as i64));
            }
        }
        match self.prepare(tid, call, spec, rewritten) {
            Ok(mut own) => {
                if spec.family == Family::Open {
                    add_cloexec(call.nr, &mut own);
                }
                let ret = raw_syscall(call.nr, &own.regs);
                self.finish(tid, call, spec, ret, own, after)
            }
            Err(errno) => Reply::Return(-(errno as i64)),
        }
    }

    /// roam's own version of `call`.
    fn prepare(
        &self,
        tid: Pid,
        call: &Syscall,
        spec: &Spec,
        rewritten: &[(usize, Vec<u8>)],
    ) -> nix::Result<OwnCall> {
        let mut regs = call.args;
        let mut keep: Vec<Vec<u8>> = Vec::new();
        let mut point = |regs: &mut [u64; 6], reg: usize, bytes: Vec<u8>| {
            keep.push(bytes);
            regs[reg] = keep.last().expect("pushed").as_ptr() as u64;
        };
        for pa in spec.paths {
            let dirfd = pa.dirfd.map(|r| call.args[r] as i32);
            let raw = match rewritten.iter().find(|(r, _)| *r == pa.path) {
                Some((_, b)) => b.clone(),
                None if call.args[pa.path] == 0 => Vec::new(),
                None => memory::read_cstr(tid, call.args[pa.path])?,
            };
            if raw.is_empty() {
                // The object of the dirfd itself (AT_EMPTY_PATH, or futimens' NULL name):
                // its magic link, followed.
                clear_nofollow(call.nr, &mut regs);
            }
            point(&mut regs, pa.path, cstring(absolute(tid, dirfd, &raw)));
            if let Some(r) = pa.dirfd {
                regs[r] = libc::AT_FDCWD as u64;
            }
        }
        // Other structs roam's rewrite replaced (openat2's `open_how`).
        for (reg, bytes) in rewritten {
            if !spec.paths.iter().any(|pa| pa.path == *reg) {
                point(&mut regs, *reg, bytes.clone());
            }
        }
        for (reg, len) in inputs(call) {
            if rewritten.iter().any(|(r, _)| *r == reg) || call.args[reg] == 0 {
                continue;
            }
            let bytes = match len {
                None => cstring(memory::read_cstr(tid, call.args[reg])?),
                Some(len) => {
                    let mut b = vec![0u8; len];
                    memory::read(tid, call.args[reg], &mut b)?;
                    b
                }
            };
            point(&mut regs, reg, bytes);
        }
        if let Some(mode) = created_mode_reg(call.nr) {
            regs[mode] &= !(super::open::umask(tid) as u64);
        }
        let out = output(call).map(|(reg, len, whole)| {
            point(&mut regs, reg, vec![0u8; len]);
            Out {
                addr: call.args[reg],
                whole,
            }
        });
        Ok(OwnCall { regs, keep, out })
    }

    /// The reply to a call roam made: its fd, or its result with the output to write into
    /// the program's buffer.
    fn finish(
        &self,
        tid: Pid,
        call: &Syscall,
        spec: &Spec,
        ret: i64,
        own: OwnCall,
        after: Option<AfterExit>,
    ) -> Reply {
        if ret < 0 {
            return Reply::Return(ret);
        }
        if spec.family == Family::Open {
            // SAFETY: a new fd of roam's own, returned by the open just made.
            let fd = unsafe { OwnedFd::from_raw_fd(ret as i32) };
            let cloexec = open_flags(tid, call) & libc::O_CLOEXEC != 0;
            return Reply::Fd {
                fd,
                cloexec,
                at: None,
            };
        }
        let answer = match after {
            Some(AfterExit::Return(r)) => r,
            _ => ret,
        };
        let Some(out) = own.out else {
            return Reply::Return(answer);
        };
        let mut data = own
            .keep
            .last()
            .expect("the output buffer is pushed last")
            .clone();
        if !out.whole {
            data.truncate(ret as usize);
        }
        if let Some(AfterExit::RemoteStat { statx, link, .. }) = after {
            make_remote(&mut data, statx, link);
        }
        Reply::Data {
            addr: out.addr,
            data,
            ret: answer,
        }
    }

    /// Whether roam may make `call` for thread `tid`, which acts with credentials other
    /// than roam's (a daemon that dropped its privileges): roam makes it with its own, so
    /// only an open or a stat of roam's own copies and skeleton entries, every name of the
    /// call one roam rewrote, and an open only when the caller may read what it names
    /// (roam's permission check in the kernel's place; writes were checked when the copy
    /// was made). Anything else would let roam's credentials stand in for the program's.
    fn for_another_user(
        &self,
        tid: Pid,
        call: &Syscall,
        spec: &Spec,
        rewritten: &[(usize, Vec<u8>)],
    ) -> Result<(), i32> {
        let vfs = self.vfs();
        // Each name is one roam rewrote into its cache, or none (the object of the
        // program's own dirfd: `fstat` of a copy it holds).
        let roams = |pa: &table::PathArg| match rewritten.iter().find(|(r, _)| *r == pa.path) {
            Some((_, b)) => vfs.unmap(std::str::from_utf8(b).ok()?).map(Some),
            None if call.args[pa.path] == 0 => Some(None),
            None => match memory::read_cstr(tid, call.args[pa.path]) {
                Ok(raw) if raw.is_empty() && pa.dirfd.is_some() => Some(None),
                _ => None,
            },
        };
        let names: Option<Vec<Option<String>>> = spec.paths.iter().map(roams).collect();
        let names = match names {
            Some(n) if matches!(spec.family, Family::Open | Family::Inspect) => n,
            _ => {
                self.cannot_afar(
                    tid,
                    Some(spec),
                    "use roam's names with credentials other than roam's",
                );
                return Err(libc::EACCES);
            }
        };
        let flags = open_flags(tid, call);
        let reads = spec.family == Family::Open
            && flags & libc::O_PATH == 0
            && flags & libc::O_ACCMODE != libc::O_WRONLY;
        if reads {
            for virt in names.iter().flatten() {
                if let Some(node) = vfs.lookup(virt).map_err(|e| e.errno())? {
                    super::open::may(vfs, tid, &node, roam_vfs::Need::Read)
                        .map_err(|e| e.errno())?;
                }
            }
        }
        Ok(())
    }

    /// Whether an open rewritten to `rewritten` names an entry of roam's own cache that is
    /// a regular file or a directory, which roam may open for a program without waiting: a
    /// FIFO's open would hold roam's worker until a writer comes, and a local mount's file
    /// served in place may be anything.
    pub fn opens_own_entry(&self, rewritten: &[(usize, Vec<u8>)]) -> bool {
        let [(_, name)] = rewritten else {
            return false;
        };
        let Ok(name) = std::str::from_utf8(name) else {
            return false;
        };
        self.vfs().unmap(name).is_some()
            && std::fs::metadata(name).is_ok_and(|m| m.is_file() || m.is_dir())
    }

    fn cannot_afar(&self, tid: Pid, spec: Option<&Spec>, what: &str) -> Reply {
        let name = spec.map_or("a call", |s| s.name.trim_start_matches("SYS_"));
        let program = std::fs::read_to_string(format!("/proc/{tid}/comm")).unwrap_or_default();
        self.report.once(
            format!("afar {name} {}", program.trim()),
            format!("{}: {name}: a process under a debugger cannot {what} (roam serves it without ptrace, and that changes the thread itself): EACCES", program.trim()),
        );
        Reply::Return(-(libc::EACCES as i64))
    }
}

/// Whether thread `tid` acts on files with roam's user and group (`/proc/TID/status`: the
/// file-system ids, the fourth of `Uid:` and `Gid:`).
pub fn acts_as_roam(tid: Pid) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    let fs_id = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|ids| ids.split_whitespace().nth(3)?.parse::<u32>().ok())
    };
    fs_id("Uid:") == Some(nix::unistd::geteuid().as_raw())
        && fs_id("Gid:") == Some(nix::unistd::getegid().as_raw())
}

fn raw_syscall(nr: i64, r: &[u64; 6]) -> i64 {
    // SAFETY: the registers are the program's own call, every pointer in them replaced by
    // one to a buffer of roam's that lives until the call returns.
    let ret = unsafe { libc::syscall(nr, r[0], r[1], r[2], r[3], r[4], r[5]) };
    if ret < 0 {
        -(nix::errno::Errno::last() as i64)
    } else {
        ret
    }
}

fn cstring(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.push(0);
    bytes
}

/// A name as an absolute path: relative ones through the thread's working directory or
/// its dirfd (`/proc/TID/cwd/NAME`, `/proc/TID/fd/N/NAME`, which roam may follow).
fn absolute(tid: Pid, dirfd: Option<i32>, raw: &[u8]) -> Vec<u8> {
    if raw.starts_with(b"/") {
        return raw.to_vec();
    }
    let mut base = match dirfd {
        Some(fd) if fd != libc::AT_FDCWD => format!("/proc/{tid}/fd/{fd}").into_bytes(),
        _ => format!("/proc/{tid}/cwd").into_bytes(),
    };
    if !raw.is_empty() {
        base.push(b'/');
        base.extend_from_slice(raw);
    }
    base
}

/// A name replaced by a dirfd's magic link must be followed: the register with the
/// `AT_*` flags of the call, cleared of `AT_SYMLINK_NOFOLLOW` and `AT_EMPTY_PATH`.
fn clear_nofollow(nr: i64, regs: &mut [u64; 6]) {
    let reg = match nr {
        libc::SYS_statx => 2,
        libc::SYS_newfstatat | libc::SYS_utimensat | libc::SYS_faccessat2 => 3,
        libc::SYS_fchmodat2 => 3,
        libc::SYS_fchownat | libc::SYS_linkat => 4,
        _ => return,
    };
    regs[reg] &= !((libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) as u64);
}

/// Pointer arguments other than names that a call reads: (register, bytes, or None for
/// a NUL-terminated string).
fn inputs(call: &Syscall) -> Vec<(usize, Option<usize>)> {
    let a = &call.args;
    match call.nr {
        libc::SYS_symlink | libc::SYS_symlinkat => vec![(0, None)],
        libc::SYS_utime => vec![(1, Some(16))],
        libc::SYS_utimes => vec![(1, Some(32))],
        libc::SYS_futimesat | libc::SYS_utimensat => vec![(2, Some(32))],
        libc::SYS_setxattr | libc::SYS_lsetxattr => {
            vec![(1, None), (2, Some(a[3] as usize))]
        }
        libc::SYS_removexattr
        | libc::SYS_lremovexattr
        | libc::SYS_getxattr
        | libc::SYS_lgetxattr => vec![(1, None)],
        libc::SYS_openat2 => vec![(2, Some((a[3] as usize).clamp(24, 4096)))],
        _ => Vec::new(),
    }
}

/// The buffer a call fills: (register, size, whole struct or as many bytes as returned).
fn output(call: &Syscall) -> Option<(usize, usize, bool)> {
    let a = &call.args;
    let len = |r: usize| (a[r] as usize).min(1 << 20);
    Some(match call.nr {
        libc::SYS_stat | libc::SYS_lstat => (1, stat_size(false), true),
        libc::SYS_newfstatat => (2, stat_size(false), true),
        libc::SYS_statx => (4, stat_size(true), true),
        libc::SYS_statfs => (1, std::mem::size_of::<libc::statfs>(), true),
        libc::SYS_readlink => (1, len(2), false),
        libc::SYS_readlinkat => (2, len(3), false),
        libc::SYS_getxattr | libc::SYS_lgetxattr if a[3] > 0 => (2, len(3), false),
        libc::SYS_listxattr | libc::SYS_llistxattr if a[2] > 0 => (1, len(2), false),
        _ => return None,
    })
}

/// The register with the mode of a file or directory the call creates: the program's
/// umask applies to it, not roam's.
fn created_mode_reg(nr: i64) -> Option<usize> {
    match nr {
        libc::SYS_creat | libc::SYS_mkdir | libc::SYS_mknod => Some(1),
        libc::SYS_open | libc::SYS_mkdirat | libc::SYS_mknodat => Some(2),
        libc::SYS_openat => Some(3),
        _ => None,
    }
}

/// roam's own open gets `O_CLOEXEC` (the program's wish goes to ADDFD instead).
fn add_cloexec(nr: i64, own: &mut OwnCall) {
    let cloexec = libc::O_CLOEXEC as u64;
    match nr {
        libc::SYS_open => own.regs[1] |= cloexec,
        libc::SYS_openat => own.regs[2] |= cloexec,
        libc::SYS_openat2 => {
            // `open_how.flags`, the first field of roam's copy of the struct.
            let at = own.regs[2];
            if let Some(how) = own.keep.iter_mut().find(|b| b.as_ptr() as u64 == at) {
                let flags = u64::from_ne_bytes(how[..8].try_into().expect("24 bytes at least"));
                how[..8].copy_from_slice(&(flags | cloexec).to_ne_bytes());
            }
        }
        _ => {}
    }
}

/// The program's open flags (for openat2, from its `open_how`).
fn open_flags(tid: Pid, call: &Syscall) -> i32 {
    match call.nr {
        libc::SYS_open => call.args[1] as i32,
        libc::SYS_openat => call.args[2] as i32,
        libc::SYS_openat2 => {
            let mut how = [0u8; 8];
            let _ = memory::read(tid, call.args[2], &mut how);
            u64::from_ne_bytes(how) as i32
        }
        _ => 0,
    }
}

/// The lowest watched fd number free in `tid`'s process, below its fd limit.
fn free_watched_fd(tid: Pid) -> Option<i32> {
    let used: std::collections::HashSet<i32> = std::fs::read_dir(format!("/proc/{tid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let limit = std::fs::read_to_string(format!("/proc/{tid}/limits"))
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse::<i32>().ok())
        })
        .unwrap_or(1024);
    (WATCHED_FD_BASE as i32..limit).find(|n| !used.contains(n))
}
