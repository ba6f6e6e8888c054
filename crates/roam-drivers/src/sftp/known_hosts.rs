//! Strict host key checking against OpenSSH `known_hosts` files (the user's, then the
//! global ones, as `ssh` reads them): plain names, `*`/`?`
//! patterns and `!` negations, hashed names (`|1|salt|hmac-sha1`), `[host]:port` for ports
//! other than 22, and the `@revoked` marker. `@cert-authority` lines name the keys that
//! may sign a host's certificate (checked in `connect.rs`). Lines that cannot be parsed (a key type we do not know)
//! are skipped, as `ssh` skips them, rather than making the whole file unusable.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use base64::Engine;
use russh::keys::{parse_public_key_base64, Algorithm, PublicKey};

use super::ssh_config::wildcard;

/// What the file says about the key a server presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Check {
    Known,
    /// No key of this type is recorded for the host.
    Unknown,
    /// Another key of the same type is recorded for the host (at this line, from 1).
    Changed {
        line: usize,
    },
    /// The key is marked `@revoked` (at this line).
    Revoked {
        line: usize,
    },
}

/// One usable line of the file.
struct Entry<'a> {
    line: usize,
    marker: Option<&'a str>,
    hosts: &'a str,
    key: PublicKey,
}

/// The name a host has in known_hosts: `host`, or `[host]:port` off port 22.
pub(super) fn host_name(host: &str, port: u16) -> String {
    match port {
        22 => host.to_owned(),
        port => format!("[{host}]:{port}"),
    }
}

/// The known hosts files of one connection (`UserKnownHostsFile`, then
/// `GlobalKnownHostsFile`), read once; missing ones are empty.
pub(super) struct Files {
    files: Vec<(std::path::PathBuf, String)>,
}

impl Files {
    pub fn read(paths: impl IntoIterator<Item = std::path::PathBuf>) -> Files {
        let files = paths
            .into_iter()
            .map(|path| {
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(e) => {
                        tracing::warn!("sftp: cannot read {}: {e}", path.display());
                        String::new()
                    }
                };
                (path, text)
            })
            .collect();
        Files { files }
    }

    /// The files, as a list for messages.
    pub fn names(&self) -> String {
        let names: Vec<String> = self
            .files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        names.join(", ")
    }

    /// The verdict of all files together, and the file it comes from: a revoked key loses
    /// over everything, a recorded equal key wins over a changed one.
    pub fn check(&self, name: &str, key: &PublicKey) -> (Check, Option<&Path>) {
        let mut verdict = (Check::Unknown, None);
        for (path, text) in &self.files {
            match check(text, name, key) {
                Check::Unknown => {}
                found @ Check::Revoked { .. } => return (found, Some(path)),
                Check::Known => verdict = (Check::Known, Some(path.as_path())),
                changed if verdict.0 == Check::Unknown => verdict = (changed, Some(path)),
                _ => {}
            }
        }
        verdict
    }

    /// The keys of the `@cert-authority` lines for `name`.
    pub fn authorities(&self, name: &str) -> Vec<PublicKey> {
        self.files
            .iter()
            .flat_map(|(_, text)| {
                entries(text)
                    .filter(|e| e.marker == Some("@cert-authority") && matches(e.hosts, name))
                    .map(|e| e.key)
            })
            .collect()
    }

    pub fn known_algorithms(&self, name: &str) -> Vec<Algorithm> {
        self.files
            .iter()
            .flat_map(|(_, text)| known_algorithms(text, name))
            .collect()
    }
}

/// Checks `key` against the entries for `name`. A revoked key loses over everything; a
/// recorded equal key wins over a different one of the same type.
pub(super) fn check(text: &str, name: &str, key: &PublicKey) -> Check {
    let mut verdict = Check::Unknown;
    for entry in entries(text).filter(|e| matches(e.hosts, name)) {
        let same = entry.key.key_data() == key.key_data();
        match entry.marker {
            Some("@revoked") if same => return Check::Revoked { line: entry.line },
            Some(_) => {}
            None if same => verdict = Check::Known,
            None if entry.key.algorithm() == key.algorithm() && verdict == Check::Unknown => {
                verdict = Check::Changed { line: entry.line }
            }
            None => {}
        }
    }
    verdict
}

/// The key types recorded for `name`, so that the key exchange can ask for one of them
/// first (as `ssh` does): a server with several host keys then shows the one we know.
pub(super) fn known_algorithms(text: &str, name: &str) -> Vec<Algorithm> {
    entries(text)
        .filter(|e| e.marker.is_none() && matches(e.hosts, name))
        .map(|e| e.key.algorithm())
        .collect()
}

/// Appends `name key` to the file at `path` (created 0600 in a 0700 directory if needed),
/// as `ssh` does for a new host under `StrictHostKeyChecking accept-new`; the name hashed
/// if `hashed` (`HashKnownHosts yes`).
pub(super) fn learn(path: &Path, name: &str, key: &PublicKey, hashed: bool) -> std::io::Result<()> {
    let name = match hashed {
        true => hash_name(name)?,
        false => name.to_owned(),
    };
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let encoded = key
        .to_openssh()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    // A last line without its newline would otherwise swallow ours.
    let mut last = [b'\n'];
    if file.seek(SeekFrom::End(-1)).is_ok() {
        file.read_exact(&mut last)?;
    }
    let separator = if last[0] == b'\n' { "" } else { "\n" };
    writeln!(file, "{separator}{name} {}", encoded.trim_end())
}

fn entries(text: &str) -> impl Iterator<Item = Entry<'_>> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let mut fields = line.split_whitespace();
        let first = fields.next().filter(|f| !f.starts_with('#'))?;
        let (marker, hosts) = match first.starts_with('@') {
            true => (Some(first), fields.next()?),
            false => (None, first),
        };
        let _type = fields.next()?;
        let key = parse_public_key_base64(fields.next()?)
            .inspect_err(|e| tracing::debug!("sftp: known_hosts line {}: {e}", i + 1))
            .ok()?;
        Some(Entry {
            line: i + 1,
            marker,
            hosts,
            key,
        })
    })
}

/// Whether the comma-separated `patterns` of a line name `name`: no `!` pattern may match,
/// and some other pattern (plain, wildcard or hashed) must.
fn matches(patterns: &str, name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let mut matched = false;
    for pattern in patterns.split(',') {
        match pattern.strip_prefix('!') {
            Some(negated) if wildcard(&negated.to_ascii_lowercase(), &name) => return false,
            Some(_) => {}
            None if pattern.starts_with("|1|") => matched |= hashed_matches(pattern, &name),
            None => matched |= wildcard(&pattern.to_ascii_lowercase(), &name),
        }
    }
    matched
}

/// `|1|SALT|HASH` for `name`, with a fresh random 20-byte salt (as `ssh` writes it).
fn hash_name(name: &str) -> std::io::Result<String> {
    use ring::rand::SecureRandom;
    let mut salt = [0u8; 20];
    ring::rand::SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| std::io::Error::other("no random salt"))?;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &salt);
    let hash = ring::hmac::sign(&key, name.to_ascii_lowercase().as_bytes());
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(format!(
        "|1|{}|{}",
        b64.encode(salt),
        b64.encode(hash.as_ref())
    ))
}

/// `|1|SALT|HASH`: HASH is HMAC-SHA1 of the name keyed with SALT, both base64.
fn hashed_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.splitn(4, '|').skip(2);
    let b64 = base64::engine::general_purpose::STANDARD;
    let (Some(Ok(salt)), Some(Ok(hash))) = (
        parts.next().map(|s| b64.decode(s)),
        parts.next().map(|h| b64.decode(h)),
    ) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &salt);
    ring::hmac::verify(&key, name.as_bytes(), &hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIK0gmsPmw1gfkUTRV+4YURst6ey8m0bZPw0ePguWB1CM";
    const ED_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIH9iyB6OtHgZFcAGIa1IHlmid+fg4/wh8bfTE0lhzCD4";
    const ECDSA: &str =
        "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBDGRLhcedrL3uhgzhWiSMvudxrMIel3a6wxBIv3kLb698nMFZYEHh6fKHYgx6wd7Nx40KEDmmgeI4tQCj7AaZSI=";

    fn key(b64: &str) -> PublicKey {
        parse_public_key_base64(b64).unwrap()
    }

    #[test]
    fn plain_and_port_names() {
        let text = format!(
            "# c\n\nhost.example,10.0.0.1 ssh-ed25519 {ED_A}\n[h]:2222 ssh-ed25519 {ED_B} c\n"
        );
        assert_eq!(check(&text, "host.example", &key(ED_A)), Check::Known);
        assert_eq!(check(&text, "10.0.0.1", &key(ED_A)), Check::Known);
        assert_eq!(
            check(&text, &host_name("h", 2222), &key(ED_B)),
            Check::Known
        );
        assert_eq!(
            check(&text, &host_name("h", 22), &key(ED_B)),
            Check::Unknown
        );
        assert_eq!(
            check(&text, "host.example", &key(ED_B)),
            Check::Changed { line: 3 }
        );
        // Another type is not a change: the server may offer several.
        assert_eq!(check(&text, "host.example", &key(ECDSA)), Check::Unknown);
        assert_eq!(
            known_algorithms(&text, "host.example"),
            [Algorithm::Ed25519]
        );
    }

    #[test]
    fn hashed_names() {
        // `ssh-keygen -H` of a line for "[127.0.0.1]:2222".
        let text = format!(
            "|1|0JyEeTclKvXtJOUlYaCwZc5i6jo=|68+2rsgVbm64L9jGdqDtESz2bhk= ssh-ed25519 {ED_A}\n"
        );
        assert_eq!(check(&text, "[127.0.0.1]:2222", &key(ED_A)), Check::Known);
        assert_eq!(check(&text, "[127.0.0.1]:2223", &key(ED_A)), Check::Unknown);
        assert_eq!(
            check(&text, "[127.0.0.1]:2222", &key(ED_B)),
            Check::Changed { line: 1 }
        );
    }

    #[test]
    fn patterns_markers_and_bad_lines() {
        let text = format!(
            "*.corp,!bad.corp ssh-ed25519 {ED_A}\n\
             unknown-type-line foo-bar AAAA\n\
             @cert-authority *.corp ssh-ed25519 {ED_B}\n\
             @revoked * ssh-ed25519 {ED_B}\n"
        );
        assert_eq!(check(&text, "a.CORP", &key(ED_A)), Check::Known);
        assert_eq!(check(&text, "bad.corp", &key(ED_A)), Check::Unknown);
        assert_eq!(
            check(&text, "a.corp", &key(ED_B)),
            Check::Revoked { line: 4 }
        );
    }

    #[test]
    fn files_together() {
        let dir = std::env::temp_dir().join(format!("roam-khf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (user, global) = (dir.join("user"), dir.join("global"));
        std::fs::write(&user, format!("h ssh-ed25519 {ED_B}\n")).unwrap();
        std::fs::write(
            &global,
            format!("h ssh-ed25519 {ED_A}\n@cert-authority h,g ssh-ed25519 {ED_B}\n"),
        )
        .unwrap();
        let files = Files::read([dir.join("missing"), user.clone(), global.clone()]);
        // Known in one file wins over changed in another.
        assert_eq!(
            files.check("h", &key(ED_A)),
            (Check::Known, Some(global.as_path()))
        );
        assert_eq!(files.check("h", &key(ED_B)).0, Check::Known);
        assert_eq!(files.authorities("g"), [key(ED_B)]);
        assert!(files.authorities("x").is_empty());
        assert!(files.names().contains("missing"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn learning_appends_a_line_that_checks() {
        let dir = std::env::temp_dir().join(format!("roam-kh-{}", std::process::id()));
        let path = dir.join("sub/known_hosts");
        let _ = std::fs::remove_dir_all(&dir);
        learn(&path, "[h]:2222", &key(ED_A), false).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"# no newline")
            .unwrap();
        learn(&path, "other", &key(ED_B), false).unwrap();
        learn(&path, "[Hashed]:22", &key(ED_B), true).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(check(&text, "[h]:2222", &key(ED_A)), Check::Known);
        assert_eq!(check(&text, "other", &key(ED_B)), Check::Known);
        assert_eq!(check(&text, "[hashed]:22", &key(ED_B)), Check::Known);
        assert!(!text.contains("ashed"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
