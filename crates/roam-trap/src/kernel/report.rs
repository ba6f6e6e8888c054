//! roam's voice on stderr: one clear line per distinct problem (what, which name, why, and
//! the errno the program got), never the same line twice in a run.

use std::collections::HashSet;
use std::sync::Mutex;

use nix::unistd::Pid;

#[derive(Default)]
pub struct Reporter {
    said: Mutex<HashSet<String>>,
}

impl Reporter {
    /// Reports a failed call on a roam name.
    pub fn error(&self, tid: Pid, call: &str, name: &str, errno: i32, why: &str) {
        let call = call.trim_start_matches("SYS_");
        let line = format!("{call} {name}: {why} ({})", errno_name(errno));
        tracing::debug!(%tid, "{line}");
        self.once(line.clone(), line);
    }

    /// Reports a change refused because roam's mounts are read-only.
    pub fn read_only(&self, call: &str, name: &str, errno: i32) {
        let call = call.trim_start_matches("SYS_");
        let line = format!(
            "{call} {name}: this mount is read-only ({})",
            errno_name(errno)
        );
        self.once(line.clone(), line);
    }

    /// Says `line` unless something with the same `key` was said before.
    pub fn once(&self, key: String, line: String) {
        if self.said.lock().unwrap().insert(key) {
            eprintln!("roam: {}", roam_vfs::secrets::scrub(&line));
        }
    }
}

/// The symbolic name of an errno (`ENOENT`), as programmers know it.
pub fn errno_name(errno: i32) -> String {
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}
