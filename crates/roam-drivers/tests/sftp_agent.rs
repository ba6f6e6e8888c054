//! The SFTP driver logging in with a key held by `ssh-agent` (found through
//! `SSH_AUTH_SOCK`), against a real OpenSSH `sshd`. A test binary of its own: it sets
//! `SSH_AUTH_SOCK` for the whole process, which no other test may see.

use std::time::Duration;

use roam_drivers::sftp::{SftpConfig, SftpDriver};
use roam_drivers::{Driver, Kind};
use roam_testkit::sftp::{keygen, ssh_agent, sshd};
use roam_testkit::{write_file, Scratch};

/// The agent's key is offered first: the only identity file is encrypted, which the
/// driver cannot use by itself.
#[test]
fn agent_keys_log_in() {
    let scratch = Scratch::new("sftp-agent");
    let root = scratch.join("root");
    write_file(&root.join("f"), b"via the agent", 0o644);
    let ssh = sshd(&scratch.join("run"));
    let agent = ssh_agent(&scratch.join("agent"), &ssh.client_key);
    std::env::set_var("SSH_AUTH_SOCK", &agent.socket);
    let cfg = SftpConfig {
        connect_timeout: Duration::from_secs(10),
        read_timeout: Duration::from_secs(10),
        ssh_config: Some(scratch.join("no-ssh-config")),
        known_hosts: Some(ssh.known_hosts.clone()),
        identity_files: vec![keygen(&scratch.join("locked"), "a passphrase")],
        ..SftpConfig::default()
    };
    let d = SftpDriver::new(cfg, &ssh.url("root", &root)).unwrap();
    assert_eq!(d.stat("/f").unwrap().kind, Kind::File);
    let mut out = Vec::new();
    d.fetch("/f", &mut out, None).unwrap();
    assert_eq!(out, b"via the agent");
}
