//! `roam attach PID` and `roam detach PID`: the agent that takes over a running process
//! tree runs in the background (or in the foreground with `--foreground`) and listens on a
//! control socket in the private cache directory, where `roam detach` finds it.

use roam_drivers::secrets::scrub;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::config::Config;

/// The control socket of the agent attached to `pid`.
fn control_socket(cache_root: &Path, pid: i32) -> PathBuf {
    cache_root.join("run").join(format!("attach-{pid}.sock"))
}

/// `roam attach`: in the background, returns once the tree is taken over.
pub fn attach(mounts: &[String], pid: i32, foreground: bool) -> Result<i32> {
    if foreground {
        return agent(mounts, pid, None);
    }
    let (r, w) = nix::unistd::pipe()?;
    // Forked before any thread exists (the namespace starts threads), so the child is whole.
    // SAFETY: single-threaded here; the child goes on as an ordinary program.
    match unsafe { nix::unistd::fork()? } {
        nix::unistd::ForkResult::Child => {
            drop(r);
            let _ = nix::unistd::setsid();
            detach_stdio(pid);
            let code = match agent(mounts, pid, Some(w)) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("roam attach {pid}: {}", scrub(&format!("{e:#}")));
                    1
                }
            };
            std::process::exit(code);
        }
        nix::unistd::ForkResult::Parent { .. } => {
            drop(w);
            let mut said = String::new();
            std::fs::File::from(r).read_to_string(&mut said)?;
            match said.strip_prefix("ok ") {
                Some(n) => {
                    eprintln!(
                        "roam: attached to {pid} ({} threads); `roam detach {pid}` releases it",
                        n.trim()
                    );
                    Ok(0)
                }
                // The agent said why on stderr.
                None => Ok(1),
            }
        }
    }
}

/// The agent: takes the tree over, serves `roam detach`, ends with the tree.
fn agent(mounts: &[String], pid: i32, ready: Option<OwnedFd>) -> Result<i32> {
    roam_trap::block_tracer_signals()?;
    let vfs = Arc::new(crate::open_vfs(mounts, crate::Use::Work)?);
    let live = crate::live::start(vfs.clone(), "attach", pid.to_string());
    let socket = control_socket(vfs.cache_root(), pid);
    std::fs::create_dir_all(socket.parent().expect("in run/"))?;
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .with_context(|| format!("control socket {}", socket.display()))?;
    let serving = socket.clone();
    let result = roam_trap::attach(vfs.clone(), pid, move |detacher, threads| {
        std::thread::spawn(move || serve_control(&listener, &detacher, &serving));
        if let Some(w) = ready {
            let _ = std::fs::File::from(w).write_all(format!("ok {threads}\n").as_bytes());
        } else {
            eprintln!("roam: attached to {pid} ({threads} threads)");
        }
    });
    let _ = std::fs::remove_file(&socket);
    live.stop();
    if let Err(e) = vfs.save_stats() {
        tracing::warn!("could not save cache counters: {e}");
    }
    vfs.finish();
    Ok(result?)
}

/// Answers `detach` requests: names go back to the kernel, pending changes are delivered.
fn serve_control(listener: &UnixListener, detacher: &roam_trap::Detacher, socket: &Path) {
    for conn in listener.incoming().flatten() {
        let mut line = String::new();
        if BufReader::new(&conn).read_line(&mut line).is_err() || line.trim() != "detach" {
            continue;
        }
        let pending = detacher.detach();
        let mut reply = format!("detached {}\n", pending.len());
        for p in pending {
            reply.push_str(&p);
            reply.push('\n');
        }
        let _ = (&conn).write_all(reply.as_bytes());
        let _ = std::fs::remove_file(socket);
        return;
    }
}

/// `roam detach PID`.
pub fn detach(pid: i32) -> Result<i32> {
    let vfs = crate::open_vfs(&[], crate::Use::Look)?;
    let socket = control_socket(vfs.cache_root(), pid);
    let Ok(mut conn) = UnixStream::connect(&socket) else {
        bail!(
            "{pid} is not attached (no roam agent at {})",
            socket.display()
        );
    };
    conn.write_all(b"detach\n")?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply)?;
    let mut lines = reply.lines();
    let Some(n) = lines.next().and_then(|l| l.strip_prefix("detached ")) else {
        bail!("the agent of {pid} did not answer");
    };
    eprintln!("roam: detached from {pid}; it now sees only local files");
    if n != "0" {
        eprintln!("roam: still open for writing (delivered at their last close):");
        for p in lines {
            eprintln!("  {}", scrub(p));
        }
    }
    Ok(0)
}

/// The background agent reads no terminal input and must not hold its caller's pipes open
/// (a caller reading roam's output would wait for the agent's end): its one-line messages
/// go to the terminal if stderr is one, else to `run/attach-PID.log` in the cache.
fn detach_stdio(pid: i32) {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null");
    // SAFETY: isatty and dup2 on the standard descriptors of this single-threaded process.
    let on_terminal = unsafe { libc::isatty(2) } == 1;
    let log = (!on_terminal)
        .then(|| Config::load().ok())
        .flatten()
        .and_then(|cfg| {
            let run = cfg.cache_dir().join("run");
            std::fs::create_dir_all(&run).ok()?;
            std::fs::File::create(run.join(format!("attach-{pid}.log"))).ok()
        });
    if let Ok(null) = null {
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
            if !on_terminal {
                libc::dup2(log.as_ref().map_or(null.as_raw_fd(), |l| l.as_raw_fd()), 2);
            }
        }
    }
}
