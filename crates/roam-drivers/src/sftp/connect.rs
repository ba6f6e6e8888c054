//! Opening a [`Link`]: the way to the host (TCP, a `ProxyCommand`, or a channel through
//! each `ProxyJump` host, each an SSH connection checked and logged in to by the same
//! rules), the SSH handshake with host key checking as `StrictHostKeyChecking` says,
//! login (`auth.rs`), and the `sftp` subsystem. The whole of it must finish within the
//! connect timeout. Every failure becomes one driver error that says which step failed:
//!
//! - no such host, refused, unreachable → EHOSTUNREACH; no answer in time → ETIMEDOUT;
//! - unknown host key → EACCES, saying how to allow it; changed or revoked key → EACCES
//!   with a warning in the log as well (a changed key only under `StrictHostKeyChecking
//!   no` is accepted, with the warning, as `ssh` does); a host certificate no
//!   `@cert-authority` vouches for → EACCES;
//! - no key accepted → EACCES (`auth.rs`); no sftp subsystem → ENOTSUP;
//! - anything else in the SSH exchange → EIO.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::ssh_key::certificate::CertType;
use russh::keys::{Algorithm, Certificate, HashAlg, PublicKey, PublicKeyOrCertificate};
use russh::{ChannelMsg, Preferred};
use russh_sftp::client::RawSftpSession;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::auth;
use super::known_hosts::{self, Check, Files};
use super::link::Link;
use super::ssh_config::{Endpoint, Proxy, Strict};
use crate::{Error, ErrorKind, Result};

const POSIX_RENAME: &str = "posix-rename@openssh.com";

/// How connections are made and checked.
#[derive(Debug)]
pub(super) struct Settings {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
}

/// What a connection travels through, kept as long as it lives.
pub(super) enum Hop {
    /// A jump host's SSH connection.
    Ssh(#[allow(dead_code)] Handle<Client>),
    /// A `ProxyCommand`, killed when the connection goes.
    Command(#[allow(dead_code)] tokio::process::Child),
}

/// A byte stream SSH can run over.
trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

type Session = (Handle<Client>, Vec<Hop>);

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
    let (ssh, hops) = session(endpoint, label.to_owned()).await?;
    let (sftp, posix_rename) = subsystem(&ssh, settings.read_timeout, label).await?;
    Ok(Link::new(
        ssh,
        sftp,
        posix_rename,
        hops,
        tokio::runtime::Handle::current(),
    ))
}

/// An SSH connection to `endpoint`, host key checked and logged in.
fn session(
    endpoint: &Endpoint,
    label: String,
) -> Pin<Box<dyn Future<Output = Result<Session>> + Send + '_>> {
    Box::pin(async move {
        let (stream, hops) = transport(endpoint, &label).await?;
        let known = Files::read(
            endpoint
                .trust
                .user_files
                .iter()
                .chain(&endpoint.trust.global_files)
                .cloned(),
        );
        let name = match &endpoint.trust.alias {
            Some(alias) => alias.clone(),
            None => known_hosts::host_name(&endpoint.host, endpoint.port),
        };
        let authorities = known.authorities(&name);
        let config = client_config(&known.known_algorithms(&name), !authorities.is_empty());
        let client = Client {
            known,
            name,
            learn_into: endpoint.trust.user_files.first().cloned(),
            authorities,
            principal: endpoint
                .trust
                .alias
                .clone()
                .unwrap_or_else(|| endpoint.host.clone()),
            strict: endpoint.trust.strict,
            hash_names: endpoint.trust.hash_names,
            label: label.clone(),
        };
        let mut ssh = client::connect_stream(Arc::new(config), stream, client)
            .await
            .map_err(|e| handshake_error(&label, e))?;
        auth::login(&mut ssh, endpoint, &label).await?;
        Ok((ssh, hops))
    })
}

/// The byte stream to the host's SSH server, and what it travels through.
async fn transport(endpoint: &Endpoint, label: &str) -> Result<(Box<dyn Transport>, Vec<Hop>)> {
    match &endpoint.proxy {
        Proxy::Direct => Ok((Box::new(dial(endpoint, label).await?), Vec::new())),
        Proxy::Command(command) => {
            let mut child = tokio::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(match command.trim_start().starts_with("exec ") {
                    // ssh's own advice is `ProxyCommand exec nc ...`.
                    true => command.clone(),
                    false => format!("exec {command}"),
                })
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Unreachable,
                        format!("{label}: cannot run the ProxyCommand {command:?}: {e}"),
                    )
                })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                unreachable!("both were asked for as pipes");
            };
            let stream = tokio::io::join(stdout, stdin);
            Ok((Box::new(stream), vec![Hop::Command(child)]))
        }
        Proxy::Jump(hop) => {
            let hop_label = format!("{label} (jump host {})", hop.alias);
            let (bastion, mut hops) = session(hop, hop_label.clone()).await?;
            let channel = bastion
                .channel_open_direct_tcpip(
                    endpoint.host.clone(),
                    u32::from(endpoint.port),
                    "127.0.0.1",
                    0,
                )
                .await
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Unreachable,
                        format!(
                            "{hop_label}: cannot reach {}:{} from there: {e}",
                            endpoint.host, endpoint.port
                        ),
                    )
                })?;
            hops.push(Hop::Ssh(bastion));
            Ok((Box::new(channel.into_stream()), hops))
        }
    }
}

/// A TCP connection to the first address of the host that accepts one, each attempt
/// within `ConnectTimeout` if one is configured.
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
        let attempt = TcpStream::connect(addr);
        let connected = match endpoint.connect_timeout {
            Some(limit) => match tokio::time::timeout(limit, attempt).await {
                Ok(connected) => connected,
                Err(_) => {
                    last = Some(Error::new(
                        ErrorKind::TimedOut,
                        format!("{label}: {addr} did not answer within ConnectTimeout {limit:?}"),
                    ));
                    continue;
                }
            },
            None => attempt.await,
        };
        match connected {
            Ok(tcp) => {
                // SFTP is request/response: Nagle would hold small requests back.
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Err(e) => last = Some(Error::from_io(label, &e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::new(
            ErrorKind::Unreachable,
            format!("{label}: the host has no address"),
        )
    }))
}

/// russh's defaults, but asking first for the host key types known_hosts has for this
/// host, so that a server with several host keys presents one we can check; and, when an
/// `@cert-authority` line names the host, for host certificates before plain keys (as
/// `ssh` does).
fn client_config(known: &[Algorithm], certificates: bool) -> client::Config {
    let (mut first, rest): (Vec<Algorithm>, Vec<Algorithm>) = Preferred::DEFAULT
        .key
        .iter()
        .cloned()
        .partition(|a| known.iter().any(|k| same_type(k, a)));
    first.extend(rest);
    client::Config {
        preferred: Preferred {
            host_key_certificates: match certificates {
                true => Cow::Owned(first.clone()),
                false => Cow::Borrowed(&[]),
            },
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
    /// The known hosts files, read once per connection.
    known: Files,
    /// The host's name in known_hosts (`[host]:port`, or `HostKeyAlias`).
    name: String,
    /// Where a new key is recorded: the first `UserKnownHostsFile`.
    learn_into: Option<std::path::PathBuf>,
    /// The `@cert-authority` keys for the host, which may sign its host certificate.
    authorities: Vec<PublicKey>,
    /// The name a host certificate must list (the host, or `HostKeyAlias`; no port).
    principal: String,
    strict: Strict,
    hash_names: bool,
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
        let key = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(cert) => return self.certificate(cert),
        };
        let (verdict, file) = self.known.check(&self.name, key);
        let file = file.map(|f| f.display().to_string()).unwrap_or_default();
        match (verdict, self.strict) {
            (Check::Known, _) => Ok(true),
            (Check::Unknown, Strict::AcceptNew | Strict::No) => self.learn(key),
            (Check::Unknown, Strict::Yes) => Err(Refusal::HostKey(self.unknown(key))),
            (Check::Changed { line }, Strict::No) => {
                tracing::error!(
                    "{}: WARNING: THE HOST KEY HAS CHANGED (now {}; line {line} of {file} \
                     records another). StrictHostKeyChecking no: connecting anyway, as ssh does",
                    self.label,
                    fingerprint(key)
                );
                Ok(true)
            }
            (Check::Changed { line }, _) => Err(Refusal::HostKey(self.changed(key, line, &file))),
            (Check::Revoked { line }, _) => Err(Refusal::HostKey(self.revoked(key, line, &file))),
        }
    }
}

impl Client {
    /// A host certificate: signed by an `@cert-authority` key for the host, for a host,
    /// naming it (or naming no one), valid now, and neither it nor its authority revoked
    /// (as `ssh` checks it). `StrictHostKeyChecking` does not apply: there is no key to learn.
    fn certificate(&self, cert: &Certificate) -> std::result::Result<bool, Refusal> {
        let refuse = |why: String| {
            let message = format!(
                "{}: the host certificate of {} (key {}, signed by {}) is refused: {why}",
                self.label,
                self.name,
                cert.public_key().fingerprint(HashAlg::Sha256),
                cert.signature_key().fingerprint(HashAlg::Sha256),
            );
            tracing::error!("{message}");
            Err(Refusal::HostKey(Error::new(
                ErrorKind::PermissionDenied,
                message,
            )))
        };
        for key in [cert.public_key(), cert.signature_key()] {
            let key = PublicKey::from(key.clone());
            if let (Check::Revoked { line }, Some(file)) = self.known.check(&self.name, &key) {
                return refuse(format!("REVOKED at line {line} of {}", file.display()));
            }
        }
        let Some(authority) = self
            .authorities
            .iter()
            .find(|a| a.key_data() == cert.signature_key())
        else {
            return refuse(format!(
                "no @cert-authority line for {} names its signer (checked: {})",
                self.name,
                self.known.names()
            ));
        };
        if cert.cert_type() != CertType::Host {
            return refuse("it is a user certificate".into());
        }
        let principals = cert.valid_principals();
        if !principals.is_empty() && !principals.contains(&self.principal) {
            return refuse(format!("it does not name {}", self.principal));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match cert.validate_at(now, [&authority.fingerprint(HashAlg::Sha256)]) {
            Ok(()) => Ok(true),
            Err(e) => refuse(format!("{e} (a bad signature, or outside its validity)")),
        }
    }

    /// `StrictHostKeyChecking accept-new` (or `no`): record the key in the first user
    /// known hosts file, as `ssh` does.
    fn learn(&self, key: &PublicKey) -> std::result::Result<bool, Refusal> {
        let Some(file) = &self.learn_into else {
            tracing::warn!(
                "{}: accepting the new host key {} unrecorded (UserKnownHostsFile none)",
                self.label,
                fingerprint(key)
            );
            return Ok(true);
        };
        match known_hosts::learn(file, &self.name, key, self.hash_names) {
            Ok(()) => {
                tracing::warn!(
                    "{}: new host key {} for {} added to {}",
                    self.label,
                    fingerprint(key),
                    self.name,
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
        let record = self
            .learn_into
            .as_ref()
            .map_or("your known_hosts".into(), |f| f.display().to_string());
        let (host, port) = split_name(&self.name);
        Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{}: the host key of {} is not known ({}; checked: {}). After checking that \
                 fingerprint with the host's owner, record it in {record}: run `ssh{} {host}` \
                 once and answer yes, or `ssh-keyscan{} {host} >> {record}`; or let roam record \
                 new hosts itself by adding `StrictHostKeyChecking accept-new` to the host's \
                 block in ~/.ssh/config",
                self.label,
                self.name,
                fingerprint(key),
                self.known.names(),
                port.map_or(String::new(), |p| format!(" -p {p}")),
                port.map_or(String::new(), |p| format!(" -p {p}")),
            ),
        )
    }

    fn changed(&self, key: &PublicKey, line: usize, file: &str) -> Error {
        let message = format!(
            "{}: WARNING: THE HOST KEY OF {} HAS CHANGED (now {}; line {line} of {file} records \
             another). Someone may be intercepting the connection (man-in-the-middle), or the \
             host was reinstalled. roam refuses to connect; if the change is expected, remove \
             the old key (ssh-keygen -R {} -f {file})",
            self.label,
            self.name,
            fingerprint(key),
            self.name
        );
        tracing::error!("{message}");
        Error::new(ErrorKind::PermissionDenied, message)
    }

    fn revoked(&self, key: &PublicKey, line: usize, file: &str) -> Error {
        let message = format!(
            "{}: WARNING: the host key {} of {} is REVOKED (line {line} of {file}); roam \
             refuses to connect",
            self.label,
            fingerprint(key),
            self.name
        );
        tracing::error!("{message}");
        Error::new(ErrorKind::PermissionDenied, message)
    }
}

/// `[host]:port` → (`host`, port); a plain name has no port.
fn split_name(name: &str) -> (&str, Option<&str>) {
    name.strip_prefix('[')
        .and_then(|rest| rest.split_once("]:"))
        .map_or((name, None), |(host, port)| (host, Some(port)))
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
        let rsa = client_config(&[Algorithm::Rsa { hash: None }], false)
            .preferred
            .key;
        assert!(rsa[..3].iter().all(|a| a.clone().is_rsa()), "{rsa:?}");
        assert_eq!(rsa.len(), Preferred::DEFAULT.key.len());
        let none = client_config(&[], false).preferred.key;
        assert_eq!(none, Preferred::DEFAULT.key);
    }
}
