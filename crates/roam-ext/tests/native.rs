//! The native column of the fault table: the same probes, called in-process with no isolation,
//! each in a throwaway child so the damage stays there. These tests assert the damage: they
//! prove the probes are real, so the isolated technologies' clean results mean something.

use roam_ext::{Extension, Limits, Technology};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

/// How a throwaway child ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Said(String),
    Died(i32),
    Hung,
}

/// Runs `f` in a forked child; its string comes back through a pipe.
fn throwaway(f: impl FnOnce() -> String) -> Outcome {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fresh descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child runs `f` and exits; glibc makes malloc fork-safe.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let said = f();
        // SAFETY: writing our answer to the pipe, then leaving without the parent's handlers.
        unsafe {
            libc::write(fds[1], said.as_ptr().cast(), said.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut status = 0;
    // SAFETY: polling our own child.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        if Instant::now() > deadline {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
                libc::close(fds[0]);
            }
            return Outcome::Hung;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: we own the read end.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    let mut said = String::new();
    let _ = pipe.read_to_string(&mut said);
    match libc::WIFSIGNALED(status) {
        true => Outcome::Died(libc::WTERMSIG(status)),
        false => Outcome::Said(said),
    }
}

fn native() -> Extension {
    Extension::load(
        &roam_testkit::ext::extensions(),
        "faults",
        Technology::Native,
        Limits::default(),
    )
    .unwrap()
}

fn said(ext: &Extension, op: &str, data: &[u8]) -> String {
    match ext.compute(op, data) {
        Ok(out) => String::from_utf8_lossy(&out).into_owned(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn native_crash_kills_roam() {
    let ext = native();
    assert_eq!(
        throwaway(|| said(&ext, "crash", b"")),
        Outcome::Died(libc::SIGSEGV)
    );
}

#[test]
fn native_loop_hangs_roam() {
    let ext = native();
    assert_eq!(throwaway(|| said(&ext, "loop", b"")), Outcome::Hung);
}

#[test]
fn native_stomp_corrupts_roams_memory() {
    let ext = native();
    let outcome = throwaway(|| {
        let canary = vec![0x55u8; 4096];
        let mut data = (canary.as_ptr() as u64).to_le_bytes().to_vec();
        data.extend_from_slice(&(canary.len() as u64).to_le_bytes());
        said(&ext, "stomp", &data);
        format!("canary intact: {}", canary.iter().all(|b| *b == 0x55))
    });
    assert_eq!(outcome, Outcome::Said("canary intact: false".into()));
}

#[test]
fn native_close_fd_closes_roams_descriptor() {
    let ext = native();
    let outcome = throwaway(|| {
        let held = std::fs::File::open("/dev/null").unwrap();
        let fd = held.as_raw_fd();
        said(&ext, "close_fd", &fd.to_le_bytes());
        // SAFETY: F_GETFD only queries the descriptor number.
        let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
        std::mem::forget(held);
        format!("descriptor open: {open}")
    });
    assert_eq!(outcome, Outcome::Said("descriptor open: false".into()));
}

#[test]
fn native_fd_leak_exec_and_write_succeed() {
    let ext = native();
    let scratch = roam_testkit::Scratch::new("ext-native");
    let target = scratch.join("pwned");
    let path = target.to_str().unwrap().as_bytes().to_vec();
    let outcome = throwaway(|| {
        let before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        let leak = said(&ext, "leak_fd", b"");
        let after = std::fs::read_dir("/proc/self/fd").unwrap().count();
        format!(
            "{leak} {} {} {}",
            after - before,
            said(&ext, "exec", b""),
            said(&ext, "write_file", &path)
        )
    });
    assert_eq!(outcome, Outcome::Said("opened 1 executed written".into()));
    assert_eq!(std::fs::read(&target).unwrap(), b"pwned");
}

#[test]
fn native_leak_grows_roam() {
    let ext = native();
    let outcome = throwaway(|| {
        let rss = || {
            std::fs::read_to_string("/proc/self/statm")
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let before = rss();
        (0..64).for_each(|_| drop(said(&ext, "leak", b"")));
        format!(
            "grew at least 60 MiB: {}",
            (rss() - before) * 4096 >= 60 << 20
        )
    });
    assert_eq!(outcome, Outcome::Said("grew at least 60 MiB: true".into()));
}

#[test]
fn native_malformed_and_oversized_are_still_caught() {
    // The reply checks do not depend on isolation: even native replies are validated.
    let ext = native();
    assert!(matches!(
        ext.compute("malformed", b"").unwrap_err().fault,
        roam_ext::Fault::Malformed(_)
    ));
    assert!(matches!(
        ext.compute("oversized", b"").unwrap_err().fault,
        roam_ext::Fault::Oversized { .. }
    ));
}
