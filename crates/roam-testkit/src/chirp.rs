//! `chirp_server` (Debian's coop-computing-tools) serving a scratch tree on 127.0.0.1.
//!
//! The server refuses to run as root unless given a user to act as on disk (`-i nobody`),
//! so the tree is handed to `nobody`. Access is governed by an ACL file (`.__acl`, one
//! `SUBJECT RIGHTS` line per grant) in each directory; a directory without one is closed to
//! everyone, so the fixture grants [`ALL_RIGHTS`] wherever the test wrote no ACL of its own.

use std::fs;
use std::os::unix::fs::lchown;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{free_port, mkdir, required, wait_for_port, write_file, Server};

/// Every right (read, write, list, delete, admin) to each subject a test on this machine
/// can authenticate as: root by `unix`, and loopback by `hostname` and by `address`.
pub const ALL_RIGHTS: &str = "unix:root rwlda\nhostname:localhost rwlda\naddress:127.0.0.1 rwlda\n";

/// The name of a directory's ACL file.
pub const ACL_FILE: &str = ".__acl";

/// Writes the ACL of `dir` (lines of `SUBJECT RIGHTS`; subjects may use `*` wildcards).
pub fn grant(dir: &Path, acl: &str) {
    write_file(&dir.join(ACL_FILE), acl.as_bytes(), 0o644);
}

impl Server {
    /// `chirp_server` serving `root`, with its logs in `run` (`error.log`).
    pub fn chirp(root: &Path, run: &Path) -> Server {
        Server::chirp_with(root, run, &[])
    }

    /// `chirp_server` with `extra` arguments, e.g. `["-a", "address"]` to offer only one
    /// authentication method.
    pub fn chirp_with(root: &Path, run: &Path, extra: &[&str]) -> Server {
        let chirp_server = required("/usr/bin/chirp_server", "Debian's coop-computing-tools");
        mkdir(run);
        grant_where_missing(root);
        give_to_nobody(root);
        let port = free_port();
        let mut child = Command::new(chirp_server)
            // First, so that even complaints about later options land in the log.
            .arg("-o")
            .arg(run.join("error.log"))
            .args([
                "-d",
                "chirp",
                "-d",
                "auth",
                "-i",
                "nobody",
                "-I",
                "127.0.0.1",
            ])
            .args(["-p", &port.to_string()])
            .arg("-r")
            .arg(root)
            .arg("-y")
            .arg(run.join("transient"))
            // The catalog it reports to: a closed local port instead of the one on the Internet.
            .args(["-u", "127.0.0.1:1"])
            .args(extra)
            .current_dir(run)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chirp_server");
        wait_for_port(&mut child, port, run);
        Server::running(child, port, run)
    }

    /// `chirp://127.0.0.1:PORT`, the driver's URL of the served root.
    pub fn chirp_url(&self) -> String {
        format!("chirp://{}", self.authority())
    }
}

/// Grants [`ALL_RIGHTS`] in every directory under `dir` (itself included) without an ACL.
fn grant_where_missing(dir: &Path) {
    if !dir.join(ACL_FILE).exists() {
        grant(dir, ALL_RIGHTS);
    }
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            grant_where_missing(&entry.path());
        }
    }
}

/// Makes `nobody` (the server's identity on disk) the owner of everything under `path`.
fn give_to_nobody(path: &Path) {
    let (uid, gid) = nobody();
    lchown(path, Some(uid), Some(gid)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            give_to_nobody(&entry.unwrap().path());
        }
    }
}

fn nobody() -> (u32, u32) {
    // SAFETY: `passwd` is plain data (integers and pointers), valid when zeroed.
    let mut record: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut found = std::ptr::null_mut();
    // SAFETY: the reentrant lookup writes only into `record` and `buf` (of the given size),
    // so concurrent tests cannot clobber each other's result.
    let rc = unsafe {
        libc::getpwnam_r(
            c"nobody".as_ptr(),
            &mut record,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    assert!(
        rc == 0 && !found.is_null(),
        "there is no user `nobody` to run chirp_server as"
    );
    (record.pw_uid, record.pw_gid)
}
