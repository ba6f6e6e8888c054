//! One real server of a chosen kind serving a directory, with what a client needs to reach
//! it: the URL roam mounts, the environment roam needs (`HOME` with an `.ssh`, AWS
//! variables), and the facts other clients (sshfs, rclone) need. Shared by roam's
//! end-to-end suites and the `roam-fixtures` binary that the shell benchmarks start, so
//! both run against the same servers, configured alike.

use std::fs;
use std::path::{Path, PathBuf};

use crate::sftp::SshServer;
use crate::{dav, ftp, s3, sftp, write_file, Server};

/// The kinds [`serve`] starts a server for; `file` and `file+cache` need none.
pub const KINDS: [&str; 6] = ["http", "dav", "ftp", "sftp", "s3", "chirp"];

/// The FTP login of the pyftpdlib fixture.
pub const FTP_USER: &str = "roam";
pub const FTP_PASSWORD: &str = "secret";

/// The S3 bucket holding the served tree.
pub const S3_BUCKET: &str = "roam";

/// The `Host` alias of the sshd fixture in the generated `~/.ssh/config`.
pub const SSH_ALIAS: &str = "roamtest";

/// A served directory: keep it alive as long as the server is needed.
pub struct Served {
    /// What roam mounts: `dav://127.0.0.1:PORT`, `sftp://roamtest/ABS/PATH`, ...
    pub url: String,
    /// Environment roam needs to reach it.
    pub env: Vec<(String, String)>,
    /// Facts for other clients: `port`, `key`, `known_hosts`, `endpoint`, ...
    pub facts: Vec<(String, String)>,
    _server: Option<Server>,
    _ssh: Option<SshServer>,
}

impl Served {
    fn plain(url: String, server: Option<Server>) -> Served {
        Served {
            url,
            env: Vec::new(),
            facts: Vec::new(),
            _server: server,
            _ssh: None,
        }
    }
}

/// Serves the tree at `srv` (written beforehand: servers take ownership of their tree when
/// they start) by a server of `kind` with its state in `run`. `file`, `file+cache` and
/// `null` serve it in place, without a server; `mem` is roam's in-memory file system.
pub fn serve(kind: &str, srv: &Path, run: &Path) -> Served {
    match kind {
        "http" => {
            let s = Server::nginx(srv, run);
            Served::plain(s.url(), Some(s))
        }
        "dav" => {
            let s = dav::nginx_dav(srv, run);
            Served::plain(format!("dav://{}", s.authority()), Some(s))
        }
        "chirp" => {
            let s = Server::chirp(srv, run);
            Served::plain(s.chirp_url(), Some(s))
        }
        "ftp" => {
            let s = ftp::pyftpdlib(srv, run, FTP_USER, FTP_PASSWORD);
            let url = format!("ftp://{FTP_USER}:{FTP_PASSWORD}@{}", s.authority());
            let mut served = Served::plain(url, None);
            served.facts = vec![
                ("port".into(), s.port.to_string()),
                ("user".into(), FTP_USER.into()),
                ("password".into(), FTP_PASSWORD.into()),
            ];
            served._server = Some(s);
            served
        }
        "sftp" => serve_sftp(srv, run),
        "s3" => serve_s3(srv, s3::moto(run)),
        // One request at a time, for races of conditional writes (see `s3::moto_serial`).
        "s3-serial" => serve_s3(srv, s3::moto_serial(run)),
        "file" | "file+cache" => Served::plain(format!("{kind}://{}", srv.display()), None),
        // In place through the null layer; `mem:` starts empty and ignores `srv`.
        "null" => Served::plain(format!("null:{}", srv.display()), None),
        "mem" => Served::plain("mem:".into(), None),
        other => {
            panic!("no fixture serves {other:?} (kinds: {KINDS:?}, file, file+cache, null, mem)")
        }
    }
}

/// A second sshd; roam finds its key and host key where OpenSSH users keep them, in a
/// `HOME` of its own (`run/home`) whose `~/.ssh/config` names the server [`SSH_ALIAS`].
fn serve_sftp(srv: &Path, run: &Path) -> Served {
    let ssh = sftp::sshd(run);
    let home = run.join("home");
    write_file(
        &home.join(".ssh/known_hosts"),
        &fs::read(&ssh.known_hosts).unwrap(),
        0o600,
    );
    let key = ssh.client_key.display().to_string();
    let config = format!(
        "Host {SSH_ALIAS}\n  HostName 127.0.0.1\n  Port {}\n  User root\n  IdentityFile {key}\n",
        ssh.port
    );
    write_file(&home.join(".ssh/config"), config.as_bytes(), 0o600);
    Served {
        url: format!("sftp://{SSH_ALIAS}{}", srv.display()),
        env: vec![("HOME".into(), home.display().to_string())],
        facts: vec![
            ("port".into(), ssh.port.to_string()),
            ("key".into(), key),
            ("known_hosts".into(), ssh.known_hosts.display().to_string()),
            ("path".into(), srv.display().to_string()),
        ],
        _server: None,
        _ssh: Some(ssh),
    }
}

/// moto with bucket [`S3_BUCKET`] holding the tree of `srv` (directories as prefixes,
/// empty ones as markers), checking signatures from then on; roam finds endpoint and
/// credentials as the AWS tools would.
fn serve_s3(srv: &Path, server: Server) -> Served {
    s3::create_bucket(&server, S3_BUCKET);
    for entry in walk(srv) {
        let key = entry.strip_prefix(srv).unwrap().to_string_lossy();
        if entry.is_dir() {
            s3::put_object(&server, S3_BUCKET, &format!("{key}/"), b"");
        } else {
            let data = fs::read(&entry).unwrap_or_default();
            s3::put_object(&server, S3_BUCKET, &key, &data);
        }
    }
    let creds = s3::enforce_auth(&server);
    let env = vec![
        ("AWS_ENDPOINT_URL".into(), server.url()),
        ("AWS_ACCESS_KEY_ID".into(), creds.access_key.clone()),
        ("AWS_SECRET_ACCESS_KEY".into(), creds.secret_key.clone()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_CA_BUNDLE".into(), String::new()),
    ];
    let facts = vec![
        ("endpoint".into(), server.url()),
        ("bucket".into(), S3_BUCKET.into()),
        ("access_key".into(), creds.access_key),
        ("secret_key".into(), creds.secret_key),
    ];
    let mut served = Served::plain(format!("s3://{S3_BUCKET}"), Some(server));
    served.env = env;
    served.facts = facts;
    served
}

/// Every file and directory below `dir` (not `dir` itself), parents first.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        out.push(p.clone());
        if p.is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}
