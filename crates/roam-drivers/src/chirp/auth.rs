//! Chirp authentication (cctools' `auth.c`). The client names a method; the server agrees
//! (`yes`) or not (`no`); the method's own exchange follows; on success the server says
//! `yes`, the method and the subject it now knows the client as (`unix:alice`), and the
//! connection is ready for requests. On failure the client may name the next method.
//!
//! The three methods that need no extra infrastructure:
//! - `unix`: the server names a fresh file in its challenge directory (`/tmp`); the client
//!   creates it, and the server reads the owner of the file as the client's user name;
//! - `hostname`: the server looks up the name of the client's address;
//! - `address`: the server takes the client's address as it is.

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

use super::conn::{broken, Conn, Failure, Reply};
use super::ChirpAuth;
use crate::{Error, ErrorKind};

/// Tries `methods` in order; returns the subject the server knows us as.
pub(crate) fn authenticate(conn: &mut Conn, methods: &[ChirpAuth]) -> Reply<String> {
    for &method in methods {
        if method == ChirpAuth::Unix && !conn.is_local() {
            // The server looks for our file on its own disk, so only a server on this host
            // can see it; a remote one would wait seconds for it in vain.
            tracing::debug!("chirp: skipping unix authentication with a remote server");
            continue;
        }
        conn.send(&format!("{}\n", method.as_str()))?;
        if !is_yes(conn)? {
            continue;
        }
        let proven = match method {
            ChirpAuth::Unix => unix(conn)?,
            ChirpAuth::Hostname | ChirpAuth::Address => is_yes(conn)?,
        };
        if proven && is_yes(conn)? {
            let method = conn.read_text()?;
            let subject = conn.read_text()?;
            return Ok(format!("{method}:{subject}"));
        }
    }
    Err(Failure::Local(Error::new(
        ErrorKind::PermissionDenied,
        refusal(methods),
    )))
}

fn refusal(methods: &[ChirpAuth]) -> String {
    if methods.is_empty() {
        return "no Chirp authentication method is configured".into();
    }
    let names: Vec<&str> = methods.iter().map(|m| m.as_str()).collect();
    format!(
        "the server accepted none of the authentication methods {}",
        names.join(", ")
    )
}

/// Reads the server's `yes` or `no`.
fn is_yes(conn: &mut Conn) -> Reply<bool> {
    match conn.read_line()?.as_slice() {
        b"yes" => Ok(true),
        b"no" => Ok(false),
        other => Err(broken(
            io::ErrorKind::InvalidData,
            format!(
                "unexpected authentication reply {:?}",
                String::from_utf8_lossy(other)
            ),
        )),
    }
}

/// The `unix` exchange: meet the challenge (or decline it), then hear the verdict.
fn unix(conn: &mut Conn) -> Reply<bool> {
    let challenge = conn.read_text()?;
    if let Err(e) = meet_challenge(&challenge) {
        tracing::debug!("chirp: cannot create the challenge file {challenge}: {e}");
        conn.send("no\n")?;
        return Ok(false);
    }
    conn.send("yes\n")?;
    let verdict = is_yes(conn);
    // The server removes the file once it has looked; we do too, for a server that did not.
    let _ = fs::remove_file(&challenge);
    verdict
}

/// Creates the challenge file. The server (anyone's server) chooses the path, so only a
/// fresh file named like cctools' challenges (`DIR/challenge.PID.N`) is created: nothing
/// existing is followed, truncated or overwritten.
fn meet_challenge(path: &str) -> io::Result<()> {
    let path = Path::new(path);
    let plausible = path.is_absolute()
        && !path.components().any(|c| c == Component::ParentDir)
        && path
            .file_name()
            .and_then(OsStr::to_str)
            .is_some_and(|name| name.starts_with("challenge."));
    if !plausible {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not the name of a challenge file",
        ));
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // As cctools' client does: a server looking through NFS must see the file.
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fresh_challenge_files_are_created() {
        let dir = std::env::temp_dir().join(format!("roam-chirp-auth-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let good = dir.join("challenge.1.2");
        meet_challenge(good.to_str().unwrap()).unwrap();
        assert!(good.is_file());
        // Never twice: an existing file is not the server's fresh challenge.
        assert!(meet_challenge(good.to_str().unwrap()).is_err());
        for bad in [
            "challenge.1.2",
            "/etc/passwd",
            &format!("{}/x/../challenge.3", dir.display()),
            &format!("{}/other.1", dir.display()),
        ] {
            assert!(meet_challenge(bad).is_err(), "{bad}");
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_refusal_names_the_methods_tried() {
        assert_eq!(
            refusal(&[ChirpAuth::Unix, ChirpAuth::Address]),
            "the server accepted none of the authentication methods unix, address"
        );
        assert_eq!(refusal(&[]), "no Chirp authentication method is configured");
    }
}
