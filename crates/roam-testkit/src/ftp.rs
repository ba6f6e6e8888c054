//! FTP servers for the FTP driver's tests, each serving a scratch tree on a free loopback
//! port and logging to `run/error.log` (shown by [`Server::error_log`] when a test fails):
//!
//! - [`pyftpdlib`] (PyPI): MLSD/MLST, MFMT, SITE CHMOD, one named user;
//! - [`vsftpd`] (Debian): no MLSD, so the driver parses LIST; anonymous users;
//! - [`vsftpd_tls`]: the same in explicit FTPS only, with a certificate of a test CA.
//!
//! Both serve the tree as an unprivileged user, whatever runs the tests: a server running
//! as root could read a mode-000 file, and the tests need one it cannot.

use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::fs::lchown;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::tls::TestCa;
use crate::{free_port, mkdir, required, Server};

/// pyftpdlib as user `user`/`password` with every permission, rooted at `root`. The tree is
/// handed to `nobody`, as whom the server runs once it has bound its port (port 0: the
/// kernel picks a free one, which the script announces, so no other process can take it).
pub fn pyftpdlib(root: &Path, run: &Path, user: &str, password: &str) -> Server {
    let python = required("python3", "python3");
    let (uid, gid) = user_ids("nobody");
    give_tree(root, uid, gid);
    mkdir(run);
    let log = run.join("error.log");
    let mut child = Command::new(python)
        .args(["-u", "-c", PYFTPDLIB])
        .arg(root)
        .args([user, password])
        .arg(&log)
        .args([uid.to_string(), gid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(fs::File::create(run.join("stderr.log")).unwrap())
        .spawn()
        .expect("starting python3");
    let mut line = String::new();
    let announced = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    match announced.ok().and_then(|_| line.trim().parse().ok()) {
        Some(port) => Server::running(child, port, run),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = fs::read_to_string(run.join("stderr.log")).unwrap_or_default();
            panic!("pyftpdlib did not start (pip install pyftpdlib): {stderr}");
        }
    }
}

/// The server script: argv = root, user, password, log file, uid, gid.
const PYFTPDLIB: &str = r#"
import logging, os, sys
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer
root, user, password, log, uid, gid = sys.argv[1:7]
logging.basicConfig(filename=log, level=logging.INFO)
authorizer = DummyAuthorizer()
authorizer.add_user(user, password, root, perm="elradfmwMT")
FTPHandler.authorizer = authorizer
server = FTPServer(("127.0.0.1", 0), FTPHandler)
print(server.address[1], flush=True)
# Modules imported on first use must be loaded while still root: the interpreter may live
# where nobody cannot read (MFMT needs _strptime).
import _strptime
os.setgid(int(gid))
os.setgroups([])
os.setuid(int(uid))
server.serve_forever()
"#;

/// vsftpd in the foreground for anonymous users (no password), who may upload, create
/// directories, delete and rename. vsftpd refuses an anonymous root the session user could
/// write, so `root` itself stays root's and everything below it goes to `ftp` (the user
/// the Debian package creates), where the writable tree belongs: e.g. `root/pub`.
///
/// The chosen port may be taken by another process before vsftpd binds it; vsftpd then
/// exits, and we start it again on another port.
pub fn vsftpd(root: &Path, run: &Path) -> Server {
    vsftpd_with(root, run, "")
}

/// [`vsftpd`] speaking explicit FTPS (`AUTH TLS`) with `ca`'s server certificate, and
/// nothing else: logins and data connections must be in TLS, and a data connection must
/// resume the TLS session of its control connection (`require_ssl_reuse`, vsftpd's
/// default, set here to say so). The log tells of each handshake whether it resumed a
/// session (`debug_ssl`: `..., reused, ...`).
pub fn vsftpd_tls(root: &Path, run: &Path, ca: &TestCa) -> Server {
    let tls = format!(
        "ssl_enable=YES
allow_anon_ssl=YES
force_anon_logins_ssl=YES
force_anon_data_ssl=YES
force_local_logins_ssl=YES
force_local_data_ssl=YES
require_ssl_reuse=YES
debug_ssl=YES
rsa_cert_file={}
rsa_private_key_file={}
",
        ca.cert.display(),
        ca.key.display()
    );
    vsftpd_with(root, run, &tls)
}

/// vsftpd as [`vsftpd`] describes, with the lines `extra` added to its configuration.
fn vsftpd_with(root: &Path, run: &Path, extra: &str) -> Server {
    let vsftpd = required("/usr/sbin/vsftpd", "Debian's vsftpd");
    let (uid, gid) = user_ids("ftp");
    for entry in fs::read_dir(root).unwrap() {
        give_tree(&entry.unwrap().path(), uid, gid);
    }
    mkdir(run);
    // vsftpd's secure_chroot_dir: empty, and writable by nobody but root.
    mkdir(&run.join("empty"));
    for _ in 0..5 {
        let port = free_port();
        let conf = run.join("vsftpd.conf");
        fs::write(&conf, vsftpd_conf(root, run, port) + extra).unwrap();
        let child = Command::new(&vsftpd)
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(run.join("stderr.log")).unwrap())
            .spawn()
            .expect("starting vsftpd");
        if let Some(child) = listening(child, port) {
            return Server::running(child, port, run);
        }
    }
    let stderr = fs::read_to_string(run.join("stderr.log")).unwrap_or_default();
    panic!("vsftpd failed to start five times: {stderr}");
}

fn vsftpd_conf(root: &Path, run: &Path, port: u16) -> String {
    format!(
        "listen=YES
listen_address=127.0.0.1
listen_port={port}
background=NO
anonymous_enable=YES
no_anon_password=YES
local_enable=NO
anon_root={root}
write_enable=YES
anon_upload_enable=YES
anon_mkdir_write_enable=YES
anon_other_write_enable=YES
anon_umask=022
ftp_username=ftp
nopriv_user=nobody
secure_chroot_dir={run}/empty
seccomp_sandbox=NO
xferlog_enable=YES
log_ftp_protocol=YES
vsftpd_log_file={run}/error.log
",
        root = root.display(),
        run = run.display()
    )
}

/// `child` once it accepts connections on `port`; `None` if it exited first.
fn listening(mut child: Child, port: u16) -> Option<Child> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(child);
        }
        assert!(
            Instant::now() < deadline,
            "nothing listened on port {port} within 10 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Makes `uid:gid` the owner of `path` and everything under it (links themselves, not
/// their targets).
fn give_tree(path: &Path, uid: u32, gid: u32) {
    lchown(path, Some(uid), Some(gid)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            give_tree(&entry.unwrap().path(), uid, gid);
        }
    }
}

/// The uid and gid of a system user; fails the test if it does not exist.
fn user_ids(name: &str) -> (u32, u32) {
    let cname = CString::new(name).unwrap();
    // SAFETY: all-zero is a valid `passwd` (null pointers, zero ids), filled in below.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found = std::ptr::null_mut();
    // SAFETY: the re-entrant lookup (tests run in threads) writes only into `entry` and
    // `buf`, whose sizes we pass, and sets `found` to `&entry` or NULL.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    assert!(
        rc == 0 && !found.is_null(),
        "the FTP tests need the system user {name:?} (installing vsftpd creates `ftp`)"
    );
    (entry.pw_uid, entry.pw_gid)
}
