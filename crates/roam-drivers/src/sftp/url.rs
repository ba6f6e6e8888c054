//! Mount URLs of the SFTP driver, `sftp://[user@]host[:port][/path]`, and how a driver
//! path becomes the absolute path the server is asked about. The host may be an alias of
//! `~/.ssh/config`; resolving it is `ssh_config.rs`'s business, so the URL keeps the name
//! the user wrote, and messages show it.

use percent_encoding::percent_decode_str;

use crate::{is_safe_name, Error, ErrorKind, Result};

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
        let invalid =
            |why: &str| Error::new(ErrorKind::InvalidName, format!("{}: {why}", redact(url)));
        let rest = url
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case("sftp://"))
            .map(|_| &url[7..])
            .ok_or_else(|| invalid("not an sftp:// URL"))?;
        if rest.contains(['?', '#']) {
            return Err(invalid("a mount URL takes no query or fragment"));
        }
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((user, _)) if user.contains(':') => {
                return Err(invalid(
                    "passwords are not supported: log in with a key or ssh-agent",
                ))
            }
            Some((user, hostport)) => (Some(decode(user)?).filter(|u| !u.is_empty()), hostport),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| invalid("bad host or port"))?;
        let prefix = decode(prefix.trim_end_matches('/'))?;
        if !(prefix.is_empty() || is_driver_path(&prefix)) {
            return Err(invalid("the path must be normalised"));
        }
        Ok(Target {
            host,
            port,
            user,
            prefix,
        })
    }

    /// `sftp://[user@]host[:port]/prefix/path`, for messages.
    pub fn describe(&self, path: &str) -> String {
        format!("{}{}", self.origin(), self.remote(path))
    }

    /// `sftp://[user@]host[:port]`, as the URL named them.
    pub fn origin(&self) -> String {
        let user = self
            .user
            .as_ref()
            .map_or(String::new(), |u| format!("{u}@"));
        let host = match self.host.contains(':') {
            true => format!("[{}]", self.host),
            false => self.host.clone(),
        };
        let port = self.port.map_or(String::new(), |p| format!(":{p}"));
        format!("sftp://{user}{host}{port}")
    }

    /// The absolute server path of a driver path.
    pub fn remote(&self, path: &str) -> String {
        match (self.prefix.as_str(), path) {
            ("", path) => path.to_owned(),
            (prefix, "/") => prefix.to_owned(),
            (prefix, path) => format!("{prefix}{path}"),
        }
    }
}

/// Whether `path` is a driver path as the layer above promises it: `/`, or `/`-separated
/// safe names. Checked anyway: a `..` would address a file outside the mount.
pub(super) fn is_driver_path(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(is_safe_name))
}

/// `host[:port]` or `[v6][:port]`; `None` when empty or the port is not a number.
fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    let port = match port {
        Some(p) => Some(p.parse().ok().filter(|p| *p != 0)?),
        None => None,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

fn decode(text: &str) -> Result<String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            Error::new(
                ErrorKind::InvalidName,
                "sftp URL: a percent-encoded part is not UTF-8",
            )
        })
}

/// `url` without its userinfo, for messages about a URL that could not be parsed (it may
/// hold a password, which we refuse but must not echo).
fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}{}", &url[..start], &url[start + at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn driver_paths_are_checked() {
        assert!(is_driver_path("/"));
        assert!(is_driver_path("/a b/ü"));
        for bad in ["", "a", "/a/", "//a", "/a/../b", "/.", "/a\0b"] {
            assert!(!is_driver_path(bad), "{bad:?}");
        }
    }
}
