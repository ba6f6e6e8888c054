//! The SFTP driver reaching hosts as the user's `ssh` does (issue 16), against real
//! OpenSSH `sshd`s: `~/.ssh/config` with `Include`, `Match` and tokens, read both by
//! `ssh -G` and by roam's own parser; a target reachable only through a bastion
//! (`ProxyJump`, `ProxyCommand`); known hosts files, hashed entries and
//! `StrictHostKeyChecking`; `IdentitiesOnly` with an agent; `CertificateFile`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use roam_drivers::sftp::{SftpConfig, SftpDriver};
use roam_drivers::{Driver, ErrorKind, Kind};
use roam_testkit::net::{command_ok, own_network};
use roam_testkit::sftp::{keygen, ssh_agent, sshd, sshd_with, SshServer};
use roam_testkit::{write_file, Scratch};

/// Both resolvers: OpenSSH's own (`ssh -G`) and roam's parser.
fn resolvers() -> [Option<PathBuf>; 2] {
    let ssh = PathBuf::from("/usr/bin/ssh");
    assert!(ssh.exists(), "ssh (Debian's openssh-client) is required");
    [Some(ssh), None]
}

/// Settings that read `config` and nothing of the machine's own `~/.ssh`.
fn settings(config: &Path, ssh: &Option<PathBuf>) -> SftpConfig {
    SftpConfig {
        connect_timeout: Duration::from_secs(15),
        read_timeout: Duration::from_secs(10),
        ssh_config: Some(config.to_path_buf()),
        known_hosts: None,
        identity_files: Vec::new(),
        ssh_program: ssh.clone(),
    }
}

fn driver(config: &Path, ssh: &Option<PathBuf>, url: &str) -> SftpDriver {
    SftpDriver::new(settings(config, ssh), url).unwrap()
}

/// The error of a call that must fail, with its message for the assertion's output.
fn failure<T: std::fmt::Debug>(result: roam_drivers::Result<T>) -> (ErrorKind, String) {
    let err = result.expect_err("the call should fail");
    (err.kind, err.message)
}

/// A scratch directory whose `root/f` holds `content`, and that root.
fn tree(name: &str, content: &[u8]) -> (Scratch, PathBuf) {
    let scratch = Scratch::new(name);
    let root = scratch.join("root");
    write_file(&root.join("f"), content, 0o644);
    (scratch, root)
}

/// Signs the public half of `key` with the CA key `ca` (`KEY-cert.pub`), with `options`.
fn sign(ca: &Path, key: &Path, options: &[&str]) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-s"])
        .arg(ca)
        .args(options)
        .arg(key.with_extension("pub"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "ssh-keygen -s: {status}");
}

/// Both resolvers' outcomes, each a file's kind.
type Outcomes = [roam_drivers::Result<Kind>; 2];

/// Both resolvers reached the file.
fn reached(outcomes: Outcomes) {
    for outcome in outcomes {
        assert_eq!(outcome.unwrap(), Kind::File);
    }
}

/// Both resolvers were refused (EACCES) with messages holding each of `wanted`.
fn refused(outcomes: Outcomes, wanted: &[&str]) {
    for outcome in outcomes {
        let (kind, message) = failure(outcome);
        assert_eq!(kind, ErrorKind::PermissionDenied, "{message}");
        for wanted in wanted {
            assert!(message.contains(wanted), "{wanted:?} in {message}");
        }
    }
}

/// The block that reaches `ssh` as `alias`, by its own address and port.
fn host_block(alias: &str, ssh: &SshServer, address: &str, user: &str) -> String {
    format!(
        "Host {alias}\n  HostName {address}\n  Port {port}\n  User {user}\n  \
         IdentityFile {key}\n  UserKnownHostsFile {known}\n",
        port = ssh.port,
        key = ssh.client_key.display(),
        known = ssh.known_hosts.display(),
    )
}

/// (1) An `Include`d file (a glob, relative to nothing) names the host; `IdentityFile` and
/// `UserKnownHostsFile` use tokens.
#[test]
fn included_hosts_resolve() {
    let (scratch, root) = tree("sshcfg-include", b"included");
    let ssh = sshd(&scratch.join("run"));
    let keys = scratch.join("keys");
    fs::create_dir_all(&keys).unwrap();
    // `%r` and `%p` pick the files: keys/root_PORT and known_PORT.
    fs::copy(&ssh.client_key, keys.join(format!("root_{}", ssh.port))).unwrap();
    fs::copy(&ssh.known_hosts, keys.join(format!("known_{}", ssh.port))).unwrap();
    fs::create_dir_all(scratch.join("conf.d")).unwrap();
    fs::write(
        scratch.join("conf.d/50-inc.conf"),
        format!(
            "Host inc-alias\n  HostName 127.0.0.1\n  Port {}\n  User root\n  \
             IdentityFile {keys}/%r_%p\n  UserKnownHostsFile {keys}/known_%p\n",
            ssh.port,
            keys = keys.display()
        ),
    )
    .unwrap();
    fs::write(
        scratch.join("conf.d/ignored.txt"),
        "Host inc-alias\n  Port 1\n",
    )
    .unwrap();
    let config = scratch.join("config");
    fs::write(
        &config,
        format!(
            "Include {}/conf.d/*.conf\nHost *\n  Port 1\n  User nobody-else\n",
            scratch.path.display()
        ),
    )
    .unwrap();
    for ssh_program in resolvers() {
        let d = driver(
            &config,
            &ssh_program,
            &format!("sftp://inc-alias{}", root.display()),
        );
        let listing = d.list("/").unwrap();
        assert_eq!(listing.entries.len(), 1, "{ssh_program:?}");
        assert_eq!(listing.entries[0].name, "f");
    }
}

/// (5) `Match host X user Y`, `!` negation and the first value winning.
#[test]
fn match_blocks_negation_and_first_values() {
    let (scratch, root) = tree("sshcfg-match", b"matched");
    let ssh = sshd(&scratch.join("run"));
    let config = scratch.join("config");
    fs::write(
        &config,
        format!(
            "Host m-alias\n  HostName 127.0.0.1\n  IdentityFile {key}\n  UserKnownHostsFile {known}\n\
             Host m-alias !m-alias\n  Port 1\n\
             Match host 127.0.0.1 user nobody\n  Port 2\n\
             Match host 127.0.0.1 user root\n  Port {port}\n\
             Host *\n  Port 3\n  User root\n",
            key = ssh.client_key.display(),
            known = ssh.known_hosts.display(),
            port = ssh.port,
        ),
    )
    .unwrap();
    for ssh_program in resolvers() {
        // As root: the second Match gives the port (the first needs nobody; the negated
        // block never applies; `Port 3` comes too late).
        let url = format!("sftp://root@m-alias{}", root.display());
        let d = driver(&config, &ssh_program, &url);
        assert_eq!(d.stat("/f").unwrap().kind, Kind::File, "{ssh_program:?}");
        // As nobody: port 2, where nothing listens.
        let url = format!("sftp://nobody@m-alias{}", root.display());
        let (kind, message) = failure(driver(&config, &ssh_program, &url).stat("/f"));
        assert_eq!(kind, ErrorKind::Unreachable, "{ssh_program:?}: {message}");
        assert!(message.to_lowercase().contains("refused"), "{message}");
    }
}

/// (2) A target on 127.0.0.2 that only the bastion's forwarding (as `nobody`) may reach:
/// root's own connections to it are reset. `ProxyJump` and `ProxyCommand ssh -W` reach it;
/// the same config without them does not.
#[test]
fn bastions_reach_what_roam_cannot() {
    let (scratch, root) = tree("sshcfg-jump", b"behind the bastion");
    own_network();
    let bastion = sshd(&scratch.join("bastion"));
    let target = sshd_with(&scratch.join("target"), "127.0.0.2", "");
    let port = target.port.to_string();
    command_ok(
        "iptables",
        &[
            "-A",
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            "127.0.0.2",
            "--dport",
            &port,
            "-m",
            "owner",
            "--uid-owner",
            "0",
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ],
    );
    let bastion_block = host_block("bastion", &bastion, "127.0.0.1", "nobody");
    let target_block = host_block("target", &target, "127.0.0.2", "root");
    let url = format!("sftp://target{}", root.display());
    let write = |name: &str, extra: &str| {
        let config = scratch.join(name);
        fs::write(&config, format!("{target_block}{extra}{bastion_block}")).unwrap();
        config
    };
    let direct = write("direct", "");
    let jump = write("jump", "  ProxyJump bastion\n");
    let proxy_command = scratch.join("command");
    let command = write(
        "command",
        &format!(
            "  ProxyCommand /usr/bin/ssh -F {} -W %h:%p bastion\n",
            proxy_command.display()
        ),
    );
    // Twice through the bastion (a chain of hops), and ssh's own `exec` form.
    let chain = write("chain", "  ProxyJump bastion,nobody@bastion\n");
    let command_exec = write(
        "command_exec",
        &format!(
            "  ProxyCommand exec /usr/bin/ssh -F {} -W %h:%p bastion\n",
            proxy_command.display()
        ),
    );
    for ssh_program in resolvers() {
        let (kind, message) = failure(driver(&direct, &ssh_program, &url).stat("/f"));
        assert_eq!(kind, ErrorKind::Unreachable, "{message}");
        for config in [&chain, &command_exec] {
            let d = driver(config, &ssh_program, &url);
            assert_eq!(d.stat("/f").unwrap().kind, Kind::File, "{config:?}");
        }
        let d = driver(&jump, &ssh_program, &url);
        assert_eq!(d.stat("/f").unwrap().kind, Kind::File, "{ssh_program:?}");
        let mut out = Vec::new();
        d.fetch("/f", &mut out, None).unwrap();
        assert_eq!(out, b"behind the bastion");
        let d = driver(&command, &ssh_program, &url);
        assert_eq!(d.stat("/f").unwrap().kind, Kind::File, "{ssh_program:?}");
    }
    // The bastion forwarded, as nobody.
    let log = fs::read_to_string(scratch.join("bastion/error.log")).unwrap();
    assert!(log.contains("Accepted publickey for nobody"), "{log}");
    // The bastion's own host key is checked too: with it unknown, the jump is refused.
    let empty = scratch.join("empty_known_hosts");
    fs::write(&empty, "").unwrap();
    let strange = scratch.join("strange");
    let text = fs::read_to_string(&jump).unwrap().replace(
        &bastion.known_hosts.display().to_string(),
        &empty.display().to_string(),
    );
    fs::write(&strange, text).unwrap();
    for ssh_program in resolvers() {
        let (kind, message) = failure(driver(&strange, &ssh_program, &url).stat("/f"));
        assert_eq!(kind, ErrorKind::PermissionDenied, "{message}");
        assert!(
            message.contains("jump host bastion") && message.contains("not known"),
            "{message}"
        );
    }
}

/// (3) Known hosts: several user files with `~`, hashed entries, a global file alone,
/// `HostKeyAlias`, unknown keys refused with the way out, `accept-new` recording them,
/// revoked keys refused.
#[test]
fn known_hosts_files() {
    let (scratch, root) = tree("sshcfg-known", b"trusted");
    let ssh = sshd(&scratch.join("run"));
    let entry = fs::read_to_string(&ssh.known_hosts).unwrap();
    let key = ssh.client_key.display().to_string();
    let url = format!("sftp://kh{}", root.display());
    let config = scratch.join("config");
    let check = |trust: &str| {
        fs::write(
            &config,
            format!(
                "Host kh\n  HostName 127.0.0.1\n  Port {}\n  User root\n  IdentityFile {key}\n{trust}",
                ssh.port
            ),
        )
        .unwrap();
        resolvers().map(|ssh_program| {
            driver(&config, &ssh_program, &url)
                .stat("/f")
                .map(|m| m.kind)
        })
    };
    // Hashed, in the second of two user files.
    let hashed = scratch.join("hashed");
    fs::write(&hashed, &entry).unwrap();
    let status = Command::new("ssh-keygen")
        .arg("-H")
        .arg("-f")
        .arg(&hashed)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(fs::read_to_string(&hashed).unwrap().starts_with("|1|"));
    let missing = scratch.join("missing");
    reached(check(&format!(
        "  UserKnownHostsFile {} {}\n  GlobalKnownHostsFile none\n",
        missing.display(),
        hashed.display()
    )));
    // Only in the global file.
    let global = scratch.join("global");
    fs::write(&global, &entry).unwrap();
    reached(check(&format!(
        "  UserKnownHostsFile {}\n  GlobalKnownHostsFile {}\n",
        missing.display(),
        global.display()
    )));
    // Under an alias.
    let aliased = scratch.join("aliased");
    fs::write(&aliased, format!("kh-key {}\n", ssh.host_key)).unwrap();
    reached(check(&format!(
        "  UserKnownHostsFile {}\n  HostKeyAlias kh-key\n",
        aliased.display()
    )));
    // Unknown: refused, saying what was checked and how to proceed.
    let first = scratch.join("learnt");
    let strict = format!(
        "  UserKnownHostsFile {} {}\n  GlobalKnownHostsFile {}\n",
        first.display(),
        missing.display(),
        missing.display()
    );
    let name = format!("[127.0.0.1]:{}", ssh.port);
    let first_name = first.display().to_string();
    let outcomes = check(&strict);
    for outcome in &outcomes {
        let message = &outcome.as_ref().unwrap_err().message;
        assert!(!message.contains("accept_new_host_keys"), "{message}");
    }
    refused(
        outcomes,
        &[
            "not known",
            &name,
            "SHA256:",
            &first_name,
            "ssh-keyscan -p",
            "StrictHostKeyChecking accept-new",
        ],
    );
    // accept-new: recorded in the first user file (hashed, as HashKnownHosts says), then
    // known under `yes`.
    for (i, result) in check(&format!(
        "{strict}  StrictHostKeyChecking accept-new\n  HashKnownHosts yes\n"
    ))
    .into_iter()
    .enumerate()
    {
        assert_eq!(result.unwrap(), Kind::File);
        let learnt = fs::read_to_string(&first).unwrap();
        assert_eq!(learnt.matches(&ssh.host_key).count(), 1, "{i}: {learnt}");
        assert!(
            learnt.starts_with("|1|") && !learnt.contains("127.0.0.1"),
            "{learnt}"
        );
    }
    reached(check(&format!("{strict}  StrictHostKeyChecking yes\n")));
    // Revoked in the global file: refused, even under `no`, known in the user file or not.
    fs::write(&global, format!("@revoked * {}\n", ssh.host_key)).unwrap();
    refused(
        check(&format!(
            "  UserKnownHostsFile {}\n  GlobalKnownHostsFile {}\n  StrictHostKeyChecking no\n",
            first.display(),
            global.display()
        )),
        &["REVOKED"],
    );
}

/// (4) `IdentitiesOnly yes`: the agent's key, which the server accepts, is not offered
/// unless it is one of the identity files (here by its `.pub` alone).
#[test]
fn identities_only_keeps_agent_keys_back() {
    let (scratch, root) = tree("sshcfg-only", b"only");
    let ssh = sshd(&scratch.join("run"));
    let agent = ssh_agent(&scratch.join("agent"), &ssh.client_key);
    let stranger = keygen(&scratch.join("stranger"), "");
    // The agent's key by its public half only: the private file is elsewhere.
    let agent_pub = scratch.join("agentkey");
    fs::copy(
        ssh.client_key.with_extension("pub"),
        scratch.join("agentkey.pub"),
    )
    .unwrap();
    let url = format!("sftp://only{}", root.display());
    let config = scratch.join("config");
    let check = |identity: &Path, only: &str| {
        fs::write(
            &config,
            format!(
                "Host only\n  HostName 127.0.0.1\n  Port {}\n  User root\n  IdentityFile {}\n  \
                 UserKnownHostsFile {}\n  IdentityAgent {}\n  IdentitiesOnly {only}\n",
                ssh.port,
                identity.display(),
                ssh.known_hosts.display(),
                agent.socket.display(),
            ),
        )
        .unwrap();
        resolvers().map(|ssh_program| {
            driver(&config, &ssh_program, &url)
                .stat("/f")
                .map(|m| m.kind)
        })
    };
    reached(check(&stranger, "no"));
    let outcomes = check(&stranger, "yes");
    for outcome in &outcomes {
        let message = &outcome.as_ref().unwrap_err().message;
        assert!(!message.contains("ssh-agent"), "{message}");
    }
    refused(outcomes, &[&stranger.display().to_string()]);
    reached(check(&agent_pub, "yes"));
}

/// `CertificateFile`: a key the server knows only through the CA that signed its
/// certificate.
#[test]
fn certificates_log_in() {
    let (scratch, root) = tree("sshcfg-cert", b"certified");
    let ca = keygen(&scratch.join("ca"), "");
    let ssh = sshd_with(
        &scratch.join("run"),
        "127.0.0.1",
        &format!("TrustedUserCAKeys {}.pub\n", ca.display()),
    );
    let user_key = keygen(&scratch.join("user"), "");
    sign(
        &ca,
        &user_key,
        &["-I", "roam-test", "-n", "root", "-V", "-5m:+1h"],
    );
    let cert = scratch.join("user-cert.pub");
    assert!(cert.exists());
    let moved = scratch.join("my.cert");
    fs::rename(&cert, &moved).unwrap();
    let url = format!("sftp://cert{}", root.display());
    let config = scratch.join("config");
    let base = format!(
        "Host cert\n  HostName 127.0.0.1\n  Port {}\n  User root\n  IdentityFile {}\n  \
         UserKnownHostsFile {}\n  IdentityAgent none\n",
        ssh.port,
        user_key.display(),
        ssh.known_hosts.display(),
    );
    // Without the certificate the key alone is refused.
    fs::write(&config, &base).unwrap();
    for ssh_program in resolvers() {
        let (kind, message) = failure(driver(&config, &ssh_program, &url).stat("/f"));
        assert_eq!(kind, ErrorKind::PermissionDenied, "{message}");
    }
    fs::write(
        &config,
        format!("{base}  CertificateFile {}\n", moved.display()),
    )
    .unwrap();
    for ssh_program in resolvers() {
        let d = driver(&config, &ssh_program, &url);
        assert_eq!(d.stat("/f").unwrap().kind, Kind::File, "{ssh_program:?}");
    }
    // The certificate held by ssh-agent (ssh-add loads KEY-cert.pub with KEY), no file.
    fs::copy(&moved, &cert).unwrap();
    let agent = ssh_agent(&scratch.join("agent"), &user_key);
    fs::write(
        &config,
        base.replace(
            "IdentityAgent none",
            &format!("IdentityAgent {}", agent.socket.display()),
        )
        .replace(&user_key.display().to_string(), "/nonexistent/key"),
    )
    .unwrap();
    for ssh_program in resolvers() {
        let d = driver(&config, &ssh_program, &url);
        assert_eq!(d.stat("/f").unwrap().kind, Kind::File, "{ssh_program:?}");
    }
}

/// Host certificates: a server known only through `@cert-authority` is accepted when its
/// certificate is signed by that authority; another authority, or a revoked one, is not.
#[test]
fn host_certificates() {
    let (scratch, root) = tree("sshcfg-hostcert", b"certified host");
    let ca = keygen(&scratch.join("host_ca"), "");
    let other_ca = keygen(&scratch.join("other_ca"), "");
    // An ECDSA host key next to the server's own ed25519 one, with a certificate.
    let host_key = scratch.join("host_ecdsa");
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ecdsa", "-N", "", "-f"])
        .arg(&host_key)
        .status()
        .unwrap();
    assert!(status.success());
    sign(
        &ca,
        &host_key,
        &["-h", "-I", "roam-host", "-n", "127.0.0.1,localhost"],
    );
    let ssh = sshd_with(
        &scratch.join("run"),
        "127.0.0.1",
        &format!(
            "HostKey {key}\nHostCertificate {key}-cert.pub\n",
            key = host_key.display()
        ),
    );
    let ca_pub = fs::read_to_string(ca.with_extension("pub")).unwrap();
    let other_pub = fs::read_to_string(other_ca.with_extension("pub")).unwrap();
    let known = scratch.join("known_hosts");
    let config = scratch.join("config");
    fs::write(
        &config,
        format!(
            "Host hc\n  HostName 127.0.0.1\n  Port {}\n  User root\n  IdentityFile {}\n  \
             UserKnownHostsFile {}\n  GlobalKnownHostsFile none\n  StrictHostKeyChecking yes\n",
            ssh.port,
            ssh.client_key.display(),
            known.display()
        ),
    )
    .unwrap();
    let url = format!("sftp://hc{}", root.display());
    let outcomes = || {
        resolvers().map(|ssh_program| {
            driver(&config, &ssh_program, &url)
                .stat("/f")
                .map(|m| m.kind)
        })
    };
    fs::write(&known, format!("@cert-authority [127.0.0.1]:* {ca_pub}")).unwrap();
    reached(outcomes());
    // Nothing was learnt: the authority vouches for the host.
    assert_eq!(fs::read_to_string(&known).unwrap().lines().count(), 1);
    fs::write(&known, format!("@cert-authority * {other_pub}")).unwrap();
    refused(outcomes(), &["host certificate", "no @cert-authority line"]);
    fs::write(
        &known,
        format!("@cert-authority * {ca_pub}@revoked * {ca_pub}"),
    )
    .unwrap();
    refused(outcomes(), &["host certificate", "REVOKED"]);
}

/// `ConnectTimeout` bounds reaching a host that never answers (its packets dropped),
/// well within roam's own connect timeout.
#[test]
fn connect_timeouts() {
    let scratch = Scratch::new("sshcfg-timeout");
    own_network();
    let port = roam_testkit::free_port();
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let port_text = port.to_string();
    command_ok(
        "iptables",
        &[
            "-A", "INPUT", "-p", "tcp", "--dport", &port_text, "-j", "DROP",
        ],
    );
    let config = scratch.join("config");
    fs::write(
        &config,
        format!(
            "Host slow\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  ConnectTimeout 1\n"
        ),
    )
    .unwrap();
    for ssh_program in resolvers() {
        let started = std::time::Instant::now();
        let (kind, message) = failure(driver(&config, &ssh_program, "sftp://slow/").stat("/"));
        assert_eq!(kind, ErrorKind::TimedOut, "{message}");
        assert!(message.contains("ConnectTimeout"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(10), "{message}");
    }
    drop(listener);
}
