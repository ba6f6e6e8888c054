//! `roam mount` for the suites: a mount in a scratch directory served by a foreground roam,
//! unmounted (lazily, so a wedged test cannot keep it) and stopped when dropped, even when
//! the test failed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use roam_testkit::Scratch;

use super::Roam;

/// A live FUSE mount of roam.
pub struct FuseMount {
    pub dir: PathBuf,
    child: Child,
    log: PathBuf,
    _roam: Roam,
    _scratch: Scratch,
}

impl FuseMount {
    /// `roam mount --foreground DIR [URL] [ARGS...]` with `roam`'s cache and environment.
    pub fn start(roam: Roam, url: Option<&str>, args: &[&str]) -> FuseMount {
        FuseMount::start_as(roam, url, args, None)
    }

    /// [`FuseMount::start`] as the user `uid` (its group too), who then owns the mount
    /// directory and roam's cache.
    pub fn start_as(roam: Roam, url: Option<&str>, args: &[&str], uid: Option<u32>) -> FuseMount {
        let scratch = Scratch::new("fuse");
        let dir = scratch.join("mnt");
        roam_testkit::mkdir(&dir);
        let log = scratch.join("roam.log");
        let mut cmd = roam.command();
        if let Some(uid) = uid {
            let cache = scratch.join("cache");
            roam_testkit::mkdir(&cache);
            for d in [&dir, &cache] {
                std::os::unix::fs::chown(d, Some(uid), Some(uid)).unwrap();
            }
            let mut setpriv = Command::new("setpriv");
            setpriv
                .arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .arg("--clear-groups")
                .arg(cmd.get_program())
                .args(cmd.get_args())
                .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
                .env("ROAM_CACHE_DIR", &cache)
                .stdin(Stdio::null());
            cmd = setpriv;
        }
        cmd.arg("mount").arg("--foreground").arg(&dir);
        cmd.args(url).args(args);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("starting roam mount");
        let mut m = FuseMount {
            dir,
            child,
            log,
            _roam: roam,
            _scratch: scratch,
        };
        m.wait_mounted();
        m
    }

    fn wait_mounted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(&self.dir) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("roam mount exited ({status}): {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "no mount after 20 s: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What roam said on stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for roam to exit; its status.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Runs `sh -c SCRIPT` on the mount, `/w` in the script standing for it; `/w` stands
    /// for the mount in the output again, so messages compare as under `roam run`.
    pub fn sh(&self, script: &str, env: &[(String, String)]) -> Output {
        let dir = self.dir.to_str().unwrap();
        let o = Command::new("sh")
            .args(["-c", &script.replace("/w", dir)])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .expect("running sh");
        let back = |b: Vec<u8>| String::from_utf8_lossy(&b).replace(dir, "/w").into_bytes();
        Output {
            status: o.status,
            stdout: back(o.stdout),
            stderr: back(o.stderr),
        }
    }
}

/// Whether a FUSE file system is mounted on `dir`.
pub fn is_mounted(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let want = dir.to_str().unwrap();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(want) && l.contains("fuse"))
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(&self.dir)
            .stderr(Stdio::null())
            .status();
        if self.wait_exit(Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Lazily unmounts a directory when dropped (for mounts a test makes without [`FuseMount`]).
pub struct UnmountOnDrop(pub PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(&self.0)
            .stderr(Stdio::null())
            .status();
    }
}
