//! Opening a [`Link`]: TCP, the SSH handshake with strict host key checking, login
//! (`auth.rs`), and the `sftp` subsystem. The whole of it must finish within the connect
//! timeout. Every failure becomes one driver error that says which step failed:
//!
//! - no such host, refused, unreachable → EHOSTUNREACH; no answer in time → ETIMEDOUT;
//! - unknown host key → EACCES, saying how to allow it; changed or revoked key → EACCES
//!   with a warning in the log as well, whatever the settings;
//! - no key accepted → EACCES (`auth.rs`); no sftp subsystem → ENOTSUP;
//! - anything else in the SSH exchange → EIO.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::{Algorithm, HashAlg, PublicKey, PublicKeyOrCertificate};
use russh::{ChannelMsg, Preferred};
use russh_sftp::client::RawSftpSession;
use tokio::net::TcpStream;

use super::known_hosts::{self, Check};
use super::link::Link;
use super::ssh_config::Endpoint;
use super::{auth, ssh_config};
use crate::{Error, ErrorKind, Result};

const POSIX_RENAME: &str = "posix-rename@openssh.com";

/// How connections are made and checked.
#[derive(Debug)]
pub(super) struct Settings {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub known_hosts: Option<PathBuf>,
    pub accept_new_host_keys: bool,
}

/// Opens a connection to `endpoint`; `origin` names it in messages.
pub(super) async fn open(endpoint: &Endpoint, settings: &Settings, origin: &str) -> Result<Link> {
    let label = format!("connect {origin}");
    match tokio::time::timeout(
        settings.connect_timeout,
        establish(endpoint, settings, &label),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(Error::new(
            ErrorKind::TimedOut,
            format!("{label}: no answer within {:?}", settings.connect_timeout),
        )),
    }
}

async fn establish(endpoint: &Endpoint, settings: &Settings, label: &str) -> Result<Link> {
    let tcp = dial(endpoint, label).await?;
    let known = ssh_config::read(settings.known_hosts.as_deref());
    let name = known_hosts::host_name(&endpoint.host, endpoint.port);
    let config = client_config(&known_hosts::known_algorithms(&known, &name));
    let client = Client {
        known,
        name,
        file: settings.known_hosts.clone(),
        accept_new: settings.accept_new_host_keys,
        label: label.to_owned(),
    };
    let mut ssh = client::connect_stream(Arc::new(config), tcp, client)
        .await
        .map_err(|e| handshake_error(label, e))?;
    auth::login(&mut ssh, endpoint, label).await?;
    let (sftp, posix_rename) = subsystem(&ssh, settings.read_timeout, label).await?;
    Ok(Link::new(
        ssh,
        sftp,
        posix_rename,
        tokio::runtime::Handle::current(),
    ))
}

/// A TCP connection to the first address of the host that accepts one.
async fn dial(endpoint: &Endpoint, label: &str) -> Result<TcpStream> {
    let addrs = tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unreachable,
                format!("{label}: cannot resolve {}: {e}", endpoint.host),
            )
        })?;
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(tcp) => {
                // SFTP is request/response: Nagle would hold small requests back.
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => Error::from_io(label, &e),
        None => Error::new(
            ErrorKind::Unreachable,
            format!("{label}: the host has no address"),
        ),
    })
}

/// russh's defaults, but asking first for the host key types known_hosts has for this
/// host, so that a server with several host keys presents one we can check.
fn client_config(known: &[Algorithm]) -> client::Config {
    let (mut first, rest): (Vec<Algorithm>, Vec<Algorithm>) = Preferred::DEFAULT
        .key
        .iter()
        .cloned()
        .partition(|a| known.iter().any(|k| same_type(k, a)));
    first.extend(rest);
    client::Config {
        preferred: Preferred {
            key: Cow::Owned(first),
            ..Preferred::DEFAULT
        },
        nodelay: true,
        ..Default::default()
    }
}

/// RSA keys serve all three RSA signature algorithms; other types only their own.
fn same_type(key: &Algorithm, algorithm: &Algorithm) -> bool {
    key == algorithm || (key.clone().is_rsa() && algorithm.clone().is_rsa())
}

/// Opens a session channel, starts the `sftp` subsystem on it and initialises SFTP.
async fn subsystem(
    ssh: &Handle<Client>,
    read_timeout: Duration,
    label: &str,
) -> Result<(RawSftpSession, bool)> {
    let lost = |e: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::Io,
            format!("{label}: opening the sftp session failed: {e}"),
        )
    };
    let mut channel = ssh.channel_open_session().await.map_err(|e| lost(&e))?;
    channel
        .request_subsystem(true, "sftp")
        .await
        .map_err(|e| lost(&e))?;
    loop {
        match channel.wait().await {
            Some(ChannelMsg::Success) => break,
            Some(ChannelMsg::Failure) => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("{label}: the server offers no sftp subsystem"),
                ))
            }
            None | Some(ChannelMsg::Close) | Some(ChannelMsg::Eof) => {
                return Err(lost(&"the server closed the channel"))
            }
            Some(_) => {}
        }
    }
    let sftp = RawSftpSession::new(channel.into_stream());
    // russh-sftp counts whole seconds; round up so that a short timeout is not zero.
    sftp.set_timeout(read_timeout.as_secs() + u64::from(read_timeout.subsec_nanos() > 0));
    let version = sftp.init().await.map_err(|e| lost(&e))?;
    let posix_rename = version
        .extensions
        .get(POSIX_RENAME)
        .is_some_and(|v| v == "1");
    if !posix_rename {
        tracing::info!("{label}: no {POSIX_RENAME}: replacing files will not be atomic");
    }
    Ok((sftp, posix_rename))
}

/// The SSH client's callbacks: only the host key check matters to us.
pub(super) struct Client {
    /// The known_hosts text, read once per connection.
    known: String,
    /// The host's name in known_hosts.
    name: String,
    file: Option<PathBuf>,
    accept_new: bool,
    label: String,
}

/// Why the handshake failed: russh's own error, or our verdict on the host key.
#[derive(Debug)]
pub(super) enum Refusal {
    Ssh(russh::Error),
    HostKey(Error),
}

impl From<russh::Error> for Refusal {
    fn from(e: russh::Error) -> Refusal {
        Refusal::Ssh(e)
    }
}

impl client::Handler for Client {
    type Error = Refusal;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> std::result::Result<bool, Refusal> {
        let PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            return Err(Refusal::HostKey(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{}: the server showed a host certificate, which roam does not check",
                    self.label
                ),
            )));
        };
        match known_hosts::check(&self.known, &self.name, key) {
            Check::Known => Ok(true),
            Check::Unknown if self.accept_new => self.learn(key),
            Check::Unknown => Err(Refusal::HostKey(self.unknown(key))),
            Check::Changed { line } => Err(Refusal::HostKey(self.changed(key, line))),
            Check::Revoked { line } => Err(Refusal::HostKey(self.revoked(key, line))),
        }
    }
}

impl Client {
    /// `accept_new_host_keys`: record the key, as `ssh -o StrictHostKeyChecking=accept-new`.
    fn learn(&self, key: &PublicKey) -> std::result::Result<bool, Refusal> {
        let Some(file) = &self.file else {
            tracing::warn!(
                "{}: accepting the new host key {} unrecorded",
                self.label,
                fingerprint(key)
            );
            return Ok(true);
        };
        match known_hosts::learn(file, &self.name, key) {
            Ok(()) => {
                tracing::warn!(
                    "{}: new host key {} added to {}",
                    self.label,
                    fingerprint(key),
                    file.display()
                );
                Ok(true)
            }
            Err(e) => Err(Refusal::HostKey(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{}: cannot record the new host key in {}: {e}",
                    self.label,
                    file.display()
                ),
            ))),
        }
    }

    fn unknown(&self, key: &PublicKey) -> Error {
        let file = self
            .file
            .as_ref()
            .map_or("known_hosts".into(), |f| f.display().to_string());
        Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{}: the host key is not known ({}): after checking that fingerprint, add the key \
                 to {file} (e.g. `ssh -p PORT HOST` once, or ssh-keyscan), or allow new host keys \
                 (accept_new_host_keys)",
                self.label,
                fingerprint(key)
            ),
        )
    }

    fn changed(&self, key: &PublicKey, line: usize) -> Error {
        let file = self
            .file
            .as_ref()
            .map_or(String::new(), |f| f.display().to_string());
        let message = format!(
            "{}: WARNING: THE HOST KEY HAS CHANGED (now {}; line {line} of {file} records another). \
             Someone may be intercepting the connection (man-in-the-middle), or the host was \
             reinstalled. roam refuses to connect; if the change is expected, remove line {line} \
             of {file}",
            self.label,
            fingerprint(key)
        );
        tracing::error!("{message}");
        Error::new(ErrorKind::PermissionDenied, message)
    }

    fn revoked(&self, key: &PublicKey, line: usize) -> Error {
        let message = format!(
            "{}: WARNING: the host key {} is REVOKED (line {line} of the known_hosts file); roam \
             refuses to connect",
            self.label,
            fingerprint(key)
        );
        tracing::error!("{message}");
        Error::new(ErrorKind::PermissionDenied, message)
    }
}

/// `ssh-ed25519 SHA256:...`, as `ssh` shows keys.
fn fingerprint(key: &PublicKey) -> String {
    format!("{} {}", key.algorithm(), key.fingerprint(HashAlg::Sha256))
}

/// The driver error of a failed handshake.
fn handshake_error(label: &str, err: Refusal) -> Error {
    match err {
        Refusal::HostKey(e) => e,
        Refusal::Ssh(russh::Error::IO(e)) => Error::from_io(label, &e),
        Refusal::Ssh(e) => Error::new(ErrorKind::Io, format!("{label}: SSH handshake failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_key_types_are_asked_for_first() {
        let rsa = client_config(&[Algorithm::Rsa { hash: None }])
            .preferred
            .key;
        assert!(rsa[..3].iter().all(|a| a.clone().is_rsa()), "{rsa:?}");
        assert_eq!(rsa.len(), Preferred::DEFAULT.key.len());
        let none = client_config(&[]).preferred.key;
        assert_eq!(none, Preferred::DEFAULT.key);
    }
}
