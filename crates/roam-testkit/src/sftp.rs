//! A second OpenSSH `sshd` (Debian's openssh-server) for the SFTP driver's tests, on a free
//! loopback port with everything of its own in `run/`: its configuration, its host key, the
//! client key it accepts (`authorized_keys`), and a `known_hosts` that names its host key,
//! for the client to verify it with. Its log (stderr, `-e`) is `run/error.log`.
//!
//! It serves the whole file system (SFTP paths are absolute), so tests address their
//! scratch tree by its absolute path. Users: `root` (as the tests run), and `nobody`, whose
//! login makes permission bits matter again (root may read a mode-000 file).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::{free_port, mkdir, pid_file_ready, required, write_file, Server};

/// A running sshd and the client's half of its keys.
pub struct SshServer {
    pub server: Server,
    pub port: u16,
    /// An unencrypted ed25519 key that `root` and `nobody` may log in with.
    pub client_key: PathBuf,
    /// `[127.0.0.1]:PORT KEY` for the server's host key, as `ssh` would have learnt it.
    pub known_hosts: PathBuf,
    /// The host public key, `ssh-ed25519 AAAA...`.
    pub host_key: String,
    /// The listening sshd, whose children carry the open connections.
    pid: u32,
}

impl SshServer {
    /// `sftp://USER@127.0.0.1:PORT/PATH` (`path` absolute).
    pub fn url(&self, user: &str, path: &Path) -> String {
        format!("sftp://{user}@127.0.0.1:{}{}", self.port, path.display())
    }

    /// Cuts every open connection (SIGKILL to the listener's descendants, which serve
    /// them) while the server goes on accepting new ones: what a client sees when a
    /// connection breaks under it.
    pub fn drop_connections(&self) {
        for pid in descendants(self.pid) {
            // SAFETY: kill(2) touches no memory; the pid is a child of our own sshd.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the processes serving the open connections: a
    /// server that stops answering without closing anything. New connections are served.
    pub fn pause_connections(&self, paused: bool) {
        let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        for pid in descendants(self.pid) {
            // SAFETY: as in `drop_connections`.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    /// Stops the listener and cuts the open connections: the host is gone.
    pub fn stop(&mut self) {
        let children = descendants(self.pid);
        self.server.stop();
        for pid in children {
            // SAFETY: as in `drop_connections`.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts sshd on 127.0.0.1 with its state in `run`. A port taken by another process
/// between choosing and binding makes sshd exit; it is then started again on another port.
pub fn sshd(run: &Path) -> SshServer {
    sshd_with(run, "127.0.0.1", "")
}

/// Starts sshd listening on `address` (a loopback address), with `extra` lines appended to
/// its configuration (e.g. `TrustedUserCAKeys ...`); `known_hosts` names `[address]:PORT`.
pub fn sshd_with(run: &Path, address: &str, extra: &str) -> SshServer {
    let sshd = required("/usr/sbin/sshd", "Debian's openssh-server");
    mkdir(run);
    // sshd's privilege-separation directory; the package creates it only at boot.
    mkdir(Path::new("/run/sshd"));
    let host_key = keygen(&run.join("host_key"), "");
    let client_key = keygen(&run.join("client_key"), "");
    let client_pub = fs::read_to_string(client_key.with_extension("pub")).unwrap();
    // Readable by nobody: sshd reads it with the privileges of the user logging in.
    write_file(&run.join("authorized_keys"), client_pub.as_bytes(), 0o644);
    for _ in 0..5 {
        let port = free_port();
        let config = sshd_config(run, &host_key, address, port) + extra;
        fs::write(run.join("sshd_config"), config).unwrap();
        let child = Command::new(&sshd)
            .args(["-D", "-e", "-f"])
            .arg(run.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(run.join("error.log")).unwrap())
            .spawn()
            .expect("starting sshd");
        // Readiness is not probed with a connection: sshd would fork a child for it, which
        // could outlive a quick `stop` holding the listening socket, and a test's "nothing
        // listens here" would then be reset instead.
        if let Some(child) = pid_file_ready(child, &run.join("sshd.pid"), "sshd") {
            let host_key = public_half(&host_key);
            let known_hosts = run.join("known_hosts");
            fs::write(&known_hosts, format!("[{address}]:{port} {host_key}\n")).unwrap();
            return SshServer {
                pid: child.id(),
                server: Server::running(child, port, run),
                port,
                client_key,
                known_hosts,
                host_key,
            };
        }
    }
    let log = fs::read_to_string(run.join("error.log")).unwrap_or_default();
    panic!("sshd failed to start five times; its log:\n{log}");
}

/// An `ssh-agent` in the foreground, holding one key, on a socket of its own.
pub struct SshAgent {
    child: Child,
    /// What `SSH_AUTH_SOCK` must name to reach it.
    pub socket: PathBuf,
}

impl Drop for SshAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ssh-agent -D` on `run/agent.sock` and adds the (unencrypted) key `key` to it.
pub fn ssh_agent(run: &Path, key: &Path) -> SshAgent {
    let agent = required("/usr/bin/ssh-agent", "Debian's openssh-client");
    let ssh_add = required("/usr/bin/ssh-add", "Debian's openssh-client");
    mkdir(run);
    let socket = run.join("agent.sock");
    let _ = fs::remove_file(&socket);
    let child = Command::new(agent)
        .arg("-D")
        .arg("-a")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting ssh-agent");
    let agent = SshAgent { child, socket };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent.socket.exists() {
        assert!(
            Instant::now() < deadline,
            "ssh-agent made no socket within 10 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let status = Command::new(ssh_add)
        .arg(key)
        .env("SSH_AUTH_SOCK", &agent.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running ssh-add");
    assert!(status.success(), "ssh-add failed: {status}");
    agent
}

/// Generates an ed25519 key pair at `path` and `path.pub`, encrypted with `passphrase`
/// unless it is empty; returns `path`.
pub fn keygen(path: &Path, passphrase: &str) -> PathBuf {
    let ssh_keygen = required("/usr/bin/ssh-keygen", "Debian's openssh-client");
    let _ = fs::remove_file(path);
    let status = Command::new(ssh_keygen)
        .args([
            "-q",
            "-t",
            "ed25519",
            "-C",
            "roam-test",
            "-N",
            passphrase,
            "-f",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("running ssh-keygen");
    assert!(status.success(), "ssh-keygen failed: {status}");
    path.to_path_buf()
}

/// `TYPE BASE64` of the key pair at `private` (its `.pub` without the comment).
pub fn public_half(private: &Path) -> String {
    let text = fs::read_to_string(private.with_extension("pub")).unwrap();
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn sshd_config(run: &Path, host_key: &Path, address: &str, port: u16) -> String {
    format!(
        "ListenAddress {address}:{port}
HostKey {host_key}
PidFile {run}/sshd.pid
AuthorizedKeysFile {run}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
LogLevel VERBOSE
Subsystem sftp internal-sftp
",
        host_key = host_key.display(),
        run = run.display(),
    )
}

/// Every process below `pid` (children, their children ...), from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let child = entry.file_name().to_str()?.parse().ok()?;
            Some((child, parent_of(child)?))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.split_off(1)
}

/// The parent pid in `/proc/PID/stat` (after the command name, which may hold spaces).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
