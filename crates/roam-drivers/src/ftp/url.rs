//! Mount URLs of the FTP driver, `ftp://[user[:password]@]host[:port][/prefix]` (and
//! `ftps://`, the same over TLS), and how a driver path becomes the absolute path the server is asked about. The password lives only
//! here and in the login exchange: [`Site::describe`] and `{:?}` never show it.

use std::fmt;

use crate::url::{authority, decode, origin, remote, ServerUrl};
use crate::Result;

const DEFAULT_PORT: u16 = 21;

/// Where a driver's tree lives: a server, the user named in the URL, and a path prefix.
pub(super) struct Site {
    /// Host name or address, without the brackets of an IPv6 literal.
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
    /// `ftps://`: TLS on the control and data connections.
    pub secure: bool,
    /// `host[:port]` as the URL writes it: the server's `[tls."..."]` key.
    pub authority: String,
    /// `""` for the server's root, else an absolute path without a trailing slash.
    prefix: String,
}

// By hand, so that `{:?}` of a driver can never print a password.
impl fmt::Debug for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe("/"))
    }
}

impl Site {
    /// Parses a mount URL. Userinfo and prefix may be percent-encoded (`%40` for an `@` in
    /// a password). The prefix is absolute on the server, not relative to the login
    /// directory, so that `/ftp/host/x` names the same file for every user.
    pub fn parse(url: &str) -> Result<Site> {
        let secure = url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("ftps://"));
        let scheme = if secure { "ftps" } else { "ftp" };
        let parts = ServerUrl::parse(url, scheme, is_driver_path)?;
        let (user, password) = match parts.userinfo {
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                let user = decode(user, "ftp")?;
                (Some(user), password.map(|p| decode(p, "ftp")).transpose()?)
            }
            None => (None, None),
        };
        Ok(Site {
            host: parts.host,
            port: parts.port.unwrap_or(DEFAULT_PORT),
            user,
            password,
            secure,
            authority: authority(url).to_owned(),
            prefix: parts.prefix,
        })
    }

    /// The port, when the URL needs to name it.
    fn port(&self) -> Option<u16> {
        Some(self.port).filter(|&p| p != DEFAULT_PORT)
    }

    /// `ftp[s]://[user@]host[:port]/prefix/path`, for messages: never the password.
    pub fn describe(&self, path: &str) -> String {
        format!("{}{}", self.origin(), self.remote(path))
    }

    /// `ftp[s]://[user@]host[:port]`, which a server path completes into a URL.
    pub fn origin(&self) -> String {
        let scheme = if self.secure { "ftps" } else { "ftp" };
        origin(scheme, self.user.as_deref(), &self.host, self.port())
    }

    /// The absolute server path of a driver path.
    pub fn remote(&self, path: &str) -> String {
        remote(&self.prefix, path)
    }
}

/// Whether `path` is a driver path (see [`crate::is_driver_path`]) that is also safe in
/// an FTP command: a CR or LF inside one would end it and start another one the server
/// would obey.
pub(super) fn is_driver_path(path: &str) -> bool {
    crate::is_driver_path(path) && !path.contains(['\r', '\n'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn full_urls_parse() {
        let site = Site::parse("ftp://al%40ice:p%3Ass@Host.example:2121/pub/a%20b/").unwrap();
        assert_eq!(site.host, "Host.example");
        assert_eq!(site.port, 2121);
        assert_eq!(site.user.as_deref(), Some("al@ice"));
        assert_eq!(site.password.as_deref(), Some("p:ss"));
        assert_eq!(site.remote("/"), "/pub/a b");
        assert_eq!(site.remote("/x y"), "/pub/a b/x y");
        assert_eq!(
            site.describe("/f"),
            "ftp://al@ice@Host.example:2121/pub/a b/f"
        );
        assert!(!format!("{site:?}").contains("p:ss"));
    }

    #[test]
    fn defaults_and_ipv6() {
        let site = Site::parse("FTP://127.0.0.1").unwrap();
        assert_eq!((site.port, site.user.clone()), (21, None));
        assert_eq!(site.remote("/"), "/");
        assert_eq!(site.remote("/a"), "/a");
        assert_eq!(site.describe("/a"), "ftp://127.0.0.1/a");
        let v6 = Site::parse("ftp://u@[::1]:2100/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 2100));
        assert_eq!(v6.describe("/"), "ftp://u@[::1]:2100/");
        assert!(!v6.secure);
    }

    #[test]
    fn ftps_urls_parse() {
        let site = Site::parse("FTPS://u:pw@h.example/pub").unwrap();
        assert!(site.secure);
        assert_eq!(site.port, 21);
        assert_eq!(site.describe("/a"), "ftps://u@h.example/pub/a");
        assert_eq!(site.authority, "h.example");
        let v6 = Site::parse("ftps://[::1]:990").unwrap();
        assert_eq!(v6.authority, "[::1]:990");
        assert!(Site::parse("ftpx://h/").is_err());
    }

    #[test]
    fn bad_urls_are_refused_without_their_password() {
        for bad in [
            "http://h/",
            "ftp://",
            "ftp://h:x/",
            "ftp://h:0/",
            "ftp://h/a/../b",
            "ftp://h/?q",
            "ftp://u:secret@h:99999/",
        ] {
            let err = Site::parse(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidName, "{bad}");
            assert!(!err.message.contains("secret"), "{}", err.message);
        }
    }

    #[test]
    fn driver_paths_are_checked() {
        assert!(is_driver_path("/"));
        assert!(is_driver_path("/a b/ü"));
        for bad in [
            "",
            "a",
            "/a/",
            "//a",
            "/a/../b",
            "/.",
            "/a\r\nDELE x",
            "/a\nb",
        ] {
            assert!(!is_driver_path(bad), "{bad:?}");
        }
    }
}
