//! Mount URLs of the SFTP driver, `sftp://[user@]host[:port][/path]`, and how a driver
//! path becomes the absolute path the server is asked about. The host may be an alias of
//! `~/.ssh/config`; resolving it is `ssh_config.rs`'s business, so the URL keeps the name
//! the user wrote, and messages show it.

use crate::url::{decode, invalid, origin, remote, ServerUrl};
use crate::{is_driver_path, Result};

/// A server (as named in the URL) and a path prefix on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// Host name, alias or address, without the brackets of an IPv6 literal.
    pub host: String,
    /// `None` unless the URL names one: `~/.ssh/config` may then choose it.
    pub port: Option<u16>,
    pub user: Option<String>,
    /// `""` for the server's root, else an absolute path without a trailing slash.
    prefix: String,
}

impl Target {
    /// Parses a mount URL; user and path may be percent-encoded. The path is absolute on
    /// the server (not relative to the login directory), so `/sftp/host/x` is `/x` for
    /// every user. A password is refused: roam logs in with keys only, and a password in a
    /// URL would end up in shell histories and process lists.
    pub fn parse(url: &str) -> Result<Target> {
        let parts = ServerUrl::parse(url, "sftp", is_driver_path)?;
        let user = match parts.userinfo {
            Some(user) if user.contains(':') => {
                return Err(invalid(
                    url,
                    "passwords are not supported: log in with a key or ssh-agent",
                ))
            }
            Some(user) => Some(decode(user, "sftp")?).filter(|u| !u.is_empty()),
            None => None,
        };
        Ok(Target {
            host: parts.host,
            port: parts.port,
            user,
            prefix: parts.prefix,
        })
    }

    /// `sftp://[user@]host[:port]/prefix/path`, for messages.
    pub fn describe(&self, path: &str) -> String {
        format!("{}{}", self.origin(), self.remote(path))
    }

    /// `sftp://[user@]host[:port]`, as the URL named them.
    pub fn origin(&self) -> String {
        origin("sftp", self.user.as_deref(), &self.host, self.port)
    }

    /// The absolute server path of a driver path.
    pub fn remote(&self, path: &str) -> String {
        remote(&self.prefix, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn full_urls_parse() {
        let t = Target::parse("sftp://al%40ice@Host.example:2222/srv/a%20b/").unwrap();
        assert_eq!(t.host, "Host.example");
        assert_eq!(t.port, Some(2222));
        assert_eq!(t.user.as_deref(), Some("al@ice"));
        assert_eq!(t.remote("/"), "/srv/a b");
        assert_eq!(t.remote("/x y"), "/srv/a b/x y");
        assert_eq!(
            t.describe("/f"),
            "sftp://al@ice@Host.example:2222/srv/a b/f"
        );
    }

    #[test]
    fn defaults_aliases_and_ipv6() {
        let t = Target::parse("SFTP://myalias").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.user.clone()),
            ("myalias", None, None)
        );
        assert_eq!(t.remote("/"), "/");
        assert_eq!(t.remote("/a"), "/a");
        assert_eq!(t.describe("/a"), "sftp://myalias/a");
        let v6 = Target::parse("sftp://u@[::1]:2200/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", Some(2200)));
        assert_eq!(v6.describe("/"), "sftp://u@[::1]:2200/");
    }

    #[test]
    fn bad_urls_are_refused_without_their_password() {
        for bad in [
            "ftp://h/",
            "sftp://",
            "sftp://h:x/",
            "sftp://h:0/",
            "sftp://h/a/../b",
            "sftp://h/a//b",
            "sftp://h/?q",
            "sftp://u:secret@h/",
        ] {
            let err = Target::parse(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidName, "{bad}");
            assert!(!err.message.contains("secret"), "{}", err.message);
        }
    }
}
