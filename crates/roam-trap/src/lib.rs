//! roam's interposition engine: runs unmodified programs so that every name they use goes
//! through roam's namespace. Split as in gVisor: [`platform`] is *how* calls are caught
//! (ptrace + a seccomp-BPF filter that stops only the calls roam must see), [`kernel`] is
//! *what* they mean (one file per family of calls), and the tracer loop ties them together.

pub mod kernel;
pub mod platform;
mod preload;
mod tracer;

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use roam_vfs::Vfs;

/// Why a program could not be run under roam.
#[derive(Debug, thiserror::Error)]
pub enum TrapError {
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0}")]
    Setup(String),
    #[error("system call failed: {0}")]
    Sys(#[from] nix::errno::Errno),
}

/// Blocks, in the calling thread, the signals the tracer reads from a signalfd (SIGCHLD).
/// Call it before roam starts any thread (a driver's runtime, a worker): threads inherit
/// the mask, and a thread that did not block SIGCHLD would take (and drop) the wake-up the
/// tracer waits for.
pub fn block_tracer_signals() -> Result<(), TrapError> {
    Ok(tracer::tracer_signals().thread_block()?)
}

/// Runs `argv` (program and arguments) with the current environment under roam and
/// returns its exit status (128+N if it was killed by signal N).
pub fn run(vfs: Arc<Vfs>, argv: &[OsString]) -> Result<i32, TrapError> {
    let program = find_program(
        argv.first()
            .ok_or_else(|| TrapError::Setup("no program given".into()))?,
    )?;
    let argv = to_cstrings(argv.iter().cloned())?;
    // The library's LD_PRELOAD takes the place of the program's (which it includes).
    let preload = preload::enabled()
        .then(|| preload::env(vfs.cache_root(), std::env::var_os("LD_PRELOAD")))
        .flatten();
    let fastpath = preload.is_some();
    let mut envp = to_cstrings(
        std::env::vars_os()
            .filter(|(k, _)| !fastpath || k != "LD_PRELOAD")
            .map(|(k, v)| {
                let mut kv = k;
                kv.push("=");
                kv.push(v);
                kv
            }),
    )?;
    envp.extend(preload);
    let program = CString::new(program.into_os_string().into_vec())
        .map_err(|_| TrapError::Setup("program name contains NUL".into()))?;
    let notify = uses_listener();
    let filter = roam_filter(notify);

    // Block the signals the tracer reads from a signalfd before any thread exists, so every
    // thread inherits the mask; the child unblocks them before exec.
    tracer::tracer_signals().thread_block()?;
    let kernel = Arc::new(kernel::Kernel::new(vfs, fastpath));
    let (child, listener) = platform::launch::spawn(&program, &argv, &envp, &filter, notify)?;
    let tracer = tracer::Tracer::new(kernel, child, listener)?;
    tracer::route_signals(child)?;
    tracer.run()
}

/// Whether roam's calls reach it through a seccomp listener rather than as ptrace stops:
/// `ROAM_NOTIFY=1` or `0` says; by default yes where the kernel has synchronous wake-ups
/// for listeners (Linux 6.6), without which a notification wakes a sleeping CPU and costs
/// more than a stop (docs/SYSCALLS.md).
pub fn uses_listener() -> bool {
    match std::env::var_os("ROAM_NOTIFY") {
        Some(v) => v == "1",
        None => std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .and_then(|r| kernel_version(&r))
            .is_some_and(|v| v >= (6, 6)),
    }
}

/// Whether the listener answers stats and read-only opens of roam names itself (writing
/// the `struct stat` into the program's buffer, installing roam's fd of the copy) rather
/// than leaving them to the tracer, which takes the thread over: yes unless `ROAM_AFAR=0`
/// (to compare the two).
pub(crate) fn from_afar() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("ROAM_AFAR").is_none_or(|v| v != "0"))
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc-v669`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The filter every tracee runs under. With the listener, every call roam sees is a
/// notification (so a process handed over to a debugger keeps roam's listener and needs no
/// second one, which the kernel would refuse); without it, a ptrace stop.
fn roam_filter(notify: bool) -> Vec<platform::seccomp::Insn> {
    let (traced, gated) = (
        kernel::table::traced_numbers(),
        kernel::table::gated_numbers(),
    );
    if notify {
        platform::seccomp::notify_only(&traced, &gated)
    } else {
        platform::seccomp::filter(&traced, &gated)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_versions_are_read_from_releases() {
        assert_eq!(super::kernel_version("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(super::kernel_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(super::kernel_version("6.6"), Some((6, 6)));
        assert_eq!(super::kernel_version("garbage"), None);
    }
}

/// A handle on an attached process tree, for `roam detach`.
#[derive(Clone)]
pub struct Detacher(Arc<kernel::Kernel>);

impl Detacher {
    /// Gives the tree's names back to the kernel and delivers pending changes; returns
    /// those still being written (their last close delivers them).
    pub fn detach(&self) -> Vec<String> {
        self.0.detach()
    }
}

/// Takes over the running process tree rooted at `root` (all threads, later children)
/// and serves it until every process in it has ended. `ready` is told the number of
/// threads taken over once the filter is in place, with a handle for detaching.
pub fn attach(
    vfs: Arc<Vfs>,
    root: i32,
    ready: impl FnOnce(Detacher, usize),
) -> Result<i32, TrapError> {
    use platform::attach as a;
    let root = nix::unistd::Pid::from_raw(root);
    // No listener: a filter with one cannot be spread over threads with TSYNC.
    let filter = roam_filter(false);
    tracer::tracer_signals().thread_block()?;
    let kernel = Arc::new(kernel::Kernel::new(vfs, false));
    let mut tids = a::seize_tree(root).map_err(|e| TrapError::Setup(e.to_string()))?;
    let mut done = std::collections::BTreeSet::new();
    let mut regions = Vec::new();
    // Processes forked while roam installs its filter inherit it or are found unfiltered
    // by the next pass.
    loop {
        let todo: Vec<_> = a::processes(root)
            .into_iter()
            .filter(|p| !done.contains(p) && (done.is_empty() || !a::is_filtered(*p)))
            .collect();
        if todo.is_empty() {
            break;
        }
        for pid in todo {
            let (seen, region) =
                a::install_filter(pid, &filter).map_err(|e| TrapError::Setup(e.to_string()))?;
            tids.extend(seen.new_tracees);
            regions.extend(region.map(|base| (pid, base)));
            done.insert(pid);
        }
    }
    let mut tracer = tracer::Tracer::new(kernel.clone(), root, None)?;
    for (pid, base) in regions {
        tracer.adopt_scratch(&a::threads(pid), base);
    }
    for tid in &tids {
        kernel.tracee_started(*tid);
    }
    ready(Detacher(kernel), tids.len());
    tracer.run()
}

fn to_cstrings(items: impl Iterator<Item = OsString>) -> Result<Vec<CString>, TrapError> {
    items
        .map(|s| {
            CString::new(s.into_vec()).map_err(|_| TrapError::Setup("argument contains NUL".into()))
        })
        .collect()
}

/// `execvp`'s search, done before fork: a name with a `/` is used as it is (it may be a
/// roam name, served when the traced `execve` arrives); others are looked up in `$PATH`.
fn find_program(name: &OsStr) -> Result<PathBuf, TrapError> {
    if name.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| TrapError::NotFound(name.to_string_lossy().into_owned()))
}
