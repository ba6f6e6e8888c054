//! Mount URLs of the FTP driver, `ftp://[user[:password]@]host[:port][/prefix]`, and how a
//! driver path becomes the absolute path the server is asked about. The password lives only
//! here and in the login exchange: [`Site::describe`] and `{:?}` never show it.

use std::fmt;

use percent_encoding::percent_decode_str;

use crate::{is_safe_name, Error, ErrorKind, Result};

const DEFAULT_PORT: u16 = 21;

/// Where a driver's tree lives: a server, the user named in the URL, and a path prefix.
pub(super) struct Site {
    /// Host name or address, without the brackets of an IPv6 literal.
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
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
        let invalid =
            |why: &str| Error::new(ErrorKind::InvalidName, format!("{}: {why}", redact(url)));
        let rest = url
            .get(..6)
            .filter(|scheme| scheme.eq_ignore_ascii_case("ftp://"))
            .map(|_| &url[6..])
            .ok_or_else(|| invalid("not an ftp:// URL"))?;
        if rest.contains(['?', '#']) {
            return Err(invalid("a mount URL takes no query or fragment"));
        }
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((userinfo, hostport)) => (Some(userinfo), hostport),
            None => (None, authority),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| invalid("bad host or port"))?;
        let (user, password) = match userinfo {
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (info, None),
                };
                (Some(decode(user)?), password.map(decode).transpose()?)
            }
            None => (None, None),
        };
        let prefix = decode(prefix.trim_end_matches('/'))?;
        if !(prefix.is_empty() || is_driver_path(&prefix)) {
            return Err(invalid("the path must be normalised"));
        }
        Ok(Site {
            host,
            port,
            user,
            password,
            prefix,
        })
    }

    /// `ftp://[user@]host[:port]/prefix/path`, for messages: never the password.
    pub fn describe(&self, path: &str) -> String {
        format!("{}{}", self.origin(), self.remote(path))
    }

    /// `ftp://[user@]host[:port]`, which a server path completes into a URL.
    pub fn origin(&self) -> String {
        let user = self
            .user
            .as_ref()
            .map_or(String::new(), |u| format!("{u}@"));
        let host = match self.host.contains(':') {
            true => format!("[{}]", self.host),
            false => self.host.clone(),
        };
        let port = match self.port {
            DEFAULT_PORT => String::new(),
            port => format!(":{port}"),
        };
        format!("ftp://{user}{host}{port}")
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
/// safe names. Checked anyway: a `..` would address another file, and a CR or LF inside an
/// FTP command would end it and start another one the server would obey.
pub(super) fn is_driver_path(path: &str) -> bool {
    path == "/"
        || path.strip_prefix('/').is_some_and(|rest| {
            rest.split('/')
                .all(|name| is_safe_name(name) && !name.contains(['\r', '\n']))
        })
}

/// `host[:port]` or `[v6]:port`; `None` when empty or the port is not a number.
fn split_host_port(text: &str) -> Option<(String, u16)> {
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
        Some(p) => p.parse().ok().filter(|p| *p != 0)?,
        None => DEFAULT_PORT,
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
                "ftp URL: a percent-encoded part is not UTF-8",
            )
        })
}

/// `url` without its userinfo, for messages about a URL that could not be parsed.
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
