//! Logging in with public keys, in `ssh`'s order: the keys and certificates of ssh-agent
//! (`IdentityAgent`, by default `SSH_AUTH_SOCK`) first, then certificates (`CertificateFile` and
//! `IDENTITY-cert.pub`, signed by the identity file or the agent holding their key), then
//! the identity files (unencrypted OpenSSH, PEM or PuTTY keys: ed25519, ecdsa, rsa). With
//! `IdentitiesOnly yes` only the agent's keys that are also identity files are offered.
//! An encrypted file cannot be used without its passphrase, which roam never asks for:
//! the message says to add the key to the agent. A refused login is EACCES; messages name
//! files and key counts, never key material. Agent forwarding is never requested.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use russh::client::Handle;
use russh::keys::agent::client::AgentClient;
use russh::keys::agent::AgentIdentity;
use russh::keys::{Certificate, HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey};
use tokio::net::UnixStream;

use super::connect::Client;
use super::ssh_config::{Agent, Endpoint};
use crate::{Error, ErrorKind, Result};

/// What came of offering one identity file.
enum Attempt {
    Accepted,
    Refused,
    Encrypted,
    /// Missing or unusable (already logged): nothing was offered.
    Skipped,
}

/// Logs in as the endpoint's user, or says why not.
pub(super) async fn login(
    ssh: &mut Handle<Client>,
    endpoint: &Endpoint,
    label: &str,
) -> Result<()> {
    let user = endpoint.user.as_str();
    let mut agent = agent(&endpoint.agent).await;
    // IdentitiesOnly: the public halves of the identity files are all the agent may offer.
    let only = endpoint.identities_only.then(|| {
        endpoint
            .identities
            .iter()
            .filter_map(|p| public_of(p))
            .collect::<Vec<_>>()
    });
    let mut agent_keys = 0;
    if let Some(agent) = agent.as_mut() {
        match with_agent(ssh, user, agent, only.as_deref()).await {
            Offered::Accepted => return Ok(()),
            Offered::Refused(n) => agent_keys = n,
        }
    }
    let mut refused = Vec::new();
    let mut encrypted = Vec::new();
    for path in &endpoint.certificates {
        match with_certificate(ssh, user, path, &endpoint.identities, agent.as_mut()).await {
            Attempt::Accepted => return Ok(()),
            Attempt::Refused => refused.push(path.clone()),
            Attempt::Encrypted | Attempt::Skipped => {}
        }
    }
    for path in &endpoint.identities {
        match with_file(ssh, user, path).await {
            Attempt::Accepted => return Ok(()),
            Attempt::Refused => refused.push(path.clone()),
            Attempt::Encrypted => encrypted.push(path.clone()),
            Attempt::Skipped => {}
        }
    }
    Err(failure(ssh, label, user, agent_keys, &refused, &encrypted))
}

/// What came of offering the agent's keys: accepted, or how many were refused.
enum Offered {
    Accepted,
    Refused(usize),
}

/// The agent `IdentityAgent` names; no agent, or one that does not answer, is none.
async fn agent(which: &Agent) -> Option<AgentClient<UnixStream>> {
    let connected = match which {
        Agent::Off => return None,
        Agent::Env => {
            std::env::var_os("SSH_AUTH_SOCK")?;
            AgentClient::connect_env().await
        }
        Agent::Socket(path) => AgentClient::connect_uds(path).await,
    };
    connected
        .inspect_err(|e| tracing::debug!("sftp: no ssh-agent: {e}"))
        .ok()
}

/// The public key of an identity file: its `.pub`, else the unencrypted private key's.
fn public_of(path: &Path) -> Option<PublicKey> {
    let mut pub_path = path.to_path_buf().into_os_string();
    pub_path.push(".pub");
    russh::keys::load_public_key(PathBuf::from(pub_path))
        .ok()
        .or_else(|| {
            let key = russh::keys::load_secret_key(path, None).ok()?;
            Some(key.public_key().clone())
        })
}

/// Offers the keys and certificates the agent holds (all, or those of the keys in
/// `only`).
async fn with_agent(
    ssh: &mut Handle<Client>,
    user: &str,
    agent: &mut AgentClient<UnixStream>,
    only: Option<&[PublicKey]>,
) -> Offered {
    let identities = agent.request_identities().await.unwrap_or_else(|e| {
        tracing::debug!("sftp: ssh-agent lists no keys: {e}");
        Vec::new()
    });
    let mut refused = 0;
    for identity in identities {
        let key_data = match &identity {
            AgentIdentity::PublicKey { key, .. } => key.key_data().clone(),
            AgentIdentity::Certificate { certificate, .. } => certificate.public_key().clone(),
        };
        if only.is_some_and(|only| !only.iter().any(|k| *k.key_data() == key_data)) {
            tracing::debug!("sftp: IdentitiesOnly: not offering an agent key of no IdentityFile");
            continue;
        }
        let outcome = match identity {
            AgentIdentity::PublicKey { key, .. } => {
                let hash = rsa_hash(ssh, &key).await;
                ssh.authenticate_publickey_with(user, key, hash, agent)
                    .await
            }
            AgentIdentity::Certificate { certificate, .. } => {
                let hash = rsa_hash_of(ssh, certificate.algorithm().is_rsa()).await;
                ssh.authenticate_certificate_with(user, certificate, hash, agent)
                    .await
            }
        };
        match outcome {
            Ok(result) if result.success() => return Offered::Accepted,
            Ok(_) => refused += 1,
            Err(e) => tracing::debug!("sftp: ssh-agent did not sign: {e}"),
        }
    }
    Offered::Refused(refused)
}

/// Offers the certificate at `path`, signed with the identity file whose key it
/// certifies, or by the agent.
async fn with_certificate(
    ssh: &mut Handle<Client>,
    user: &str,
    path: &Path,
    identities: &[PathBuf],
    agent: Option<&mut AgentClient<UnixStream>>,
) -> Attempt {
    let cert = match russh::keys::load_openssh_certificate(path) {
        Ok(cert) => cert,
        Err(e) => {
            tracing::debug!("sftp: no certificate {}: {e}", path.display());
            return Attempt::Skipped;
        }
    };
    let outcome = match certified_key(&cert, identities) {
        Some(key) => ssh
            .authenticate_openssh_cert(user, Arc::new(key), cert)
            .await
            .map_err(|e| e.to_string()),
        None => match agent {
            Some(agent) => {
                let hash = rsa_hash_of(ssh, cert.algorithm().is_rsa()).await;
                ssh.authenticate_certificate_with(user, cert, hash, agent)
                    .await
                    .map_err(|e| e.to_string())
            }
            None => {
                tracing::debug!(
                    "sftp: no key for the certificate {} (no identity file, no agent)",
                    path.display()
                );
                return Attempt::Skipped;
            }
        },
    };
    match outcome {
        Ok(result) if result.success() => Attempt::Accepted,
        Ok(_) => Attempt::Refused,
        Err(e) => {
            tracing::debug!("sftp: offering {} failed: {e}", path.display());
            Attempt::Refused
        }
    }
}

/// The unencrypted identity file holding the key `cert` certifies.
fn certified_key(cert: &Certificate, identities: &[PathBuf]) -> Option<PrivateKey> {
    identities
        .iter()
        .filter_map(|p| russh::keys::load_secret_key(p, None).ok())
        .find(|k| k.public_key().key_data() == cert.public_key())
}

async fn with_file(ssh: &mut Handle<Client>, user: &str, path: &Path) -> Attempt {
    let key = match russh::keys::load_secret_key(path, None) {
        Ok(key) => key,
        Err(russh::keys::Error::KeyIsEncrypted) => return Attempt::Encrypted,
        Err(russh::keys::Error::IO(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!("sftp: no identity file {}", path.display());
            return Attempt::Skipped;
        }
        Err(e) => {
            tracing::warn!("sftp: cannot use the identity file {}: {e}", path.display());
            return Attempt::Skipped;
        }
    };
    let hash = rsa_hash(ssh, key.public_key()).await;
    let key = PrivateKeyWithHashAlg::new(Arc::new(key), hash);
    match ssh.authenticate_publickey(user, key).await {
        Ok(result) if result.success() => Attempt::Accepted,
        Ok(_) => Attempt::Refused,
        Err(e) => {
            tracing::debug!("sftp: offering {} failed: {e}", path.display());
            Attempt::Refused
        }
    }
}

/// For an RSA key, the best signature hash the server accepts (SHA-256 when the server
/// does not say: every OpenSSH since 7.2 takes it); `None` for other key types.
async fn rsa_hash(ssh: &Handle<Client>, key: &PublicKey) -> Option<HashAlg> {
    rsa_hash_of(ssh, key.algorithm().is_rsa()).await
}

async fn rsa_hash_of(ssh: &Handle<Client>, rsa: bool) -> Option<HashAlg> {
    if !rsa {
        return None;
    }
    match ssh.best_supported_rsa_hash().await {
        Ok(Some(hash)) => hash,
        _ => Some(HashAlg::Sha256),
    }
}

/// The error of a login that did not succeed.
fn failure(
    ssh: &Handle<Client>,
    label: &str,
    user: &str,
    agent_keys: usize,
    refused: &[PathBuf],
    encrypted: &[PathBuf],
) -> Error {
    if ssh.is_closed() {
        return Error::new(
            ErrorKind::Io,
            format!("{label}: the server closed the connection during login"),
        );
    }
    let mut tried = Vec::new();
    if agent_keys > 0 {
        tried.push(format!("{agent_keys} key(s) of ssh-agent"));
    }
    tried.extend(refused.iter().map(|p| p.display().to_string()));
    let mut message = match tried.is_empty() {
        true => format!(
            "{label}: no key to log in as {user} with (no ssh-agent key, no usable identity file)"
        ),
        false => format!(
            "{label}: the server refused every key for {user} (tried {})",
            tried.join(", ")
        ),
    };
    for path in encrypted {
        let path = path.display();
        message.push_str(&format!(
            "; {path} is encrypted and roam asks no passphrase: add it to ssh-agent (ssh-add {path})"
        ));
    }
    Error::new(ErrorKind::PermissionDenied, message)
}
