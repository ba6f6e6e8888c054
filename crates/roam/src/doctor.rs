//! `roam doctor`: which of roam's mechanisms this machine allows, and if not, why.
//! `roam run` needs ptrace and seccomp; `roam mount` needs FUSE (`/dev/fuse`, and for a
//! user without root the setuid `fusermount3`); `roam run --fuse` needs FUSE inside an
//! unprivileged user namespace. FUSE over io_uring is a speed-up, not a need: its line
//! says `off` (and how to turn it on) without failing the check.
//!
//! `roam doctor URL`: the mount a URL (or a remote's `NAME:PATH`) makes, what its driver
//! read to reach the server and log in ([`roam_drivers::Driver::sources`]: never a
//! secret), and whether the server answers a stat of the mount's root.

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use roam_drivers::secrets::scrub;
use roam_vfs::Node;

/// Where `roam doctor URL` mounts the URL in its namespace (no program ever sees it).
const PROBE: &str = "/.roam-doctor";

pub fn doctor_url(url: &str) -> anyhow::Result<i32> {
    let line = |what: &str, value: &str| println!("{what:<18} {}", scrub(value));
    let config = crate::config::config_path();
    let shown = config.display().to_string();
    line(
        "roam.toml",
        &match config.exists() {
            true => shown,
            false => format!("{shown} (absent)"),
        },
    );
    let target = crate::config::Config::load()?.mount_url(url)?;
    line("mount URL", &target);
    let vfs = match crate::open_vfs(&[format!("{PROBE}={url}")], crate::Use::Look) {
        Ok(vfs) => vfs,
        Err(e) => {
            line("mount", &format!("cannot be made: {e:#}"));
            return Ok(1);
        }
    };
    let Some(Node::Remote(root)) = vfs.lookup(PROBE)? else {
        anyhow::bail!("{PROBE} is not a mount");
    };
    for (what, from) in root.driver.sources() {
        line(&what, &from);
    }
    let started = Instant::now();
    let node = Node::Remote(root);
    match vfs.stat(&node) {
        Ok(_) => {
            line(
                "server",
                &format!("answers ({} ms)", started.elapsed().as_millis()),
            );
            Ok(0)
        }
        Err(e) => {
            line("server", &format!("does not answer as hoped: {e}"));
            Ok(1)
        }
    }
}

/// One mechanism: whether it works, and the reason.
struct Check {
    name: &'static str,
    ok: bool,
    why: String,
    /// roam works without it (only faster with it).
    optional: bool,
}

pub fn doctor() -> anyhow::Result<i32> {
    let checks = [ptrace(), seccomp(), fuse(), fuse_uring(), user_namespaces()];
    for c in &checks {
        let verdict = match (c.ok, c.optional) {
            (true, _) => "yes",
            (false, true) => "off",
            (false, false) => "no ",
        };
        println!("{:<16} {verdict}  {}", c.name, c.why);
    }
    Ok(i32::from(checks.iter().any(|c| !c.ok && !c.optional)))
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn ptrace() -> Check {
    let (ok, why) = match read_trimmed("/proc/sys/kernel/yama/ptrace_scope").as_deref() {
        None => (true, "no Yama LSM: classic ptrace permissions".to_owned()),
        Some("0") => (true, "Yama ptrace_scope 0: classic ptrace permissions".to_owned()),
        Some("1") => (
            true,
            "Yama ptrace_scope 1: only descendants may be traced (roam run starts its program, so that is enough)".to_owned(),
        ),
        Some("2") => (
            is_root(),
            "Yama ptrace_scope 2: only with CAP_SYS_PTRACE (root)".to_owned(),
        ),
        Some(v) => (false, format!("Yama ptrace_scope {v}: ptrace is disabled")),
    };
    Check {
        name: "ptrace",
        ok,
        why,
        optional: false,
    }
}

fn seccomp() -> Check {
    // SAFETY: PR_GET_SECCOMP reads this thread's mode; EINVAL means no seccomp in the kernel.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP) };
    let channel = if roam_trap::uses_listener() {
        "calls reach roam run's listener (synchronous wake-ups, Linux 6.6+)"
    } else {
        "calls reach roam run as ptrace stops (kernel before 6.6, or ROAM_NOTIFY=0)"
    };
    let (ok, why) = match mode {
        0 => (true, format!("filters available; {channel}")),
        -1 => (
            false,
            "the kernel has no seccomp (CONFIG_SECCOMP_FILTER)".to_owned(),
        ),
        _ => (
            true,
            format!("roam itself runs under a seccomp filter; its own stacks on top; {channel}"),
        ),
    };
    Check {
        name: "seccomp",
        ok,
        why,
        optional: false,
    }
}

fn fuse() -> Check {
    let dev = std::fs::metadata("/dev/fuse");
    let helper = which("fusermount3");
    let setuid = helper
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| m.permissions().mode() & 0o4000 != 0);
    let (ok, why) = match (&dev, is_root()) {
        (Err(_), _) => (false, "no /dev/fuse (modprobe fuse, or a container without the device)".to_owned()),
        (Ok(_), true) => (true, "root: roam mounts /dev/fuse itself".to_owned()),
        (Ok(m), false) if m.permissions().mode() & 0o006 != 0o006 => (
            false,
            "/dev/fuse is not read-writable by other users (udev normally makes it 0666); fusermount3 opens it as you".to_owned(),
        ),
        (Ok(_), false) if !setuid => (
            false,
            "no setuid fusermount3 (install fuse3)".to_owned(),
        ),
        (Ok(_), false) => (true, "through the setuid fusermount3".to_owned()),
    };
    Check {
        name: "FUSE",
        ok,
        why,
        optional: false,
    }
}

/// FUSE over io_uring: each request served on the CPU of the program that made it.
fn fuse_uring() -> Check {
    use roam_fuse::uring::{enabled, PARAMETER};
    let (ok, why) = match enabled() {
        Some(true) => (
            true,
            "the kernel allows it; `roam mount` takes requests through it with ROAM_FUSE_URING=1"
                .to_owned(),
        ),
        Some(false) => (
            false,
            format!("the kernel's switch is off; to turn it on: echo Y | sudo tee {PARAMETER}"),
        ),
        None => (
            false,
            "this kernel has none (Linux 6.14+ built with CONFIG_FUSE_IO_URING)".to_owned(),
        ),
    };
    Check {
        name: "FUSE io_uring",
        ok,
        why,
        optional: true,
    }
}

fn user_namespaces() -> Check {
    let max = read_trimmed("/proc/sys/user/max_user_namespaces");
    let debian = read_trimmed("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let (ok, why) = if max.as_deref() == Some("0") {
        (false, "user.max_user_namespaces is 0".to_owned())
    } else if debian.as_deref() == Some("0") {
        (false, "kernel.unprivileged_userns_clone is 0".to_owned())
    } else if apparmor.as_deref() == Some("1") {
        (
            false,
            "AppArmor restricts unprivileged user namespaces".to_owned(),
        )
    } else {
        match try_unshare() {
            Ok(()) => (
                true,
                "a new user namespace can be made (roam run --fuse works without root)".to_owned(),
            ),
            Err(e) => (false, format!("unshare(CLONE_NEWUSER) failed: {e}")),
        }
    };
    Check {
        name: "user namespaces",
        ok,
        why,
        optional: false,
    }
}

/// Tries unshare(CLONE_NEWUSER) in a child, so roam's own namespace stays as it is.
fn try_unshare() -> std::io::Result<()> {
    // SAFETY: the child only calls unshare and _exit (async-signal-safe).
    unsafe {
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => {
                let code = if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                    0
                } else {
                    *libc::__errno_location()
                };
                libc::_exit(code)
            }
            pid => {
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                match libc::WEXITSTATUS(status) {
                    0 => Ok(()),
                    errno => Err(std::io::Error::from_raw_os_error(errno)),
                }
            }
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn which(prog: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(prog))
        .find(|p| p.is_file())
}
