//! Logging in with public keys, in `ssh`'s order: the keys of ssh-agent (`SSH_AUTH_SOCK`)
//! first, then the identity files (unencrypted OpenSSH, PEM or PuTTY keys: ed25519, ecdsa,
//! rsa). An encrypted file cannot be used without its passphrase, which roam never asks
//! for: the message says to add the key to the agent. A refused login is EACCES; messages
//! name files and key counts, never key material.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use russh::client::Handle;
use russh::keys::agent::client::AgentClient;
use russh::keys::agent::AgentIdentity;
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKey};

use super::connect::Client;
use super::ssh_config::Endpoint;
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
    let agent_keys = match with_agent(ssh, user).await {
        Offered::Accepted => return Ok(()),
        Offered::Refused(n) => n,
    };
    let mut refused = Vec::new();
    let mut encrypted = Vec::new();
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

/// Offers every plain key the agent holds (certificates are not offered). No agent, or
/// one that does not answer, is no key at all.
async fn with_agent(ssh: &mut Handle<Client>, user: &str) -> Offered {
    if std::env::var_os("SSH_AUTH_SOCK").is_none() {
        return Offered::Refused(0);
    }
    let mut agent = match AgentClient::connect_env().await {
        Ok(agent) => agent,
        Err(e) => {
            tracing::debug!("sftp: no ssh-agent: {e}");
            return Offered::Refused(0);
        }
    };
    let identities = agent.request_identities().await.unwrap_or_else(|e| {
        tracing::debug!("sftp: ssh-agent lists no keys: {e}");
        Vec::new()
    });
    let mut refused = 0;
    for identity in identities {
        let AgentIdentity::PublicKey { key, .. } = identity else {
            continue;
        };
        let hash = rsa_hash(ssh, &key).await;
        match ssh
            .authenticate_publickey_with(user, key, hash, &mut agent)
            .await
        {
            Ok(result) if result.success() => return Offered::Accepted,
            Ok(_) => refused += 1,
            Err(e) => tracing::debug!("sftp: ssh-agent did not sign: {e}"),
        }
    }
    Offered::Refused(refused)
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
    if !key.algorithm().is_rsa() {
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
